package engine_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/descriptor"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/metrics"
)

// flaky is a transport called "rdma" (ranked above tcp) between engines
// of this process: it copies a slice itself (the peer's memory is in this
// address space) while it has successes left, and then fails every slice
// with fail, as a path whose every NIC went down does.
type flaky struct {
	ok        atomic.Int64 // slices it still copies
	fail      atomic.Pointer[error]
	sliceSize uint64
	submitted atomic.Int64 // slices handed to it
}

func (f *flaky) Name() string                 { return "rdma" }
func (f *flaky) Describe(*descriptor.Segment) {}
func (f *flaky) Reaches(p *engine.Peer) bool  { return !p.Local() }
func (f *flaky) SliceSize() uint64            { return f.sliceSize }
func (f *flaky) Close() error                 { return nil }
func (f *flaky) GathersPieces() bool          { return true }
func (f *flaky) failWith(err error)           { f.fail.Store(&err) }
func (f *flaky) Carries(_ *engine.Peer, e engine.Ends) bool {
	return e.Local.HostAccessible() && e.Remote.HostAccessible()
}

func (f *flaky) Submit(p *engine.Peer, slices []*engine.Slice) {
	for _, s := range slices {
		f.submitted.Add(1)
		if f.ok.Add(-1) < 0 {
			s.Complete(*f.fail.Load())
			continue
		}
		remote := cmem.Bytes(uintptr(s.Remote), s.Length)
		var local []byte
		if s.Pieces == nil {
			local = cmem.Bytes(s.Local, s.Length)
		} else {
			for _, pc := range s.Pieces {
				local = append(local, cmem.Bytes(pc.Addr, pc.Length)...)
			}
		}
		if s.Op == engine.OpWrite {
			copy(remote, local)
		} else if s.Pieces == nil {
			copy(local, remote)
		} else {
			at := remote
			for _, pc := range s.Pieces {
				copy(cmem.Bytes(pc.Addr, pc.Length), at[:pc.Length])
				at = at[pc.Length:]
			}
		}
		s.Complete(nil)
	}
}

var pathDown = engine.PathFailed(engine.FailoverCompletion, errors.New("fake work completion: transport retry counter exceeded"))

// newFlakyEngine starts an engine with f as "rdma" and the real tcp (with
// 64 KiB stripes, so that f's slices are cut again when they move); cfg
// adds settings.
func newFlakyEngine(t *testing.T, f *flaky, cfg engine.Config) *engine.Engine {
	t.Helper()
	cfg.LocalServerName = "127.0.0.1"
	cfg.Transports = []string{"rdma", "tcp"}
	if cfg.TransferTimeout == 0 {
		cfg.TransferTimeout = 5 * time.Second
	}
	sc := stack.Config{Engine: cfg}
	sc.TCP.StripeSize = 64 << 10
	real := stack.Factory(sc)
	sc.Engine.NewTransport = func(name string, e *engine.Engine) (engine.Transport, error) {
		if name == "rdma" {
			return f, nil
		}
		return real(name, e)
	}
	e, err := stack.New(context.Background(), sc)
	assert.NilError(t, err)
	t.Cleanup(func() { e.Close() })
	return e
}

func failovers(e *engine.Engine) map[metrics.FailoverKey]uint64 { return e.Metrics().Failovers }

