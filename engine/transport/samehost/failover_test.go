package samehost_test

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/transport/samehost"
)

// TestCMARefusedMidSession: the kernel starts refusing process_vm_* to
// the peer in the middle of a batch (a ptrace policy tightened): the
// slices cma could not copy move to shm (engine failover), the batch
// completes with the right bytes, and cma is down for the peer, so the
// next batch goes to shm directly. With shm gone too, TCP carries it.
func TestCMARefusedMidSession(t *testing.T) {
	for _, tc := range []struct {
		name       string
		transports []string
		to         string
	}{
		{"shm", []string{samehost.NameCMA, samehost.NameShm, "tcp"}, samehost.NameShm},
		{"tcp", []string{samehost.NameCMA, "tcp"}, "tcp"},
	} {
		for _, op := range []engine.OpCode{engine.OpWrite, engine.OpRead} {
			t.Run(tc.name+"/"+op.String(), func(t *testing.T) {
				const size = 8 << 20
				a := newEngine(t, "", tc.transports...)
				b := newEngine(t, "", tc.transports...)
				cma := a.Transport(samehost.NameCMA).(*samehost.CMA)
				var calls atomic.Int32
				samehost.SetCallHook(cma, 256<<10, func(*engine.Slice) {
					if calls.Add(1) == 3 { // two calls copied, then refused
						samehost.RefuseCalls(cma, true)
					}
				})
				src, dst := newBuf(t, a, size), newBuf(t, b, size)
				pattern(src.Bytes(), 5)
				pattern(dst.Bytes(), 6)
				want := append([]byte(nil), src.Bytes()...)
				if op == engine.OpRead {
					want = append([]byte(nil), dst.Bytes()...)
				}
				seg, err := a.OpenSegment(context.Background(), b.SegmentName())
				assert.NilError(t, err)
				assert.Equal(t, a.ChooseTransport(seg), samehost.NameCMA)
				var reqs []engine.Request
				for off := uint64(0); off < size; off += 1 << 20 {
					reqs = append(reqs, engine.Request{Op: op, Source: src.Addr() + uintptr(off), Target: seg, TargetOffset: uint64(dst.Addr()) + off, Length: 1 << 20})
				}
				assert.NilError(t, a.Transfer(context.Background(), reqs))
				got := dst.Bytes()
				if op == engine.OpRead {
					got = src.Bytes()
				}
				assert.Assert(t, bytes.Equal(got, want), "bytes differ")
				fo := a.Metrics().Failovers
				var moved uint64
				for k, v := range fo {
					assert.Equal(t, k.From, samehost.NameCMA, "%v", fo)
					assert.Equal(t, k.To, tc.to, "%v", fo)
					assert.Equal(t, k.Cause, engine.FailoverRefused, "%v", fo)
					moved += v
				}
				assert.Assert(t, moved > 0, "nothing failed over: %v", fo)
				assert.Assert(t, calls.Load() >= 3)
				assert.Equal(t, a.ChooseTransport(seg), tc.to)
				assert.NilError(t, a.Transfer(context.Background(), reqs[:1]))
				assert.DeepEqual(t, a.Metrics().Failovers, fo)
			})
		}
	}
}
