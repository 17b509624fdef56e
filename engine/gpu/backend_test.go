package gpu_test

import (
	"errors"
	"testing"
	"unsafe"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/gpu"
	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/internal/cuda"
	"github.com/kvferry/kvferry/internal/hip"
	"github.com/kvferry/kvferry/internal/testutil/fakecuda"
)

func TestLocations(t *testing.T) {
	for loc, want := range map[string]bool{
		"cuda": true, "cuda:1": true, "hip:0": true, "HIP": true, "rocm": true, "rocm:3": true,
		"cpu:0": false, "*": false, "hipster": false, "": false,
	} {
		assert.Equal(t, gpu.IsGPULocation(loc), want, loc)
	}
	for s, want := range map[string]gpu.Kind{"": "", "auto": "", "cuda": gpu.CUDA, " HIP ": gpu.HIP} {
		k, err := gpu.ParseKind(s)
		assert.NilError(t, err)
		assert.Equal(t, k, want, s)
	}
	_, err := gpu.ParseKind("ascend")
	assert.Assert(t, errors.Is(err, engine.ErrInvalidArgument))
}

// TestCopyLayout: a batch passes from engine/gpu to the HIP binding
// without a copy only while the two Copy types share one layout.
func TestCopyLayout(t *testing.T) {
	var c cuda.Copy
	var h hip.Copy
	assert.Equal(t, unsafe.Sizeof(c), unsafe.Sizeof(h))
	assert.Equal(t, unsafe.Offsetof(c.Dst), unsafe.Offsetof(h.Dst))
	assert.Equal(t, unsafe.Offsetof(c.Src), unsafe.Offsetof(h.Src))
	assert.Equal(t, unsafe.Offsetof(c.N), unsafe.Offsetof(h.N))
}

// TestHIPRuntime: a runtime forced to HIP (or asked at a "hip:N"
// location) loads the HIP runtime only, classifies its memory, shares
// device memory by IPC handle and copies through the shared Copier and
// Stager API; the CUDA-only calls say it is not CUDA.
func TestHIPRuntime(t *testing.T) {
	lib := fakecuda.HIPPath(t, false)
	ctl := fakecuda.Open(lib)
	ctl.Reset()
	r := gpu.Shared(gpu.Config{HIPLibrary: lib, Library: "/nonexistent/libcuda.so.1"})
	assert.Equal(t, r.Kind(), gpu.Kind(""))
	const n = 4 << 20
	host, err := cmem.Malloc(n)
	assert.NilError(t, err)
	defer cmem.Free(host)
	info, err := r.Classify(host, n, "cpu:0")
	assert.NilError(t, err)
	assert.Equal(t, info.Kind, engine.MemoryHost)

	h, err := r.HIP()
	assert.NilError(t, err)
	assert.Equal(t, r.Kind(), gpu.HIP)
	_, err = r.Driver()
	assert.Assert(t, errors.Is(err, engine.ErrNotSupported), "%v", err)

	dev, err := h.MemAlloc(1, n)
	assert.NilError(t, err)
	defer h.MemFree(1, dev)
	info, err = r.Classify(uintptr(dev)+4096, n-4096, "hip:1")
	assert.NilError(t, err)
	assert.Equal(t, info.Kind, engine.MemoryDevice)
	assert.Equal(t, info.Device, 1)
	assert.Equal(t, info.AllocBase, dev)
	assert.Equal(t, info.AllocSize, uint64(n))
	assert.Equal(t, info.Share, engine.ShareLegacyIPC)
	assert.Equal(t, len(info.Handle), 64)
	_, err = r.Classify(uintptr(dev), n, "cpu:0")
	assert.Assert(t, errors.Is(err, engine.ErrInvalidArgument), "%v", err)
	_, err = r.Classify(uintptr(dev), n+1, "hip:1")
	assert.Assert(t, errors.Is(err, engine.ErrInvalidArgument), "%v", err)
	pinned, err := h.HostAlloc(1 << 16)
	assert.NilError(t, err)
	defer h.HostFree(pinned)
	info, err = r.Classify(pinned, 1<<16, "*")
	assert.NilError(t, err)
	assert.Equal(t, info.Kind, engine.MemoryPinned)

	// Copies through the shared API.
	src := cmem.Bytes(host, n)
	for i := range src {
		src[i] = byte(i * 13)
	}
	c, err := r.Copier(1)
	assert.NilError(t, err)
	assert.NilError(t, c.Copy([]gpu.Copy{{Dst: dev, Src: uint64(host), N: n}}))
	assert.DeepEqual(t, ctl.Bytes(dev, 64), src[:64])
	st, err := r.NewStager()
	assert.NilError(t, err)
	defer st.Close()
	var got []byte
	assert.NilError(t, st.FromDevice(1, dev, n, func(p []byte) error { got = append(got, p...); return nil }))
	assert.DeepEqual(t, got, src)

	bufs, err := r.ExportDmaBufs(1, dev+4096, 8192)
	assert.NilError(t, err)
	assert.Equal(t, len(bufs), 1)
	assert.Equal(t, bufs[0].Offset, uint64(4096))
	assert.Assert(t, bufs[0].FD >= 0)
}
