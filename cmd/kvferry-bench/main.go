// Command kvferry-bench measures the transfer engine with the flags and the
// summary line of Mooncake's transfer_engine_bench:
//
//	kvferry-bench --mode=target --local_server_name=127.0.0.1
//	kvferry-bench --mode=initiator --segment_id=127.0.0.1:15321 \
//	    --operation=write --block_size=1048576 --batch_size=128 --threads=4
//
// The target prints its segment name; the initiator opens it, and each of
// --threads workers loops: allocate a batch, submit --batch_size requests of
// --block_size bytes, wait for completion, free the batch. It prints a
// progress line every second and a summary (or one JSON object with --json).
// MC_* and KVFERRY_* environment variables apply as in the library.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/internal/hostenv"
)

var (
	mode            = flag.String("mode", "initiator", "Running mode: initiator, target, or memcpy (C memcpy between two local buffers of buffer_size, one thread: the baseline of bench/samehost.sh)")
	metadataServer  = flag.String("metadata_server", "P2PHANDSHAKE", "Metadata connection string (P2PHANDSHAKE, http://host:port/metadata, etcd://host:port)")
	localServerName = flag.String("local_server_name", "127.0.0.1", "Local server name (P2P: the host to advertise)")
	segmentID       = flag.String("segment_id", "", "Segment name of the target (P2P: <ip>:<port> printed by the target)")
	protocol        = flag.String("protocol", "tcp", "Transport to use: tcp, rdma, local, cma, shm or auto (the selector)")
	deviceName      = flag.String("device_name", "", "RDMA NICs to use, comma-separated (default: all, or MC_TE_FILTERS)")
	operation       = flag.String("operation", "read", "Operation type: read or write")
	blockSize       = flag.Uint64("block_size", 65536, "Block size for each transfer request")
	batchSize       = flag.Int("batch_size", 128, "Batch size")
	threads         = flag.Int("threads", 12, "Task submission threads")
	duration        = flag.Int("duration", 10, "Test duration in seconds")
	bufferSize      = flag.Uint64("buffer_size", 1<<30, "Total size of the data buffer")
	jsonOut         = flag.Bool("json", false, "Print one JSON object with the results")
	readyFile       = flag.String("ready_file", "", "Target: write the segment name to this file once ready")
	reportUnit      = flag.String("report_unit", "GB", "Report unit: GB|GiB|Gb|MB|MiB|Mb")
	hugePages       = flag.Bool("hugepages", false, "Ask for transparent huge pages on the buffers (madvise MADV_HUGEPAGE)")
)

// mapBuffer maps n bytes, with transparent huge pages when asked, and
// touches every page.
func mapBuffer(n uint64) (*cmem.Map, error) {
	m, err := cmem.MapAnon(n)
	if err != nil {
		return nil, err
	}
	b := m.Bytes()
	if *hugePages {
		if err := unix.Madvise(b, unix.MADV_HUGEPAGE); err != nil {
			m.Close()
			return nil, fmt.Errorf("madvise(MADV_HUGEPAGE): %w", err)
		}
	}
	for i := 0; i < len(b); i += 4096 {
		b[i] = byte(i >> 12)
	}
	return m, nil
}

// Result is the initiator's summary.
type Result struct {
	Operation  string  `json:"operation"`
	BlockSize  uint64  `json:"block_size"`
	BatchSize  int     `json:"batch_size"`
	Threads    int     `json:"threads"`
	Duration   float64 `json:"duration_s"`
	Batches    uint64  `json:"batch_count"`
	Bytes      uint64  `json:"bytes"`
	GBps       float64 `json:"gb_per_s"`
	OpsPerSec  float64 `json:"ops_per_s"`
	AvgBatchUs float64 `json:"avg_batch_latency_us"`
	Transport  string  `json:"transport"`
	Failed     uint64  `json:"failed_batches"`
}

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "kvferry-bench:", err)
		os.Exit(1)
	}
}

