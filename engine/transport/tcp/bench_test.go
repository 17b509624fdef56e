package tcp_test

import (
	"context"
	"testing"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/internal/cmem"
)

func pair(tb testing.TB, size uint64) (a *engine.Engine, seg engine.SegmentID, src, dst *cmem.Map) {
	tb.Helper()
	a, _, seg, src, dst = pairEngines(tb, size)
	return a, seg, src, dst
}

// pairEngines is pair that also returns the second engine (dst's owner).
func pairEngines(tb testing.TB, size uint64) (a, b *engine.Engine, seg engine.SegmentID, src, dst *cmem.Map) {
	tb.Helper()
	mk := func() *engine.Engine {
		e, err := stack.New(context.Background(), stack.Config{Engine: engine.Config{LocalServerName: "127.0.0.1", Transports: []string{"tcp"}}})
		assert.NilError(tb, err)
		tb.Cleanup(func() { e.Close() })
		return e
	}
	a, b = mk(), mk()
	var err error
	src, err = cmem.MapAnon(size)
	assert.NilError(tb, err)
	dst, err = cmem.MapAnon(size)
	assert.NilError(tb, err)
	tb.Cleanup(func() { src.Close(); dst.Close() })
	assert.NilError(tb, a.RegisterMemory(src.Addr(), size, "*", true))
	assert.NilError(tb, b.RegisterMemory(dst.Addr(), size, "*", true))
	seg, err = a.OpenSegment(context.Background(), b.SegmentName())
	assert.NilError(tb, err)
	return a, b, seg, src, dst
}

func benchOp(b *testing.B, op engine.OpCode, block uint64, batch int) {
	a, seg, src, dst := pair(b, 64<<20)
	reqs := make([]engine.Request, batch)
	for i := range reqs {
		off := uint64(i) * block % (64 << 20)
		reqs[i] = engine.Request{Op: op, Source: src.Addr() + uintptr(off), Target: seg, TargetOffset: uint64(dst.Addr()) + off, Length: block}
	}
	ctx := context.Background()
	b.SetBytes(int64(block) * int64(batch))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := a.Transfer(ctx, reqs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "ops/s")
}

func BenchmarkWrite4KBatch1(b *testing.B)   { benchOp(b, engine.OpWrite, 4096, 1) }
func BenchmarkWrite4KBatch128(b *testing.B) { benchOp(b, engine.OpWrite, 4096, 128) }
func BenchmarkRead4KBatch1(b *testing.B)    { benchOp(b, engine.OpRead, 4096, 1) }
func BenchmarkWrite1MBatch16(b *testing.B)  { benchOp(b, engine.OpWrite, 1<<20, 16) }
func BenchmarkRead1MBatch16(b *testing.B)   { benchOp(b, engine.OpRead, 1<<20, 16) }
