package rdma_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/engine/transport/rdma"
	"github.com/kvferry/kvferry/engine/transport/tcp"
	"github.com/kvferry/kvferry/internal/cuda"
	"github.com/kvferry/kvferry/internal/testutil/fakecuda"
	"github.com/kvferry/kvferry/tests/rdma/fakeverbs"
)

// gpuBuf is device memory of fake GPU 0 registered with an engine, and the
// fake's host view of it for checks.
type gpuBuf struct {
	addr uint64
	view []byte
}

func newGPUBuf(t *testing.T, e *engine.Engine, n uint64) gpuBuf {
	t.Helper()
	d, err := stack.GPURuntime(stack.Config{GPU: gpuConfig()}).Driver()
	assert.NilError(t, err)
	p, err := d.MemAlloc(0, n)
	assert.NilError(t, err)
	assert.NilError(t, e.RegisterMemory(uintptr(p), n, "cuda:0", true))
	t.Cleanup(func() {
		e.UnregisterMemory(uintptr(p))
		d.MemFree(0, p)
	})
	b := gpuBuf{addr: p}
	if !fakecuda.Hardware() {
		b.view = fakecuda.Open(cudaLib).Bytes(p, int(n))
	}
	return b
}

func deviceBytes(devs ...string) uint64 {
	var n uint64
	for _, d := range devs {
		n += fake.Bytes(d)
	}
	return n
}

// gpuTransfer moves n bytes between local and the owner's memory and
// reports what the fake NICs of this process carried.
func gpuTransfer(t *testing.T, a *engine.Engine, seg engine.SegmentID, op engine.OpCode, local uintptr, remote, n uint64) uint64 {
	t.Helper()
	before := deviceBytes(allDevices[:2]...)
	assert.NilError(t, a.Transfer(context.Background(), []engine.Request{{Op: op, Source: local, Target: seg, TargetOffset: remote, Length: n}}))
	return deviceBytes(allDevices[:2]...) - before
}

// TestGPUDirect moves (fake) GPU memory between two processes over two fake
// NICs in every combination with host memory, with byte checks on both
// sides: both register their GPU memory through dma-bufs from the CUDA
// driver (ibv_reg_dmabuf_mr), and every byte goes over the NICs. The
// owner's NICs take at most 3 MiB per memory region and the initiator's
// a little over 5 MiB, so both sides' buffers are several regions (one
// dma-buf, several offsets into it) and 100 KiB slices are cut at both
// sides' boundaries (an uncut one would fail the fake's MR bounds check).
func TestGPUDirect(t *testing.T) {
	needsFake(t, "the fake provider's MR size limit and the fake driver's dma-buf count (TestGPUDirectHardware runs on real NICs)")
	const size = 8 << 20
	o := startOwner(t, allDevices[:2], size, 0, "RDMA_TEST_GPU=8388608", "RDMA_TEST_CUDA="+cudaLib,
		"FAKEVERBS_MAX_MR_SIZE=3145728")
	assert.Assert(t, o.gpu != 0)
	exports := fakecuda.Open(cudaLib).Calls("cuMemGetHandleForAddressRange")
	cfg := rdmaConfig(allDevices[:2]...)
	cfg.MaxMRSize = 5<<20 + 12<<10
	cfg.SliceSize = 100 << 10 // slices straddle both sides' region boundaries
	a := newEngine(t, cfg, 20*time.Second)
	host := newBuf(t, a, size)
	dev := newGPUBuf(t, a, size)
	assert.Assert(t, fakecuda.Open(cudaLib).Calls("cuMemGetHandleForAddressRange") > exports, "no dma-buf exported")
	rt := a.Transport(rdma.Name).(*rdma.Transport)
	assert.Assert(t, strings.Contains(rt.GPUDirectStatus(), "dmabuf 1"), rt.GPUDirectStatus())
	assert.Assert(t, strings.Contains(o.do("gpudirect"), "dmabuf 1"))
	seg, err := a.OpenSegment(context.Background(), o.name)
	assert.NilError(t, err)
	d, err := a.SegmentDescriptor(seg)
	assert.NilError(t, err)
	assert.Equal(t, len(d.Buffers), 6, "two 8 MiB buffers in 3 MiB regions: %+v", d.Buffers)
	for i, b := range d.Buffers {
		assert.Equal(t, b.Continues, i%3 != 0, "buffer %d", i)
		assert.Equal(t, len(b.RKey), 2)
	}

	steps := []struct {
		name   string
		op     engine.OpCode
		local  []byte
		laddr  uintptr
		remote uint64
		rbuf   string // owner buffer: "" host, "g" GPU
	}{
		{"gpu to gpu", engine.OpWrite, dev.view, uintptr(dev.addr), o.gpu, "g"},
		{"host to gpu", engine.OpWrite, host.Bytes(), host.Addr(), o.gpu, "g"},
		{"gpu to host", engine.OpWrite, dev.view, uintptr(dev.addr), o.addr, ""},
		{"gpu from gpu", engine.OpRead, dev.view, uintptr(dev.addr), o.gpu, "g"},
		{"host from gpu", engine.OpRead, host.Bytes(), host.Addr(), o.gpu, "g"},
		{"gpu from host", engine.OpRead, dev.view, uintptr(dev.addr), o.addr, ""},
	}
	for i, st := range steps {
		seed := uint64(40 + i)
		if st.op == engine.OpWrite {
			pattern(st.local, seed)
			moved := gpuTransfer(t, a, seg, st.op, st.laddr, st.remote, size)
			assert.Equal(t, o.do("%scheck %d 0 %d", st.rbuf, seed, size), "ok", st.name)
			assert.Equal(t, moved, uint64(size), "%s: the NICs carried %d bytes", st.name, moved)
		} else {
			assert.Equal(t, o.do("%sfill %d 0 %d", st.rbuf, seed, size), "ok")
			clear(st.local)
			moved := gpuTransfer(t, a, seg, st.op, st.laddr, st.remote, size)
			assert.Assert(t, bytes.Equal(st.local, patternAt(seed, size)), "%s: bytes differ", st.name)
			assert.Equal(t, moved, uint64(size), "%s: the NICs carried %d bytes", st.name, moved)
		}
	}
	per := nicBytes(a)
	assert.Assert(t, per["fake_mlx5_0"] > 0 && per["fake_mlx5_1"] > 0, "GPU slices not striped: %v", per)
}

