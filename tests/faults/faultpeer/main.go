// Command faultpeer is the process the fault suite (tests/faults) runs in
// its network namespaces. It has two jobs:
//
//	faultpeer engine [flags]   a transfer engine (engine/stack, configured
//	                           from the environment by stack.ConfigFromEnv
//	                           as the library is) answering commands on stdin
//	faultpeer netem [flags]    the user-space network emulator of
//	                           tests/faults/netem on one NFQUEUE
//
// Engine commands (one per line; each answered by one JSON line with "ok"):
//
//	fill <seed>                         pattern over the whole buffer
//	sum <off> <len>                     CRC-32C of buffer[off:off+len]
//	open <segment>                      OpenSegment; "id", "ms"
//	xfer read|write <id> <remote> <off> <len> <nreq>
//	    one batch of nreq requests covering [off, off+len) of the buffer
//	    and [remote, remote+len) of the peer: Submit, Wait (the engine's
//	    transfer timeout), then the time until every task ended (polled);
//	    "state", "submit_ms", "wait_ms", "end_ms", "err"
//	notify <id> <msg>                   Notify; "ms", "err"
//	stats                               goroutines, fds, threads, rss, regions
//	unreg                               unregister the buffer; "ms"
//	rereg                               register it again
//	rdma <dev> up|down | rdma-delay <dev> <us> | rdma-fail <dev> <n> <status>
//	                                    fault injection of the fake verbs provider
//	quit
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/internal/cuda"
	"github.com/kvferry/kvferry/internal/hostenv"
	"github.com/kvferry/kvferry/tests/faults/netem"
	"github.com/kvferry/kvferry/tests/internal/child"
	"github.com/kvferry/kvferry/tests/rdma/fakeverbs"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: faultpeer engine|netem [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "engine":
		err = engineMain(os.Args[2:])
	case "netem":
		err = netemMain(os.Args[2:])
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		reply(map[string]any{"ok": false, "err": err.Error()})
		os.Exit(1)
	}
}

func reply(v map[string]any) {
	b, _ := json.Marshal(v)
	fmt.Println(string(b))
}

func netemMain(args []string) error {
	fs := flag.NewFlagSet("netem", flag.ExitOnError)
	num := fs.Uint("queue", 0, "NFQUEUE number")
	params := fs.String("params", "", "delay=..,jitter=..,loss=..,reorder=..,rate=..")
	seed := fs.Uint64("seed", 1, "random seed")
	_ = fs.Parse(args)
	p, err := netem.ParseParams(*params)
	if err != nil {
		return err
	}
	q, err := netem.Open(uint16(*num))
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	reply(map[string]any{"ok": true, "ready": true, "params": p.String()})
	st, err := netem.Run(ctx, q, p, *seed)
	reply(map[string]any{"ok": err == nil, "packets": st.Packets, "dropped": st.Dropped, "reordered": st.Reordered})
	return err
}

// peer is the engine process's state.
type peer struct {
	e     *engine.Engine
	addr  uintptr // buffer (host memory, or the device pointer of GPU memory)
	size  uint64
	gpu   *cuda.Driver
	host  uintptr // host staging of GPU memory for fill and sum
	loc   string
	verbs *fakeverbs.Control
}

func engineMain(args []string) error {
	fs := flag.NewFlagSet("engine", flag.ExitOnError)
	size := fs.Uint64("size", 64<<20, "buffer bytes")
	mem := fs.String("mem", "host", "buffer memory: host or gpu (the CUDA driver of KVFERRY_CUDA_LIB)")
	name := fs.String("name", "127.0.0.1", "local server name (the P2P host)")
	conn := fs.String("metadata", "", "metadata connection string (default P2PHANDSHAKE)")
	protocol := fs.String("protocol", "", "transport to install besides the discovered ones (Mooncake's protocol argument: efa)")
	_ = fs.Parse(args)

	cfg := stack.ConfigFromEnv(hostenv.Lookup)
	cfg.Engine.LocalServerName = *name
	cfg.Engine.MetadataConn = *conn
	cfg.AutoDiscover = true
	cfg.Protocol = *protocol
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	e, err := stack.New(ctx, cfg)
	cancel()
	if err != nil {
		return err
	}
	p := &peer{e: e, size: *size, loc: "cpu:0"}
	if lib, ok := hostenv.Getenv("KVFERRY_IBVERBS_LIB"); ok && lib != "" {
		if c, err := fakeverbs.Open(lib); err == nil {
			p.verbs = c
		}
	}
	switch *mem {
	case "host":
		if p.addr, err = mmapAnon(*size); err != nil {
			return err
		}
	case "gpu":
		lib, _ := hostenv.Getenv("KVFERRY_CUDA_LIB")
		d, err := cuda.Load(lib)
		if err != nil {
			return err
		}
		dp, err := d.MemAlloc(0, *size)
		if err != nil {
			return err
		}
		p.gpu, p.addr, p.loc = d, uintptr(dp), "cuda:0"
		if p.host, err = mmapAnon(*size); err != nil {
			return err
		}
	default:
		return fmt.Errorf("-mem %q: host or gpu", *mem)
	}
	if err := e.RegisterMemory(p.addr, p.size, p.loc, true); err != nil {
		return err
	}
	reply(map[string]any{"ok": true, "segment": e.SegmentName(), "addr": uint64(p.addr), "pid": os.Getpid(),
		"transports": e.Transports()})
	child.Serve(os.Stdin, func(f []string) { reply(p.do(f)) })
	return e.Close()
}

