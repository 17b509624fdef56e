package rdma_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/engine/transport/rdma"
	"github.com/kvferry/kvferry/engine/transport/tcp"
)

// TestAllNICsDownFailsOverToTCP takes every NIC of the fake provider down
// while a batch is in flight over RDMA: the slices RDMA cannot carry any
// more move to TCP (engine failover), the batch completes with the right
// bytes, RDMA is down for the peer afterwards and the next batch goes to
// TCP directly. It logs how long the batch took to finish after the last
// NIC went down.
func TestAllNICsDownFailsOverToTCP(t *testing.T) {
	needsFake(t, "ports taken down and held work requests")
	devs := allDevices[:2]
	for _, op := range []engine.OpCode{engine.OpWrite, engine.OpRead} {
		t.Run(op.String(), func(t *testing.T) {
			const size = 32 << 20
			cfg := func() stack.Config {
				return stack.Config{Engine: engine.Config{LocalServerName: "127.0.0.1", Transports: []string{rdma.Name, tcp.Name},
					TransferTimeout: 20 * time.Second}, RDMA: rdmaConfig(devs...)}
			}
			a, b := newEngineWith(t, cfg()), newEngineWith(t, cfg())
			src, dst := newBuf(t, a, size), newBuf(t, b, size)
			pattern(src.Bytes(), 7)
			pattern(dst.Bytes(), 8)
			want := src.Bytes()
			if op == engine.OpRead {
				want = append([]byte(nil), dst.Bytes()...)
			}
			seg, err := a.OpenSegment(context.Background(), b.SegmentName())
			assert.NilError(t, err)
			assert.Equal(t, a.ChooseTransport(seg), rdma.Name)
			// Each NIC carries a few slices, then holds the rest of its
			// work requests: the batch is in flight over RDMA when the
			// ports go down, and the held requests meet the ports down,
			// however late this goroutine runs. (With slowed requests
			// and a poll for progress instead, a loaded machine could
			// let the batch finish first, or take the ports down before
			// a slice was posted.)
			for _, d := range devs {
				assert.NilError(t, fake.Hold(d, 4))
			}
			defer func() {
				for _, d := range devs {
					fake.Release(d)
					fake.SetPort(d, true)
				}
			}()
			id, err := a.AllocateBatch(1)
			assert.NilError(t, err)
			before := fakeBytes(devs)
			assert.NilError(t, a.Submit(id, []engine.Request{{Op: op, Source: src.Addr(), Target: seg, TargetOffset: uint64(dst.Addr()), Length: size}}))
			waitHeld(t, a, id, devs, before)
			for _, d := range devs {
				assert.NilError(t, fake.SetPort(d, false))
			}
			for _, d := range devs {
				assert.NilError(t, fake.Release(d))
			}
			down := time.Now()
			bs, err := a.Wait(context.Background(), id)
			took := time.Since(down)
			assert.NilError(t, err)
			assert.Equal(t, bs.State, engine.StateCompleted, "%v", bs.Err)
			assert.NilError(t, a.FreeBatch(id))
			if op == engine.OpWrite {
				assert.Assert(t, bytes.Equal(dst.Bytes(), want), "written bytes differ")
			} else {
				assert.Assert(t, bytes.Equal(src.Bytes(), want), "read bytes differ")
			}
			m := a.Metrics()
			var moved uint64
			for k, v := range m.Failovers {
				assert.Equal(t, k.From, rdma.Name)
				assert.Equal(t, k.To, tcp.Name)
				moved += v
			}
			assert.Assert(t, moved > 0, "no slice failed over: %v", m.Failovers)
			var rdmaBytes uint64
			for _, n := range nicBytes(a) {
				rdmaBytes += n
			}
			t.Logf("%s: batch done %s after the last NIC went down; %d slices moved to tcp (%v), %d of %d bytes over rdma",
				op, took.Round(time.Microsecond), moved, m.Failovers, rdmaBytes, size)
			var h engine.PathHealth
			for _, x := range a.PathHealth() {
				if x.Transport == rdma.Name {
					h = x
				}
			}
			assert.Equal(t, h.State, "down", "%+v", h)
			assert.Equal(t, a.ChooseTransport(seg), tcp.Name)
			// The next batch goes to TCP directly: nothing more moves.
			assert.NilError(t, a.Transfer(context.Background(), []engine.Request{{Op: op, Source: src.Addr(), Target: seg, TargetOffset: uint64(dst.Addr()), Length: 1 << 20}}))
			assert.DeepEqual(t, a.Metrics().Failovers, m.Failovers)
		})
	}
}

// fakeBytes is what devs moved as requester in this process (fakeverbs).
func fakeBytes(devs []string) uint64 {
	var n uint64
	for _, d := range devs {
		n += fake.Bytes(d)
	}
	return n
}

// waitHeld waits until devs have moved bytes beyond before (fakeBytes
// before the batch was submitted) and work requests wait at the hold of
// one of them (fakeverbs Hold), and checks batch id of a is still in
// flight. (The transport's own counts can stay 0 here: it sees completions
// only of signalled requests, which may be held.)
func waitHeld(t *testing.T, a *engine.Engine, id engine.BatchID, devs []string, before uint64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := a.TaskStatus(id, 0)
		assert.NilError(t, err)
		assert.Assert(t, !st.State.Terminal(), "the batch ended with its NICs held (%s)", st.State)
		moved := fakeBytes(devs) - before
		held := 0
		for _, d := range devs {
			n, err := fake.Held(d)
			assert.NilError(t, err)
			held += n
		}
		if moved > 0 && held > 0 {
			return
		}
		assert.Assert(t, time.Now().Before(deadline), "no work request held after bytes moved (%d bytes, %d held)", moved, held)
		time.Sleep(time.Millisecond)
	}
}