// TestGPUDirectFallback: GPU memory the NICs cannot register is carried by
// TCP (staged through host memory) instead, with a log line (and the
// reason in the transport's status): a peer whose provider lacks dma-buf
// support (its GPU buffer has no rkeys), and a local engine with GPUDirect
// off. Host memory between the same engines still takes RDMA.
func TestGPUDirectFallback(t *testing.T) {
	needsFake(t, "a provider without dma-buf support")
	const size = 4 << 20
	o := startOwner(t, allDevices[:2], size, 0, "RDMA_TEST_GPU=4194304", "RDMA_TEST_CUDA="+cudaLib,
		"RDMA_TEST_TCP=1", "FAKEVERBS_DMABUF=0")
	status := o.do("gpudirect")
	t.Logf("owner: %s", status)
	assert.Assert(t, strings.Contains(status, "0 GPU regions registered") && strings.Contains(status, "1 not registered"), status)
	assert.Assert(t, strings.Contains(status, "operation not supported"), status)

	for _, mode := range []string{rdma.GPUDirectAuto, rdma.GPUDirectOff} {
		t.Run(mode, func(t *testing.T) {
			cfg := rdmaConfig(allDevices[:2]...)
			cfg.GPUDirect = mode
			a := newEngineWith(t, stack.Config{
				Engine: engine.Config{LocalServerName: "127.0.0.1", Transports: []string{rdma.Name, tcp.Name}, TransferTimeout: 20 * time.Second},
				RDMA:   cfg,
			})
			host := newBuf(t, a, size)
			dev := newGPUBuf(t, a, size)
			seg, err := a.OpenSegment(context.Background(), o.name)
			assert.NilError(t, err)
			rt := a.Transport(rdma.Name).(*rdma.Transport)
			t.Logf("local: %s", rt.GPUDirectStatus())

			// To the peer's GPU memory: never RDMA (no rkeys there).
			pattern(dev.view, 7)
			assert.Equal(t, gpuTransfer(t, a, seg, engine.OpWrite, uintptr(dev.addr), o.gpu, size), uint64(0))
			assert.Equal(t, o.do("gcheck 7 0 %d", size), "ok")
			pattern(host.Bytes(), 8)
			assert.Equal(t, gpuTransfer(t, a, seg, engine.OpWrite, host.Addr(), o.gpu, size), uint64(0))
			assert.Equal(t, o.do("gcheck 8 0 %d", size), "ok")
			// Local GPU memory to the peer's host memory: RDMA with
			// GPUDirect, TCP without.
			pattern(dev.view, 9)
			want := uint64(size)
			if mode == rdma.GPUDirectOff {
				want = 0
				assert.Assert(t, strings.Contains(rt.GPUDirectStatus(), "1 not registered"), rt.GPUDirectStatus())
			}
			assert.Equal(t, gpuTransfer(t, a, seg, engine.OpWrite, uintptr(dev.addr), o.addr, size), want)
			assert.Equal(t, o.do("check 9 0 %d", size), "ok")
			assert.Equal(t, o.do("fill 10 0 %d", size), "ok")
			assert.Equal(t, gpuTransfer(t, a, seg, engine.OpRead, uintptr(dev.addr), o.addr, size), want)
			assert.Assert(t, bytes.Equal(dev.view, patternAt(10, size)))
			// Host to host: RDMA.
			pattern(host.Bytes(), 11)
			assert.Equal(t, gpuTransfer(t, a, seg, engine.OpWrite, host.Addr(), o.addr, size), uint64(size))
			assert.Equal(t, o.do("check 11 0 %d", size), "ok")
		})
	}
}

