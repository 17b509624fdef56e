// Command gpubench measures kvferry's GPU paths against baselines taken in
// the same run (bench/gpu.sh runs it and prints the table):
//
//   - engine D2D in one process vs a plain cuMemcpyAsync on one stream;
//   - D2D to another process through CUDA IPC (nvlink) vs the same copy
//     done in-process;
//   - device memory over TCP loopback vs host memory over TCP loopback;
//   - H2D and D2H through the engine vs cuMemcpy;
//   - a batch of 128 x 64 KiB D2D requests: the engine's overhead per
//     request over one cuMemcpyAsync per block.
//
// It uses the driver KVFERRY_CUDA_LIB names (default libcuda.so.1), or,
// with KVFERRY_GPU_RUNTIME=hip, the HIP runtime KVFERRY_HIP_LIB names
// (default libamdhip64.so): the same rows, with HIP's calls as baselines.
// It re-executes itself as the peer process (-role peer), which inherits
// the environment. Output: one JSON object per row on stdout.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/gpu"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/internal/hostenv"
)

var (
	role     = flag.String("role", "", "internal: peer")
	sizesArg = flag.String("sizes", "1048576,16777216,268435456", "block sizes in bytes")
	seconds  = flag.Float64("seconds", 2, "seconds per measurement")
	device   = flag.Int("device", 0, "GPU device")
)

// row is one line of the table.
type row struct {
	Test     string  `json:"test"`
	Bytes    uint64  `json:"bytes"`
	GBps     float64 `json:"gbps,omitempty"`
	Baseline float64 `json:"baseline_gbps,omitempty"`
	Ratio    float64 `json:"ratio,omitempty"`
	Target   float64 `json:"target,omitempty"`
	// For the batch row: microseconds per request above the baseline.
	OverheadUS float64 `json:"overhead_us,omitempty"`
	Note       string  `json:"note,omitempty"`
}

func main() {
	flag.Parse()
	if *role == "peer" {
		os.Exit(peer())
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "gpubench:", err)
		os.Exit(1)
	}
}

func newEngine(force string) (*engine.Engine, error) {
	cfg := stack.ConfigFromEnv(hostenv.Lookup)
	cfg.Engine.LocalServerName = "127.0.0.1"
	cfg.AutoDiscover = true
	if force != "" {
		cfg.Engine.ForceTransport = force
	}
	return stack.New(context.Background(), cfg)
}

// timeIt runs f until the time budget is used (at least 3 times after a
// warm-up) and returns the rate of bytes per call in GB/s.
func timeIt(bytes uint64, f func() error) (float64, error) {
	if err := f(); err != nil {
		return 0, err
	}
	n := 0
	start := time.Now()
	for n < 3 || time.Since(start).Seconds() < *seconds {
		if err := f(); err != nil {
			return 0, err
		}
		n++
	}
	return float64(bytes) * float64(n) / time.Since(start).Seconds() / 1e9, nil
}

func emit(r row) {
	if r.Baseline > 0 && r.GBps > 0 {
		r.Ratio = r.GBps / r.Baseline
	}
	b, _ := json.Marshal(r)
	fmt.Println(string(b))
}

func sizes() []uint64 {
	var out []uint64
	for _, s := range strings.Split(*sizesArg, ",") {
		var v uint64
		if _, err := fmt.Sscan(s, &v); err == nil && v > 0 {
			out = append(out, v)
		}
	}
	return out
}

