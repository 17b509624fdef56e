package rdma_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/gpu"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/engine/transport/rdma"
	"github.com/kvferry/kvferry/engine/transport/tcp"
	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/internal/testutil/fakecuda"
)

// ownerAddr is where an owner child maps its buffer, so that a restarted
// owner serves the same addresses (with new keys).
const ownerAddr = 0x5e0000000000

// childMain runs an owner process: an engine with only the RDMA transport
// on the NICs of RDMA_TEST_DEVICES (and TCP with RDMA_TEST_TCP=1), one
// registered buffer of RDMA_TEST_SIZE bytes at ownerAddr, the RPC port
// RDMA_TEST_PORT when set. With RDMA_TEST_GPU=<bytes> and RDMA_TEST_CUDA=<fake
// libcuda> it also registers that much device memory of (fake) GPU 0 at
// "cuda:0". It prints "ready <segment> <addr> [<gpu addr>]" and then answers
// commands on stdin:
//
//	fill <seed> <off> <n>   write a pattern        -> ok
//	check <seed> <off> <n>  compare with a pattern -> ok | bad
//	zero                    clear the buffer       -> ok
//	gfill, gcheck, gzero    the same on the GPU buffer
//	gpudirect               the rdma transport's GPUDirect status
//	put <seg> <addr> <seed> <n>  write a pattern from the buffer to segment seg at addr -> ok | err ...
//	unreg                   unregister the buffer  -> ok | err ...
//	stats                   NIC figures as JSON
func childMain(role string) int {
	switch role {
	case "owner":
	case "nolib":
		return noLibMain()
	default:
		return 2
	}
	size, _ := strconv.ParseUint(os.Getenv("RDMA_TEST_SIZE"), 10, 64)
	gsize, _ := strconv.ParseUint(os.Getenv("RDMA_TEST_GPU"), 10, 64)
	transports := []string{rdma.Name}
	if os.Getenv("RDMA_TEST_TCP") == "1" {
		transports = append(transports, tcp.Name)
	}
	cfg := stack.Config{
		Engine: engine.Config{LocalServerName: "127.0.0.1", Transports: transports, TransferTimeout: 5 * time.Second,
			Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))},
		RDMA: rdma.Config{Library: os.Getenv("KVFERRY_IBVERBS_LIB"), Devices: strings.Split(os.Getenv("RDMA_TEST_DEVICES"), ","), SysFS: testSys()},
		GPU:  gpu.Config{Library: os.Getenv("RDMA_TEST_CUDA")},
	}
	if p, err := strconv.Atoi(os.Getenv("RDMA_TEST_PORT")); err == nil {
		cfg.Engine.MinRPCPort, cfg.Engine.MaxRPCPort = p, p
	}
	e, err := stack.New(context.Background(), cfg)
	if err != nil {
		fmt.Println("err", err)
		return 1
	}
	defer e.Close()
	p, _, errno := unix.Syscall6(unix.SYS_MMAP, ownerAddr, uintptr(size), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED_NOREPLACE, ^uintptr(0), 0)
	if errno != 0 || p != ownerAddr {
		fmt.Println("err mmap", errno)
		return 1
	}
	buf := cmem.Bytes(p, size)
	if err := e.RegisterMemory(p, size, "cpu:0", true); err != nil {
		fmt.Println("err", err)
		return 1
	}
	var gctl *fakecuda.Control
	var gaddr uint64
	if gsize > 0 {
		d, err := stack.GPURuntime(cfg).Driver()
		if err != nil {
			fmt.Println("err", err)
			return 1
		}
		if gaddr, err = d.MemAlloc(0, gsize); err != nil {
			fmt.Println("err", err)
			return 1
		}
		gctl = fakecuda.Open(cfg.GPU.Library) // reads and writes the GPU buffer for checks
		if err := e.RegisterMemory(uintptr(gaddr), gsize, "cuda:0", true); err != nil {
			fmt.Println("err", err)
			return 1
		}
		fmt.Printf("ready %s %d %d\n", e.SegmentName(), p, gaddr)
	} else {
		fmt.Printf("ready %s %d\n", e.SegmentName(), p)
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) == 0 {
			continue
		}
		num := func(i int) uint64 { n, _ := strconv.ParseUint(f[i], 10, 64); return n }
		b := buf
		if strings.HasPrefix(f[0], "g") && f[0] != "gpudirect" {
			// The GPU buffer, through the driver.
			switch f[0] {
			case "gfill":
				gctl.Write(gaddr+num(2), patternAt(num(1), num(3)))
				fmt.Println("ok")
			case "gcheck":
				if bytes.Equal(gctl.Bytes(gaddr+num(2), int(num(3))), patternAt(num(1), num(3))) {
					fmt.Println("ok")
				} else {
					fmt.Println("bad")
				}
			case "gzero":
				gctl.Zero(gaddr, int(gsize))
				fmt.Println("ok")
			}
			continue
		}
		switch f[0] {
		case "fill":
			off, n := num(2), num(3)
			pattern(b[off:off+n], num(1))
			fmt.Println("ok")
		case "check":
			off, n := num(2), num(3)
			if bytes.Equal(b[off:off+n], patternAt(num(1), n)) {
				fmt.Println("ok")
			} else {
				fmt.Println("bad")
			}
		case "zero":
			clear(b)
			fmt.Println("ok")
		case "put":
			seg, err := e.OpenSegment(context.Background(), f[1])
			if err == nil {
				n := num(4)
				pattern(b[:n], num(3))
				err = e.Transfer(context.Background(), []engine.Request{{Op: engine.OpWrite, Source: p, Target: seg, TargetOffset: num(2), Length: n}})
			}
			if err != nil {
				fmt.Println("err", err)
			} else {
				fmt.Println("ok")
			}
		case "gpudirect":
			if t, ok := e.Transport(rdma.Name).(*rdma.Transport); ok {
				fmt.Println(t.GPUDirectStatus())
			} else {
				fmt.Println("no rdma")
			}
		case "nonzero":
			k := 0
			for _, b := range buf {
				if b != 0 {
					k++
				}
			}
			fmt.Println(k)
		case "unreg":
			if err := e.UnregisterMemory(uintptr(p)); err != nil {
				fmt.Println("err", err)
			} else {
				fmt.Println("ok")
			}
		case "stats":
			b, _ := json.Marshal(e.NICStats())
			fmt.Println(string(b))
		case "quit":
			return 0
		}
	}
	return 0
}

