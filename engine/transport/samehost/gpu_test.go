package samehost_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/gpu"
	"github.com/kvferry/kvferry/engine/gpu/gputest"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/internal/cuda"
	"github.com/kvferry/kvferry/internal/hip"
	"github.com/kvferry/kvferry/internal/hostenv"
	"github.com/kvferry/kvferry/internal/testutil/fakecuda"
)

// gpuBufs are the buffers of a GPU test process: pageable host memory,
// cudaMalloc/hipMalloc memory (legacy IPC) on device 0 and VMM memory
// (cuMemCreate/hipMemCreate, POSIX-fd export) on device 1 (0 on a machine
// with one GPU), each gpuBufBytes.
type gpuBufs struct {
	host     *cmem.Map
	dev, vmm uint64
	vmmSize  uint64
}

const gpuBufBytes = 8 << 20

// gpuStack returns the stack configuration of a GPU test process on the
// GPU runtime g names.
func gpuStack(g gpu.Config) stack.Config {
	cfg := stack.ConfigFromEnv(hostenv.Lookup) // KVFERRY_TRANSPORT and the GPU runtime in children
	cfg.Engine.LocalServerName = "127.0.0.1"
	cfg.Engine.TransferTimeout = 5 * time.Second
	cfg.AutoDiscover = true
	cfg.GPU.Library, cfg.GPU.HIPLibrary, cfg.GPU.Runtime = g.Library, g.HIPLibrary, g.Runtime
	if conn := os.Getenv(metadataEnv); conn != "" {
		cfg.Engine.MetadataConn = conn
	}
	return cfg
}

// With tb set, the memory goes back when the test ends (after its engine
// closed): every test of the process shares the fake's small
// device arena. A child passes nil (its exit frees everything).
func allocGPU(tb testing.TB, rt gputest.Runtime, e *engine.Engine, d gputest.Allocator) (gpuBufs, error) {
	var b gpuBufs
	if tb != nil {
		tb.Cleanup(func() { // what was allocated, even on failure
			if b.host != nil {
				b.host.Close()
			}
			b.freeDevice(d)
		})
	}
	var err error
	if b.host, err = cmem.MapAnon(gpuBufBytes); err != nil {
		return b, err
	}
	if b.dev, err = d.MemAlloc(0, gpuBufBytes); err != nil {
		return b, err
	}
	second := fakecuda.SecondOf(deviceCount(d))
	if b.vmm, b.vmmSize, err = d.(vmmAllocator).VMMAlloc(second, gpuBufBytes); err != nil {
		return b, err
	}
	if err := e.RegisterMemory(b.host.Addr(), gpuBufBytes, "cpu:0", true); err != nil {
		return b, err
	}
	if err := e.RegisterMemory(uintptr(b.dev), gpuBufBytes, rt.Location(0), true); err != nil {
		return b, err
	}
	return b, e.RegisterMemory(uintptr(b.vmm), gpuBufBytes, rt.Location(second), true)
}

// gpuOwner starts an engine with cfg and gives it allocGPU's buffers on
// runtime rt (configuration g); all of it goes when the test ends, the
// engine first.
func gpuOwner(t *testing.T, rt gputest.Runtime, g gpu.Config, cfg stack.Config) (*engine.Engine, gputest.Allocator, gpuBufs) {
	t.Helper()
	e, err := stack.New(context.Background(), cfg)
	assert.NilError(t, err)
	d := rt.Allocator(t, g)
	own, err := allocGPU(t, rt, e, d)
	t.Cleanup(func() { e.Close() }) // before allocGPU's cleanup, which frees the memory
	assert.NilError(t, err)
	return e, d, own
}

// freeDevice frees allocGPU's device memory.
func (b gpuBufs) freeDevice(d gputest.Allocator) {
	if b.dev != 0 {
		_ = d.MemFree(0, b.dev)
	}
	if b.vmm == 0 {
		return
	}
	switch v := d.(type) {
	case *cuda.Driver:
		_ = v.VMMFree(b.vmm)
	case *hip.Runtime:
		_ = v.VMMFree(b.vmm, b.vmmSize)
	}
}

// vmmAllocator allocates shareable VMM memory (both bindings).
type vmmAllocator interface {
	VMMAlloc(dev int, n uint64) (p, size uint64, err error)
}

var (
	_ vmmAllocator = (*cuda.Driver)(nil)
	_ vmmAllocator = (*hip.Runtime)(nil)
)

// deviceCount returns the device count of either binding.
func deviceCount(d gputest.Allocator) int {
	return d.(interface{ DeviceCount() int }).DeviceCount()
}

