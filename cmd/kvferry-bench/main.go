// Command kvferry-bench is kvferry's benchmark front end.
//
//	kvferry-bench [transfer] FLAGS   the transfer engine (the default: Mooncake's
//	                                 transfer_engine_bench command lines work as they are)
//	kvferry-bench store FLAGS        the store between processes (bench/store.sh)
//
// transfer takes the flags and prints the summary line of Mooncake's
// transfer_engine_bench:
//
//	kvferry-bench --mode=target --local_server_name=127.0.0.1
//	kvferry-bench --mode=initiator --segment_id=127.0.0.1:15321 \
//	    --operation=write --block_size=1048576 --batch_size=128 --threads=4
//
// The target prints its segment name; the initiator opens it, and each of
// --threads workers loops: allocate a batch, submit --batch_size requests of
// --block_size bytes, wait for completion, free the batch. --block_size,
// --batch_size and --threads take comma-separated lists (4096,65536,1048576):
// the initiator then runs every combination for --duration seconds each.
// Progress goes to stderr: a live bar on a terminal, a plain line per second
// otherwise (--quiet: none). It prints a summary line per run, or one JSON
// object per run with --json, and with --plot out.png draws throughput and
// batch latency against block size. MC_* and KVFERRY_* environment variables
// apply as in the library; KVFERRY_METRICS_ADDR serves the process's
// /metrics while it runs.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
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
	"github.com/kvferry/kvferry/metrics"
)

var (
	mode            = flag.String("mode", "initiator", "Running mode: initiator, target, or memcpy (C memcpy between two local buffers of buffer_size, one thread: the baseline of bench/samehost.sh)")
	metadataServer  = flag.String("metadata_server", "P2PHANDSHAKE", "Metadata connection string (P2PHANDSHAKE, http://host:port/metadata, etcd://host:port, redis://[:password@]host:port[/db])")
	localServerName = flag.String("local_server_name", "127.0.0.1", "Local server name (P2P: the host to advertise)")
	segmentID       = flag.String("segment_id", "", "Segment name of the target (P2P: <ip>:<port> printed by the target)")
	protocol        = flag.String("protocol", "tcp", "Transport to use: tcp, rdma, efa, local, cma, shm or auto (the selector)")
	deviceName      = flag.String("device_name", "", "RDMA NICs to use, comma-separated (default: all, or MC_TE_FILTERS)")
	operation       = flag.String("operation", "read", "Operation type: read, write, or notify (notification round trips: ping the target, which answers each ping)")
	blockSizes      = flag.String("block_size", "65536", "Block size for each transfer request (a comma-separated list sweeps)")
	batchSizes      = flag.String("batch_size", "128", "Batch size (a comma-separated list sweeps)")
	threadCounts    = flag.String("threads", "12", "Task submission threads (a comma-separated list sweeps)")
	duration        = flag.Int("duration", 10, "Test duration in seconds (of each run of a sweep)")
	bufferSize      = flag.Uint64("buffer_size", 1<<30, "Total size of the data buffer")
	jsonOut         = flag.Bool("json", false, "Print one JSON object per run with the results")
	plotOut         = flag.String("plot", "", "Draw throughput and batch latency against block size into this PNG file")
	quiet           = flag.Bool("quiet", false, "No progress on stderr")
	readyFile       = flag.String("ready_file", "", "Target: write the segment name to this file once ready")
	reportUnit      = flag.String("report_unit", "GB", "Report unit: GB|GiB|Gb|MB|MiB|Mb")
	hugePages       = flag.Bool("hugepages", false, "Ask for transparent huge pages on the buffers (madvise MADV_HUGEPAGE)")
	useVRAM         = flag.Bool("use_vram", false, "Allocate the buffer in GPU memory (CUDA driver; RDMA then needs GPUDirect)")
	gpuID           = flag.Int("gpu_id", 0, "GPU of the buffer with --use_vram")
	lockedWaits     = flag.Bool("locked", false, "Submit and wait from goroutines locked to their threads, as every C caller of the library is (kvferry_batch_wait: Engine.WaitLocked)")
	pollStatus      = flag.Bool("poll_status", false, "Wait for each batch by polling its task's status in a loop (Mooncake's getTransferStatus loop: Engine.PollTaskStatus) instead of Engine.Wait; with --locked from locked threads, as a C caller")
	awaitBatches    = flag.Bool("await", false, "Declare each batch awaited before submitting it (kvferry_batch_await, what the Python sync calls do): the submitting thread may do its I/O")
	samplesFile     = flag.String("samples_file", "", "Append every batch latency, in the order measured, to this file (lines: thread, nanoseconds)")
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

// Result is one initiator run.
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
	P50BatchUs float64 `json:"p50_batch_latency_us"`
	P99BatchUs float64 `json:"p99_batch_latency_us"`
	Transport  string  `json:"transport"`
	Failed     uint64  `json:"failed_batches"`
	// CPUPerOpUs is this process's CPU time (user + system) per request:
	// what a request costs the initiator, less sensitive to other load on
	// the machine than the throughput.
	CPUPerOpUs float64 `json:"cpu_us_per_op"`
	// CtxSwitchesPerOp is this process's context switches (voluntary and
	// involuntary, all threads) per request; notify runs only.
	CtxSwitchesPerOp float64 `json:"ctx_switches_per_op,omitempty"`
	// Locked says the batches were waited for from locked threads (--locked).
	Locked bool `json:"locked,omitempty"`
	// Awaited says each batch was declared awaited (--await).
	Awaited bool `json:"awaited,omitempty"`
	// P50DeliverUs and P99DeliverUs are notify runs' delivery times of one
	// notification: from the sender's Notify call until the peer's
	// application saw it (both processes read the host's monotonic clock).
	P50DeliverUs float64 `json:"p50_deliver_latency_us,omitempty"`
	P99DeliverUs float64 `json:"p99_deliver_latency_us,omitempty"`
	// P50AcceptUs and P99AcceptUs are notify runs' Notify call times: until
	// the peer's acceptance came back to the sender.
	P50AcceptUs float64 `json:"p50_accept_latency_us,omitempty"`
	P99AcceptUs float64 `json:"p99_accept_latency_us,omitempty"`
}

