package gpu_test

import (
	"errors"
	"fmt"
	"testing"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/gpu"
	"github.com/kvferry/kvferry/engine/gpu/gputest"
	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/internal/cuda"
	"github.com/kvferry/kvferry/internal/testutil/fakecuda"
)

func TestNoDriver(t *testing.T) {
	r := gpu.Shared(gpu.Config{Library: "/nonexistent/libcuda.so.1"})
	info, err := r.Classify(0x1000, 10, "*")
	assert.NilError(t, err)
	assert.Equal(t, info.Kind, engine.MemoryHost)
	_, err = r.Classify(0x1000, 10, "cuda:0")
	assert.Assert(t, errors.Is(err, engine.ErrNotSupported), "%v", err)
	_, err = r.Copier(0)
	assert.Assert(t, errors.Is(err, engine.ErrNotSupported), "%v", err)
	off := gpu.Shared(gpu.Config{Disabled: true})
	_, err = off.Classify(0x1000, 10, "cuda:0")
	assert.Assert(t, errors.Is(err, engine.ErrNotSupported), "%v", err)
}

func TestClassify(t *testing.T) {
	path := fakecuda.Path(t)
	r := gpu.Shared(gpu.Config{Library: path})
	// Before anything loaded the driver, "*" and "cpu" registrations do
	// not load it.
	host, err := cmem.Malloc(1 << 20)
	assert.NilError(t, err)
	defer cmem.Free(host)
	info, err := r.Classify(host, 1<<20, "cpu:0")
	assert.NilError(t, err)
	assert.Equal(t, info.Kind, engine.MemoryHost)

	d, err := r.Driver()
	assert.NilError(t, err)
	info, err = r.Classify(host, 1<<20, "*")
	assert.NilError(t, err)
	assert.Equal(t, info.Kind, engine.MemoryHost)

	pinned, err := d.HostAlloc(1 << 16)
	assert.NilError(t, err)
	defer d.HostFree(pinned)
	info, err = r.Classify(pinned, 1<<16, "cpu:0")
	assert.NilError(t, err)
	assert.Equal(t, info.Kind, engine.MemoryPinned)

	second := fakecuda.Second(t)
	loc := fmt.Sprintf("cuda:%d", second)
	dev, err := d.MemAlloc(second, 4<<20)
	assert.NilError(t, err)
	defer d.MemFree(second, dev)
	info, err = r.Classify(uintptr(dev+4096), 1<<20, loc)
	assert.NilError(t, err)
	assert.Equal(t, info.Kind, engine.MemoryDevice)
	assert.Equal(t, info.Device, second)
	assert.Equal(t, info.Share, engine.ShareLegacyIPC)
	assert.Equal(t, info.AllocBase, dev)
	assert.Equal(t, len(info.Handle), 64)
	// "*" finds the device itself; a wrong ordinal is corrected.
	if second != 0 {
		info, err = r.Classify(uintptr(dev), 4<<20, "cuda:0")
		assert.NilError(t, err)
		assert.Equal(t, info.Device, second)
	}
	// Device memory as cpu memory is refused.
	_, err = r.Classify(uintptr(dev), 4096, "cpu:0")
	assert.Assert(t, errors.Is(err, engine.ErrInvalidArgument), "%v", err)
	// Past the allocation's end is not device memory.
	_, err = r.Classify(uintptr(dev), 4<<20+4096, loc)
	assert.Assert(t, errors.Is(err, engine.ErrInvalidArgument), "%v", err)

	man, err := d.MemAllocManaged(0, 1<<16)
	assert.NilError(t, err)
	defer d.MemFree(0, man)
	info, err = r.Classify(uintptr(man), 1<<16, "*")
	assert.NilError(t, err)
	assert.Equal(t, info.Kind, engine.MemoryManaged)

	// VMM memory: POSIX-fd shareable; two mappings side by side in one
	// reservation register as one region (PyTorch's expandable segments
	// look like this).
	v, size, err := d.VMMAlloc(0, 2<<20)
	assert.NilError(t, err)
	defer d.VMMFree(v)
	info, err = r.Classify(uintptr(v), size, "cuda:0")
	assert.NilError(t, err)
	assert.Equal(t, info.Kind, engine.MemoryDevice)
	assert.Equal(t, info.Share, engine.SharePosixFD)
	assert.Assert(t, info.Handle == nil)
	assert.Equal(t, info.AllocBase, v)
	v2, _, err := d.VMMAlloc(0, 2<<20)
	assert.NilError(t, err)
	defer d.VMMFree(v2)
	if v2 != v+size {
		// The fake reserves address space in order; a real driver
		// need not.
		assert.Assert(t, fakecuda.Hardware(), "the fake reserves in order")
		return
	}
	info, err = r.Classify(uintptr(v+4096), 2*size-8192, "*")
	assert.NilError(t, err)
	assert.Equal(t, info.Share, engine.SharePosixFD)
	assert.Equal(t, info.AllocBase, v)
	assert.Equal(t, info.AllocSize, size)
}