func num(f []string, i int) uint64 {
	if i >= len(f) {
		return 0
	}
	n, _ := strconv.ParseUint(f[i], 10, 64)
	return n
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// mmapAnon maps n bytes of anonymous memory outside the Go heap.
func mmapAnon(n uint64) (uintptr, error) {
	a, _, errno := unix.Syscall6(unix.SYS_MMAP, 0, uintptr(n), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE, ^uintptr(0), 0)
	if errno != 0 {
		return 0, fmt.Errorf("mmap %d: %w", n, errno)
	}
	return a, nil
}

// bytes returns the buffer as the CPU sees it (the host staging copy of
// GPU memory).
func (p *peer) bytes() []byte {
	if p.gpu != nil {
		return cmem.Bytes(p.host, p.size)
	}
	return cmem.Bytes(p.addr, p.size)
}

func (p *peer) do(f []string) map[string]any {
	switch f[0] {
	case "fill":
		b := p.bytes()
		r := rand.New(rand.NewPCG(num(f, 1), 7))
		for i := 0; i+8 <= len(b); i += 8 {
			v := r.Uint64()
			for k := range 8 {
				b[i+k] = byte(v >> (8 * k))
			}
		}
		if p.gpu != nil {
			if err := p.gpu.MemcpySync(0, uint64(p.addr), uint64(p.host), p.size); err != nil {
				return map[string]any{"ok": false, "err": err.Error()}
			}
		}
		return map[string]any{"ok": true}
	case "sum":
		off, n := num(f, 1), num(f, 2)
		if off+n > p.size {
			return map[string]any{"ok": false, "err": "range"}
		}
		b := p.bytes()
		if p.gpu != nil {
			if err := p.gpu.MemcpySync(0, uint64(p.host), uint64(p.addr), p.size); err != nil {
				return map[string]any{"ok": false, "err": err.Error()}
			}
		}
		return map[string]any{"ok": true, "sum": crc32.Checksum(b[off:off+n], crc32.MakeTable(crc32.Castagnoli))}
	case "open":
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 2*p.e.Config().MetadataTimeout)
		id, err := p.e.OpenSegment(ctx, f[1])
		cancel()
		r := map[string]any{"ok": err == nil, "id": id, "ms": ms(time.Since(start)), "err": errText(err)}
		if err == nil {
			r["transport"] = p.e.ChooseTransport(id)
		}
		return r
	case "xfer":
		return p.xfer(f)
	case "notify":
		start := time.Now()
		err := p.e.Notify(context.Background(), engine.SegmentID(num(f, 1)), engine.Notification{Name: "faults", Msg: strings.Join(f[2:], " ")})
		return map[string]any{"ok": err == nil, "ms": ms(time.Since(start)), "err": errText(err)}
	case "stats":
		return p.stats()
	case "unreg":
		start := time.Now()
		err := p.e.UnregisterMemory(p.addr)
		return map[string]any{"ok": err == nil, "ms": ms(time.Since(start)), "err": errText(err)}
	case "rereg":
		err := p.e.RegisterMemory(p.addr, p.size, p.loc, true)
		return map[string]any{"ok": err == nil, "err": errText(err)}
	case "rdma", "rdma-delay", "rdma-fail", "rdma-after", "rdma-down-held":
		if p.verbs == nil {
			return map[string]any{"ok": false, "err": "no fake verbs provider loaded"}
		}
		var err error
		switch f[0] {
		case "rdma":
			err = p.verbs.SetPort(f[1], f[2] == "up")
		case "rdma-after": // rdma-after DEV up|down MS: later, while the next command runs
			dev, up := f[1], f[2] == "up"
			time.AfterFunc(time.Duration(num(f, 3))*time.Millisecond, func() { _ = p.verbs.SetPort(dev, up) })
		case "rdma-down-held": // rdma-down-held DEV PASS: DEV dies mid-batch, whatever the load
			err = p.downWhenHeld(f[1], int(num(f, 2)))
		case "rdma-delay":
			err = p.verbs.SetDelay(f[1], int(num(f, 2)))
		default:
			err = p.verbs.FailNext(f[1], int(num(f, 2)), int(num(f, 3)))
		}
		return map[string]any{"ok": err == nil, "err": errText(err)}
	}
	return map[string]any{"ok": false, "err": "unknown command " + f[0]}
}

