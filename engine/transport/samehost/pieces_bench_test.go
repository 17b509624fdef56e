package samehost_test

import (
	"context"
	"fmt"
	"testing"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
)

// BenchmarkPieces measures, over cma between two engines of this process,
// a batch of 16 objects gathered from (written) or scattered into (read)
// blocks strided over a region as bench/store_multi.py lays out per-layer
// KV blocks (block l of object k at (l*16+k)*block), against the same
// objects from one contiguous range each: the engine's and the kernel's
// share of the multi-buffer store calls, without the store and Python.
//
//	go test ./engine/transport/samehost -run '^$' -bench Pieces
func BenchmarkPieces(b *testing.B) {
	const keys = 16
	for _, shape := range []struct{ blocks, block uint64 }{{16, 4 << 10}, {64, 32 << 10}} {
		obj := shape.blocks * shape.block
		a, e2 := newBenchEngine(b, "cma"), newBenchEngine(b, "cma")
		src := newBenchBuf(b, a, keys*obj)
		dst := newBenchBuf(b, e2, keys*obj)
		seg, err := a.OpenSegment(context.Background(), e2.SegmentName())
		assert.NilError(b, err)
		for _, op := range []engine.OpCode{engine.OpWrite, engine.OpRead} {
			for _, multi := range []bool{false, true} {
				name := fmt.Sprintf("%dx%dKiB/%s/single", shape.blocks, shape.block>>10, op)
				if multi {
					name = name[:len(name)-len("single")] + "multi"
				}
				reqs := make([]engine.Request, keys)
				for k := range reqs {
					at := uint64(dst.Addr()) + uint64(k)*obj
					reqs[k] = engine.Request{Op: op, Source: src.Addr() + uintptr(uint64(k)*obj), Target: seg, TargetOffset: at, Length: obj}
					if multi {
						ps := make([]engine.Piece, shape.blocks)
						for l := range ps {
							ps[l] = engine.Piece{Addr: src.Addr() + uintptr((uint64(l)*keys+uint64(k))*shape.block), Length: shape.block}
						}
						reqs[k].Source, reqs[k].Pieces = 0, ps
					}
				}
				b.Run(name, func(b *testing.B) {
					b.SetBytes(int64(keys * obj))
					b.ReportAllocs()
					for range b.N {
						if err := a.Transfer(context.Background(), reqs); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}
