package samehost_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/transport/samehost"
)

// pollBatch polls batch id without waiting, as NIXL's checkXfer loop does.
func pollBatch(t *testing.T, e *engine.Engine, id engine.BatchID) engine.BatchStatus {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		bs, err := e.BatchStatus(id)
		assert.NilError(t, err)
		if bs.State != engine.StateWaiting {
			return bs
		}
	}
	t.Fatalf("batch %d still waiting", id)
	return engine.BatchStatus{}
}

// TestNotificationRing: over cma, a batch's notification and a plain one
// go through the owner's ring (no notify RPC), are there once the sender
// returns, and keep their order with the ones too large for the ring,
// which go by RPC; a full ring falls back to the RPC in order too.
func TestNotificationRing(t *testing.T) {
	a, b := newEngine(t, samehost.NameCMA), newEngine(t, samehost.NameCMA)
	src, dst := newBuf(t, a, 1<<20), newBuf(t, b, 1<<20)
	pattern(src.Bytes(), 5)
	ctx := context.Background()
	seg, err := a.OpenSegment(ctx, b.SegmentName())
	assert.NilError(t, err)
	cma := a.Transport(samehost.NameCMA).(*samehost.CMA)

	before := cma.RingNotified()
	for i := range 20 {
		id, err := a.AllocateBatch(1)
		assert.NilError(t, err)
		msg := fmt.Sprintf("batch %d", i)
		assert.NilError(t, a.SubmitWithNotify(id, []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg,
			TargetOffset: uint64(dst.Addr()), Length: 64 << 10}}, engine.Notification{Name: "a", Msg: msg}))
		bs := pollBatch(t, a, id)
		assert.Equal(t, bs.State, engine.StateCompleted, "%v", bs.Err)
		assert.NilError(t, a.FreeBatch(id))
		// Completed means it lies in b's memory: no waiting.
		assert.DeepEqual(t, b.Notifications(), []engine.Notification{{Name: "a", Msg: msg}})
	}
	assert.Equal(t, cma.RingNotified()-before, uint64(20), "every batch notification went through the ring")

	// Small ones (ring) and large ones (RPC), interleaved: one order.
	var want []engine.Notification
	before = cma.RingNotified()
	for i := range 40 {
		msg := fmt.Sprintf("n%d", i)
		if i%3 == 2 {
			msg += strings.Repeat("\x00L", 40<<10) // over a quarter of the ring
		}
		n := engine.Notification{Name: "a", Msg: msg}
		assert.NilError(t, a.Notify(ctx, seg, n))
		want = append(want, n)
	}
	assert.Equal(t, cma.RingNotified()-before, uint64(27))
	assert.DeepEqual(t, b.Notifications(), want)

	// A ring filled faster than it is drained: the rest goes by RPC, in order.
	want = want[:0]
	before = cma.RingNotified()
	for i := range 3000 {
		n := engine.Notification{Name: "a", Msg: fmt.Sprintf("%04d%s", i, strings.Repeat("f", 200))}
		assert.NilError(t, a.Notify(ctx, seg, n))
		want = append(want, n)
	}
	ringed := cma.RingNotified() - before
	assert.Assert(t, ringed > 500 && ringed < 3000, "ring took %d of 3000", ringed)
	assert.DeepEqual(t, b.Notifications(), want)
}

// TestNotificationRingWakesWaiter: an application thread asleep in
// WaitNotifications is woken by a notification written into the ring.
func TestNotificationRingWakesWaiter(t *testing.T) {
	a, b := newEngine(t, samehost.NameCMA), newEngine(t, samehost.NameCMA)
	src, dst := newBuf(t, a, 1<<20), newBuf(t, b, 1<<20)
	ctx := context.Background()
	seg, err := a.OpenSegment(ctx, b.SegmentName())
	assert.NilError(t, err)
	// A transfer opens the cma session (and its ring).
	assert.NilError(t, a.Transfer(ctx, []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: uint64(dst.Addr()), Length: 4096}}))
	cma := a.Transport(samehost.NameCMA).(*samehost.CMA)
	before := cma.RingNotified()
	for i := range 30 {
		got := make(chan []engine.Notification, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			got <- b.WaitNotifications(wctx)
		}()
		if i%2 == 0 {
			time.Sleep(2 * time.Millisecond) // asleep before the send, or racing it
		}
		n := engine.Notification{Name: "a", Msg: fmt.Sprint(i)}
		assert.NilError(t, a.Notify(ctx, seg, n))
		select {
		case q := <-got:
			assert.DeepEqual(t, q, []engine.Notification{n})
		case <-time.After(6 * time.Second):
			t.Fatalf("waiter %d not woken", i)
		}
	}
	assert.Equal(t, cma.RingNotified()-before, uint64(30))
}

// TestNotificationRingOff: KVFERRY_NOTIFY_RING=0 (NoNotifyRing) on either
// side leaves every notification to the RPC.
func TestNotificationRingOff(t *testing.T) {
	for _, side := range []string{"initiator", "owner"} {
		t.Run(side, func(t *testing.T) {
			ca, cb := samehost.Config{}, samehost.Config{}
			if side == "initiator" {
				ca.NoNotifyRing = true
			} else {
				cb.NoNotifyRing = true
			}
			a, b := newEngineWith(t, ca, samehost.NameCMA), newEngineWith(t, cb, samehost.NameCMA)
			src, dst := newBuf(t, a, 1<<20), newBuf(t, b, 1<<20)
			ctx := context.Background()
			seg, err := a.OpenSegment(ctx, b.SegmentName())
			assert.NilError(t, err)
			assert.NilError(t, a.Transfer(ctx, []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: uint64(dst.Addr()), Length: 4096}}))
			assert.NilError(t, a.Notify(ctx, seg, engine.Notification{Name: "a", Msg: "x"}))
			assert.DeepEqual(t, b.Notifications(), []engine.Notification{{Name: "a", Msg: "x"}})
			assert.Equal(t, a.Transport(samehost.NameCMA).(*samehost.CMA).RingNotified(), uint64(0))
		})
	}
}
