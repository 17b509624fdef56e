package samehost_test

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
)

// TestConcurrentBatches runs batches of different block sizes and both
// directions from four goroutines at once over each transport, so that
// workers share sessions and (shm) staging chunks.
func TestConcurrentBatches(t *testing.T) {
	for _, tr := range []string{"cma", "shm"} {
		t.Run(tr, func(t *testing.T) { concurrentBatches(t, tr) })
	}
}

func concurrentBatches(t *testing.T, tr string) {
	a, e2 := newBenchEngine(t, tr), newBenchEngine(t, tr)
	const total = 32 << 20
	src := newBenchBuf(t, a, total)
	dst := newBenchBuf(t, e2, total)
	seg, err := a.OpenSegment(context.Background(), e2.SegmentName())
	assert.NilError(t, err)
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			bs := []uint64{4096, 64 << 10, 1 << 20, 2<<20 + 4096}[g]
			n := (total / 4) / bs
			reqs := make([]engine.Request, n)
			for i := range reqs {
				off := uint64(g)*(total/4) + uint64(i)*bs
				reqs[i] = engine.Request{Op: engine.OpCode(i % 2), Source: src.Addr() + uintptr(off), Target: seg, TargetOffset: uint64(dst.Addr()) + off, Length: bs}
			}
			for range 10 {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				err := a.Transfer(ctx, reqs)
				cancel()
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		buf := make([]byte, 1<<20)
		t.Fatalf("%v\n%s", err, buf[:runtime.Stack(buf, true)])
	}
}
