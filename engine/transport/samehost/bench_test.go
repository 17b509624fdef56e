package samehost_test

import (
	"context"
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
