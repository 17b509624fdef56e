// Package local is the transport for requests whose target is the engine's
// own segment (LOCAL_SEGMENT): both ends are registered memory of this
// process, so a slice is one C memcpy. Copies run on a small pool of
// workers, one cgo crossing per batch of slices.
package local

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/descriptor"
	"github.com/kvferry/kvferry/internal/cmem"
)

// Name is the transport's name.
const Name = "local"

// Defaults.
const (
	// DefaultSliceSize keeps one copy short enough to share the workers.
	DefaultSliceSize = 4 << 20
	// DefaultWorkers is the number of copy goroutines.
	DefaultWorkers = 2
	queueDepth     = 4096
)

// Config configures the transport. The zero value works.
type Config struct {
	// Workers is the number of copy goroutines (default 2).
	Workers int
	// SliceSize is the largest single copy (default 4 MiB).
	SliceSize uint64
}

// Transport copies within this process.
type Transport struct {
	e      *engine.Engine
	cfg    Config
	q      chan []*engine.Slice
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.RWMutex // held for reading by Submit while sending on q; guards closed
	closed bool
	copies atomic.Uint64
}

var _ engine.Transport = (*Transport)(nil)

// New starts the transport's workers.
func New(e *engine.Engine, cfg Config) *Transport {
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.SliceSize == 0 {
		cfg.SliceSize = DefaultSliceSize
	}
	t := &Transport{e: e, cfg: cfg, q: make(chan []*engine.Slice, queueDepth)}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	for range cfg.Workers {
		t.wg.Add(1)
		go t.runWorker()
	}
	return t
}

// Name returns "local".
func (t *Transport) Name() string { return Name }

// Describe adds nothing: the transport serves only this process.
func (t *Transport) Describe(*descriptor.Segment) {}

// Reaches reports whether p is this engine's own segment.
func (t *Transport) Reaches(p *engine.Peer) bool { return p.Local() }

// SliceSize returns the largest single copy.
func (t *Transport) SliceSize() uint64 { return t.cfg.SliceSize }

// Copies returns the number of slices copied.
func (t *Transport) Copies() uint64 { return t.copies.Load() }

// Submit queues the slices for the workers.
func (t *Transport) Submit(_ *engine.Peer, slices []*engine.Slice) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		for _, s := range slices {
			s.Complete(engine.ErrClosed)
		}
		return
	}
	// Split the work so that every worker gets a share.
	per := max(1, (len(slices)+t.cfg.Workers-1)/t.cfg.Workers)
	for lo := 0; lo < len(slices); lo += per {
		t.q <- slices[lo:min(lo+per, len(slices))]
	}
}

// runWorker copies queued slices; owned by Transport, stopped by Close.
func (t *Transport) runWorker() {
	defer t.wg.Done()
	ops := make([]cmem.Op, 0, 64)
	pins := make([]*engine.Region, 0, 64)
	for {
		select {
		case <-t.ctx.Done():
			return
		case slices, ok := <-t.q:
			if !ok {
				return
			}
			t.copyAll(slices, ops[:0], pins[:0])
		}
	}
}

func (t *Transport) copyAll(slices []*engine.Slice, ops []cmem.Op, pins []*engine.Region) {
	done := slices[:0:0]
	for _, s := range slices {
		if s.Canceled() {
			s.Complete(engine.ErrCanceled)
			continue
		}
		// The target is local registered memory: check and pin it.
		pin := t.e.Pin(s.Remote, s.Length)
		if pin == nil {
			s.Complete(fmt.Errorf("local %s %#x+%d: %w", s.Op, s.Remote, s.Length, engine.ErrAddressNotRegistered))
			continue
		}
		op := cmem.Op{Dst: uintptr(s.Remote), Src: s.Local, N: s.Length}
		if s.Op == engine.OpRead {
			op.Dst, op.Src = s.Local, uintptr(s.Remote)
		}
		ops = append(ops, op)
		pins = append(pins, pin)
		done = append(done, s)
	}
	cmem.CopyBatch(ops)
	for _, p := range pins {
		p.Release()
	}
	t.copies.Add(uint64(len(done)))
	for _, s := range done {
		s.Complete(nil)
	}
}

// Close stops the workers after draining what is queued (failing it).
func (t *Transport) Close() error {
	t.mu.Lock() // no Submit is sending now, nor will one after this
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	t.mu.Unlock()
	t.cancel()
	t.wg.Wait()
	for {
		select {
		case slices := <-t.q:
			for _, s := range slices {
				s.Complete(engine.ErrClosed)
			}
		default:
			return nil
		}
	}
}
