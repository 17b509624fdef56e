package tcp_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/engine/transport/tcp"
	"github.com/kvferry/kvferry/internal/cmem"
)

// pollPair is two engines over TCP with the given spin budget, a's src
// and b's dst registered, and b's segment opened on a.
func pollPair(t *testing.T, spin time.Duration, size uint64) (a, b *engine.Engine, seg engine.SegmentID, src, dst *cmem.Map) {
	t.Helper()
	mk := func() *engine.Engine {
		e, err := stack.New(context.Background(), stack.Config{Engine: engine.Config{LocalServerName: "127.0.0.1",
			Transports: []string{"tcp"}, SpinWait: spin}})
		assert.NilError(t, err)
		t.Cleanup(func() { e.Close() })
		return e
	}
	a, b = mk(), mk()
	var err error
	src, err = cmem.MapAnon(size)
	assert.NilError(t, err)
	dst, err = cmem.MapAnon(size)
	assert.NilError(t, err)
	t.Cleanup(func() { src.Close(); dst.Close() })
	assert.NilError(t, a.RegisterMemory(src.Addr(), size, "*", true))
	assert.NilError(t, b.RegisterMemory(dst.Addr(), size, "*", true))
	seg, err = a.OpenSegment(context.Background(), b.SegmentName())
	assert.NilError(t, err)
	return a, b, seg, src, dst
}

// A small transfer on an idle lane is read by the goroutine waiting for
// it (Wait polls the connection) rather than by the lane's reader, and
// moves the right bytes; with polling off nothing is polled.
func TestWaiterReadsSmallAnswers(t *testing.T) {
	for _, spin := range []time.Duration{10 * time.Millisecond, -1} {
		a, _, seg, src, dst := pollPair(t, spin, 1<<20)
		ctx := context.Background()
		for i := range 200 {
			off := uint64(i%128) * 4096
			copy(src.Bytes()[off:off+4096], bytes.Repeat([]byte{byte(i), 7}, 2048))
			w := engine.Request{Op: engine.OpWrite, Source: src.Addr() + uintptr(off), Target: seg, TargetOffset: uint64(dst.Addr()) + off, Length: 4096}
			assert.NilError(t, a.Transfer(ctx, []engine.Request{w}))
			r := w
			r.Op, r.Source = engine.OpRead, src.Addr()+uintptr(off+512<<10)
			assert.NilError(t, a.Transfer(ctx, []engine.Request{r}))
			assert.Assert(t, bytes.Equal(cmem.Bytes(r.Source, 4096), dst.Bytes()[off:off+4096]), "spin %v, transfer %d", spin, i)
		}
		polled := a.Transport("tcp").(*tcp.Transport).Stats().SlicesPolled
		t.Logf("spin %v: %d of 400 slices read by their waiter", spin, polled)
		if spin > 0 {
			// Timing decides how many (a loaded machine can make the
			// fallback win), but a 10 ms budget leaves room for most.
			assert.Assert(t, polled > 0)
		} else {
			assert.Equal(t, polled, uint64(0))
		}
	}
}

// A slice offered to a waiter that never comes completes all the same:
// the fallback hands it to the lane's reader after the spin budget. The
// batch's notification, sent by whoever completes it, shows completion
// without a status query (which would poll).
func TestOfferedSliceCompletesWithoutWaiter(t *testing.T) {
	a, b, seg, src, dst := pollPair(t, 2*time.Millisecond, 1<<20)
	tr := a.Transport("tcp").(*tcp.Transport)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	assert.NilError(t, a.Transfer(ctx, []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: uint64(dst.Addr()), Length: 4096}}))
	polled := tr.Stats().SlicesPolled
	for i := range 20 {
		id, err := a.AllocateBatch(1)
		assert.NilError(t, err)
		name := fmt.Sprint("done-", i)
		assert.NilError(t, a.SubmitWithNotify(id, []engine.Request{{Op: engine.OpRead, Source: src.Addr() + 8192, Target: seg,
			TargetOffset: uint64(dst.Addr()), Length: 4096}}, engine.Notification{Name: name}))
		for seen := false; !seen; {
			ns := b.WaitNotifications(ctx)
			assert.NilError(t, ctx.Err(), "the batch never completed without a waiter")
			for _, n := range ns {
				seen = seen || n.Name == name
			}
		}
		bs, err := a.Wait(ctx, id)
		assert.NilError(t, err)
		assert.Equal(t, bs.State, engine.StateCompleted)
		assert.NilError(t, a.FreeBatch(id))
	}
	assert.Equal(t, tr.Stats().SlicesPolled, polled, "nobody polled, yet a poller read")
}
