package engine_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/internal/cmem"
)

func newEngine(t *testing.T, transports ...string) *engine.Engine {
	t.Helper()
	if len(transports) == 0 {
		transports = []string{"local", "tcp"}
	}
	e, err := stack.New(context.Background(), stack.Config{Engine: engine.Config{LocalServerName: "127.0.0.1", Transports: transports, TransferTimeout: 5 * time.Second}})
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
	r := rand.New(rand.NewPCG(seed, seed*7+1))
	for i := 0; i+8 <= len(b); i += 8 {
		v := r.Uint64()
		for k := 0; k < 8; k++ {
			b[i+k] = byte(v >> (8 * k))
		}
	}
}

func TestWriteReadBetweenEngines(t *testing.T) {
	for _, size := range []uint64{1, 4096, 1 << 20, 3<<20 + 17} {
		// TCP only: with "local" installed two engines of one process
		// copy directly (engine/transport/local).
		a, b := newEngine(t, "tcp"), newEngine(t, "tcp")
		src := newBuf(t, a, 8<<20)
		dst := newBuf(t, b, 8<<20)
		back := newBuf(t, a, 8<<20)
		fill(src.Bytes(), size)
		seg, err := a.OpenSegment(context.Background(), b.SegmentName())
		assert.NilError(t, err)
		assert.Assert(t, seg > 0)
		assert.Equal(t, a.ChooseTransport(seg), "tcp")
		ctx := context.Background()
		assert.NilError(t, a.Transfer(ctx, []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: uint64(dst.Addr()) + 100, Length: size}}))
		assert.Assert(t, bytes.Equal(src.Bytes()[:size], dst.Bytes()[100:100+size]))
		assert.NilError(t, a.Transfer(ctx, []engine.Request{{Op: engine.OpRead, Source: back.Addr(), Target: seg, TargetOffset: uint64(dst.Addr()) + 100, Length: size}}))
		assert.Assert(t, bytes.Equal(src.Bytes()[:size], back.Bytes()[:size]))
	}
}

func TestLocalSegment(t *testing.T) {
	a := newEngine(t)
	buf := newBuf(t, a, 1<<20)
	fill(buf.Bytes()[:4096], 3)
	assert.Equal(t, a.ChooseTransport(engine.LocalSegment), "local")
	id, err := a.OpenSegment(context.Background(), a.SegmentName())
	assert.NilError(t, err)
	assert.Equal(t, id, engine.LocalSegment)
	assert.NilError(t, a.Transfer(context.Background(), []engine.Request{{Op: engine.OpWrite, Source: buf.Addr(), Target: 0, TargetOffset: uint64(buf.Addr()) + 8192, Length: 4096}}))
	assert.Assert(t, bytes.Equal(buf.Bytes()[:4096], buf.Bytes()[8192:8192+4096]))
	// Outside registered memory: refused.
	other := newBuf(t, nil, 4096)
	err = a.Transfer(context.Background(), []engine.Request{{Op: engine.OpWrite, Source: buf.Addr(), Target: 0, TargetOffset: uint64(other.Addr()), Length: 16}})
	assert.Assert(t, errors.Is(err, engine.ErrAddressNotRegistered), "%v", err)
}

func TestBatchSemantics(t *testing.T) {
	a, b := newEngine(t), newEngine(t)
	src := newBuf(t, a, 1<<20)
	dst := newBuf(t, b, 1<<20)
	seg, err := a.OpenSegment(context.Background(), b.SegmentName())
	assert.NilError(t, err)
	id, err := a.AllocateBatch(3)
	assert.NilError(t, err)
	req := engine.Request{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: uint64(dst.Addr()), Length: 4096}
	assert.NilError(t, a.Submit(id, []engine.Request{req, req}))
	err = a.Submit(id, []engine.Request{req, req})
	assert.Assert(t, errors.Is(err, engine.ErrTooManyRequests))
	assert.NilError(t, a.Submit(id, []engine.Request{req}))
	// Task ids continue across submits: 0..2; 3 is out of range.
	_, err = a.TaskStatus(id, 3)
	assert.Assert(t, errors.Is(err, engine.ErrInvalidArgument))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Wait observes all tasks, but a fresh batch must be observed before free.
	id2, _ := a.AllocateBatch(1)
	assert.NilError(t, a.Submit(id2, []engine.Request{req}))
	err = a.FreeBatch(id2)
	assert.Assert(t, errors.Is(err, engine.ErrBatchBusy), "%v", err)
	for {
		st, err := a.TaskStatus(id2, 0)
		assert.NilError(t, err)
		if st.State.Terminal() {
			assert.Equal(t, st.State, engine.StateCompleted)
			assert.Equal(t, st.TransferredBytes, uint64(4096))
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("task never completed")
		default:
		}
	}
	assert.NilError(t, a.FreeBatch(id2))
	assert.Assert(t, errors.Is(a.FreeBatch(id2), engine.ErrUnknownBatch))
	bs, err := a.Wait(ctx, id)
	assert.NilError(t, err)
	assert.Equal(t, bs.State, engine.StateCompleted)
	assert.Equal(t, bs.Tasks, 3)
	assert.NilError(t, a.FreeBatch(id))
}

