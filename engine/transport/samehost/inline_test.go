package samehost_test

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/transport/samehost"
)

// TestInline: small cma submissions are copied by the submitting
// goroutine; larger ones of several slices are shared between the workers
// and the submitting goroutine; one large slice and submissions finding
// every inline copier busy go to the workers; the knob turns both off.
func TestInline(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cfg    samehost.Config
		size   uint64
		n      int
		inline bool
		shared bool
	}{
		{"1x4KiB", samehost.Config{}, 4 << 10, 1, true, false},
		{"1x2MiB", samehost.Config{}, 2 << 20, 1, true, false},
		{"1x2MiB+1", samehost.Config{}, 2<<20 + 1, 1, false, false},
		{"32x64KiB", samehost.Config{}, 64 << 10, 32, true, false},
		{"33x64KiB", samehost.Config{}, 64 << 10, 33, false, true},
		{"1025x1KiB", samehost.Config{}, 1 << 10, 1025, false, true}, // more slices than one call takes
		{"3x4MiB", samehost.Config{}, 4 << 20, 3, false, true},
		{"1x1MiB/8MiB", samehost.Config{CMAInlineBytes: 8 << 20}, 1 << 20, 1, true, false},
		{"8x1MiB/8MiB", samehost.Config{CMAInlineBytes: 8 << 20}, 1 << 20, 8, true, false},
		{"off", samehost.Config{CMAInlineBytes: -1}, 4 << 10, 1, false, false},
		{"off/33x64KiB", samehost.Config{CMAInlineBytes: -1}, 64 << 10, 33, false, false},
		{"no slots", samehost.Config{CMAInlineSlots: -1}, 4 << 10, 1, false, false},
		{"64 workers", samehost.Config{Workers: 64}, 64 << 10, 33, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newEngineWith(t, tc.cfg, "cma"), newEngineWith(t, tc.cfg, "cma")
			span := tc.size * uint64(tc.n)
			src, dst := newBuf(t, a, 2*span), newBuf(t, b, 2*span)
			pattern(src.Bytes(), 21)
			ctx := context.Background()
			seg, err := a.OpenSegment(ctx, b.SegmentName())
			assert.NilError(t, err)
			cma := a.Transport(samehost.NameCMA).(*samehost.CMA)
			reqs := make([]engine.Request, tc.n)
			for i := range reqs {
				off := uint64(i) * tc.size
				reqs[i] = engine.Request{Op: engine.OpWrite, Source: src.Addr() + uintptr(off), Target: seg, TargetOffset: uint64(dst.Addr()) + off, Length: tc.size}
			}
			before, sharedBefore := cma.Inlined(), cma.Shared()
			assert.NilError(t, a.Transfer(ctx, reqs))
			assert.Assert(t, bytes.Equal(src.Bytes()[:span], dst.Bytes()[:span]))
			for i := range reqs {
				reqs[i].Op, reqs[i].Source = engine.OpRead, reqs[i].Source+uintptr(span)
			}
			assert.NilError(t, a.Transfer(ctx, reqs))
			assert.Assert(t, bytes.Equal(src.Bytes()[:span], src.Bytes()[span:]))
			want := uint64(0)
			if tc.inline {
				want = 2
			}
			assert.Equal(t, cma.Inlined()-before, want)
			want = 0
			if tc.shared {
				want = 2
			}
			assert.Equal(t, cma.Shared()-sharedBefore, want)
		})
	}
}

// TestInlineBusy: with every inline copier taken, a small submission goes
// to the workers.
func TestInlineBusy(t *testing.T) {
	a, b := newEngine(t, "cma"), newEngine(t, "cma")
	src, dst := newBuf(t, a, 1<<20), newBuf(t, b, 1<<20)
	pattern(src.Bytes(), 22)
	ctx := context.Background()
	seg, err := a.OpenSegment(ctx, b.SegmentName())
	assert.NilError(t, err)
	cma := a.Transport(samehost.NameCMA).(*samehost.CMA)
	giveBack := samehost.TakeInlineCopiers(cma)
	req := engine.Request{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: uint64(dst.Addr()), Length: 1 << 20}
	assert.NilError(t, a.Transfer(ctx, []engine.Request{req}))
	assert.Equal(t, cma.Inlined(), uint64(0))
	assert.Assert(t, bytes.Equal(src.Bytes(), dst.Bytes()))
	giveBack()
	assert.NilError(t, a.Transfer(ctx, []engine.Request{req}))
	assert.Equal(t, cma.Inlined(), uint64(1))
}

