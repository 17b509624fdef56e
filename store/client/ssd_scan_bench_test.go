package client_test

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/store/client"
	"github.com/kvferry/kvferry/store/master"
	"github.com/kvferry/kvferry/store/ssd"
)

// TestBenchPrefixScan (issue 32, bench/ssd.sh runs it): a holder with
// memory M and its disk tier in KVFERRY_SSD_BENCH_DIR takes 4*M in 4 MiB
// objects (every put acknowledged: the offload writers' backpressure), then
// reads every object once in put order (a prefix scan) with GetInto into
// one reused buffer; the first and last 8 bytes of each object carry its
// index. The figure is set against a sequential read of one file of the
// same size in the same directory, in 4 MiB blocks, O_DIRECT where the
// tier uses it. Skipped unless KVFERRY_SSD_BENCH_DIR is set;
// KVFERRY_SSD_SCAN_MIB sets M (default 64).
func TestBenchPrefixScan(t *testing.T) {
	dir := os.Getenv("KVFERRY_SSD_BENCH_DIR")
	if dir == "" {
		t.Skip("set KVFERRY_SSD_BENCH_DIR (bench/ssd.sh)")
	}
	mem := 64 << 20
	if v, err := strconv.Atoi(os.Getenv("KVFERRY_SSD_SCAN_MIB")); err == nil && v > 0 {
		mem = v << 20
	}
	const obj = 4 << 20
	total := 4 * mem
	n := total / obj
	work, err := os.MkdirTemp(dir, "kvferry-scan-bench-")
	assert.NilError(t, err)
	t.Cleanup(func() { os.RemoveAll(work) }) // after the client's Close
	ctx := ctxT(t, 300*time.Second)
	srv := startMaster(t, master.Config{})
	holder := newClient(t, client.Config{MasterServerAddr: srv.Addr(), GlobalSegmentSize: uint64(mem),
		SSDOffloadPath: filepath.Join(work, "tier"), SSDCapacity: uint64(2 * total)})
	tier, err := holder.DiskTier()
	assert.NilError(t, err)

	key := func(i int) string { return fmt.Sprintf("scan%05d", i) }
	val := pattern(obj, 0)
	t0 := time.Now()
	for i := range n {
		binary.LittleEndian.PutUint64(val, uint64(i))
		binary.LittleEndian.PutUint64(val[obj-8:], uint64(i))
		assert.NilError(t, holder.Put(ctx, key(i), val, client.ReplicateConfig{}), "put %s", key(i))
	}
	putTime := time.Since(t0)
	m := srv.Service().Metrics()
	assert.Assert(t, m.EvictedObjectsTotal > 0, "nothing was evicted: the test did not exceed memory")

	buf := cbuf(t, obj)
	b := buf.Bytes()
	reads0 := holder.Metrics().DiskReads
	t0 = time.Now()
	for i := range n {
		got, err := holder.GetInto(ctx, key(i), buf.Addr(), obj)
		assert.NilError(t, err, "get into %s", key(i))
		assert.Equal(t, got, uint64(obj))
		if binary.LittleEndian.Uint64(b) != uint64(i) || binary.LittleEndian.Uint64(b[obj-8:]) != uint64(i) {
			t.Fatalf("get into %s: wrong bytes (index %d / %d)", key(i), binary.LittleEndian.Uint64(b),
				binary.LittleEndian.Uint64(b[obj-8:]))
		}
	}
	scan := time.Since(t0)
	diskReads := holder.Metrics().DiskReads - reads0

	// The baseline: one file of the same size in the same directory,
	// written, then read in 4 MiB blocks.
	_, seqRead, _, err := ssd.SequentialBaseline(work, b, n)
	assert.NilError(t, err)

	mbs := func(d time.Duration) float64 { return float64(total) / d.Seconds() / (1 << 20) }
	fmt.Printf("prefix scan 4x memory (%d objects of %d MiB): %.0f MiB/s\n", n, obj>>20, mbs(scan))
	fmt.Printf("  vs sequential read of the same directory: %.0f MiB/s, ratio %.2f\n", mbs(seqRead),
		seqRead.Seconds()/scan.Seconds())
	fmt.Printf("  (%s, o_direct=%v, memory %d MiB; %d of %d reads from disk; puts %.0f MiB/s)\n", dir, tier.Direct(),
		mem>>20, diskReads, n, mbs(putTime))
}