// TestGPUDirectPeerMemory: where the driver cannot export a dma-buf but a
// peer-memory module is loaded (sysfs), GPU memory is registered with
// ibv_reg_mr on the device pointer (the fake provider's peer-memory client
// resolves it through the fake driver) and moves over the NICs.
func TestGPUDirectPeerMemory(t *testing.T) {
	needsFake(t, "a driver failing dma-buf exports and the fake's peer-memory client")
	const size = 2 << 20
	o := startOwner(t, allDevices[:1], size, 0)
	ctl := fakecuda.Open(cudaLib)
	ctl.Fail("cuMemGetHandleForAddressRange", 1, true, int(cuda.ErrorNotSupported))
	defer ctl.Reset()
	sys := fstest.MapFS{"devices/system/node/node0/cpulist": {Data: []byte("0-1\n")},
		"module/nvidia_peermem/version": {Data: []byte("550.54\n")}}
	cfg := rdmaConfig(allDevices[:1]...)
	cfg.SysFS = sys
	a := newEngine(t, cfg, 20*time.Second)
	dev := newGPUBuf(t, a, size)
	rt := a.Transport(rdma.Name).(*rdma.Transport)
	assert.Assert(t, strings.Contains(rt.GPUDirectStatus(), "peermem 1"), rt.GPUDirectStatus())
	seg, err := a.OpenSegment(context.Background(), o.name)
	assert.NilError(t, err)
	pattern(dev.view, 21)
	assert.Equal(t, gpuTransfer(t, a, seg, engine.OpWrite, uintptr(dev.addr), o.addr, size), uint64(size))
	assert.Equal(t, o.do("check 21 0 %d", size), "ok")

	// Without the module, the same failure leaves GPU memory off RDMA.
	cfg.SysFS = emptySys
	b := newEngine(t, cfg, 20*time.Second)
	newGPUBuf(t, b, size)
	st := b.Transport(rdma.Name).(*rdma.Transport).GPUDirectStatus()
	assert.Assert(t, strings.Contains(st, "1 not registered") && strings.Contains(st, "no nvidia-peermem"), st)
}

// TestGPUDirectAcrossAllocations: one registration over two VMM
// allocations side by side (PyTorch's expandable segments) is exported as
// two dma-bufs, one per allocation, and registered as one memory region of
// each; transfers crossing the boundary move every byte.
func TestGPUDirectAcrossAllocations(t *testing.T) {
	needsFake(t, "the fake's address-space order and dma-buf count")
	a := newEngine(t, rdmaConfig(allDevices[:2]...), 10*time.Second)
	b := newEngine(t, rdmaConfig(allDevices[:2]...), 10*time.Second)
	d, err := stack.GPURuntime(stack.Config{GPU: gpuConfig()}).Driver()
	assert.NilError(t, err)
	v, size, err := d.VMMAlloc(0, 2<<20)
	assert.NilError(t, err)
	defer d.VMMFree(v)
	v2, _, err := d.VMMAlloc(0, 2<<20)
	assert.NilError(t, err)
	defer d.VMMFree(v2)
	assert.Equal(t, v2, v+size, "the fake reserves address space in order")
	start, n := v+4096, 2*size-8192
	exports := fakecuda.Open(cudaLib).Calls("cuMemGetHandleForAddressRange")
	assert.NilError(t, b.RegisterMemory(uintptr(start), n, "cuda:0", true))
	defer b.UnregisterMemory(uintptr(start))
	assert.Equal(t, fakecuda.Open(cudaLib).Calls("cuMemGetHandleForAddressRange")-exports, uint64(2))
	bufs := b.LocalDescriptor().Buffers
	assert.Equal(t, len(bufs), 2, "%+v", bufs)
	assert.Equal(t, bufs[0].Addr+bufs[0].Length, v2)
	assert.Assert(t, bufs[1].Continues)
	// The fake's host views of the two allocations are separate mappings.
	ctl := fakecuda.Open(cudaLib)
	first, second := ctl.Bytes(start, int(v2-start)), ctl.Bytes(v2, int(start+n-v2))
	view := func() []byte { return append(append([]byte(nil), first...), second...) }

	host := newBuf(t, a, n)
	seg, err := a.OpenSegment(context.Background(), b.SegmentName())
	assert.NilError(t, err)
	pattern(host.Bytes(), 61)
	assert.NilError(t, a.Transfer(context.Background(), []engine.Request{{Op: engine.OpWrite, Source: host.Addr(), Target: seg, TargetOffset: start, Length: n}}))
	assert.Assert(t, bytes.Equal(view(), host.Bytes()))
	p := patternAt(62, n)
	copy(first, p)
	copy(second, p[len(first):])
	assert.NilError(t, a.Transfer(context.Background(), []engine.Request{{Op: engine.OpRead, Source: host.Addr(), Target: seg, TargetOffset: start, Length: n}}))
	assert.Assert(t, bytes.Equal(host.Bytes(), patternAt(62, n)))
}