// cpuTime returns this process's user + system CPU time.
func cpuTime() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ctxSwitches returns this process's context switches so far (voluntary
// and involuntary, all threads).
func ctxSwitches() int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Nvcsw + ru.Nivcsw
}

func main() {
	args := os.Args[1:]
	sub := "transfer"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		sub, args = args[0], args[1:]
	}
	var err error
	switch sub {
	case "transfer":
		_ = flag.CommandLine.Parse(args)
		err = run()
	case "store":
		err = storeMain(args)
	case "help":
		fmt.Fprintln(os.Stderr, "usage: kvferry-bench [transfer] FLAGS | kvferry-bench store FLAGS\ntransfer flags:")
		flag.PrintDefaults()
		fmt.Fprintln(os.Stderr, "store flags:")
		storeFlags.PrintDefaults()
	default:
		err = fmt.Errorf("unknown subcommand %q (transfer, store or help)", sub)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kvferry-bench:", err)
		os.Exit(1)
	}
}

// serveMetrics serves the process's metrics on KVFERRY_METRICS_ADDR, as
// the library does.
func serveMetrics() {
	addr := hostenv.MetricsAddr()
	if addr == "" {
		return
	}
	ln, err := metrics.Serve(addr, metrics.NewRegistry(), hostenv.MetricsPprof())
	if err != nil {
		fmt.Fprintln(os.Stderr, "kvferry-bench:", err)
		return
	}
	fmt.Fprintf(os.Stderr, "metrics on %s\n", ln.Addr())
}

func newEngine(ctx context.Context) (*engine.Engine, error) {
	cfg := stack.ConfigFromEnv(hostenv.Lookup)
	cfg.Engine.MetadataConn = *metadataServer
	cfg.Engine.LocalServerName = *localServerName
	cfg.AutoDiscover = true
	if *deviceName != "" {
		cfg.RDMA.Devices = strings.Split(*deviceName, ",")
	}
	if p := strings.ToLower(*protocol); p != "auto" && p != "" && cfg.Engine.ForceTransport == "" {
		cfg.Engine.ForceTransport = p
		cfg.Protocol = p // installs a transport discovery leaves out (efa)
	}
	return stack.New(ctx, cfg)
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *mode == "memcpy" {
		return memcpyBench(ctx)
	}
	serveMetrics()
	e, err := newEngine(ctx)
	if err != nil {
		return err
	}
	defer e.Close()
	buf, release, err := benchBuffer(e)
	if err != nil {
		return err
	}
	defer release()
	switch *mode {
	case "target":
		return target(ctx, e)
	case "initiator":
		return initiator(ctx, e, buf)
	}
	return fmt.Errorf("unknown mode %q", *mode)
}