func run() error {
	d, err := openAPI()
	if err != nil {
		return err
	}
	dev := *device
	desc, err := d.Describe(dev)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "gpubench: %s\n", desc)
	loc := location(d.Kind(), dev)
	max := uint64(8 << 20) // the batch row's 128 x 64 KiB at least
	for _, s := range sizes() {
		max = maxU(max, s)
	}
	rawCopy, rawClose, err := d.OneStream(dev)
	if err != nil {
		return err
	}
	defer rawClose()
	a, err := d.MemAlloc(dev, max)
	if err != nil {
		return err
	}
	b, err := d.MemAlloc(dev, max)
	if err != nil {
		return err
	}
	pinned, err := d.HostAlloc(max)
	if err != nil {
		return err
	}
	e, err := newEngine("")
	if err != nil {
		return err
	}
	defer e.Close()
	for _, p := range []struct {
		addr uintptr
		loc  string
	}{{uintptr(a), loc}, {uintptr(b), loc}, {pinned, "cpu:0"}} {
		if err := e.RegisterMemory(p.addr, max, p.loc, true); err != nil {
			return err
		}
	}
	ctx := context.Background()
	xfer := func(e *engine.Engine, op engine.OpCode, src uintptr, seg engine.SegmentID, dst, n uint64) func() error {
		req := []engine.Request{{Op: op, Source: src, Target: seg, TargetOffset: dst, Length: n}}
		return func() error { return e.Transfer(ctx, req) }
	}

	// 1. D2D in one process.
	for _, n := range sizes() {
		base, err := timeIt(n, func() error { return rawCopy([]gpu.Copy{{Dst: b, Src: a, N: n}}) })
		if err != nil {
			return err
		}
		got, err := timeIt(n, xfer(e, engine.OpWrite, uintptr(a), engine.LocalSegment, b, n))
		if err != nil {
			return err
		}
		emit(row{Test: "engine D2D in one process vs " + d.AsyncName(), Bytes: n, GBps: got, Baseline: base, Target: 0.9})
	}
	// 2. H2D and D2H through the engine vs cuMemcpy / hipMemcpy (pinned host memory).
	for _, n := range sizes() {
		base, err := timeIt(n, func() error { return d.MemcpySync(dev, a, uint64(pinned), n) })
		if err != nil {
			return err
		}
		got, err := timeIt(n, xfer(e, engine.OpWrite, pinned, engine.LocalSegment, a, n))
		if err != nil {
			return err
		}
		emit(row{Test: "engine H2D vs " + d.SyncName(), Bytes: n, GBps: got, Baseline: base, Target: 0.9})
		base, err = timeIt(n, func() error { return d.MemcpySync(dev, uint64(pinned), a, n) })
		if err != nil {
			return err
		}
		got, err = timeIt(n, xfer(e, engine.OpRead, pinned, engine.LocalSegment, a, n))
		if err != nil {
			return err
		}
		emit(row{Test: "engine D2H vs " + d.SyncName(), Bytes: n, GBps: got, Baseline: base, Target: 0.9})
	}
	// 3. A batch of 128 x 64 KiB D2D requests.
	{
		const blk, count = 64 << 10, 128
		ops := make([]gpu.Copy, count)
		reqs := make([]engine.Request, count)
		for i := range ops {
			off := uint64(i) * blk
			ops[i] = gpu.Copy{Dst: b + off, Src: a + off, N: blk}
			reqs[i] = engine.Request{Op: engine.OpWrite, Source: uintptr(a + off), Target: engine.LocalSegment, TargetOffset: b + off, Length: blk}
		}
		base, err := timeIt(blk*count, func() error { return rawCopy(ops) })
		if err != nil {
			return err
		}
		got, err := timeIt(blk*count, func() error { return e.Transfer(ctx, reqs) })
		if err != nil {
			return err
		}
		perReq := func(gbps float64) float64 { return float64(blk) / (gbps * 1e9) * 1e6 }
		emit(row{Test: "batch of 128 x 64 KiB D2D: engine overhead per request", Bytes: blk * count, GBps: got, Baseline: base,
			OverheadUS: perReq(got) - perReq(base), Target: 2, Note: "target: overhead_us <= 2"})
	}

	// 4. Another process: CUDA / HIP IPC, and TCP.
	pr, err := startPeer(max, dev)
	if err != nil {
		return err
	}
	defer pr.stop()
	seg, err := e.OpenSegment(ctx, pr.segment)
	if err != nil {
		return err
	}
	for _, n := range sizes() {
		base, err := timeIt(n, xfer(e, engine.OpWrite, uintptr(a), engine.LocalSegment, b, n))
		if err != nil {
			return err
		}
		before := e.Metrics().SlicesByTransport
		got, err := timeIt(n, xfer(e, engine.OpWrite, uintptr(a), seg, pr.dev, n))
		if err != nil {
			return err
		}
		emit(row{Test: "D2D to another process (" + d.IPCName() + ") vs in-process", Bytes: n, GBps: got, Baseline: base, Target: 0.9,
			Note: "transport " + used(before, e.Metrics().SlicesByTransport)})
	}
	et, err := newEngine("tcp")
	if err != nil {
		return err
	}
	defer et.Close()
	host, err := d.HostAlloc(max)
	if err != nil {
		return err
	}
	for _, p := range []struct {
		addr uintptr
		loc  string
	}{{uintptr(a), loc}, {host, "cpu:0"}} {
		if err := et.RegisterMemory(p.addr, max, p.loc, true); err != nil {
			return err
		}
	}
	tseg, err := et.OpenSegment(ctx, pr.segment)
	if err != nil {
		return err
	}
	for _, n := range sizes() {
		base, err := timeIt(n, xfer(et, engine.OpWrite, host, tseg, pr.host, n))
		if err != nil {
			return err
		}
		got, err := timeIt(n, xfer(et, engine.OpWrite, uintptr(a), tseg, pr.dev, n))
		if err != nil {
			return err
		}
		emit(row{Test: "device memory over TCP loopback vs host memory (WRITE)", Bytes: n, GBps: got, Baseline: base, Target: 0.8})
		base, err = timeIt(n, xfer(et, engine.OpRead, host, tseg, pr.host, n))
		if err != nil {
			return err
		}
		got, err = timeIt(n, xfer(et, engine.OpRead, uintptr(a), tseg, pr.dev, n))
		if err != nil {
			return err
		}
		emit(row{Test: "device memory over TCP loopback vs host memory (READ)", Bytes: n, GBps: got, Baseline: base, Target: 0.8})
	}
	return nil
}

