package gpu_test

import (
	"errors"
	"testing"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/gpu"
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

	dev, err := d.MemAlloc(1, 4<<20)
	assert.NilError(t, err)
	defer d.MemFree(1, dev)
	info, err = r.Classify(uintptr(dev+4096), 1<<20, "cuda:1")
	assert.NilError(t, err)
	assert.Equal(t, info.Kind, engine.MemoryDevice)
	assert.Equal(t, info.Device, 1)
	assert.Equal(t, info.Share, engine.ShareLegacyIPC)
	assert.Equal(t, info.AllocBase, dev)
	assert.Equal(t, len(info.Handle), 64)
	// "*" finds the device itself; a wrong ordinal is corrected.
	info, err = r.Classify(uintptr(dev), 4<<20, "cuda:0")
	assert.NilError(t, err)
	assert.Equal(t, info.Device, 1)
	// Device memory as cpu memory is refused.
	_, err = r.Classify(uintptr(dev), 4096, "cpu:0")
	assert.Assert(t, errors.Is(err, engine.ErrInvalidArgument), "%v", err)
	// Past the allocation's end is not device memory.
	_, err = r.Classify(uintptr(dev), 4<<20+4096, "cuda:1")
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
	assert.Equal(t, v2, v+size) // the fake reserves address space in order
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

	// Two adjacent cudaMalloc allocations (the fake allocates first fit).
	a, err := d.MemAlloc(1, 1<<20)
	assert.NilError(t, err)
	defer d.MemFree(1, a)
	b, err := d.MemAlloc(1, 1<<20)
	assert.NilError(t, err)
	defer d.MemFree(1, b)
	assert.Equal(t, b, a+1<<20)
	info, err := r.Classify(uintptr(a+4096), 2<<20-8192, "cuda:1")
	assert.NilError(t, err)
	assert.Equal(t, info.Share, engine.ShareLegacyIPC)
	assert.Assert(t, info.Handle == nil)
	assert.Equal(t, len(info.Chunks), 2)
	assert.Equal(t, info.Chunks[0].Base, a)
	assert.Equal(t, info.Chunks[1].Base, b)
	assert.Equal(t, info.Chunks[1].Size, uint64(1<<20))
	assert.Equal(t, len(info.Chunks[0].Handle), 64)
	assert.Assert(t, string(info.Chunks[0].Handle) != string(info.Chunks[1].Handle))

	// Chunked VMM memory.
	v, size, err := d.VMMAllocChunks(0, 2<<20, 3, cuda.HandlePosixFD)
	assert.NilError(t, err)
	defer d.VMMFreeChunks(0, v, size)
	info, err = r.Classify(uintptr(v+4096), size-8192, "cuda:0")
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
