package local_test

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/engine/transport/local"
	"github.com/kvferry/kvferry/internal/cmem"
)

// newEngineWith starts an engine with the local transport configured by
// lc and the given transfer timeout.
func newEngineWith(t *testing.T, lc local.Config, timeout time.Duration) *engine.Engine {
	t.Helper()
	e, err := stack.New(context.Background(), stack.Config{
		Engine: engine.Config{LocalServerName: "127.0.0.1", Transports: []string{"local"}, TransferTimeout: timeout},
		Local:  lc,
	})
	assert.NilError(t, err)
	t.Cleanup(func() { e.Close() })
	return e
}

// seal makes m read-only: a copy into it after this point faults (the
// test binary dies with SIGSEGV), so a test that seals the memory of a
// transfer that has returned proves no copy into it was still on its way.
func seal(t *testing.T, m *cmem.Map) {
	t.Helper()
	assert.NilError(t, syscall.Mprotect(m.Bytes(), syscall.PROT_READ))
	t.Cleanup(func() { _ = syscall.Mprotect(m.Bytes(), syscall.PROT_READ|syscall.PROT_WRITE) })
}

// TestFailedBatchWaitsForItsCopies: of one batch, one request fails at
// once (outside the target's registered memory) while the other's copy
// is held up in the copier; Transfer reports the failure only once that
// copy is done, and the memory sealed right after it returns is never
// written again.
func TestFailedBatchWaitsForItsCopies(t *testing.T) {
	a, b := newEngine(t), newEngine(t)
	src := newBuf(t, a, 1<<20)
	fill(src.Bytes(), 7)
	keep := newBuf(t, b, 1<<20)
	gone := newBuf(t, b, 1<<20)
	ctx := context.Background()
	seg, err := a.OpenSegment(ctx, b.SegmentName())
	assert.NilError(t, err)
	assert.NilError(t, b.UnregisterMemory(gone.Addr())) // a's cached descriptor still lists it
	var inCopy atomic.Int32
	entered := make(chan struct{}, 1)
	local.SetCopyHook(a.Transport("local").(*local.Transport), 0, func(ss []*engine.Slice) {
		if ss[0].Remote != uint64(keep.Addr()) {
			return
		}
		inCopy.Add(1)
		entered <- struct{}{}
		// Held up long enough for the other request to fail first; a
		// Transfer that returned meanwhile would see inCopy set.
		time.Sleep(300 * time.Millisecond)
		inCopy.Add(-1)
	})
	err = a.Transfer(ctx, []engine.Request{
		{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: uint64(gone.Addr()), Length: 4096},
		{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: uint64(keep.Addr()), Length: 1 << 20},
	})
	assert.Equal(t, inCopy.Load(), int32(0), "Transfer returned while a copy ran")
	assert.Assert(t, errors.Is(err, engine.ErrRejected), "%v", err)
	select {
	case <-entered:
	default:
		t.Fatal("the held-up copy never started")
	}
	seal(t, keep)
	seal(t, src)
	assert.Assert(t, bytes.Equal(keep.Bytes(), src.Bytes()), "the other request's copy is complete")
}

// TestTimedOutTransferStopsBetweenPieces: a 4 MiB write copied 1 MiB per
// call; the first call is held up past the transfer timeout. Transfer
// cancels the batch and returns once that call is done: the remaining
// pieces are never copied, and nothing writes the memory after it
// returns.
func TestTimedOutTransferStopsBetweenPieces(t *testing.T) {
	lc := local.Config{Workers: 1, SliceSize: 1 << 20}
	a := newEngineWith(t, lc, 300*time.Millisecond)
	b := newEngineWith(t, lc, 300*time.Millisecond)
	src := newBuf(t, a, 4<<20)
	fill(src.Bytes(), 9)
	dst := newBuf(t, b, 4<<20)
	ctx := context.Background()
	seg, err := a.OpenSegment(ctx, b.SegmentName())
	assert.NilError(t, err)
	var calls, inCopy atomic.Int32
	local.SetCopyHook(a.Transport("local").(*local.Transport), 1<<20, func(ss []*engine.Slice) {
		if calls.Add(1) > 1 {
			return
		}
		inCopy.Add(1)
		defer inCopy.Add(-1)
		deadline := time.Now().Add(20 * time.Second)
		for !ss[0].Canceled() && time.Now().Before(deadline) { // until the timed-out Transfer cancels
			time.Sleep(time.Millisecond)
		}
	})
	err = a.Transfer(ctx, []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: uint64(dst.Addr()), Length: 4 << 20}})
	assert.Equal(t, inCopy.Load(), int32(0), "Transfer returned while a copy ran")
	assert.Assert(t, errors.Is(err, engine.ErrTimeout), "%v", err)
	seal(t, dst)
	assert.Equal(t, calls.Load(), int32(1), "pieces copied after the cancellation")
	assert.Assert(t, bytes.Equal(dst.Bytes()[:1<<20], src.Bytes()[:1<<20]), "the piece in flight finished")
	assert.Assert(t, bytes.Equal(dst.Bytes()[1<<20:], make([]byte, 3<<20)), "later pieces untouched")
}
