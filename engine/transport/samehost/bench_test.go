package samehost_test

import (
	"context"
	"sync"
	"testing"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
)

// BenchmarkInProcess measures batches of block-sized writes between two
// engines of this process over cma and shm (process_vm_* to one's own pid
// costs what it costs across processes).
func BenchmarkInProcess(b *testing.B) {
	for _, tr := range []string{"cma", "shm"} {
		for _, bs := range []uint64{64 << 10, 1 << 20, 16 << 20} {
			b.Run(tr+"/"+human(bs), func(b *testing.B) {
				t := &testing.T{}
				_ = t
				benchOne(b, tr, bs)
			})
		}
	}
}

func human(n uint64) string {
	if n >= 1<<20 {
		return itoa(n>>20) + "MiB"
	}
	return itoa(n>>10) + "KiB"
}

func itoa(n uint64) string {
	s := ""
	for n >= 10 {
		s = string(rune('0'+n%10)) + s
		n /= 10
	}
	return string(rune('0'+n)) + s
}

func benchOne(b *testing.B, tr string, bs uint64) {
	a, e2 := newBenchEngine(b, tr), newBenchEngine(b, tr)
	const total = 64 << 20
	src := newBenchBuf(b, a, total)
	dst := newBenchBuf(b, e2, total)
	seg, err := a.OpenSegment(context.Background(), e2.SegmentName())
	assert.NilError(b, err)
	n := total / bs
	reqs := make([]engine.Request, n)
	for i := range reqs {
		off := uint64(i) * bs
		reqs[i] = engine.Request{Op: engine.OpWrite, Source: src.Addr() + uintptr(off), Target: seg, TargetOffset: uint64(dst.Addr()) + off, Length: bs}
	}
	b.SetBytes(total)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := a.Transfer(context.Background(), reqs); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSmall measures small submissions, where the hand-off to a copy
// goroutine costs as much as the copy: one request per batch (as a store
// get or put makes), and batches of 64 KiB requests of a few MiB in all,
// both directions, from one goroutine and from two.
func BenchmarkSmall(b *testing.B) {
	type shape struct {
		name      string
		n, each   uint64
		op        engine.OpCode
		submitter int
	}
	var shapes []shape
	for _, op := range []engine.OpCode{engine.OpWrite, engine.OpRead} {
		for _, bs := range []uint64{64 << 10, 256 << 10, 1 << 20, 2 << 20, 4 << 20} {
			shapes = append(shapes, shape{op.String() + "/1x" + human(bs), 1, bs, op, 1})
		}
		for _, n := range []uint64{16, 32, 64} {
			shapes = append(shapes, shape{op.String() + "/" + itoa(n) + "x64KiB", n, 64 << 10, op, 1})
		}
		shapes = append(shapes, shape{op.String() + "/2g-1x1MiB", 1, 1 << 20, op, 2})
	}
	for _, tr := range []string{"cma", "local"} {
		a, e2 := newBenchEngine(b, tr, tr), newBenchEngine(b, tr, tr)
		const span = 16 << 20
		src := newBenchBuf(b, a, 2*span)
		dst := newBenchBuf(b, e2, 2*span)
		seg, err := a.OpenSegment(context.Background(), e2.SegmentName())
		assert.NilError(b, err)
		for _, sh := range shapes {
			b.Run(tr+"/"+sh.name, func(b *testing.B) {
				reqs := make([][]engine.Request, sh.submitter)
				for g := range reqs {
					for i := range sh.n {
						off := uint64(g)*span + i*sh.each
						reqs[g] = append(reqs[g], engine.Request{Op: sh.op, Source: src.Addr() + uintptr(off), Target: seg, TargetOffset: uint64(dst.Addr()) + off, Length: sh.each})
					}
				}
				b.SetBytes(int64(sh.n*sh.each) * int64(sh.submitter))
				b.ReportAllocs()
				b.ResetTimer()
				var wg sync.WaitGroup
				for g := range sh.submitter {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range b.N {
							if err := a.Transfer(context.Background(), reqs[g]); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
			})
		}
	}
}
