package local_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/gpu"
	"github.com/kvferry/kvferry/engine/gpu/gputest"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/internal/cuda"
	"github.com/kvferry/kvferry/internal/testutil/fakecuda"
)

func gpuEngine(t *testing.T, rt gputest.Runtime) (*engine.Engine, gputest.Allocator, *fakecuda.Control) {
	t.Helper()
	cfg, lib := rt.Config(t)
	e, err := stack.New(context.Background(), stack.Config{
		Engine: engine.Config{LocalServerName: "127.0.0.1", Transports: []string{"local", "tcp"}, TransferTimeout: 5 * time.Second},
		GPU:    cfg,
	})
	assert.NilError(t, err)
	t.Cleanup(func() { e.Close() })
	d := rt.Allocator(t, cfg)
	c := fakecuda.Open(lib)
	c.Reset()
	t.Cleanup(c.Reset)
	return e, d, c
}

func devBuf(t *testing.T, rt gputest.Runtime, e *engine.Engine, d gputest.Allocator, dev int, n uint64) uint64 {
	t.Helper()
	p, err := d.MemAlloc(dev, n)
	assert.NilError(t, err)
	t.Cleanup(func() { d.MemFree(dev, p) })
	if e != nil {
		assert.NilError(t, e.RegisterMemory(uintptr(p), n, rt.Location(dev), true))
	}
	return p
}

// TestGPUCopies moves host<->device and device<->device (across devices)
// within a process and between two engines of it, byte checked, on each
// GPU runtime.
func TestGPUCopies(t *testing.T) {
	for _, rt := range gputest.Runtimes() {
		t.Run(rt.Name, func(t *testing.T) { testGPUCopies(t, rt) })
	}
}

func testGPUCopies(t *testing.T, rt gputest.Runtime) {
	a, d, c := gpuEngine(t, rt)
	b, _, _ := gpuEngine(t, rt)
	const n = 5<<20 + 77
	host := newBuf(t, a, n)
	back := newBuf(t, a, n)
	fill(host.Bytes(), 3)
	d0 := devBuf(t, rt, a, d, 0, n)
	d1 := devBuf(t, rt, b, d, fakecuda.Second(t), n)
	ctx := context.Background()
	seg, err := a.OpenSegment(ctx, b.SegmentName())
	assert.NilError(t, err)

	// H2D into our own device memory, D2D into the other engine's device,
	// D2H back.
	assert.NilError(t, a.Transfer(ctx, []engine.Request{{Op: engine.OpWrite, Source: host.Addr(), Target: engine.LocalSegment, TargetOffset: d0, Length: n}}))
	assert.Assert(t, bytes.Equal(c.Bytes(d0, n), host.Bytes()))
	assert.NilError(t, a.Transfer(ctx, []engine.Request{{Op: engine.OpWrite, Source: uintptr(d0), Target: seg, TargetOffset: d1, Length: n}}))
	assert.Assert(t, bytes.Equal(c.Bytes(d1, n), host.Bytes()))
	assert.NilError(t, a.Transfer(ctx, []engine.Request{{Op: engine.OpRead, Source: back.Addr(), Target: seg, TargetOffset: d1, Length: n}}))
	assert.Assert(t, bytes.Equal(back.Bytes(), host.Bytes()))

	// A batch mixing host and device requests: the host ones by memcpy,
	// the device ones by the copier, all complete.
	reqs := []engine.Request{}
	for i := uint64(0); i < 64; i++ {
		off := i * 4096
		reqs = append(reqs, engine.Request{Op: engine.OpWrite, Source: host.Addr() + uintptr(off), Target: engine.LocalSegment, TargetOffset: d0 + off, Length: 4096})
		reqs = append(reqs, engine.Request{Op: engine.OpWrite, Source: host.Addr() + uintptr(off), Target: engine.LocalSegment, TargetOffset: uint64(back.Addr()) + off, Length: 4096})
	}
	assert.NilError(t, a.Transfer(ctx, reqs))
	assert.Assert(t, bytes.Equal(c.Bytes(d0, 64*4096), host.Bytes()[:64*4096]))
	if !c.Fake() {
		// Outside the target's registered device memory: refused.
		err = a.Transfer(ctx, []engine.Request{{Op: engine.OpWrite, Source: host.Addr(), Target: seg, TargetOffset: d1 + n - 10, Length: 20}})
		assert.Assert(t, err != nil)
		return // the rest loses a context, which only the fake can
	}
	assert.Assert(t, c.Calls(rt.Prefix+"EventSynchronize") > 0)

	// Outside the target's registered device memory: refused.
	err = a.Transfer(ctx, []engine.Request{{Op: engine.OpWrite, Source: host.Addr(), Target: seg, TargetOffset: d1 + n - 10, Length: 20}})
	assert.Assert(t, err != nil)

	// A lost context fails the transfer; nothing hangs.
	c.LoseContext(0)
	err = a.Transfer(ctx, []engine.Request{{Op: engine.OpWrite, Source: host.Addr(), Target: engine.LocalSegment, TargetOffset: d0, Length: 4096}})
	assert.Equal(t, rt.Code(err), int(cuda.ErrorIllegalAddress), "%v", err)
	c.Reset()
	assert.NilError(t, a.Transfer(ctx, []engine.Request{{Op: engine.OpWrite, Source: host.Addr(), Target: engine.LocalSegment, TargetOffset: d0, Length: 4096}}))
}

// BenchmarkGPUBatch: 128 x 64 KiB device-to-device requests in one batch
// within a process (on the fake driver the copies are memmoves, so this
// measures the engine's and the copier's overhead per request).
func BenchmarkGPUBatch(b *testing.B) {
	lib, err := fakecuda.Build()
	if err != nil {
		b.Fatal(err)
	}
	e, err := stack.New(context.Background(), stack.Config{
		Engine: engine.Config{LocalServerName: "127.0.0.1", Transports: []string{"local"}},
		GPU:    gpu.Config{Library: lib},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	d, err := gpu.Shared(gpu.Config{Library: lib}).Driver()
	if err != nil {
		b.Fatal(err)
	}
	const blk, count = 64 << 10, 128
	src, _ := d.MemAlloc(0, blk*count)
	dst, _ := d.MemAlloc(0, blk*count)
	defer d.MemFree(0, src)
	defer d.MemFree(0, dst)
	if err := e.RegisterMemory(uintptr(src), blk*count, "cuda:0", true); err != nil {
		b.Fatal(err)
	}
	if err := e.RegisterMemory(uintptr(dst), blk*count, "cuda:0", true); err != nil {
		b.Fatal(err)
	}
	reqs := make([]engine.Request, count)
	for i := range reqs {
		off := uint64(i) * blk
		reqs[i] = engine.Request{Op: engine.OpWrite, Source: uintptr(src + off), Target: engine.LocalSegment, TargetOffset: dst + off, Length: blk}
	}
	b.SetBytes(blk * count)
	b.ResetTimer()
	for range b.N {
		if err := e.Transfer(context.Background(), reqs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*count), "us/request")
}
