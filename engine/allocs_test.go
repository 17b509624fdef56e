package engine_test

import (
	"context"
	"math"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/internal/cmem"
)

// tcpPair4K is two engines of this process joined over TCP loopback, with
// one 4 KiB request of each direction ready to Transfer: the batch-1 path
// whose steady state should allocate nothing on either side (issue 38).
type tcpPair4K struct {
	x     *engine.Engine
	read  []engine.Request
	write []engine.Request
}

// spin is the engines' SpinWait: 0 the default, negative never polling (a
// wait parks at once: the path a loaded machine takes).
func newTCPPair4K(tb testing.TB, spin time.Duration) *tcpPair4K {
	tb.Helper()
	mk := func() *engine.Engine {
		e, err := stack.New(context.Background(), stack.Config{Engine: engine.Config{LocalServerName: "127.0.0.1",
			Transports: []string{"tcp"}, TransferTimeout: 10 * time.Second, SpinWait: spin}})
		assert.NilError(tb, err)
		tb.Cleanup(func() { e.Close() })
		return e
	}
	x, y := mk(), mk()
	const n = 1 << 20
	src, err := cmem.MapAnon(n)
	assert.NilError(tb, err)
	dst, err := cmem.MapAnon(n)
	assert.NilError(tb, err)
	tb.Cleanup(func() { src.Close(); dst.Close() })
	assert.NilError(tb, x.RegisterMemory(src.Addr(), n, "cpu:0", true))
	assert.NilError(tb, y.RegisterMemory(dst.Addr(), n, "cpu:0", true))
	tb.Cleanup(func() { x.UnregisterMemory(src.Addr()); y.UnregisterMemory(dst.Addr()) })
	seg, err := x.OpenSegment(context.Background(), y.SegmentName())
	assert.NilError(tb, err)
	assert.Equal(tb, x.ChooseTransport(seg), "tcp")
	p := &tcpPair4K{x: x}
	for _, op := range []engine.OpCode{engine.OpRead, engine.OpWrite} {
		r := []engine.Request{{Op: op, Source: src.Addr(), Target: seg, TargetOffset: uint64(dst.Addr()), Length: 4096}}
		if op == engine.OpRead {
			p.read = r
		} else {
			p.write = r
		}
	}
	return p
}

// BenchmarkTCPAllocs4K times one batch-1 4 KiB Transfer over TCP loopback
// with allocations: -benchmem's B/op and allocs/op count both the
// initiator and the target, which share this process.
func BenchmarkTCPAllocs4K(b *testing.B) {
	p, park := newTCPPair4K(b, 0), newTCPPair4K(b, -1)
	for _, c := range []struct {
		name string
		x    *engine.Engine
		reqs []engine.Request
	}{{"read", p.x, p.read}, {"write", p.x, p.write}, {"read-park", park.x, park.read}, {"write-park", park.x, park.write}} {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			b.SetBytes(4096)
			b.ReportAllocs()
			for b.Loop() {
				if err := c.x.Transfer(ctx, c.reqs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// maxTransferAllocs4K is what a batch-1 4 KiB Transfer over TCP may
// allocate per op, both sides together: nothing. The batch, with its task,
// slice and lists, comes from the engine's free list once the transports
// released it (batchpool.go).
const maxTransferAllocs4K = 0

// TestTransferAllocs4K pins the allocations of a batch-1 4 KiB READ and
// WRITE over TCP, initiator and target in this process, for a wait that
// polls and one that parks at once: everything comes from storage reused
// across ops, the batch included.
func TestTransferAllocs4K(t *testing.T) {
	if testing.Short() {
		t.Skip("two engines over loopback")
	}
	p, park := newTCPPair4K(t, 0), newTCPPair4K(t, -1)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		x    *engine.Engine
		reqs []engine.Request
	}{{"read", p.x, p.read}, {"write", p.x, p.write}, {"read-park", park.x, park.read}, {"write-park", park.x, park.write}} {
		t.Run(c.name, func(t *testing.T) {
			for range 50 { // warm up: connections, lane queues, watches
				assert.NilError(t, c.x.Transfer(ctx, c.reqs))
			}
			var err error
			// AllocsPerRun counts every goroutine of the process: the
			// engines' background work (the other pair still starting, a
			// descriptor refresh) lands in a round now and then on a loaded
			// machine. The op's own allocations are in every round, so the
			// least of a few rounds is the op's figure.
			n := math.Inf(1)
			for range 5 {
				n = min(n, testing.AllocsPerRun(200, func() {
					if e := c.x.Transfer(ctx, c.reqs); e != nil {
						err = e
					}
				}))
				if n <= maxTransferAllocs4K {
					break
				}
			}
			assert.NilError(t, err)
			assert.Assert(t, n <= maxTransferAllocs4K, "a 4 KiB %s allocates %v objects per op, want at most %d", c.name, n, maxTransferAllocs4K)
		})
	}
}