// xfer runs one batch and reports how long each call took and when the
// last task ended.
func (p *peer) xfer(f []string) map[string]any {
	op := engine.OpWrite
	if f[1] == "read" {
		op = engine.OpRead
	}
	id := engine.SegmentID(num(f, 2))
	remote, off, n, nreq := num(f, 3), num(f, 4), num(f, 5), max(num(f, 6), 1)
	if off+n > p.size || n == 0 {
		return map[string]any{"ok": false, "err": "range"}
	}
	reqs := make([]engine.Request, 0, nreq)
	step := n / nreq
	for i := range nreq {
		l := step
		if i == nreq-1 {
			l = n - step*(nreq-1)
		}
		reqs = append(reqs, engine.Request{Op: op, Source: p.addr + uintptr(off+i*step), Target: id, TargetOffset: remote + i*step, Length: l})
	}
	res := map[string]any{}
	start := time.Now()
	b, err := p.e.AllocateBatch(len(reqs))
	if err != nil {
		return map[string]any{"ok": false, "err": err.Error()}
	}
	serr := p.e.Submit(b, reqs)
	res["submit_ms"] = ms(time.Since(start))
	bs, werr := p.e.Wait(context.Background(), b)
	res["wait_ms"] = ms(time.Since(start))
	// How long until every task is terminal (the transports' deadlines),
	// bounded so that a hang shows as such.
	limit := start.Add(3*p.e.Config().TransferTimeout + 10*time.Second)
	for !bs.State.Terminal() && time.Now().Before(limit) {
		time.Sleep(5 * time.Millisecond)
		bs, _ = p.e.BatchStatus(b)
	}
	res["end_ms"] = ms(time.Since(start))
	res["state"] = bs.State.String()
	res["bytes"] = bs.TransferredBytes
	e := serr
	if e == nil {
		e = bs.Err
	}
	if e == nil {
		e = werr
	}
	res["err"] = errText(e)
	if !bs.State.Terminal() {
		cstart := time.Now()
		cerr := p.e.Cancel(context.Background(), b)
		res["cancel_ms"] = ms(time.Since(cstart))
		res["cancel_err"] = errText(cerr)
	}
	if ferr := p.e.FreeBatch(b); ferr != nil {
		res["free_err"] = ferr.Error()
	}
	if serr != nil && bs.Tasks == 0 {
		// Refused as a whole (no transport, bad request): nothing ran.
		res["state"] = "refused"
	}
	res["ok"] = bs.State == engine.StateCompleted && bs.Tasks == len(reqs)
	return res
}

// downWhenHeld lets dev carry pass more work requests and holds the rest
// (fakeverbs Hold); once one waits at the hold (within 30 s), it takes
// dev's port down and releases them: they fail at a port that is down,
// so the batch running then loses the NIC mid-batch, never before its
// first slice nor after its last.
func (p *peer) downWhenHeld(dev string, pass int) error {
	if err := p.verbs.Hold(dev, pass); err != nil {
		return err
	}
	go func() {
		defer func() { _ = p.verbs.Release(dev) }()
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if n, err := p.verbs.Held(dev); err != nil || n > 0 {
				break
			}
		}
		_ = p.verbs.SetPort(dev, false)
	}()
	return nil
}

func (p *peer) stats() map[string]any {
	fds, _ := os.ReadDir("/proc/self/fd")
	var failovers uint64
	for _, n := range p.e.Metrics().Failovers {
		failovers += n
	}
	st := map[string]any{"ok": true, "goroutines": runtime.NumGoroutine(), "fds": len(fds), "regions": len(p.e.Regions()),
		"failovers": failovers}
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(l, ":")
			fv := strings.Fields(v)
			if len(fv) == 0 {
				continue
			}
			switch k {
			case "Threads":
				st["threads"], _ = strconv.Atoi(fv[0])
			case "VmRSS":
				kb, _ := strconv.Atoi(fv[0])
				st["rss_kb"] = kb
			}
		}
	}
	m := p.e.Metrics()
	st["tasks_failed"] = m.TasksFailed
	st["tasks_completed"] = m.TasksCompleted
	return st
}
