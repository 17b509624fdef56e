package tcp_test

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
	"github.com/kvferry/kvferry/engine/transport/tcp"
	"github.com/kvferry/kvferry/engine/transport/tcp/tcpwire"
	"github.com/kvferry/kvferry/internal/cmem"
)

// newNodeTimeout is newNode with the engine's transfer timeout set.
func newNodeTimeout(t *testing.T, tc tcp.Config, size uint64, timeout time.Duration) *node {
	t.Helper()
	e, err := stack.New(context.Background(), stack.Config{
		Engine: engine.Config{LocalServerName: "127.0.0.1", Transports: []string{"tcp"}, TransferTimeout: timeout},
		TCP:    tc,
	})
	assert.NilError(t, err)
	t.Cleanup(func() { e.Close() })
	m, err := cmem.MapAnon(size)
	assert.NilError(t, err)
	t.Cleanup(func() { _ = e.UnregisterMemory(m.Addr()); m.Close() })
	assert.NilError(t, e.RegisterMemory(m.Addr(), size, "*", true))
	return &node{e: e, t: e.Transport("tcp").(*tcp.Transport), mem: m}
}

// TestTimedOutReadLeavesBufferAlone: the target holds back the answer of
// a 1 MiB READ (its status timeout is a minute); the initiator's transfer
// times out after 300 ms and is canceled. Transfer returns once its reader
// let go of the buffer: the buffer, overwritten right after, keeps what
// was written there even when the target then sends the payload.
func TestTimedOutReadLeavesBufferAlone(t *testing.T) {
	const size = 1 << 20
	target := newNode(t, tcp.Config{}, size)
	b := target.mem.Bytes()
	for i := range b {
		b[i] = byte(i*13 + 1)
	}
	release := make(chan struct{})
	tcp.SetHooks(target.t, func(tcpwire.Header) {
		select {
		case <-release:
		case <-time.After(30 * time.Second):
		}
	}, nil)
	init := newNodeTimeout(t, tcp.Config{StatusTimeout: time.Minute}, size, 300*time.Millisecond)
	seg, err := init.e.OpenSegment(context.Background(), target.e.SegmentName())
	assert.NilError(t, err)
	err = init.e.Transfer(context.Background(), []engine.Request{{Op: engine.OpRead, Source: init.mem.Addr(), Target: seg,
		TargetOffset: uint64(target.mem.Addr()), Length: size}})
	assert.Assert(t, errors.Is(err, engine.ErrTimeout), "%v", err)
	mark := bytes.Repeat([]byte{0xA5}, size)
	copy(init.mem.Bytes(), mark) // the caller reuses its buffer
	close(release)               // the target answers now
	waitServerConns(t, target, 0)
	assert.Assert(t, bytes.Equal(init.mem.Bytes(), mark), "a late answer landed in the buffer")
	assert.Assert(t, init.t.Stats().SlicesFailed > 0)
}

// TestCanceledWriteWaitsForItsWriter: one lane carries a small READ and a
// 4 MiB WRITE; the lane's writer is held up in the middle of the WRITE's
// payload past the wait's deadline. Cancel aborts the connection, and the
// reader fails the WRITE only once the writer has left its payload:
// nothing reads the caller's memory after Cancel returns.
func TestCanceledWriteWaitsForItsWriter(t *testing.T) {
	const size = 4 << 20
	target := newNode(t, tcp.Config{}, 2*size)
	init := newNodeTimeout(t, tcp.Config{Lanes: 1}, 2*size, 300*time.Millisecond)
	var pieces, inWrite atomic.Int32
	canceling := make(chan struct{})
	tcp.SetHooks(init.t, nil, func() {
		if pieces.Add(1) != 2 { // the second piece: after the headers and 1 MiB
			return
		}
		inWrite.Add(1)
		defer inWrite.Add(-1)
		select {
		case <-canceling:
		case <-time.After(20 * time.Second):
		}
		// A reader that failed the WRITE without waiting for this writer
		// would have completed it, and Cancel returned, by now.
		time.Sleep(200 * time.Millisecond)
	})
	seg, err := init.e.OpenSegment(context.Background(), target.e.SegmentName())
	assert.NilError(t, err)
	id, err := init.e.AllocateBatch(2)
	assert.NilError(t, err)
	assert.NilError(t, init.e.Submit(id, []engine.Request{
		{Op: engine.OpRead, Source: init.mem.Addr() + size, Target: seg, TargetOffset: uint64(target.mem.Addr()) + size, Length: 4096},
		{Op: engine.OpWrite, Source: init.mem.Addr(), Target: seg, TargetOffset: uint64(target.mem.Addr()), Length: size},
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, werr := init.e.Wait(ctx, id)
	cancel()
	assert.Assert(t, errors.Is(werr, engine.ErrTimeout), "%v", werr)
	close(canceling)
	assert.NilError(t, init.e.Cancel(context.Background(), id))
	assert.Equal(t, inWrite.Load(), int32(0), "Cancel returned while the writer still sent the payload")
	st, err := init.e.TaskStatus(id, 1)
	assert.NilError(t, err)
	assert.Assert(t, st.State == engine.StateCanceled, "%v: %v", st.State, st.Err)
	assert.NilError(t, init.e.FreeBatch(id))
	assert.Assert(t, pieces.Load() >= 2)
}