func target(ctx context.Context, e *engine.Engine) error {
	go echoNotifications(ctx, e) // --operation=notify initiators ping
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
	if isFlagSet("duration") {
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

// point is one run of a sweep.
type point struct {
	block          uint64
	batch, threads int
}

// parseList parses a comma-separated list of positive integers (sizes may
// end in K, M or G: binary units).
func parseList(name, s string) ([]uint64, error) {
	var out []uint64
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		mul := uint64(1)
		switch {
		case strings.HasSuffix(f, "K"), strings.HasSuffix(f, "k"):
			mul, f = 1<<10, f[:len(f)-1]
		case strings.HasSuffix(f, "M"), strings.HasSuffix(f, "m"):
			mul, f = 1<<20, f[:len(f)-1]
		case strings.HasSuffix(f, "G"), strings.HasSuffix(f, "g"):
			mul, f = 1<<30, f[:len(f)-1]
		}
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("--%s: %q is not a positive integer", name, f)
		}
		out = append(out, n*mul)
	}
	return out, nil
}

// sweep returns every (block, batch, threads) combination of the flags.
func sweep() ([]point, error) {
	blocks, err := parseList("block_size", *blockSizes)
	if err != nil {
		return nil, err
	}
	batches, err := parseList("batch_size", *batchSizes)
	if err != nil {
		return nil, err
	}
	threads, err := parseList("threads", *threadCounts)
	if err != nil {
		return nil, err
	}
	var ps []point
	for _, th := range threads {
		for _, bt := range batches {
			for _, bl := range blocks {
				ps = append(ps, point{block: bl, batch: int(bt), threads: int(th)})
			}
		}
	}
	return ps, nil
}

func initiator(ctx context.Context, e *engine.Engine, buf region) error {
	if *segmentID == "" {
		return fmt.Errorf("--segment_id is required in initiator mode")
	}
	var op engine.OpCode
	switch *operation {
	case "read":
		op = engine.OpRead
	case "write":
		op = engine.OpWrite
	case "notify":
		return notifyInitiator(ctx, e)
	default:
		return fmt.Errorf("unsupported operation %q: must be read, write or notify", *operation)
	}
	points, err := sweep()
	if err != nil {
		return err
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
	var results []Result
	failed := false
	for i, pt := range points {
		if ctx.Err() != nil {
			break
		}
		span := pt.block * uint64(pt.batch) * uint64(pt.threads)
		if span > buf.n || span > remote.Length {
			err := fmt.Errorf("block_size*batch_size*threads = %d*%d*%d exceeds the buffer (local %d, remote %d)",
				pt.block, pt.batch, pt.threads, buf.n, remote.Length)
			if len(points) == 1 {
				return err
			}
			fmt.Fprintln(os.Stderr, "kvferry-bench: skipped:", err)
			continue
		}
		label := fmt.Sprintf("%s %s x %d x %d", *operation, sizeName(pt.block), pt.batch, pt.threads)
		if len(points) > 1 {
			label = fmt.Sprintf("[%d/%d] %s", i+1, len(points), label)
		}
		r := runPoint(ctx, e, buf, seg, remote.Addr, op, pt, label)
		results = append(results, r)
		if *jsonOut {
			if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
				return err
			}
		} else {
			fmt.Printf("Test completed: duration %.2f, batch count %d, throughput %s, %.0f ops/s, avg batch latency %.1f us (p50 %.0f, p99 %.0f), transport %s%s\n",
				r.Duration, r.Batches, formatRate(r.GBps*1e9), r.OpsPerSec, r.AvgBatchUs, r.P50BatchUs, r.P99BatchUs, r.Transport, sweepTag(len(points), r))
		}
		failed = failed || r.Failed > 0
	}
	if *plotOut != "" && len(results) > 0 {
		if err := plotResults(*plotOut, results); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "plot written to %s\n", *plotOut)
	}
	if failed {
		return fmt.Errorf("some batches failed")
	}
	return nil
}

func sweepTag(n int, r Result) string {
	if n == 1 {
		return ""
	}
	return fmt.Sprintf(" [block %d, batch %d, threads %d]", r.BlockSize, r.BatchSize, r.Threads)
}

// pollUntilDone polls every task of batch id until each is terminal, as a
// Mooncake caller's getTransferStatus loop does (--poll_status), bounded
// by ctx and the transfer timeout.
func pollUntilDone(ctx context.Context, e *engine.Engine, id engine.BatchID, n int) (engine.BatchStatus, error) {
	end := time.Now().Add(e.Config().TransferTimeout)
	bs := engine.BatchStatus{State: engine.StateCompleted, Tasks: n}
	for i := 0; i < n; i++ {
		for {
			st, err := e.PollTaskStatus(id, i)
			if err != nil {
				return bs, err
			}
			if st.State.Terminal() {
				if st.State != engine.StateCompleted {
					bs.State = st.State
				}
				break
			}
			if ctx.Err() != nil || time.Now().After(end) {
				return bs, fmt.Errorf("batch %d task %d: %w", id, i, engine.ErrTimeout)
			}
		}
	}
	return bs, nil
}