func (b gpuBufs) addr(kind string) uint64 {
	switch kind {
	case "dev":
		return b.dev
	case "vmm":
		return b.vmm
	}
	return uint64(b.host.Addr())
}

// fill and check put the pattern into a buffer of any kind (through the
// driver for device memory) and compare against it.
func (b gpuBufs) fill(d gputest.Allocator, kind string, n, seed uint64) error {
	copy(b.host.Bytes()[:n], patternAt(seed, n))
	if kind == "host" {
		return nil
	}
	return d.MemcpySync(0, b.addr(kind), uint64(b.host.Addr()), n)
}

func (b gpuBufs) check(d gputest.Allocator, kind string, n, seed uint64) (bool, error) {
	if kind != "host" {
		clear(b.host.Bytes()[:n])
		if err := d.MemcpySync(0, uint64(b.host.Addr()), b.addr(kind), n); err != nil {
			return false, err
		}
	}
	return bytes.Equal(b.host.Bytes()[:n], patternAt(seed, n)), nil
}

// gpuChildEngineOn starts a GPU child's engine on runtime rt's library
// lib and loads that runtime.
func gpuChildEngineOn(rt gputest.Runtime, lib string) (*engine.Engine, gputest.Allocator, error) {
	g := rt.ConfigFor(lib)
	e, err := stack.New(context.Background(), gpuStack(g))
	if err != nil {
		return nil, nil, fmt.Errorf("engine: %w", err)
	}
	var d gputest.Allocator
	if rt.Name == "hip" {
		d, err = gpu.Shared(g).HIP()
	} else {
		d, err = gpu.Shared(g).Driver()
	}
	if err != nil {
		e.Close()
		return nil, nil, err
	}
	return e, d, nil
}

// gpuChildMain is a GPU test peer:
//
//	gpu-initiator: "xfer w|r local-kind remote-addr len seed", "ipc",
//	               "rate pageable pinned device" (fake copy speeds, MB/s),
//	               "paths" (the engine's measured path choices), "quit"
//	gpu-owner:     prints its segment and buffers, then "quit"
func gpuChildMain(role string) int {
	switch role {
	case "gpu-chunk-owner":
		return chunkOwnerMain()
	case "gpu-mooncake-owner":
		return mooncakeOwnerMain()
	case "gpu-mooncake-hip-mapper":
		return mooncakeHIPMapperMain()
	}
	rt, lib := gputest.FromEnv(os.LookupEnv)
	e, d, err := gpuChildEngineOn(rt, lib)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer e.Close()
	bufs, err := allocGPU(nil, rt, e, d)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctl := fakecuda.Open(lib)
	out := bufio.NewWriter(os.Stdout)
	reply := func(format string, args ...any) {
		fmt.Fprintf(out, format+"\n", args...)
		out.Flush()
	}
	if role == "gpu-owner" {
		reply("ready %s %d %d %d", e.SegmentName(), bufs.host.Addr(), bufs.dev, bufs.vmm)
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		return 0
	}
	seg, err := e.OpenSegment(context.Background(), os.Getenv(ownerEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 1
	}
	reply("ready")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 6 && f[0] == "xfer":
			kind, addr, n, seed := f[2], atou(f[3]), atou(f[4]), atou(f[5])
			op := engine.OpWrite
			if f[1] == "r" {
				op = engine.OpRead
			}
			if op == engine.OpWrite {
				if err := bufs.fill(d, kind, n, seed); err != nil {
					reply("err other %s", oneLine(err))
					continue
				}
			}
			before := e.Metrics().SlicesByTransport
			err := e.Transfer(context.Background(), []engine.Request{{Op: op, Source: uintptr(bufs.addr(kind)), Target: seg, TargetOffset: addr, Length: n}})
			if err != nil {
				reply("err %s %s", errClass(err), oneLine(err))
				continue
			}
			used := "?"
			for tr, k := range e.Metrics().SlicesByTransport {
				if k > before[tr] {
					used = tr
				}
			}
			if op == engine.OpRead {
				if ok, err := bufs.check(d, kind, n, seed); err != nil || !ok {
					reply("bad %v", err)
					continue
				}
			}
			reply("ok %s", used)
		case len(f) == 1 && f[0] == "ipc":
			reply("ipc %d %d", ctl.Count(fakecuda.KindIPCOpen), ctl.Count(fakecuda.KindVMMMapping))
		case len(f) == 4 && f[0] == "rate":
			ctl.SetCopyMBps(int(atou(f[1])), int(atou(f[2])), int(atou(f[3])))
			reply("ok")
		case len(f) == 1 && f[0] == "paths":
			reply("paths %s", pathChoices(e))
		case len(f) == 1 && f[0] == "quit":
			return 0
		}
	}
	return 0
}