// TestClassifyChunks: ranges over several allocations get one handle per
// allocation: adjacent cudaMalloc ranges one legacy IPC handle each, and
// chunked VMM memory (one reservation, one mapping per chunk: PyTorch's
// expandable segments) its POSIX-fd share; the descriptor lists the chunks.
func TestClassifyChunks(t *testing.T) {
	path := fakecuda.Path(t)
	r := gpu.Shared(gpu.Config{Library: path})
	d, err := r.Driver()
	assert.NilError(t, err)

	// Two adjacent cudaMalloc allocations (the fake allocates first fit;
	// a real driver places them as it likes: that part is the fake's).
	second := fakecuda.Second(t)
	a, err := d.MemAlloc(second, 1<<20)
	assert.NilError(t, err)
	defer d.MemFree(second, a)
	b, err := d.MemAlloc(second, 1<<20)
	assert.NilError(t, err)
	defer d.MemFree(second, b)
	if fakecuda.Hardware() && b != a+1<<20 {
		t.Log("the driver placed two 1 MiB allocations apart: the adjacent-allocation case is the fake's only")
		chunkedVMM(t, r, d)
		return
	}
	assert.Equal(t, b, a+1<<20)
	info, err := r.Classify(uintptr(a+4096), 2<<20-8192, fmt.Sprintf("cuda:%d", second))
	assert.NilError(t, err)
	assert.Equal(t, info.Share, engine.ShareLegacyIPC)
	assert.Assert(t, info.Handle == nil)
	assert.Equal(t, len(info.Chunks), 2)
	assert.Equal(t, info.Chunks[0].Base, a)
	assert.Equal(t, info.Chunks[1].Base, b)
	assert.Equal(t, info.Chunks[1].Size, uint64(1<<20))
	assert.Equal(t, len(info.Chunks[0].Handle), 64)
	assert.Assert(t, string(info.Chunks[0].Handle) != string(info.Chunks[1].Handle))
	chunkedVMM(t, r, d)
}

// chunkedVMM: chunked VMM memory (PyTorch's expandable segments) is one
// region with its chunks' layout; chunks without a shareable handle are
// device memory that is not shared.
func chunkedVMM(t *testing.T, r *gpu.Runtime, d *cuda.Driver) {
	t.Helper()
	v, size, err := d.VMMAllocChunks(0, 2<<20, 3, cuda.HandlePosixFD)
	assert.NilError(t, err)
	defer d.VMMFreeChunks(0, v, size)
	info, err := r.Classify(uintptr(v+4096), size-8192, "cuda:0")
	assert.NilError(t, err)
	assert.Equal(t, info.Share, engine.SharePosixFD)
	assert.Assert(t, info.Handle == nil)
	assert.Equal(t, len(info.Chunks), 3) // the layout, without handles
	assert.Equal(t, info.Chunks[2].Base, v+4<<20)
	assert.Assert(t, info.Chunks[2].Handle == nil)
	assert.Equal(t, info.AllocBase, v)
	assert.Equal(t, info.AllocSize, uint64(2<<20))
	// Chunks that allow no shareable handle: device memory, not shared.
	v2, size2, err := d.VMMAllocChunks(0, 2<<20, 2, cuda.HandleNone)
	assert.NilError(t, err)
	defer d.VMMFreeChunks(0, v2, size2)
	info, err = r.Classify(uintptr(v2), size2, "cuda:0")
	assert.NilError(t, err)
	assert.Equal(t, info.Kind, engine.MemoryDevice)
	assert.Equal(t, info.Share, engine.ShareKind(0))
}

// TestDeviceOf finds the device of device memory on each GPU runtime
// (kvferry_cuda_memcpy's choice of the current device), and none for host
// memory.
func TestDeviceOf(t *testing.T) {
	for _, rt := range gputest.Runtimes() {
		t.Run(rt.Name, func(t *testing.T) {
			cfg, _ := rt.Config(t)
			r := gpu.Shared(cfg)
			d := rt.Allocator(t, cfg)
			second := fakecuda.SecondOf(d.(interface{ DeviceCount() int }).DeviceCount())
			p, err := d.MemAlloc(second, 1<<20)
			assert.NilError(t, err)
			defer d.MemFree(second, p)
			dev, ok := r.DeviceOf(p + 4096)
			assert.Assert(t, ok)
			assert.Equal(t, dev, second)
			host, err := cmem.MapAnon(4096)
			assert.NilError(t, err)
			defer host.Close()
			_, ok = r.DeviceOf(uint64(host.Addr()))
			assert.Assert(t, !ok)
			// A copy with that device current reaches the memory.
			copy(host.Bytes(), "device-of")
			assert.NilError(t, r.MemcpySync(dev, p, uint64(host.Addr()), 9))
			clear(host.Bytes())
			assert.NilError(t, r.MemcpySync(dev, uint64(host.Addr()), p, 9))
			assert.Equal(t, string(host.Bytes()[:9]), "device-of")
		})
	}
}
