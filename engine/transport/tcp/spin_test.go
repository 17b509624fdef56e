package tcp_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/internal/cmem"
)

// Small transfers with the waits polling (the default) and with polling
// off move the right bytes, and once the traffic stops nothing keeps
// spinning: the process uses next to no CPU while idle, with the lanes and
// server connections still open.
func TestSpinningStopsWhenIdle(t *testing.T) {
	for _, spin := range []time.Duration{0, -1, 200 * time.Microsecond} {
		mk := func() *engine.Engine {
			e, err := stack.New(context.Background(), stack.Config{Engine: engine.Config{LocalServerName: "127.0.0.1",
				Transports: []string{"tcp"}, SpinWait: spin}})
			assert.NilError(t, err)
			t.Cleanup(func() { e.Close() })
			return e
		}
		a, b := mk(), mk()
		const size = 1 << 20
		src, err := cmem.MapAnon(size)
		assert.NilError(t, err)
		dst, err := cmem.MapAnon(size)
		assert.NilError(t, err)
		t.Cleanup(func() { src.Close(); dst.Close() })
		assert.NilError(t, a.RegisterMemory(src.Addr(), size, "*", true))
		assert.NilError(t, b.RegisterMemory(dst.Addr(), size, "*", true))
		seg, err := a.OpenSegment(context.Background(), b.SegmentName())
		assert.NilError(t, err)
		ctx := context.Background()
		for i := range 300 {
			off := uint64(i%256) * 4096
			copy(src.Bytes()[off:off+4096], bytes.Repeat([]byte{byte(i)}, 4096))
			w := engine.Request{Op: engine.OpWrite, Source: src.Addr() + uintptr(off), Target: seg, TargetOffset: uint64(dst.Addr()) + off, Length: 4096}
			assert.NilError(t, a.Transfer(ctx, []engine.Request{w}))
			r := w
			r.Op, r.Source = engine.OpRead, src.Addr()+uintptr((off+512<<10)%size)
			assert.NilError(t, a.Transfer(ctx, []engine.Request{r}))
			got := cmem.Bytes(r.Source, 4096)
			assert.Assert(t, bytes.Equal(got, dst.Bytes()[off:off+4096]), "spin %v, transfer %d", spin, i)
		}
		time.Sleep(100 * time.Millisecond)
		c0, t0 := cpuTime(), time.Now()
		time.Sleep(500 * time.Millisecond)
		used, wall := cpuTime()-c0, time.Since(t0)
		// A wait that kept spinning would take a whole core; idle lanes,
		// their health checks and the runtime take well under 1% of one.
		assert.Assert(t, used < wall/5, "spin %v: %v of CPU in %v idle", spin, used, wall)
	}
}
