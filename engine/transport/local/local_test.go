package local_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/internal/testutil"
)

func TestMain(m *testing.M) { os.Exit(testutil.VerifyNoLeaks(m)) }

func newEngine(t *testing.T) *engine.Engine {
	t.Helper()
	e, err := stack.New(context.Background(), stack.Config{Engine: engine.Config{
		LocalServerName: "127.0.0.1", Transports: []string{"local", "tcp"}, TransferTimeout: 5 * time.Second}})
	assert.NilError(t, err)
	t.Cleanup(func() { e.Close() })
	return e
}

func newBuf(t *testing.T, e *engine.Engine, n uint64) *cmem.Map {
	t.Helper()
	m, err := cmem.MapAnon(n)
	assert.NilError(t, err)
	// Unregistering first waits for copies still using the memory (a
	// failed or timed-out transfer's slices may still run) before unmapping.
	t.Cleanup(func() {
		if e != nil {
			_ = e.UnregisterMemory(m.Addr())
		}
		m.Close()
	})
	if e != nil {
		assert.NilError(t, e.RegisterMemory(m.Addr(), n, "cpu:0", true))
	}
	return m
}

func fill(b []byte, seed uint64) {
	_, _ = rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)}).Read(b)
}

// TestTwoEnginesOneProcess moves bytes between two engines of this process
// with the local transport: writes, reads, several requests per batch.
func TestTwoEnginesOneProcess(t *testing.T) {
	a, b := newEngine(t), newEngine(t)
	src := newBuf(t, a, 16<<20)
	back := newBuf(t, a, 16<<20)
	dst := newBuf(t, b, 16<<20)
	fill(src.Bytes(), 1)
	ctx := context.Background()
	seg, err := a.OpenSegment(ctx, b.SegmentName())
	assert.NilError(t, err)
	assert.Equal(t, a.ChooseTransport(seg), "local")
	for _, size := range []uint64{1, 4096, 1 << 20, 9<<20 + 13} {
		assert.NilError(t, a.Transfer(ctx, []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: uint64(dst.Addr()) + 7, Length: size}}))
		assert.Assert(t, bytes.Equal(src.Bytes()[:size], dst.Bytes()[7:7+size]), "size %d", size)
		clear(back.Bytes())
		assert.NilError(t, a.Transfer(ctx, []engine.Request{{Op: engine.OpRead, Source: back.Addr(), Target: seg, TargetOffset: uint64(dst.Addr()) + 7, Length: size}}))
		assert.Assert(t, bytes.Equal(src.Bytes()[:size], back.Bytes()[:size]), "size %d", size)
	}
	// One batch: many blocks to b and one to a's own segment.
	var reqs []engine.Request
	for i := range 64 {
		off := uint64(i) * 65536
		reqs = append(reqs, engine.Request{Op: engine.OpWrite, Source: src.Addr() + uintptr(off), Target: seg, TargetOffset: uint64(dst.Addr()) + off, Length: 65536})
	}
	reqs = append(reqs, engine.Request{Op: engine.OpWrite, Source: src.Addr(), Target: engine.LocalSegment, TargetOffset: uint64(back.Addr()), Length: 1 << 20})
	before := a.Metrics().SlicesByTransport["local"]
	assert.NilError(t, a.Transfer(ctx, reqs))
	assert.Assert(t, bytes.Equal(src.Bytes()[:64*65536], dst.Bytes()[:64*65536]))
	assert.Assert(t, bytes.Equal(src.Bytes()[:1<<20], back.Bytes()[:1<<20]))
	assert.Equal(t, a.Metrics().SlicesByTransport["local"]-before, uint64(65))
	assert.Equal(t, a.Metrics().SlicesByTransport["tcp"], uint64(0))
}

// TestTargetRegistryChecks shows that the target engine's registry, not
// the initiator's cached descriptor, decides: a region b unregistered after
// a cached its descriptor is refused and left untouched.
func TestTargetRegistryChecks(t *testing.T) {
	a, b := newEngine(t), newEngine(t)
	src := newBuf(t, a, 1<<20)
	fill(src.Bytes(), 2)
	keep := newBuf(t, b, 1<<20)
	gone := newBuf(t, b, 1<<20)
	ctx := context.Background()
	seg, err := a.OpenSegment(ctx, b.SegmentName())
	assert.NilError(t, err)
	assert.NilError(t, b.UnregisterMemory(gone.Addr()))
	// a's cached descriptor still lists gone.
	d, err := a.SegmentDescriptor(seg)
	assert.NilError(t, err)
	_, listed := d.Find(uint64(gone.Addr()), 4096)
	assert.Assert(t, listed)
	for _, op := range []engine.OpCode{engine.OpWrite, engine.OpRead} {
		err := a.Transfer(ctx, []engine.Request{{Op: op, Source: src.Addr(), Target: seg, TargetOffset: uint64(gone.Addr()), Length: 4096}})
		assert.Assert(t, errors.Is(err, engine.ErrRejected), "%s: %v", op, err)
	}
	assert.Assert(t, bytes.Equal(gone.Bytes()[:4096], make([]byte, 4096)))
	// A range that straddles the end of a registered region.
	err = a.Transfer(ctx, []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: uint64(keep.Addr()) + keep.Len() - 100, Length: 4096}})
	assert.Assert(t, err != nil)
	// The registered one still works.
	assert.NilError(t, a.Transfer(ctx, []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: uint64(keep.Addr()), Length: 4096}}))
	assert.Assert(t, bytes.Equal(src.Bytes()[:4096], keep.Bytes()[:4096]))
}

// TestTargetClosed: once the target engine is closed, requests to it end
// FAILED promptly (no hang) and the local transport no longer claims it.
func TestTargetClosed(t *testing.T) {
	a, b := newEngine(t), newEngine(t)
	src := newBuf(t, a, 1<<20)
	newBuf(t, b, 1<<20)
	ctx := context.Background()
	seg, err := a.OpenSegment(ctx, b.SegmentName())
	assert.NilError(t, err)
	d, _ := a.SegmentDescriptor(seg)
	assert.Equal(t, a.ChooseTransport(seg), "local")
	assert.NilError(t, b.Close())
	assert.Equal(t, a.ChooseTransport(seg), "tcp")
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	err = a.Transfer(ctx, []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: d.Buffers[0].Addr, Length: 4096}})
	assert.Assert(t, err != nil)
	assert.Assert(t, time.Since(start) < 9*time.Second)
}

// TestConcurrentCloseWhileCopying closes the target while another engine
// copies into it: copies finish or fail, nothing hangs or faults.
func TestConcurrentCloseWhileCopying(t *testing.T) {
	a, b := newEngine(t), newEngine(t)
	src := newBuf(t, a, 32<<20)
	dst := newBuf(t, b, 32<<20)
	ctx := context.Background()
	seg, err := a.OpenSegment(ctx, b.SegmentName())
	assert.NilError(t, err)
	stop := make(chan struct{})
	done := make(chan error, 1)
	first := make(chan struct{})
	go func() {
		for n := 0; ; n++ {
			if n == 1 {
				close(first)
			}
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			err := a.Transfer(ctx, []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: uint64(dst.Addr()), Length: 32 << 20}})
			if err != nil {
				if n == 0 {
					close(first)
				}
				done <- nil
				return
			}
		}
	}()
	select {
	case <-first:
	case <-time.After(20 * time.Second):
		t.Fatal("first transfer hung")
	}
	assert.NilError(t, b.Close())
	close(stop)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("transfer loop hung after the target closed")
	}
}
