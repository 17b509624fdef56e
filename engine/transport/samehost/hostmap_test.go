package samehost_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/engine/transport/samehost"
)

// mappedInitiator is this process as a cma initiator of an owner child
// whose buffer is memfd-backed.
type mappedInitiator struct {
	e    *engine.Engine
	cma  *samehost.CMA
	seg  engine.SegmentID
	peer *engine.Peer
	src  interface {
		Addr() uintptr
		Bytes() []byte
	}
}

func newMappedInitiator(t *testing.T, segName string, noMap bool) *mappedInitiator {
	t.Helper()
	cfg := stack.Config{AutoDiscover: true, Engine: engine.Config{LocalServerName: "127.0.0.1", TransferTimeout: 5 * time.Second, ForceTransport: "cma"}}
	cfg.SameHost.NoMap = noMap
	e, err := stack.New(context.Background(), cfg)
	assert.NilError(t, err)
	t.Cleanup(func() { e.Close() })
	m := &mappedInitiator{e: e, src: newBuf(t, e, 4<<20)}
	m.seg, err = e.OpenSegment(context.Background(), segName)
	assert.NilError(t, err)
	m.peer = e.Peer(m.seg)
	m.cma = e.Transport(samehost.NameCMA).(*samehost.CMA)
	return m
}

func (m *mappedInitiator) xfer(op engine.OpCode, addr uint64, n uint64) error {
	return m.e.Transfer(context.Background(), []engine.Request{{Op: op, Source: m.src.Addr(), Target: m.seg, TargetOffset: addr, Length: n}})
}

// waitMapped writes to addr until the session maps want regions.
func (m *mappedInitiator) waitMapped(t *testing.T, addr uint64, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		assert.NilError(t, m.xfer(engine.OpWrite, addr, 4096))
		if n, _ := samehost.HostMaps(m.cma, m.peer); n == want {
			return
		}
		assert.Assert(t, time.Now().Before(deadline), "the owner's memfd was not mapped")
		time.Sleep(time.Millisecond)
	}
}

// TestMappedOwnerMemory: an owner whose registered buffer is memfd-backed
// hands it to a cma initiator, which then copies with memcpy (bytes checked
// on both sides, gathered pieces included); ranges outside the registration
// are still refused; memory that is not memfd-backed (the owner's spare
// buffer) keeps process_vm; unregistering drops the mapping, and no byte is
// written after UnregisterMemory returned; with NoMap nothing is mapped.
func TestMappedOwnerMemory(t *testing.T) {
	const size = 8 << 20
	c := startChild(t, childOpts{role: "owner", bufBytes: size, env: []string{memfdEnv + "=1"}})
	segName, addr, spare := c.ready[0], atou(c.ready[1]), atou(c.ready[3])
	m := newMappedInitiator(t, segName, false)
	m.waitMapped(t, addr, 1)
	_, before := samehost.HostMaps(m.cma, m.peer)

	// Writes and reads through the mapping, checked by the owner.
	for i, n := range []uint64{4 << 10, 1<<20 + 3, 4 << 20} {
		off, seed := uint64(4096+17*i), uint64(10+i)
		copy(m.src.Bytes()[:n], patternAt(seed, n))
		assert.NilError(t, m.xfer(engine.OpWrite, addr+off, n))
		assert.Equal(t, c.do("check %d %d %d", off, n, seed), "ok", "write %d", n)
		assert.Equal(t, c.do("fill %d %d %d", off, n, seed+1), "ok")
		clear(m.src.Bytes()[:n])
		assert.NilError(t, m.xfer(engine.OpRead, addr+off, n))
		assert.Assert(t, bytes.Equal(m.src.Bytes()[:n], patternAt(seed+1, n)), "read %d", n)
	}
	// A gather: one remote range from four local pieces, strided.
	copy(m.src.Bytes()[:1<<20], patternAt(20, 1<<20))
	pieces := []engine.Piece{}
	for k := range 4 {
		pieces = append(pieces, engine.Piece{Addr: m.src.Addr() + uintptr(k*8192), Length: 4096})
	}
	want := []byte{}
	for k := range 4 {
		want = append(want, m.src.Bytes()[k*8192:k*8192+4096]...)
	}
	assert.NilError(t, m.e.Transfer(context.Background(), []engine.Request{{Op: engine.OpWrite, Pieces: pieces, Target: m.seg, TargetOffset: addr, Length: 4 * 4096}}))
	assert.Equal(t, c.do("checkbytes %d %x", 0, want), "ok")
	_, after := samehost.HostMaps(m.cma, m.peer)
	assert.Assert(t, after > before, "no copy went through the mapping (%d, %d)", before, after)

	// Across the end of the registration: refused, whatever the mapping.
	err := m.xfer(engine.OpWrite, addr+size-4096, 8192)
	assert.Assert(t, err != nil)
	// The spare buffer is anonymous: process_vm, no second mapping.
	assert.NilError(t, m.xfer(engine.OpWrite, spare, 4096))
	assert.NilError(t, m.xfer(engine.OpWrite, spare, 4096))
	n, _ := samehost.HostMaps(m.cma, m.peer)
	assert.Equal(t, n, 1)

	// Unregister while writes run through the mapping.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if m.xfer(engine.OpWrite, addr, 1<<20) != nil {
				return
			}
		}
	}()
	time.Sleep(20 * time.Millisecond)
	assert.Equal(t, c.do("unreg"), "ok", "written after UnregisterMemory returned")
	close(stop)
	wg.Wait()
	err = m.xfer(engine.OpWrite, addr, 4096)
	assert.Assert(t, err != nil && strings.Contains(err.Error(), "registered"), "%v", err)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if n, _ := samehost.HostMaps(m.cma, m.peer); n == 0 {
			break
		}
		assert.Assert(t, time.Now().Before(deadline), "the mapping outlived the registration")
		time.Sleep(time.Millisecond)
	}

	// NoMap: the same owner's memory is copied with process_vm only.
	c2 := startChild(t, childOpts{role: "owner", bufBytes: size, env: []string{memfdEnv + "=1"}})
	nm := newMappedInitiator(t, c2.ready[0], true)
	for range 20 {
		assert.NilError(t, nm.xfer(engine.OpWrite, atou(c2.ready[1]), 4096))
	}
	n, _ = samehost.HostMaps(nm.cma, nm.peer)
	assert.Equal(t, n, -1, "NoMap: the session maps nothing")
}

// TestMappedOwnerKilled: the owner of mapped memory dies; the session drops
// its mapping and transfers fail, without hanging.
func TestMappedOwnerKilled(t *testing.T) {
	c := startChild(t, childOpts{role: "owner", bufBytes: 8 << 20, env: []string{memfdEnv + "=1"}})
	addr := atou(c.ready[1])
	m := newMappedInitiator(t, c.ready[0], false)
	m.waitMapped(t, addr, 1)
	c.kill()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := m.xfer(engine.OpWrite, addr, 4096)
		if n, _ := samehost.HostMaps(m.cma, m.peer); err != nil && n <= 0 {
			break
		}
		assert.Assert(t, time.Now().Before(deadline), "writes into a dead owner's mapped memory still succeed")
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	assert.Assert(t, m.xfer(engine.OpRead, addr, 4096) != nil)
	assert.Assert(t, time.Since(start) < 10*time.Second)
}
