package client_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/store/client"
	"github.com/kvferry/kvferry/store/master"
)

// TestBenchCrossClientRead (issue 32, bench/ssd.sh runs it): where a second
// client's first read of a 1 MiB object that is only on the holder's disk
// spends its time. A holder with 16 MiB of memory and its disk tier in
// KVFERRY_SSD_BENCH_DIR takes 64 objects of 1 MiB (the first ones end up
// on disk only); a client that lends nothing reads each disk-only object
// once with GetInto, through the holder's serve buffer (served) and, with a
// serve buffer too small for them, through promotions (promoted). The
// parts are timed alone: the master lookup (ReplicaDescs of one key), the
// holder's read of one file (its disk tier), and a read of a 1 MiB object
// in the holder's memory (lookup and transfer). Skipped unless
// KVFERRY_SSD_BENCH_DIR is set.
func TestBenchCrossClientRead(t *testing.T) {
	dir := os.Getenv("KVFERRY_SSD_BENCH_DIR")
	if dir == "" {
		t.Skip("set KVFERRY_SSD_BENCH_DIR (bench/ssd.sh)")
	}
	const obj, mem, n = 1 << 20, 16 << 20, 64
	for _, arm := range []struct {
		name  string
		serve uint64
	}{{"served", 0}, {"promoted", 4096}} {
		work, err := os.MkdirTemp(dir, "kvferry-cross-bench-")
		assert.NilError(t, err)
		t.Cleanup(func() { os.RemoveAll(work) }) // after the clients' Close
		ctx := ctxT(t, 300*time.Second)
		srv := startMaster(t, master.Config{})
		holder := newClient(t, client.Config{MasterServerAddr: srv.Addr(), GlobalSegmentSize: mem,
			SSDOffloadPath: filepath.Join(work, "tier"), SSDCapacity: 4 * n * obj, DiskServeBufferSize: arm.serve})
		user := newClient(t, client.Config{MasterServerAddr: srv.Addr()})
		key := func(i int) string { return fmt.Sprintf("x%03d", i) }
		for i := range n {
			assert.NilError(t, holder.Put(ctx, key(i), pattern(obj, byte(i)), client.ReplicateConfig{}))
		}
		buf := cbuf(t, obj)
		read := func(i int) time.Duration {
			t0 := time.Now()
			got, err := user.GetInto(ctx, key(i), buf.Addr(), obj)
			d := time.Since(t0)
			assert.NilError(t, err, "get into %s", key(i))
			assert.Equal(t, got, uint64(obj))
			assert.Equal(t, buf.Bytes()[obj-1], pattern(obj, byte(i))[obj-1])
			return d
		}
		// Every object once, in put order; a read counts as one from disk
		// when it was served from the holder's disk or promoted (queries
		// would lease the objects in memory and change what a promotion
		// finds).
		var first []time.Duration
		var inMem []int
		for i := range n {
			before := user.Metrics()
			d := read(i)
			after := user.Metrics()
			if after.RemoteDiskReads+after.Promotions > before.RemoteDiskReads+before.Promotions {
				first = append(first, d)
			} else {
				inMem = append(inMem, i)
			}
		}
		assert.Assert(t, len(first) > 8, "%d reads from disk", len(first))
		um := user.Metrics()
		fmt.Printf("cross-client read of a 1 MiB disk-only object, %s (%d objects): %s; %d served, %d promotions, %d promotion waits\n",
			arm.name, len(first), stats(first), um.RemoteDiskReads, um.Promotions, um.PromoteWaits)
		if arm.serve != 0 {
			continue
		}
		// The parts, alone.
		var lookup, file, memRead []time.Duration
		tier, err := holder.DiskTier()
		assert.NilError(t, err)
		entries := tier.Entries()
		assert.Assert(t, len(inMem) > 0)
		fileBuf := cbuf(t, obj)
		for j := range 32 {
			t0 := time.Now()
			_, err := user.ReplicaDescs(ctx, []string{key(j % n)})
			lookup = append(lookup, time.Since(t0))
			assert.NilError(t, err)
			e := entries[j%len(entries)]
			t0 = time.Now()
			assert.NilError(t, tier.Read(e.Tenant, e.Key, e.UID, fileBuf.Bytes()[:e.Size]))
			file = append(file, time.Since(t0))
			memRead = append(memRead, read(inMem[j%len(inMem)]))
		}
		fmt.Printf("  parts: master lookup %s\n         holder file read (1 MiB) %s\n         read from holder memory (lookup + transfer) %s\n",
			stats(lookup), stats(file), stats(memRead))
	}
}

// stats formats the p50, p90 and mean of ds.
func stats(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
	return fmt.Sprintf("p50 %v, p90 %v, mean %v", r(s[len(s)/2]), r(s[len(s)*9/10]), r(sum/time.Duration(len(s))))
}