// TestGPUTwoProcesses: this process owns host, cudaMalloc and VMM memory;
// a child moves bytes between its own host and device memory and ours,
// with the selector (nvlink for our device memory, shm where its device
// memory meets our host memory, cma host to host) and with each transport
// forced. Every byte is checked, on our side through the fake's own view
// of device memory. It runs on each GPU runtime.
func TestGPUTwoProcesses(t *testing.T) {
	for _, rt := range gputest.Runtimes() {
		t.Run(rt.Name, func(t *testing.T) { testGPUTwoProcesses(t, rt) })
	}
}

func testGPUTwoProcesses(t *testing.T, rt gputest.Runtime) {
	g, lib := rt.Config(t)
	fc := fakecuda.Open(lib)
	fc.Reset()
	e, d, own := gpuOwner(t, rt, g, gpuStack(g))
	ours := func(kind string, n uint64) []byte {
		if kind == "host" {
			return own.host.Bytes()[:n]
		}
		return fc.Bytes(own.addr(kind), int(n))
	}
	setOurs := func(kind string, off uint64, b []byte) {
		if kind == "host" {
			copy(own.host.Bytes()[off:], b)
			return
		}
		fc.Write(own.addr(kind)+off, b)
	}
	for _, tc := range []struct {
		name, env string
		want      map[string]string // "local-kind>remote-kind" -> transport
	}{
		// Host memory against our device memory is measured (mapping or
		// staging, TestGPUHostPathMeasured); pinned here to each.
		{"auto", "KVFERRY_GPU_HOST_PATH=map", map[string]string{"host>dev": "nvlink", "dev>vmm": "nvlink", "vmm>host": "shm", "host>host": "cma"}},
		{"stage", "KVFERRY_GPU_HOST_PATH=stage", map[string]string{"host>dev": "shm", "host>vmm": "shm", "dev>vmm": "nvlink"}},
		{"shm", "KVFERRY_TRANSPORT=shm", map[string]string{"host>dev": "shm", "dev>vmm": "shm", "vmm>host": "shm", "dev>dev": "shm"}},
		{"tcp", "KVFERRY_TRANSPORT=tcp", map[string]string{"host>vmm": "tcp", "dev>dev": "tcp"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := append([]string{ownerEnv + "=" + e.SegmentName()}, rt.Env(lib)...)
			if tc.env != "" {
				env = append(env, tc.env)
			}
			c := startChild(t, childOpts{role: "gpu-initiator", env: env})
			seed := uint64(1)
			for pair, want := range tc.want {
				lk, rk, _ := strings.Cut(pair, ">")
				for _, n := range []uint64{4096, 1<<20 + 3, 5 << 20} {
					seed++
					off := uint64(17 * seed % 4096)
					// WRITE into our memory.
					setOurs(rk, 0, make([]byte, n+off))
					assert.Equal(t, c.do("xfer w %s %d %d %d", lk, own.addr(rk)+off, n, seed), "ok "+want, "%s write %d", pair, n)
					assert.Assert(t, bytes.Equal(ours(rk, n+off)[off:], patternAt(seed, n)), "%s write %d: bytes differ", pair, n)
					// READ from it.
					seed++
					setOurs(rk, off, patternAt(seed, n))
					assert.Equal(t, c.do("xfer r %s %d %d %d", lk, own.addr(rk)+off, n, seed), "ok "+want, "%s read %d", pair, n)
				}
			}
			// Outside our registered device memory: refused.
			r := c.do("xfer w dev %d %d 1", own.dev+gpuBufBytes-4096, 8192)
			assert.Assert(t, strings.HasPrefix(r, "err"), "%s", r)
			if tc.name != "auto" {
				return
			}
			// The child mapped our cudaMalloc/hipMalloc allocation and our
			// VMM memory (imported from the fd we exported); once we
			// unregister them, its mappings close (the fake counts them:
			// its own VMM buffer and ours) and requests to them are refused.
			mapped, after := "ipc 1 2", "ipc 0 1"
			if fc.Fake() {
				assert.Equal(t, c.do("ipc"), mapped)
			}
			assert.NilError(t, e.UnregisterMemory(uintptr(own.dev)))
			assert.NilError(t, e.UnregisterMemory(uintptr(own.vmm)))
			r = c.do("xfer w dev %d %d 1", own.dev, 4096)
			assert.Assert(t, strings.HasPrefix(r, "err"), "%s", r)
			r = c.do("xfer w host %d %d 1", own.vmm, 4096)
			assert.Assert(t, strings.HasPrefix(r, "err"), "%s", r)
			if fc.Fake() {
				assert.Equal(t, c.do("ipc"), after)
			}
			assert.NilError(t, e.RegisterMemory(uintptr(own.dev), gpuBufBytes, rt.Location(0), true))
			assert.NilError(t, e.RegisterMemory(uintptr(own.vmm), gpuBufBytes, "*", true))
			// Device memory registered after the child cached our
			// descriptor: its request refreshes the descriptor before
			// choosing a transport, so the memory is device memory (nvlink),
			// not the host memory an unknown range would be taken for.
			fresh, err := d.MemAlloc(0, 1<<20)
			assert.NilError(t, err)
			assert.NilError(t, e.RegisterMemory(uintptr(fresh), 1<<20, rt.Location(0), true))
			seed++
			assert.Equal(t, c.do("xfer w dev %d %d %d", fresh, 4096, seed), "ok nvlink")
			assert.Assert(t, bytes.Equal(fc.Bytes(fresh, 4096), patternAt(seed, 4096)))
			assert.NilError(t, e.UnregisterMemory(uintptr(fresh)))
			assert.NilError(t, d.MemFree(0, fresh))
		})
	}
}