// TestFailoverToTCP: the better transport fails every slice after the
// first few of a batch (mid-batch), and the batch completes over TCP with
// the right bytes, writes and reads, plain and gathered requests; each
// moved slice is counted once; after repeated failures the transport is
// down for the peer, which the selector then skips.
func TestFailoverToTCP(t *testing.T) {
	engine.SetHealthBackoff(t, time.Hour) // the checks below run inside it, at any load
	f := &flaky{sliceSize: 1 << 20}
	f.ok.Store(2)
	f.failWith(pathDown)
	a := newFlakyEngine(t, f, engine.Config{})
	b := newEngine(t, "tcp")
	const n = 8 << 20
	src, dst := newBuf(t, a, n), newBuf(t, b, n)
	fill(src.Bytes(), 41)
	seg, err := a.OpenSegment(context.Background(), b.SegmentName())
	assert.NilError(t, err)
	assert.Equal(t, a.ChooseTransport(seg), "rdma")

	half := uint64(n / 2)
	pieces := []engine.Piece{{Addr: src.Addr() + uintptr(half), Length: half / 2}, {Addr: src.Addr() + uintptr(half+half/2), Length: half / 2}}
	reqs := []engine.Request{
		{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: uint64(dst.Addr()), Length: half},
		{Op: engine.OpWrite, Pieces: pieces, Target: seg, TargetOffset: uint64(dst.Addr()) + half, Length: half},
	}
	assert.NilError(t, a.Transfer(context.Background(), reqs))
	assert.Assert(t, bytes.Equal(src.Bytes(), dst.Bytes()), "written bytes differ")
	moved := failovers(a)[metrics.FailoverKey{From: "rdma", To: "tcp", Cause: engine.FailoverCompletion}]
	// 8 slices of 1 MiB (the gathered request cut at 1 MiB too), 2 copied.
	assert.Equal(t, moved, uint64(6))
	assert.Equal(t, f.submitted.Load(), int64(8))

	// Down now: the selector skips it, and a read goes to TCP at once.
	h := health(a, b.SegmentName(), "rdma")
	assert.Equal(t, h.State, "down", "%+v", h)
	assert.Equal(t, h.Failovers, uint64(6))
	assert.Assert(t, h.RetryIn > 0)
	assert.Equal(t, health(a, b.SegmentName(), "tcp"), engine.PathHealth{}) // only failures make an entry
	assert.Equal(t, a.ChooseTransport(seg), "tcp")
	fill(dst.Bytes(), 42)
	assert.NilError(t, a.Transfer(context.Background(), []engine.Request{{Op: engine.OpRead, Source: src.Addr(), Target: seg, TargetOffset: uint64(dst.Addr()), Length: n}}))
	assert.Assert(t, bytes.Equal(src.Bytes(), dst.Bytes()), "read bytes differ")
	assert.Equal(t, f.submitted.Load(), int64(8), "a down transport got slices")
}

func health(e *engine.Engine, seg, transport string) engine.PathHealth {
	for _, h := range e.PathHealth() {
		if h.Segment == seg && h.Transport == transport {
			return h
		}
	}
	return engine.PathHealth{}
}

// TestFailoverReadMidBatch: a read whose slices fail on the better
// transport ends with the peer's bytes in the local buffer (moved slices
// overwrite their local ranges before the task completes).
func TestFailoverReadMidBatch(t *testing.T) {
	f := &flaky{sliceSize: 256 << 10}
	f.ok.Store(5)
	f.failWith(engine.PathFailed(engine.FailoverReset, fmt.Errorf("fake endpoint retired: %w", engine.ErrRejected)))
	a := newFlakyEngine(t, f, engine.Config{})
	b := newEngine(t, "tcp")
	const n = 4 << 20
	src, dst := newBuf(t, a, n), newBuf(t, b, n)
	fill(dst.Bytes(), 43)
	fill(src.Bytes(), 44)
	seg, err := a.OpenSegment(context.Background(), b.SegmentName())
	assert.NilError(t, err)
	assert.NilError(t, a.Transfer(context.Background(), []engine.Request{{Op: engine.OpRead, Source: src.Addr(), Target: seg, TargetOffset: uint64(dst.Addr()), Length: n}}))
	assert.Assert(t, bytes.Equal(src.Bytes(), dst.Bytes()), "read bytes differ")
	assert.Equal(t, failovers(a)[metrics.FailoverKey{From: "rdma", To: "tcp", Cause: engine.FailoverReset}], uint64(16-5))
}