// runPoint runs one point of the sweep for --duration seconds.
func runPoint(ctx context.Context, e *engine.Engine, buf region, seg engine.SegmentID, remoteAddr uint64, op engine.OpCode, pt point, label string) Result {
	var running atomic.Bool
	running.Store(true)
	var batches, failed, latNanos atomic.Uint64
	lat := make([]*samples, pt.threads)
	var wg sync.WaitGroup
	start, cpu0 := time.Now(), cpuTime()
	for t := 0; t < pt.threads; t++ {
		wg.Add(1)
		lat[t] = &samples{}
		go func(t int) {
			defer wg.Done()
			wait := e.Wait
			if *lockedWaits {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				wait = e.WaitLocked
			}
			reqs := make([]engine.Request, pt.batch)
			for i := range reqs {
				off := pt.block * uint64(i*pt.threads+t)
				reqs[i] = engine.Request{Op: op, Source: buf.addr + uintptr(off), Target: seg, TargetOffset: remoteAddr + off, Length: pt.block}
			}
			for running.Load() {
				t0 := time.Now()
				id, err := e.AllocateBatch(len(reqs))
				if err != nil {
					failed.Add(1)
					return
				}
				if *awaitBatches {
					_ = e.Await(id) // the batch was just allocated: it exists
				}
				if err := e.Submit(id, reqs); err != nil {
					failed.Add(1)
				}
				var bs engine.BatchStatus
				if *pollStatus {
					bs, err = pollUntilDone(ctx, e, id, len(reqs))
				} else {
					bs, err = wait(ctx, id)
				}
				if err != nil || bs.State != engine.StateCompleted {
					failed.Add(1)
					if err != nil {
						_ = e.Cancel(context.Background(), id)
					}
				}
				_ = e.FreeBatch(id)
				d := time.Since(t0)
				lat[t].add(d)
				latNanos.Add(uint64(d))
				batches.Add(1)
			}
		}(t)
	}
	total := time.Duration(*duration) * time.Second
	perBatch := uint64(pt.batch) * pt.block
	var prog *progress
	if !*quiet {
		prog = startProgress(label, func(el time.Duration) float64 { return el.Seconds() / total.Seconds() },
			func() uint64 { return batches.Load() * perBatch })
	}
	select {
	case <-time.After(total):
	case <-ctx.Done():
	}
	running.Store(false)
	wg.Wait()
	prog.stop()
	elapsed, cpu := time.Since(start).Seconds(), cpuTime()-cpu0
	n := batches.Load()
	bytes := n * perBatch
	r := Result{Operation: *operation, BlockSize: pt.block, BatchSize: pt.batch, Threads: pt.threads, Duration: elapsed,
		Batches: n, Bytes: bytes, GBps: float64(bytes) / elapsed / 1e9, OpsPerSec: float64(n) * float64(pt.batch) / elapsed,
		Transport: e.ChooseTransport(seg), Failed: failed.Load(), Awaited: *awaitBatches, Locked: *lockedWaits}
	if n > 0 {
		r.CPUPerOpUs = float64(cpu) / 1e3 / (float64(n) * float64(pt.batch))
		r.AvgBatchUs = float64(latNanos.Load()) / float64(n) / 1e3
		r.P50BatchUs, r.P99BatchUs = percentiles(lat)
		if *samplesFile != "" {
			if err := writeSamples(*samplesFile, lat); err != nil {
				fmt.Fprintln(os.Stderr, "kvferry-bench:", err)
			}
		}
	}
	return r
}

func sizeName(n uint64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
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
	blocks, err := parseList("block_size", *blockSizes)
	if err != nil {
		return err
	}
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
	for _, bs := range blocks {
		if bs > *bufferSize {
			return fmt.Errorf("block_size must be in 1..buffer_size")
		}
		n := *bufferSize / bs
		start := time.Now()
		end := start.Add(time.Duration(*duration) * time.Second)
		var count uint64
		for time.Now().Before(end) && ctx.Err() == nil {
			for i := uint64(0); i < n; i++ {
				cmem.Copy(dst.Addr()+uintptr(i*bs), src.Addr()+uintptr(i*bs), bs)
			}
			count += n
		}
		elapsed := time.Since(start).Seconds()
		bytes := count * bs
		r := Result{Operation: "memcpy", BlockSize: bs, BatchSize: 1, Threads: 1, Duration: elapsed, Batches: count, Bytes: bytes,
			GBps: float64(bytes) / elapsed / 1e9, OpsPerSec: float64(count) / elapsed, Transport: "memcpy"}
		if *jsonOut {
			if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
				return err
			}
			continue
		}
		fmt.Printf("memcpy: block %d, %s\n", bs, formatRate(float64(bytes)/elapsed))
	}
	return nil
}
