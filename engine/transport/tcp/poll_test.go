package tcp_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
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
		completesUnwaited(ctx, t, a, b, id, name)
	}
	assert.Equal(t, tr.Stats().SlicesPolled, polled, "nobody polled, yet a poller read")
}

// completesUnwaited waits, without asking a for it, until b has the
// notification name that batch id of a sends once complete, then checks
// that the batch completed and frees it.
func completesUnwaited(ctx context.Context, t *testing.T, a, b *engine.Engine, id engine.BatchID, name string) {
	t.Helper()
	for seen := false; !seen; {
		ns := b.WaitNotifications(ctx)
		assert.NilError(t, ctx.Err(), "batch %d never completed without a waiter", id)
		for _, n := range ns {
			seen = seen || n.Name == name
		}
	}
	bs, err := a.Wait(ctx, id)
	assert.NilError(t, err)
	assert.Equal(t, bs.State, engine.StateCompleted)
	assert.NilError(t, a.FreeBatch(id))
}

// Large transfers whose submitter waits (Transfer) are read by the waiter
// too, blocking in the kernel for the answers (engine.WaitPoller): 1 MiB
// WRITEs and READs striped over the lanes move the right bytes, and the
// waiter read answers itself; with polling off nothing is polled.
func TestWaiterReadsLargeAnswers(t *testing.T) {
	const size = 1 << 20
	for _, spin := range []time.Duration{50 * time.Microsecond, -1} {
		a, _, seg, src, dst := pollPair(t, spin, 4*size)
		ctx := context.Background()
		for i := range 20 {
			off := uint64(i%2) * size
			copy(src.Bytes()[off:off+size], bytes.Repeat([]byte{byte(i), 3, 5, 7}, size/4))
			w := engine.Request{Op: engine.OpWrite, Source: src.Addr() + uintptr(off), Target: seg, TargetOffset: uint64(dst.Addr()) + off, Length: size}
			assert.NilError(t, a.Transfer(ctx, []engine.Request{w}))
			assert.Assert(t, bytes.Equal(src.Bytes()[off:off+size], dst.Bytes()[off:off+size]), "spin %v, write %d", spin, i)
			r := w
			r.Source = src.Addr() + uintptr(2*size+off)
			r.Op = engine.OpRead
			assert.NilError(t, a.Transfer(ctx, []engine.Request{r}))
			assert.Assert(t, bytes.Equal(cmem.Bytes(r.Source, size), dst.Bytes()[off:off+size]), "spin %v, read %d", spin, i)
		}
		polled := a.Transport("tcp").(*tcp.Transport).Stats().SlicesPolled
		t.Logf("spin %v: %d of 80 slices read by their waiter", spin, polled)
		if spin > 0 {
			assert.Assert(t, polled > 0)
		} else {
			assert.Equal(t, polled, uint64(0))
		}
	}
}

// A large slice offered to a waiter that leaves at once (its context is
// already done) completes all the same: the lane's reader reads the
// answer after the fallback delay, the batch ends, and the lane serves
// the next transfer.
func TestOfferedLargeSliceCompletesWhenWaiterLeaves(t *testing.T) {
	const size = 1 << 20
	a, _, seg, src, dst := pollPair(t, 50*time.Microsecond, 2*size)
	done, cancel := context.WithCancel(context.Background())
	cancel()
	copy(src.Bytes()[:size], bytes.Repeat([]byte{9, 8, 7, 6}, size/4))
	for _, op := range []engine.OpCode{engine.OpWrite, engine.OpRead} {
		req := engine.Request{Op: op, Source: src.Addr(), Target: seg, TargetOffset: uint64(dst.Addr()), Length: size}
		if op == engine.OpRead {
			req.Source += size
		}
		// The canceled wait returns (an error, unless the answers were
		// all in before it looked) once the batch ended: Cancel waits for
		// what is in flight.
		_ = a.Transfer(done, []engine.Request{req})
		assert.NilError(t, a.Transfer(context.Background(), []engine.Request{req}))
	}
	assert.Assert(t, bytes.Equal(src.Bytes()[:size], dst.Bytes()[:size]))
	assert.Assert(t, bytes.Equal(src.Bytes()[size:], dst.Bytes()[:size]))
}

// A batch declared awaited (Engine.Await, kvferry_batch_await) before its
// submission is read by its waiter like a Transfer's: 1 MiB READs
// submitted and waited for through AllocateBatch, Submit and Wait are
// read by the waiter only when declared, and move the right bytes.
func TestAwaitedBatchIsReadByItsWaiter(t *testing.T) {
	const size = 1 << 20
	a, _, seg, src, dst := pollPair(t, 50*time.Microsecond, 2*size)
	tr := a.Transport("tcp").(*tcp.Transport)
	ctx := context.Background()
	assert.Assert(t, a.Await(engine.BatchID(987654321)) != nil, "an unknown batch")
	for _, awaited := range []bool{false, true} {
		before := tr.Stats().SlicesPolled
		for i := range 20 {
			copy(dst.Bytes()[:size], bytes.Repeat([]byte{byte(i), 1, 2, 3}, size/4))
			id, err := a.AllocateBatch(1)
			assert.NilError(t, err)
			if awaited {
				assert.NilError(t, a.Await(id))
			}
			assert.NilError(t, a.Submit(id, []engine.Request{{Op: engine.OpRead, Source: src.Addr() + size, Target: seg,
				TargetOffset: uint64(dst.Addr()), Length: size}}))
			bs, err := a.Wait(ctx, id)
			assert.NilError(t, err)
			assert.Equal(t, bs.State, engine.StateCompleted)
			assert.NilError(t, a.FreeBatch(id))
			assert.Assert(t, bytes.Equal(src.Bytes()[size:], dst.Bytes()[:size]), "awaited %v, read %d", awaited, i)
		}
		polled := tr.Stats().SlicesPolled - before
		t.Logf("awaited %v: %d of 40 slices read by their waiter", awaited, polled)
		if awaited {
			assert.Assert(t, polled > 0)
		} else {
			assert.Equal(t, polled, uint64(0), "a large slice nobody declared awaited was offered to its waiter")
		}
	}
}