// TestNoFailover: errors of the request itself are never moved, and
// with failover off or a forced transport a path failure fails the task
// as before.
func TestNoFailover(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  engine.Config
		err  error
		is   error
	}{
		{name: "rejected", err: fmt.Errorf("fake: outside registered memory: %w", engine.ErrRejected), is: engine.ErrRejected},
		{name: "not-registered", err: engine.ErrAddressNotRegistered, is: engine.ErrAddressNotRegistered},
		{name: "timeout", err: fmt.Errorf("fake: %w", engine.ErrTimeout), is: engine.ErrTimeout},
		{name: "canceled-marked", err: engine.PathFailed(engine.FailoverReset, engine.ErrCanceled), is: engine.ErrCanceled},
		{name: "failover-off", cfg: engine.Config{NoFailover: true}, err: pathDown, is: pathDown},
		{name: "forced", cfg: engine.Config{ForceTransport: "rdma"}, err: pathDown, is: pathDown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &flaky{sliceSize: 64 << 10}
			f.failWith(tc.err)
			a := newFlakyEngine(t, f, tc.cfg)
			b := newEngine(t, "tcp")
			src, dst := newBuf(t, a, 1<<20), newBuf(t, b, 1<<20)
			seg, err := a.OpenSegment(context.Background(), b.SegmentName())
			assert.NilError(t, err)
			for range 2 {
				err = a.Transfer(context.Background(), []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: uint64(dst.Addr()), Length: 1 << 20}})
				assert.Assert(t, errors.Is(err, tc.is), "%v", err)
			}
			assert.Equal(t, len(failovers(a)), 0)
			assert.Equal(t, len(a.PathHealth()), 0)
			assert.Equal(t, f.submitted.Load(), int64(32)) // never skipped
			assert.Equal(t, a.ChooseTransport(seg), "rdma")
		})
	}
}

// TestFailoverPeerDeadEverywhere: the peer is gone on every transport;
// the batch ends FAILED within the deadline after one attempt per slice
// and transport (no retry storm), and the next batch skips the transport
// that went down.
func TestFailoverPeerDeadEverywhere(t *testing.T) {
	f := &flaky{sliceSize: 64 << 10}
	f.failWith(engine.PathFailed(engine.FailoverReset, errors.New("fake: endpoint lost")))
	a := newFlakyEngine(t, f, engine.Config{TransferTimeout: 5 * time.Second})
	b := newEngine(t, "tcp")
	src, dst := newBuf(t, a, 1<<20), newBuf(t, b, 1<<20)
	seg, err := a.OpenSegment(context.Background(), b.SegmentName())
	assert.NilError(t, err)
	addr := uint64(dst.Addr())
	assert.NilError(t, b.Close())

	start := time.Now()
	err = a.Transfer(context.Background(), []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: addr, Length: 1 << 20}})
	assert.Assert(t, err != nil)
	assert.Assert(t, !errors.Is(err, engine.ErrTimeout), "%v", err)
	assert.Assert(t, time.Since(start) < a.Config().TransferTimeout, "took %s", time.Since(start))
	// Each of the 16 slices went to rdma once and, until tcp went down
	// too (after its first refused slices), to tcp once.
	m := a.Metrics()
	assert.Equal(t, f.submitted.Load(), int64(16))
	moved := m.Failovers[metrics.FailoverKey{From: "rdma", To: "tcp", Cause: engine.FailoverReset}]
	assert.Assert(t, moved >= 1 && moved <= 16, "%d moved", moved)
	assert.Equal(t, m.SlicesByTransport["tcp"], moved)
	assert.Equal(t, health(a, b.SegmentName(), "rdma").State, "down")

	assert.Equal(t, health(a, b.SegmentName(), "tcp").State, "down")

	// Next: both down, so the best is tried anyway, and its slices do not
	// move to a transport that is down: one attempt per slice.
	err = a.Transfer(context.Background(), []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: addr, Length: 1 << 20}})
	assert.Assert(t, err != nil)
	assert.Equal(t, f.submitted.Load(), int64(32))
	assert.Equal(t, a.Metrics().SlicesByTransport["tcp"], moved)
	var total uint64
	for _, v := range a.Metrics().Failovers {
		total += v
	}
	assert.Equal(t, total, moved)
}