// TestInlineSlotDrained: every cma session has an epoch slot per worker
// and per inline copier, and an owner removing a region waits for an
// inline copier's slot as for a worker's.
func TestInlineSlotDrained(t *testing.T) {
	a, b := newEngine(t, "cma"), newEngine(t, "cma")
	src := newBuf(t, a, 1<<20)
	victim := newBuf(t, b, 1<<20)
	ctx := context.Background()
	seg, err := a.OpenSegment(ctx, b.SegmentName())
	assert.NilError(t, err)
	assert.NilError(t, a.Transfer(ctx, []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: uint64(victim.Addr()), Length: 4096}}))
	cma := a.Transport(samehost.NameCMA).(*samehost.CMA)
	slots, release := samehost.HoldLastSlot(cma, a.Peer(seg))
	assert.Equal(t, slots, samehost.DefaultWorkers+samehost.DefaultCMAInlineSlots)
	done := make(chan error, 1)
	go func() { done <- b.UnregisterMemory(victim.Addr()) }()
	select {
	case err := <-done:
		release()
		t.Fatalf("UnregisterMemory returned (%v) while an inline slot held the old epoch", err)
	case <-time.After(200 * time.Millisecond):
	}
	release()
	select {
	case err := <-done:
		assert.NilError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("UnregisterMemory did not return after the slot was cleared")
	}
}

// TestInlineConcurrent: more goroutines than inline copiers submit small
// transfers of both directions (some inline, some to the workers), each
// checking its bytes; then the initiator closes while they still submit,
// and every transfer ends.
func TestInlineConcurrent(t *testing.T) {
	a, b := newEngineWith(t, samehost.Config{CMAInlineSlots: 2}, "cma"), newEngine(t, "cma")
	const goroutines, each = 8, 1 << 20
	src, back, dst := newBuf(t, a, goroutines*each), newBuf(t, a, goroutines*each), newBuf(t, b, goroutines*each)
	pattern(src.Bytes(), 23)
	ctx := context.Background()
	seg, err := a.OpenSegment(ctx, b.SegmentName())
	assert.NilError(t, err)
	cma := a.Transport(samehost.NameCMA).(*samehost.CMA)
	var wg sync.WaitGroup
	errs := make(chan error, 2*goroutines)
	stop := make(chan struct{})
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			off := uint64(g) * each
			for i := 0; ; i++ {
				n := uint64(4096) << (i % 9) // 4 KiB .. 1 MiB
				w := engine.Request{Op: engine.OpWrite, Source: src.Addr() + uintptr(off), Target: seg, TargetOffset: uint64(dst.Addr()) + off, Length: n}
				r := engine.Request{Op: engine.OpRead, Source: back.Addr() + uintptr(off), Target: seg, TargetOffset: uint64(dst.Addr()) + off, Length: n}
				err := a.Transfer(ctx, []engine.Request{w})
				if err == nil {
					err = a.Transfer(ctx, []engine.Request{r})
				}
				select {
				case <-stop:
					return // after Close, any outcome but a hang
				default:
				}
				if err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(src.Bytes()[off:off+n], back.Bytes()[off:off+n]) {
					errs <- errBytes
					return
				}
				if i == 200 {
					errs <- nil
				}
			}
		}()
	}
	for range goroutines {
		assert.NilError(t, <-errs)
	}
	assert.Assert(t, cma.Inlined() > 0)
	close(stop)
	closed := make(chan struct{})
	go func() {
		a.Close()
		close(closed)
	}()
	wg.Wait()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
}

type constErr string

func (e constErr) Error() string { return string(e) }

const errBytes = constErr("bytes differ")
