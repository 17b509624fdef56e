package engine_test

import (
	"context"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/descriptor"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/internal/cmem"
)

// BenchmarkTransfer4KBatch1 times Transfer of one 4 KiB write between two
// engines of this process over local (memcpy) and over tcp (loopback): the
// per-request cost of the engine's submit and completion path, which
// failover's health checks sit on.
func BenchmarkTransfer4KBatch1(b *testing.B) {
	for _, tr := range []string{"local", "tcp"} {
		b.Run(tr, func(b *testing.B) {
			mk := func() *engine.Engine {
				e, err := stack.New(context.Background(), stack.Config{Engine: engine.Config{LocalServerName: "127.0.0.1",
					Transports: []string{tr}, TransferTimeout: 10 * time.Second}})
				assert.NilError(b, err)
				b.Cleanup(func() { e.Close() })
				return e
			}
			x, y := mk(), mk()
			const n = 1 << 20
			src, err := cmem.MapAnon(n)
			assert.NilError(b, err)
			dst, err := cmem.MapAnon(n)
			assert.NilError(b, err)
			b.Cleanup(func() { src.Close(); dst.Close() })
			assert.NilError(b, x.RegisterMemory(src.Addr(), n, "cpu:0", true))
			assert.NilError(b, y.RegisterMemory(dst.Addr(), n, "cpu:0", true))
			b.Cleanup(func() { x.UnregisterMemory(src.Addr()); y.UnregisterMemory(dst.Addr()) })
			seg, err := x.OpenSegment(context.Background(), y.SegmentName())
			assert.NilError(b, err)
			assert.Equal(b, x.ChooseTransport(seg), tr)
			reqs := []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: uint64(dst.Addr()), Length: 4096}}
			ctx := context.Background()
			b.SetBytes(4096)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if err := x.Transfer(ctx, reqs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// syncCopy is a transport that copies a slice in Submit and completes it
// there: with it a Transfer costs only the engine's own work (submit,
// slicing, completion, wait), without a goroutine hand-off to measure.
type syncCopy struct{}

func (syncCopy) Name() string                 { return "rdma" }
func (syncCopy) Describe(*descriptor.Segment) {}
func (syncCopy) Reaches(p *engine.Peer) bool  { return !p.Local() }
func (syncCopy) SliceSize() uint64            { return 64 << 10 }
func (syncCopy) Close() error                 { return nil }
func (syncCopy) Submit(_ *engine.Peer, ss []*engine.Slice) {
	for _, s := range ss {
		copy(cmem.Bytes(uintptr(s.Remote), s.Length), cmem.Bytes(s.Local, s.Length))
		s.Complete(nil)
	}
}

// BenchmarkEngineOverhead4KBatch1 times Transfer of one 4 KiB write over a
// transport that completes in Submit: the engine's per-request CPU cost,
// which failover's checks add to.
func BenchmarkEngineOverhead4KBatch1(b *testing.B) {
	mk := func() *engine.Engine {
		e, err := stack.New(context.Background(), stack.Config{Engine: engine.Config{LocalServerName: "127.0.0.1",
			Transports: []string{"rdma"}, TransferTimeout: 10 * time.Second,
			NewTransport: func(string, *engine.Engine) (engine.Transport, error) { return syncCopy{}, nil }}})
		assert.NilError(b, err)
		b.Cleanup(func() { e.Close() })
		return e
	}
	x, y := mk(), mk()
	const n = 1 << 20
	src, err := cmem.MapAnon(n)
	assert.NilError(b, err)
	dst, err := cmem.MapAnon(n)
	assert.NilError(b, err)
	b.Cleanup(func() { src.Close(); dst.Close() })
	assert.NilError(b, x.RegisterMemory(src.Addr(), n, "cpu:0", true))
	assert.NilError(b, y.RegisterMemory(dst.Addr(), n, "cpu:0", true))
	seg, err := x.OpenSegment(context.Background(), y.SegmentName())
	assert.NilError(b, err)
	reqs := []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: uint64(dst.Addr()), Length: 4096}}
	ctx := context.Background()
	b.SetBytes(4096)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := x.Transfer(ctx, reqs); err != nil {
			b.Fatal(err)
		}
	}
}
