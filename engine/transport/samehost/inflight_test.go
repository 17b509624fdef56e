package samehost_test

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/engine/transport/samehost"
)

// newCMAEngine starts an engine with cma only, configured by cfg, with
// the given transfer timeout.
func newCMAEngine(t *testing.T, cfg samehost.Config, timeout time.Duration) *engine.Engine {
	t.Helper()
	e, err := stack.New(context.Background(), stack.Config{
		Engine:   engine.Config{LocalServerName: "127.0.0.1", Transports: []string{samehost.NameCMA}, TransferTimeout: timeout},
		SameHost: cfg,
	})
	assert.NilError(t, err)
	t.Cleanup(func() { e.Close() })
	return e
}

func cmaOf(e *engine.Engine) *samehost.CMA { return e.Transport(samehost.NameCMA).(*samehost.CMA) }

// TestCMAFailedBatchWaitsForItsCopies: of one batch over cma, one request
// fails at once (outside the owner's registered memory, on one worker)
// while the other's process_vm_writev is held up (on the other); Transfer
// reports the failure only once that copy is done.
func TestCMAFailedBatchWaitsForItsCopies(t *testing.T) {
	cfg := samehost.Config{Workers: 2, CMAInlineBytes: -1}
	a, b := newCMAEngine(t, cfg, 5*time.Second), newCMAEngine(t, cfg, 5*time.Second)
	src := newBuf(t, a, 1<<20)
	pattern(src.Bytes(), 5)
	keep := newBuf(t, b, 1<<20)
	gone := newBuf(t, b, 1<<20)
	ctx := context.Background()
	seg, err := a.OpenSegment(ctx, b.SegmentName())
	assert.NilError(t, err)
	assert.Equal(t, a.ChooseTransport(seg), samehost.NameCMA)
	assert.NilError(t, b.UnregisterMemory(gone.Addr())) // a's descriptor still lists it
	var inCopy, held atomic.Int32
	samehost.SetCallHook(cmaOf(a), 0, func(first *engine.Slice) {
		if first.Remote != uint64(keep.Addr()) {
			return
		}
		held.Add(1)
		inCopy.Add(1)
		time.Sleep(300 * time.Millisecond) // the other request fails meanwhile
		inCopy.Add(-1)
	})
	err = a.Transfer(ctx, []engine.Request{
		{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: uint64(gone.Addr()), Length: 4096},
		{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: uint64(keep.Addr()), Length: 1 << 20},
	})
	assert.Equal(t, inCopy.Load(), int32(0), "Transfer returned while a copy ran")
	assert.Assert(t, errors.Is(err, engine.ErrRejected), "%v", err)
	assert.Equal(t, held.Load(), int32(1))
	assert.Assert(t, bytes.Equal(keep.Bytes(), src.Bytes()), "the other request's copy is complete")
}

// TestCMATimedOutTransferStopsBetweenCalls: a 4 MiB write moved 1 MiB per
// process_vm_writev; the first call is held up past the transfer timeout.
// Transfer cancels the batch and returns once that call is done, and the
// remaining ranges are never copied.
func TestCMATimedOutTransferStopsBetweenCalls(t *testing.T) {
	cfg := samehost.Config{Workers: 1, CMAInlineBytes: -1, CMASliceSize: 1 << 20}
	a := newCMAEngine(t, cfg, 300*time.Millisecond)
	b := newCMAEngine(t, cfg, 300*time.Millisecond)
	src := newBuf(t, a, 4<<20)
	pattern(src.Bytes(), 6)
	dst := newBuf(t, b, 4<<20)
	ctx := context.Background()
	seg, err := a.OpenSegment(ctx, b.SegmentName())
	assert.NilError(t, err)
	var calls, inCopy atomic.Int32
	samehost.SetCallHook(cmaOf(a), 1<<20, func(first *engine.Slice) {
		if calls.Add(1) > 1 {
			return
		}
		inCopy.Add(1)
		defer inCopy.Add(-1)
		deadline := time.Now().Add(20 * time.Second)
		for !first.Canceled() && time.Now().Before(deadline) { // until the timed-out Transfer cancels
			time.Sleep(time.Millisecond)
		}
	})
	err = a.Transfer(ctx, []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: uint64(dst.Addr()), Length: 4 << 20}})
	assert.Equal(t, inCopy.Load(), int32(0), "Transfer returned while a copy ran")
	assert.Assert(t, errors.Is(err, engine.ErrTimeout), "%v", err)
	assert.Equal(t, calls.Load(), int32(1), "ranges copied after the cancellation")
	assert.Assert(t, bytes.Equal(dst.Bytes()[:1<<20], src.Bytes()[:1<<20]), "the call in flight finished")
	assert.Assert(t, bytes.Equal(dst.Bytes()[1<<20:], make([]byte, 3<<20)), "later ranges untouched")
}