// TestGPUDirectHardware (KVFERRY_HW=1, a machine with a GPU and an RDMA
// NIC): GPU memory of two processes registered with the NICs as the
// driver and the NICs allow (dma-buf, else peer memory), moved between GPU
// and host memory both ways over RDMA, bytes checked through the driver.
// Where the NICs cannot register GPU memory it says why (the status line)
// and checks that the transfers still complete over TCP.
func TestGPUDirectHardware(t *testing.T) {
	if !fakeverbs.Hardware() {
		t.Skip("a hardware run's test (KVFERRY_HW=1); TestGPUDirect covers the fakes")
	}
	devs := nics(t, 1)
	const size = 8 << 20
	fakecuda.Path(t) // skips without a GPU
	o := startOwner(t, devs, size, 0, fmt.Sprintf("RDMA_TEST_GPU=%d", size), "RDMA_TEST_CUDA="+cudaLib, "RDMA_TEST_TCP=1")
	assert.Assert(t, o.gpu != 0)
	a := newEngineWith(t, stack.Config{
		Engine: engine.Config{LocalServerName: "127.0.0.1", Transports: []string{rdma.Name, tcp.Name}, TransferTimeout: 20 * time.Second},
		RDMA:   rdmaConfig(devs...),
	})
	host := newBuf(t, a, size)
	dev := newGPUBuf(t, a, size)
	ctl := fakecuda.Open(cudaLib)
	rt := a.Transport(rdma.Name).(*rdma.Transport)
	local, remote := rt.GPUDirectStatus(), o.do("gpudirect")
	t.Logf("GPUDirect: local %s; owner %s", local, remote)
	registered := !strings.Contains(local, "not registered") && !strings.Contains(remote, "not registered")
	seg, err := a.OpenSegment(context.Background(), o.name)
	assert.NilError(t, err)
	for i, st := range []struct {
		name         string
		op           engine.OpCode
		gpu          bool // local buffer on the GPU
		remote, rbuf string
	}{
		{"gpu to gpu", engine.OpWrite, true, "gpu", "g"},
		{"host to gpu", engine.OpWrite, false, "gpu", "g"},
		{"gpu to host", engine.OpWrite, true, "host", ""},
		{"gpu from gpu", engine.OpRead, true, "gpu", "g"},
		{"host from gpu", engine.OpRead, false, "gpu", "g"},
		{"gpu from host", engine.OpRead, true, "host", ""},
	} {
		seed := uint64(70 + i)
		laddr, raddr := host.Addr(), o.addr
		if st.gpu {
			laddr = uintptr(dev.addr)
		}
		if st.remote == "gpu" {
			raddr = o.gpu
		}
		before := nicBytes(a)
		if st.op == engine.OpWrite {
			if st.gpu {
				ctl.Write(dev.addr, patternAt(seed, size))
			} else {
				pattern(host.Bytes(), seed)
			}
		} else {
			assert.Equal(t, o.do("%sfill %d 0 %d", st.rbuf, seed, size), "ok")
		}
		assert.NilError(t, a.Transfer(context.Background(), []engine.Request{{Op: st.op, Source: laddr, Target: seg, TargetOffset: raddr, Length: size}}), st.name)
		if st.op == engine.OpWrite {
			assert.Equal(t, o.do("%scheck %d 0 %d", st.rbuf, seed, size), "ok", st.name)
		} else if st.gpu {
			assert.Assert(t, bytes.Equal(ctl.Bytes(dev.addr, size), patternAt(seed, size)), "%s: bytes differ", st.name)
		} else {
			assert.Assert(t, bytes.Equal(host.Bytes(), patternAt(seed, size)), "%s: bytes differ", st.name)
		}
		var moved uint64
		for d, n := range nicBytes(a) {
			moved += n - before[d]
		}
		if registered {
			assert.Equal(t, moved, uint64(size), "%s: the NICs carried %d bytes", st.name, moved)
		}
	}
}