// owner is an owner child seen from the test.
type owner struct {
	t    testing.TB
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
	name string
	addr uint64
	gpu  uint64 // its GPU buffer (RDMA_TEST_GPU)
}

func startOwner(t testing.TB, devices []string, size uint64, port int, env ...string) *owner {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "RDMA_TEST_CHILD=owner", "RDMA_TEST_DEVICES="+strings.Join(devices, ","),
		fmt.Sprintf("RDMA_TEST_SIZE=%d", size))
	cmd.Env = append(cmd.Env, env...)
	if port > 0 {
		cmd.Env = append(cmd.Env, fmt.Sprintf("RDMA_TEST_PORT=%d", port))
	}
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	assert.NilError(t, err)
	out, err := cmd.StdoutPipe()
	assert.NilError(t, err)
	assert.NilError(t, cmd.Start())
	o := &owner{t: t, cmd: cmd, in: in, out: bufio.NewReader(out)}
	t.Cleanup(o.kill)
	line := o.read(30 * time.Second)
	f := strings.Fields(line)
	assert.Assert(t, (len(f) == 3 || len(f) == 4) && f[0] == "ready", "owner: %q", line)
	o.name = f[1]
	o.addr, _ = strconv.ParseUint(f[2], 10, 64)
	if len(f) == 4 {
		o.gpu, _ = strconv.ParseUint(f[3], 10, 64)
	}
	return o
}

func (o *owner) read(timeout time.Duration) string {
	o.t.Helper()
	ch := make(chan string, 1)
	go func() {
		s, _ := o.out.ReadString('\n')
		ch <- strings.TrimSpace(s)
	}()
	select {
	case s := <-ch:
		return s
	case <-time.After(timeout):
		o.t.Fatalf("owner did not answer within %s", timeout)
		return ""
	}
}

func (o *owner) do(format string, args ...any) string {
	o.t.Helper()
	fmt.Fprintf(o.in, format+"\n", args...)
	return o.read(60 * time.Second)
}

func (o *owner) stats() []engine.NICStat {
	var s []engine.NICStat
	assert.NilError(o.t, json.Unmarshal([]byte(o.do("stats")), &s))
	return s
}

func (o *owner) kill() {
	if o.cmd.Process != nil && o.cmd.ProcessState == nil {
		_ = o.cmd.Process.Kill()
		_ = o.cmd.Wait()
	}
}
