package engine_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/descriptor"
	"github.com/kvferry/kvferry/engine/rpc"
	"github.com/kvferry/kvferry/engine/stack"
)

// pollDone polls batch id without waiting, as NIXL's checkXfer loop does,
// until it is terminal.
func pollDone(t *testing.T, e *engine.Engine, id engine.BatchID) engine.BatchStatus {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		bs, err := e.BatchStatus(id)
		assert.NilError(t, err)
		if bs.State != engine.StateWaiting {
			return bs
		}
		if time.Now().After(deadline) {
			t.Fatalf("batch %d still waiting", id)
		}
		time.Sleep(20 * time.Microsecond)
	}
}

// TestCompletedMeansNotified: once a batch submitted with a notification
// reports completed (batch or task status), the peer already holds the
// notification, and the segment can be removed at once without losing it
// (NIXL programs drop the remote agent right after DONE).
func TestCompletedMeansNotified(t *testing.T) {
	for _, tr := range []string{"tcp", "local"} {
		t.Run(tr, func(t *testing.T) {
			a, b := newEngine(t, tr), newEngine(t, tr)
			src := newBuf(t, a, 1<<20)
			dst := newBuf(t, b, 1<<20)
			for i := range 50 {
				seg, err := a.OpenSegment(context.Background(), b.SegmentName())
				assert.NilError(t, err)
				id, err := a.AllocateBatch(2)
				assert.NilError(t, err)
				msg := fmt.Sprintf("done %d", i)
				reqs := []engine.Request{
					{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: uint64(dst.Addr()), Length: 4096},
					{Op: engine.OpWrite, Source: src.Addr() + 4096, Target: seg, TargetOffset: uint64(dst.Addr()) + 4096, Length: 64 << 10},
				}
				assert.NilError(t, a.SubmitWithNotify(id, reqs, engine.Notification{Name: "a", Msg: msg}))
				if i%2 == 0 {
					bs := pollDone(t, a, id)
					assert.Equal(t, bs.State, engine.StateCompleted, "%v", bs.Err)
				} else {
					// Mooncake-style per-task polling.
					for task := range 2 {
						for {
							st, err := a.TaskStatus(id, task)
							assert.NilError(t, err)
							if st.State.Terminal() {
								assert.Equal(t, st.State, engine.StateCompleted)
								break
							}
							time.Sleep(20 * time.Microsecond)
						}
					}
				}
				assert.NilError(t, a.FreeBatch(id))
				assert.NilError(t, a.RemoveSegment(b.SegmentName()))
				// No waiting: it is there already.
				assert.DeepEqual(t, b.Notifications(), []engine.Notification{{Name: "a", Msg: msg}})
			}
		})
	}
}

// TestNotificationFailureFailsBatch: a notification the peer refuses turns
// the batch FAILED with the reason, instead of a completed batch whose
// notification vanished.
func TestNotificationFailureFailsBatch(t *testing.T) {
	a := newEngine(t, "tcp")
	b, err := stack.New(context.Background(), stack.Config{Engine: engine.Config{LocalServerName: "127.0.0.1", Transports: []string{"tcp"}, NotifyQueueLimit: 1}})
	assert.NilError(t, err)
	t.Cleanup(func() { b.Close() })
	src := newBuf(t, a, 1<<20)
	dst := newBuf(t, b, 1<<20)
	seg, err := a.OpenSegment(context.Background(), b.SegmentName())
	assert.NilError(t, err)
	// b's queue holds one undrained notification: the next is refused.
	assert.NilError(t, a.Notify(context.Background(), seg, engine.Notification{Name: "a", Msg: "fills the queue"}))
	id, err := a.AllocateBatch(1)
	assert.NilError(t, err)
	assert.NilError(t, a.SubmitWithNotify(id, []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: uint64(dst.Addr()), Length: 4096}}, engine.Notification{Name: "a", Msg: "refused"}))
	bs := pollDone(t, a, id)
	assert.Equal(t, bs.State, engine.StateFailed)
	assert.ErrorContains(t, bs.Err, "notification did not reach")
	st, err := a.TaskStatus(id, 0)
	assert.NilError(t, err)
	assert.Equal(t, st.State, engine.StateFailed)
	assert.ErrorContains(t, st.Err, "notification did not reach")
	assert.NilError(t, a.FreeBatch(id))
	assert.Assert(t, a.Metrics().NotifiesFailed >= 1)
	assert.DeepEqual(t, b.Notifications(), []engine.Notification{{Name: "a", Msg: "fills the queue"}})
}