func newEngine(ctx context.Context) (*engine.Engine, error) {
	cfg := hostenv.StackConfig()
	cfg.Engine.MetadataConn = *metadataServer
	cfg.Engine.LocalServerName = *localServerName
	cfg.AutoDiscover = true
	if *deviceName != "" {
		cfg.RDMA.Devices = strings.Split(*deviceName, ",")
	}
	if p := strings.ToLower(*protocol); p != "auto" && p != "" && cfg.Engine.ForceTransport == "" {
		cfg.Engine.ForceTransport = p
	}
	return stack.New(ctx, cfg)
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *mode == "memcpy" {
		return memcpyBench(ctx)
	}
	e, err := newEngine(ctx)
	if err != nil {
		return err
	}
	defer e.Close()
	buf, err := mapBuffer(*bufferSize)
	if err != nil {
		return err
	}
	defer buf.Close()
	if err := e.RegisterMemory(buf.Addr(), buf.Len(), "cpu:0", true); err != nil {
		return err
	}
	switch *mode {
	case "target":
		return target(ctx, e)
	case "initiator":
		return initiator(ctx, e, buf)
	}
	return fmt.Errorf("unknown mode %q", *mode)
}

func target(ctx context.Context, e *engine.Engine) error {
	fmt.Printf("kvferry-bench target ready: segment %s\n", e.SegmentName())
	if *readyFile != "" {
		tmp := *readyFile + ".tmp"
		if err := os.WriteFile(tmp, []byte(e.SegmentName()+"\n"), 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, *readyFile); err != nil {
			return err
		}
	}
	if *duration > 0 && *mode == "target" && flag.Lookup("duration") != nil && isFlagSet("duration") {
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(*duration) * time.Second):
		}
		return nil
	}
	<-ctx.Done()
	return nil
}

func isFlagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) {
		if f.Name == name {
			set = true
		}
	})
	return set
}

func initiator(ctx context.Context, e *engine.Engine, buf *cmem.Map) error {
	if *segmentID == "" {
		return fmt.Errorf("--segment_id is required in initiator mode")
	}
	var op engine.OpCode
	switch *operation {
	case "read":
		op = engine.OpRead
	case "write":
		op = engine.OpWrite
	default:
		return fmt.Errorf("unsupported operation %q: must be read or write", *operation)
	}
	seg, err := e.OpenSegment(ctx, *segmentID)
	if err != nil {
		return err
	}
	desc, err := e.SegmentDescriptor(seg)
	if err != nil || len(desc.Buffers) == 0 {
		return fmt.Errorf("target segment %q has no registered buffer", *segmentID)
	}
	remote := desc.Buffers[0]
	span := *blockSize * uint64(*batchSize) * uint64(*threads)
	if span > buf.Len() || span > remote.Length {
		return fmt.Errorf("block_size*batch_size*threads = %d exceeds the buffer (local %d, remote %d)", span, buf.Len(), remote.Length)
	}
	var running atomic.Bool
	running.Store(true)
	var batches, failed, latNanos atomic.Uint64
	var wg sync.WaitGroup
	start := time.Now()
	for t := 0; t < *threads; t++ {
		wg.Add(1)
		go func(t int) {
			defer wg.Done()
			reqs := make([]engine.Request, *batchSize)
			for i := range reqs {
				off := *blockSize * uint64(i**threads+t)
				reqs[i] = engine.Request{Op: op, Source: buf.Addr() + uintptr(off), Target: seg, TargetOffset: remote.Addr + off, Length: *blockSize}
			}
			for running.Load() {
				t0 := time.Now()
				id, err := e.AllocateBatch(len(reqs))
				if err != nil {
					failed.Add(1)
					return
				}
				if err := e.Submit(id, reqs); err != nil {
					failed.Add(1)
				}
				bs, err := e.Wait(ctx, id)
				if err != nil || bs.State != engine.StateCompleted {
					failed.Add(1)
					if err != nil {
						_ = e.Cancel(context.Background(), id)
					}
				}
				_ = e.FreeBatch(id)
				latNanos.Add(uint64(time.Since(t0)))
				batches.Add(1)
			}
		}(t)
	}
	end := time.After(time.Duration(*duration) * time.Second)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var last uint64
	lastT := start
loop:
	for {
		select {
		case <-end:
			break loop
		case <-ctx.Done():
			break loop
		case now := <-tick.C:
			if *jsonOut {
				continue
			}
			n := batches.Load()
			rate := float64(n-last) * float64(*batchSize) * float64(*blockSize) / now.Sub(lastT).Seconds()
			fmt.Fprintf(os.Stderr, "\r[%5.1fs] %s %d batches, %s   ", now.Sub(start).Seconds(), *operation, n, formatRate(rate))
			last, lastT = n, now
		}
	}
	running.Store(false)
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	if !*jsonOut {
		fmt.Fprintln(os.Stderr)
	}
	n := batches.Load()
	bytes := n * uint64(*batchSize) * *blockSize
	r := Result{Operation: *operation, BlockSize: *blockSize, BatchSize: *batchSize, Threads: *threads, Duration: elapsed,
		Batches: n, Bytes: bytes, GBps: float64(bytes) / elapsed / 1e9, OpsPerSec: float64(n) * float64(*batchSize) / elapsed,
		Transport: e.ChooseTransport(seg), Failed: failed.Load()}
	if n > 0 {
		r.AvgBatchUs = float64(latNanos.Load()) / float64(n) / 1e3
	}
	if *jsonOut {
		return json.NewEncoder(os.Stdout).Encode(r)
	}
	fmt.Printf("Test completed: duration %.2f, batch count %d, throughput %s, %.0f ops/s, avg batch latency %.1f us, transport %s\n",
		r.Duration, r.Batches, formatRate(float64(bytes)/elapsed), r.OpsPerSec, r.AvgBatchUs, r.Transport)
	if r.Failed > 0 {
		return fmt.Errorf("%d batches failed", r.Failed)
	}
	return nil
}

