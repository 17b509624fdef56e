package nixl

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/internal/cmem"
)

// BenchmarkRegisterSingle registers N buffers one call at a time, as NIXL
// registers a descriptor list, then deregisters them one at a time, through
// an agent with the default transports (same process, same host, TCP), and
// prints the mean cost of a call over the first 1,000 calls and over the
// last 1,000 (calls 99,001-100,000 for the default N): flat means O(1)
// amortized. N is KVFERRY_BENCH_REGS (default 100000). Run it with
//
//	go test -run '^$' -bench RegisterSingle -benchtime 1x ./agent/nixl
func BenchmarkRegisterSingle(b *testing.B) {
	n := 100000
	if v := os.Getenv("KVFERRY_BENCH_REGS"); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		assert.NilError(b, err)
	}
	const window, stride = 1000, 4096
	assert.Assert(b, n >= 2*window)
	for range b.N {
		a := newTestAgent(b, "bench", map[string]string{"local_server_name": "127.0.0.1"}, false)
		buf, err := cmem.MapAnon(uint64(n) * stride) // address space only: registration touches no page
		assert.NilError(b, err)
		mds := make([]MD, n)
		at := make([]time.Duration, n+1)
		start := time.Now()
		for i := range n {
			mds[i], err = a.Register(DRAM, uint64(buf.Addr())+uint64(i)*stride, stride, 0)
			if err != nil {
				b.Fatal(err)
			}
			at[i+1] = time.Since(start)
		}
		reg := at
		at = make([]time.Duration, n+1)
		start = time.Now()
		for i := range n {
			if err := a.Deregister(mds[i]); err != nil {
				b.Fatal(err)
			}
			at[i+1] = time.Since(start)
		}
		perCall := func(ts []time.Duration, from, to int) float64 {
			return float64(ts[to]-ts[from]) / float64(to-from)
		}
		rFirst, rLast := perCall(reg, 0, window), perCall(reg, n-window, n)
		dFirst, dLast := perCall(at, 0, window), perCall(at, n-window, n)
		fmt.Printf("register   %7d single calls: %8.0f ns/call over calls 1-%d, %8.0f ns/call over calls %d-%d (last/first %.2f), total %v\n",
			n, rFirst, window, rLast, n-window+1, n, rLast/rFirst, reg[n].Round(time.Millisecond))
		fmt.Printf("deregister %7d single calls: %8.0f ns/call over calls 1-%d, %8.0f ns/call over calls %d-%d (last/first %.2f), total %v\n",
			n, dFirst, window, dLast, n-window+1, n, dLast/dFirst, at[n].Round(time.Millisecond))
		b.ReportMetric(float64(reg[n])/float64(n), "ns/register")
		b.ReportMetric(float64(at[n])/float64(n), "ns/deregister")
		assert.NilError(b, buf.Close())
	}
}
