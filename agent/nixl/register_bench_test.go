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
// prints the mean cost of a call after 1,000 calls and after all of them
// (100,000 by default): flat (ratio about 1) means O(1) amortized. The mean
// of the last 1,000 calls alone is printed too; it is noisier (one
// background publication or GC cycle falls into a few milliseconds). N is KVFERRY_BENCH_REGS (default 100000). Run it with
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
		report := func(what string, ts []time.Duration) {
			first, all, last := perCall(ts, 0, window), perCall(ts, 0, n), perCall(ts, n-window, n)
			fmt.Printf("%-10s %d single calls: mean %6.0f ns/call at %d calls, %6.0f ns/call at %d (ratio %.2f); calls %d-%d alone %6.0f ns/call\n",
				what, n, first, window, all, n, all/first, n-window+1, n, last)
		}
		report("register", reg)
		report("deregister", at)
		b.ReportMetric(float64(reg[n])/float64(n), "ns/register")
		b.ReportMetric(float64(at[n])/float64(n), "ns/deregister")
		assert.NilError(b, buf.Close())
	}
}