func formatRate(bytesPerSec float64) string {
	units := map[string]float64{"GB": 1e9, "GiB": 1 << 30, "Gb": 1e9 / 8, "MB": 1e6, "MiB": 1 << 20, "Mb": 1e6 / 8}
	u, ok := units[*reportUnit]
	if !ok {
		u, *reportUnit = 1e9, "GB"
	}
	return fmt.Sprintf("%.2f %s/s", bytesPerSec/u, *reportUnit)
}

// memcpyBench copies block_size blocks with C memcpy, one thread, from one
// buffer of buffer_size to another, sweeping through both, for duration
// seconds.
func memcpyBench(ctx context.Context) error {
	src, err := mapBuffer(*bufferSize)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := mapBuffer(*bufferSize)
	if err != nil {
		return err
	}
	defer dst.Close()
	bs := *blockSize
	if bs == 0 || bs > *bufferSize {
		return fmt.Errorf("block_size must be in 1..buffer_size")
	}
	blocks := *bufferSize / bs
	start := time.Now()
	end := start.Add(time.Duration(*duration) * time.Second)
	var n uint64
	for time.Now().Before(end) && ctx.Err() == nil {
		for i := uint64(0); i < blocks; i++ {
			cmem.Copy(dst.Addr()+uintptr(i*bs), src.Addr()+uintptr(i*bs), bs)
		}
		n += blocks
	}
	elapsed := time.Since(start).Seconds()
	bytes := n * bs
	r := Result{Operation: "memcpy", BlockSize: bs, BatchSize: 1, Threads: 1, Duration: elapsed, Batches: n, Bytes: bytes,
		GBps: float64(bytes) / elapsed / 1e9, OpsPerSec: float64(n) / elapsed, Transport: "memcpy"}
	if *jsonOut {
		return json.NewEncoder(os.Stdout).Encode(r)
	}
	fmt.Printf("memcpy: block %d, %s\n", bs, formatRate(float64(bytes)/elapsed))
	return nil
}