// A batch declared awaited that nobody waits for completes all the same
// (the lane's reader reads its answer after the fallback delay): its
// notification shows it.
func TestAwaitedBatchCompletesWithoutWaiter(t *testing.T) {
	const size = 1 << 20
	a, b, seg, src, dst := pollPair(t, 50*time.Microsecond, 2*size)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, n := range []uint64{4096, size} {
		for i := range 5 {
			id, err := a.AllocateBatch(1)
			assert.NilError(t, err)
			assert.NilError(t, a.Await(id))
			name := fmt.Sprint("awaited-", n, "-", i)
			assert.NilError(t, a.SubmitWithNotify(id, []engine.Request{{Op: engine.OpRead, Source: src.Addr() + size, Target: seg,
				TargetOffset: uint64(dst.Addr()), Length: n}}, engine.Notification{Name: name}))
			completesUnwaited(ctx, t, a, b, id, name)
		}
	}
}

// A small answer its submitter waits for that comes after the waiter's
// spin budget is still read by the waiter, which blocks in the kernel for
// it (SpinThenWaitWith), rather than by the lane's reader after a hand-off:
// with a 1 µs budget every answer comes late, and most are read by their
// waiter (timing decides how many: a waiter kept from the CPU past the
// fallback delay leaves its answer to the reader).
func TestAwaitedSmallAnswerAfterSpinIsReadByWaiter(t *testing.T) {
	a, _, seg, src, dst := pollPair(t, time.Microsecond, 1<<20)
	tr := a.Transport("tcp").(*tcp.Transport)
	ctx := context.Background()
	before := tr.Stats().SlicesPolled
	const n = 40
	for i := range n {
		copy(dst.Bytes()[:4096], bytes.Repeat([]byte{byte(i), 5}, 2048))
		r := engine.Request{Op: engine.OpRead, Source: src.Addr() + 8192, Target: seg, TargetOffset: uint64(dst.Addr()), Length: 4096}
		assert.NilError(t, a.Transfer(ctx, []engine.Request{r}))
		assert.Assert(t, bytes.Equal(src.Bytes()[8192:8192+4096], dst.Bytes()[:4096]), "read %d", i)
	}
	polled := tr.Stats().SlicesPolled - before
	t.Logf("%d of %d late small answers read by their waiter", polled, n)
	assert.Assert(t, polled > n/2, "%d of %d late small answers read by their waiter", polled, n)
}

// A C caller's wait (WaitLocked from a thread-locked goroutine) for a
// batch not declared awaited, whose answer comes after the waiter's spin
// budget: the waiter hands the answer to the lane's reader when it stops
// polling (Handoff) and sleeps in the kernel until the reader completes
// the batch (issue 38); every batch completes with the right bytes, and
// so does a C-style status poll (PollTaskStatus in a loop).
func TestLockedWaitWithoutAwaitCompletes(t *testing.T) {
	a, _, seg, src, dst := pollPair(t, time.Microsecond, 1<<20)
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		done <- lockedRounds(a, seg, src, dst)
	}()
	select {
	case err := <-done:
		assert.NilError(t, err)
	case <-time.After(2 * time.Minute):
		t.Fatal("locked waits did not finish")
	}
}

// lockedRounds runs 40 reads waited for with WaitLocked and 40 polled for
// with PollTaskStatus, each checked.
func lockedRounds(a *engine.Engine, seg engine.SegmentID, src, dst *cmem.Map) error {
	for i := range 80 {
		copy(dst.Bytes()[:4096], bytes.Repeat([]byte{byte(i), 9}, 2048))
		id, err := a.AllocateBatch(1)
		if err != nil {
			return err
		}
		r := engine.Request{Op: engine.OpRead, Source: src.Addr() + 8192, Target: seg, TargetOffset: uint64(dst.Addr()), Length: 4096}
		if err := a.Submit(id, []engine.Request{r}); err != nil {
			return err
		}
		if i%2 == 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			bs, err := a.WaitLocked(ctx, id)
			cancel()
			if err != nil || bs.State != engine.StateCompleted {
				return fmt.Errorf("wait %d: %v %v", i, bs.State, err)
			}
		} else {
			end := time.Now().Add(30 * time.Second)
			for {
				st, err := a.PollTaskStatus(id, 0)
				if err != nil {
					return fmt.Errorf("status %d: %w", i, err)
				}
				if st.State.Terminal() {
					if st.State != engine.StateCompleted {
						return fmt.Errorf("status %d: %v", i, st.State)
					}
					break
				}
				if time.Now().After(end) {
					return fmt.Errorf("status %d: still %v after 30 s", i, st.State)
				}
			}
		}
		if !bytes.Equal(src.Bytes()[8192:8192+4096], dst.Bytes()[:4096]) {
			return fmt.Errorf("read %d: wrong bytes", i)
		}
		if err := a.FreeBatch(id); err != nil {
			return err
		}
	}
	// Bad handles: an unknown batch is an error, at once.
	if _, err := a.WaitLocked(context.Background(), 987654321); !errors.Is(err, engine.ErrUnknownBatch) {
		return fmt.Errorf("wait for an unknown batch: %v", err)
	}
	if _, err := a.PollTaskStatus(987654321, 0); !errors.Is(err, engine.ErrUnknownBatch) {
		return fmt.Errorf("status of an unknown batch: %v", err)
	}
	return nil
}