// location is the registration location of device dev's memory: Mooncake's
// "cuda:N", and "hip:N" on HIP.
func location(k gpu.Kind, dev int) string {
	if k == gpu.HIP {
		return fmt.Sprintf("hip:%d", dev)
	}
	return fmt.Sprintf("cuda:%d", dev)
}

// used names the transport whose slice count grew.
func used(before, after map[string]uint64) string {
	for t, n := range after {
		if n > before[t] {
			return t
		}
	}
	return "?"
}

func maxU(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}

type peerProc struct {
	cmd       *exec.Cmd
	in        *os.File
	segment   string
	dev, host uint64
}

func startPeer(size uint64, dev int) (*peerProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "-role", "peer", "-sizes", fmt.Sprint(size), "-device", fmt.Sprint(dev))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdin = r
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	r.Close()
	p := &peerProc{cmd: cmd, in: w}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		p.stop()
		return nil, fmt.Errorf("peer: %w", err)
	}
	if _, err := fmt.Sscan(line, &p.segment, &p.dev, &p.host); err != nil {
		p.stop()
		return nil, fmt.Errorf("peer said %q", line)
	}
	return p, nil
}

func (p *peerProc) stop() {
	p.in.Close()
	_ = p.cmd.Wait()
}

// peer registers device and host memory and prints "segment dev host"
// until its stdin closes.
func peer() int {
	d, err := openAPI()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	size := sizes()[0]
	p, err := d.MemAlloc(*device, size)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	h, err := d.HostAlloc(size)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	e, err := newEngine("")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer e.Close()
	if err := e.RegisterMemory(uintptr(p), size, location(d.Kind(), *device), true); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := e.RegisterMemory(h, size, "cpu:0", true); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("%s %d %d\n", e.SegmentName(), p, h)
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	return 0
}