// TestGPUOwnerKilled: the owner of device memory dies while we copy into
// it through CUDA IPC: the batch fails within the deadlines, and our
// mappings of its memory close. It runs on each GPU runtime.
func TestGPUOwnerKilled(t *testing.T) {
	fakecuda.FakeOnly(t, "device copies slowed down while the owner is killed, and the fake's count of open mappings")
	for _, rt := range gputest.Runtimes() {
		t.Run(rt.Name, func(t *testing.T) { testGPUOwnerKilled(t, rt) })
	}
}

func testGPUOwnerKilled(t *testing.T, rt gputest.Runtime) {
	g, lib := rt.Config(t)
	fc := fakecuda.Open(lib)
	fc.Reset()
	defer fc.Reset()
	c := startChild(t, childOpts{role: "gpu-owner", env: rt.Env(lib)})
	segName, dev, vmm := c.ready[0], atou(c.ready[2]), atou(c.ready[3])
	e, _, own := gpuOwner(t, rt, g, gpuStack(g))
	vmmMaps := fc.Count(fakecuda.KindVMMMapping) // ours, before any import
	ctx := context.Background()
	seg, err := e.OpenSegment(ctx, segName)
	assert.NilError(t, err)
	reqs := []engine.Request{
		{Op: engine.OpWrite, Source: uintptr(own.dev), Target: seg, TargetOffset: dev, Length: gpuBufBytes},
		{Op: engine.OpWrite, Source: uintptr(own.vmm), Target: seg, TargetOffset: vmm, Length: gpuBufBytes},
	}
	assert.NilError(t, e.Transfer(ctx, reqs))
	// The owner's cudaMalloc/hipMalloc buffer is mapped by IPC, its VMM
	// buffer by fd.
	ipcs, imports := 1, 1
	assert.Equal(t, fc.Count(fakecuda.KindIPCOpen), ipcs)
	assert.Equal(t, fc.Count(fakecuda.KindVMMMapping), vmmMaps+imports)
	fc.SetCopyDelay(200000) // 200 ms per device copy
	id, err := e.AllocateBatch(len(reqs))
	assert.NilError(t, err)
	assert.NilError(t, e.Submit(id, reqs))
	time.Sleep(50 * time.Millisecond)
	c.kill()
	fc.SetCopyDelay(0)
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	bs, err := e.Wait(wctx, id)
	assert.NilError(t, err, "batch not terminal after the owner was killed")
	assert.Equal(t, bs.State, engine.StateFailed, "a batch in flight when the owner died must fail")
	assert.NilError(t, e.FreeBatch(id))
	start := time.Now()
	err = e.Transfer(ctx, reqs[:1])
	assert.Assert(t, err != nil)
	assert.Assert(t, time.Since(start) < 10*time.Second)
	// The session's death closed our mappings of the dead owner's memory.
	deadline := time.Now().Add(10 * time.Second)
	for (fc.Count(fakecuda.KindIPCOpen) != 0 || fc.Count(fakecuda.KindVMMMapping) != vmmMaps) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	assert.Equal(t, fc.Count(fakecuda.KindIPCOpen), 0)
	assert.Equal(t, fc.Count(fakecuda.KindVMMMapping), vmmMaps)
}