func TestRemoteOutsideRegisteredRefused(t *testing.T) {
	a, b := newEngine(t), newEngine(t)
	src := newBuf(t, a, 1<<20)
	dst := newBuf(t, b, 1<<20)
	seg, err := a.OpenSegment(context.Background(), b.SegmentName())
	assert.NilError(t, err)
	err = a.Transfer(context.Background(), []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: uint64(dst.Addr()) + 1<<20 - 10, Length: 100}})
	assert.Assert(t, errors.Is(err, engine.ErrAddressNotRegistered), "%v", err)
}

func TestServerRejectsStaleDescriptor(t *testing.T) {
	// The initiator's cached descriptor still lists a buffer the target has
	// unregistered: the target's server refuses the request.
	a, b := newEngine(t), newEngine(t)
	src := newBuf(t, a, 1<<20)
	dst := newBuf(t, b, 1<<20)
	seg, err := a.OpenSegment(context.Background(), b.SegmentName())
	assert.NilError(t, err)
	assert.NilError(t, b.UnregisterMemory(dst.Addr()))
	err = a.Transfer(context.Background(), []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: uint64(dst.Addr()), Length: 100}})
	assert.Assert(t, errors.Is(err, engine.ErrRejected), "%v", err)
}

func TestNotifications(t *testing.T) {
	a, b := newEngine(t), newEngine(t)
	src := newBuf(t, a, 1<<20)
	dst := newBuf(t, b, 1<<20)
	seg, err := a.OpenSegment(context.Background(), b.SegmentName())
	assert.NilError(t, err)
	id, _ := a.AllocateBatch(1)
	assert.NilError(t, a.SubmitWithNotify(id, []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: uint64(dst.Addr()), Length: 1 << 20}}, engine.Notification{Name: "agent-a", Msg: "done"}))
	_, err = a.Wait(context.Background(), id)
	assert.NilError(t, err)
	assert.NilError(t, a.FreeBatch(id))
	got := waitNotifs(t, b, 1)
	assert.DeepEqual(t, got, []engine.Notification{{Name: "agent-a", Msg: "done"}})
	assert.NilError(t, a.Notify(context.Background(), seg, engine.Notification{Name: "x", Msg: "y"}))
	assert.DeepEqual(t, waitNotifs(t, b, 1), []engine.Notification{{Name: "x", Msg: "y"}})
	assert.NilError(t, a.Notify(context.Background(), engine.LocalSegment, engine.Notification{Name: "self", Msg: "z"}))
	assert.DeepEqual(t, a.Notifications(), []engine.Notification{{Name: "self", Msg: "z"}})
	assert.NilError(t, a.Probe(context.Background(), b.SegmentName()))
}

func waitNotifs(t *testing.T, e *engine.Engine, n int) []engine.Notification {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	var got []engine.Notification
	for len(got) < n {
		got = append(got, e.Notifications()...)
		if time.Now().After(deadline) {
			t.Fatalf("got %d notifications, want %d", len(got), n)
		}
		time.Sleep(time.Millisecond)
	}
	return got
}

func TestPeerDeathFailsTasks(t *testing.T) {
	a, b := newEngine(t), newEngine(t)
	src := newBuf(t, a, 64<<20)
	dst := newBuf(t, b, 64<<20)
	seg, err := a.OpenSegment(context.Background(), b.SegmentName())
	assert.NilError(t, err)
	id, _ := a.AllocateBatch(64)
	reqs := make([]engine.Request, 64)
	for i := range reqs {
		reqs[i] = engine.Request{Op: engine.OpWrite, Source: src.Addr() + uintptr(i)<<20, Target: seg, TargetOffset: uint64(dst.Addr()) + uint64(i)<<20, Length: 1 << 20}
	}
	assert.NilError(t, a.Submit(id, reqs))
	b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bs, err := a.Wait(ctx, id)
	assert.NilError(t, err) // terminal, not timed out
	assert.Assert(t, bs.State == engine.StateCompleted || bs.State == engine.StateFailed)
	assert.NilError(t, a.FreeBatch(id))
}

func TestCancel(t *testing.T) {
	a, b := newEngine(t), newEngine(t)
	src := newBuf(t, a, 64<<20)
	dst := newBuf(t, b, 64<<20)
	seg, err := a.OpenSegment(context.Background(), b.SegmentName())
	assert.NilError(t, err)
	id, _ := a.AllocateBatch(64)
	reqs := make([]engine.Request, 64)
	for i := range reqs {
		reqs[i] = engine.Request{Op: engine.OpRead, Source: src.Addr() + uintptr(i)<<20, Target: seg, TargetOffset: uint64(dst.Addr()) + uint64(i)<<20, Length: 1 << 20}
	}
	assert.NilError(t, a.Submit(id, reqs))
	assert.NilError(t, a.Cancel(context.Background(), id))
	bs, err := a.BatchStatus(id)
	assert.NilError(t, err)
	assert.Assert(t, bs.State == engine.StateCompleted || bs.State == engine.StateCanceled, "%v", bs.State)
	assert.NilError(t, a.FreeBatch(id))
}