// downThenDue takes f down for b's segment with one failing batch of
// a's (8 slices of 1 MiB, all moved to TCP) and waits until its back-off
// has passed: the next submission probes it.
func downThenDue(t *testing.T, a, b *engine.Engine, f *flaky, src, dst *cmem.Map, seg engine.SegmentID) {
	t.Helper()
	write := []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: uint64(dst.Addr()), Length: 8 << 20}}
	assert.NilError(t, a.Transfer(context.Background(), write))
	assert.Equal(t, f.submitted.Load(), int64(8))
	h := health(a, b.SegmentName(), "rdma")
	assert.Equal(t, h.State, "down", "%+v", h)
	for end := time.Now().Add(20 * time.Second); health(a, b.SegmentName(), "rdma").RetryIn > 0; {
		assert.Assert(t, time.Now().Before(end), "the back-off never passed")
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFailoverProbeFails: after the back-off one slice, not the
// submission, goes to the dead transport as the probe (even with several
// submitters at once: one of them claims it); its failure takes the
// transport down again for twice as long, and every other slice goes to
// TCP as while down, with the right bytes.
func TestFailoverProbeFails(t *testing.T) {
	f := &flaky{sliceSize: 1 << 20}
	f.failWith(pathDown)
	a := newFlakyEngine(t, f, engine.Config{})
	b := newEngine(t, "tcp")
	const n, submitters = 8 << 20, 4
	src, dst := newBuf(t, a, submitters*n), newBuf(t, b, submitters*n)
	seg, err := a.OpenSegment(context.Background(), b.SegmentName())
	assert.NilError(t, err)
	downThenDue(t, a, b, f, src, dst, seg)
	fill(src.Bytes(), 45)
	moved := failovers(a)[metrics.FailoverKey{From: "rdma", To: "tcp", Cause: engine.FailoverCompletion}]
	tcp := a.Metrics().SlicesByTransport["tcp"]

	errs := make(chan error, submitters)
	for i := range submitters {
		off := uint64(i * n)
		go func() {
			errs <- a.Transfer(context.Background(), []engine.Request{{Op: engine.OpWrite, Source: src.Addr() + uintptr(off),
				Target: seg, TargetOffset: uint64(dst.Addr()) + off, Length: n}})
		}()
	}
	for range submitters {
		assert.NilError(t, <-errs)
	}
	assert.Assert(t, bytes.Equal(src.Bytes(), dst.Bytes()), "written bytes differ")
	assert.Equal(t, f.submitted.Load(), int64(8+1), "not one probe slice")
	m := a.Metrics()
	assert.Equal(t, m.Failovers[metrics.FailoverKey{From: "rdma", To: "tcp", Cause: engine.FailoverCompletion}], moved+1)
	// Every slice but the probe went to TCP at once (cut at 64 KiB), and
	// the probe after it failed.
	assert.Equal(t, m.SlicesByTransport["tcp"], tcp+submitters*n/(64<<10))
	h := health(a, b.SegmentName(), "rdma")
	assert.Equal(t, h.State, "down", "%+v", h)
	assert.Assert(t, h.RetryIn > time.Second, "the back-off did not double: %+v", h)
}

// TestFailoverProbeSucceeds: the transport works again after its
// back-off: the probe (one slice; the rest go to TCP) brings it up, and
// the next submission goes to it whole. A claim never handed out is
// released.
func TestFailoverProbeSucceeds(t *testing.T) {
	f := &flaky{sliceSize: 1 << 20}
	f.failWith(pathDown)
	a := newFlakyEngine(t, f, engine.Config{})
	b := newEngine(t, "tcp")
	const n = 8 << 20
	src, dst := newBuf(t, a, n), newBuf(t, b, n)
	seg, err := a.OpenSegment(context.Background(), b.SegmentName())
	assert.NilError(t, err)
	downThenDue(t, a, b, f, src, dst, seg)
	f.ok.Store(1 << 30)                            // the path is back
	assert.Equal(t, a.ChooseTransport(seg), "tcp") // asking claims no probe
	// A submission that claims the probe but hands out no slice (its
	// source is not registered) releases it for the next one.
	other := newBuf(t, b, n) // registered with b, not a
	err = a.Transfer(context.Background(), []engine.Request{{Op: engine.OpWrite, Source: other.Addr(), Target: seg, TargetOffset: uint64(dst.Addr()), Length: n}})
	assert.Assert(t, errors.Is(err, engine.ErrAddressNotRegistered), "%v", err)
	assert.Equal(t, f.submitted.Load(), int64(8))

	for i, want := range []int64{8 + 1, 8 + 1 + 8} {
		fill(src.Bytes(), uint64(46+i))
		assert.NilError(t, a.Transfer(context.Background(), []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: uint64(dst.Addr()), Length: n}}))
		assert.Assert(t, bytes.Equal(src.Bytes(), dst.Bytes()), "written bytes differ (batch %d)", i)
		assert.Equal(t, f.submitted.Load(), want, "batch %d", i)
		h := health(a, b.SegmentName(), "rdma")
		assert.Equal(t, h.State, "up", "%+v", h)
		assert.Equal(t, h.ConsecutiveFailures, 0)
	}
	assert.Equal(t, a.ChooseTransport(seg), "rdma")
}