// TestRemoveSegmentDeliversQueued: notifications queued for a segment (by
// batches that completed and by concurrent Notify calls) are delivered
// before RemoveSegment forgets the segment, never dropped.
func TestRemoveSegmentDeliversQueued(t *testing.T) {
	a, b := newEngine(t, "tcp"), newEngine(t, "tcp")
	src := newBuf(t, a, 1<<20)
	dst := newBuf(t, b, 1<<20)
	seg, err := a.OpenSegment(context.Background(), b.SegmentName())
	assert.NilError(t, err)
	const batches, direct = 20, 20
	var ids []engine.BatchID
	for i := range batches {
		id, err := a.AllocateBatch(1)
		assert.NilError(t, err)
		assert.NilError(t, a.SubmitWithNotify(id, []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: uint64(dst.Addr()), Length: 4096}},
			engine.Notification{Name: "a", Msg: fmt.Sprintf("batch %d", i)}))
		ids = append(ids, id)
	}
	var wg sync.WaitGroup
	errs := make(chan error, direct)
	for i := range direct {
		wg.Go(func() {
			errs <- a.Notify(context.Background(), seg, engine.Notification{Name: "a", Msg: fmt.Sprintf("direct %d", i)})
		})
	}
	assert.NilError(t, a.RemoveSegment(b.SegmentName()))
	wg.Wait()
	close(errs)
	sent := 0
	for err := range errs {
		if err == nil {
			sent++
		} else {
			// Only a Notify that came after the removal may fail, and it
			// says so.
			assert.Assert(t, errors.Is(err, engine.ErrUnknownSegment), "%v", err)
		}
	}
	for _, id := range ids {
		bs, err := a.Wait(context.Background(), id)
		assert.NilError(t, err)
		assert.Equal(t, bs.State, engine.StateCompleted, "%v", bs.Err)
	}
	got := waitNotifs(t, b, batches+sent)
	assert.Equal(t, len(got), batches+sent)
}

// allBytes is every byte value, NUL and invalid UTF-8 included.
func allBytes() string {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return string(b)
}

// TestNotificationBytes: between kvferry engines a notification's name and
// message arrive byte for byte, whatever the bytes, through Notify and
// through a batch's notification.
func TestNotificationBytes(t *testing.T) {
	a, b := newEngine(t, "tcp"), newEngine(t, "tcp")
	src := newBuf(t, a, 1<<20)
	dst := newBuf(t, b, 1<<20)
	seg, err := a.OpenSegment(context.Background(), b.SegmentName())
	assert.NilError(t, err)
	all := allBytes()
	want := []engine.Notification{
		{Name: "agent\x00\xff", Msg: all},
		{Name: all, Msg: "\xc3\x28 invalid \x80\x00 utf-8"},
		{Name: "", Msg: ""},
	}
	for _, n := range want {
		assert.NilError(t, a.Notify(context.Background(), seg, n))
	}
	id, err := a.AllocateBatch(1)
	assert.NilError(t, err)
	assert.NilError(t, a.SubmitWithNotify(id, []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: uint64(dst.Addr()), Length: 4096}}, engine.Notification{Name: all, Msg: all}))
	assert.Equal(t, pollDone(t, a, id).State, engine.StateCompleted)
	want = append(want, engine.Notification{Name: all, Msg: all})
	assert.DeepEqual(t, waitNotifs(t, b, len(want)), want)
}

// TestNotificationToMooncakePeer: a peer whose descriptor does not announce
// byte notifications (Mooncake) gets Mooncake's plain JSON form, and a
// plain body from it is delivered as it is.
func TestNotificationToMooncakePeer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	name := ln.Addr().String()
	bodies := make(chan []byte, 4)
	srv := rpc.NewServer(ln, func(_ context.Context, typ rpc.Type, body []byte, _ net.Addr) ([]byte, error) {
		switch typ {
		case rpc.TypeMetadata:
			return descriptor.Marshal(&descriptor.Segment{Name: name, Protocol: "tcp", TCPDataPort: 1, TCPProtoVersion: 2})
		case rpc.TypeNotify:
			bodies <- append([]byte(nil), body...)
			return []byte(`{"name":"","notify_msg":"success"}`), nil
		}
		return nil, fmt.Errorf("unexpected %s", typ)
	}, rpc.ServerConfig{})
	defer srv.Close()
	a := newEngine(t, "tcp")
	seg, err := a.OpenSegment(context.Background(), name)
	assert.NilError(t, err)
	assert.NilError(t, a.Notify(context.Background(), seg, engine.Notification{Name: "agent-a", Msg: "hello mooncake"}))
	assert.Equal(t, string(<-bodies), `{"name":"agent-a","notify_msg":"hello mooncake"}`)

	// And what a Mooncake node sends is taken as it is.
	b := newEngine(t, "tcp")
	reply, err := rpc.Call(context.Background(), fmt.Sprintf("127.0.0.1:%d", b.RPCPort()), rpc.TypeNotify,
		[]byte(`{"name":"mooncake-node","notify_msg":"plain text"}`), rpc.ClientConfig{})
	assert.NilError(t, err)
	assert.Equal(t, string(bytes.TrimSpace(reply)), `{"name":"","notify_msg":"success"}`)
	assert.DeepEqual(t, b.Notifications(), []engine.Notification{{Name: "mooncake-node", Msg: "plain text"}})
}
