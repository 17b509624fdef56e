package client

import (
	"context"
	"fmt"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/internal/cmem"
)

// Staging chunk sizes.
const (
	maxChunkBytes = 4 << 20
	minChunkBytes = 64 << 10
)

// staging is the registered local buffer, cut into fixed chunks handed out
// from a bounded free list. Data that is not in registered memory goes
// through it chunk by chunk.
type staging struct {
	mem   *cmem.Map
	chunk uint64
	free  chan uintptr // chunk addresses; capacity = number of chunks
}

func newStaging(e *engine.Engine, size uint64) (*staging, error) {
	m, err := cmem.MapAnonPopulate(size)
	if err != nil {
		return nil, err
	}
	chunk := min(max(size/4, minChunkBytes), maxChunkBytes, size)
	chunk &^= 4095
	if chunk == 0 {
		chunk = size
	}
	n := size / chunk
	s := &staging{mem: m, chunk: chunk, free: make(chan uintptr, n)}
	for i := range n {
		s.free <- m.Addr() + uintptr(i*chunk)
	}
	if err := e.RegisterMemory(m.Addr(), m.Len(), "*", false); err != nil {
		m.Close()
		return nil, fmt.Errorf("register %d bytes: %w", size, err)
	}
	return s, nil
}

// get takes a chunk, waiting for one until ctx is done.
func (s *staging) get(ctx context.Context) (uintptr, error) {
	select {
	case a := <-s.free:
		return a, nil
	default:
	}
	select {
	case a := <-s.free:
		return a, nil
	case <-ctx.Done():
		return 0, fmt.Errorf("wait for a staging buffer chunk: %w", ctx.Err())
	}
}

// put returns a chunk.
func (s *staging) put(a uintptr) { s.free <- a }
