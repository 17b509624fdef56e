package gpu_test

import (
	"os"
	"os/exec"
	"testing"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/gpu"
	"github.com/kvferry/kvferry/engine/gpu/gputest"
	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/internal/testutil/fakecuda"
)

// TestAlloc allocates shareable memory on each GPU runtime: VMM memory
// the runtime classifies as device memory of the device asked for, that a
// copy reaches, freed once; bad devices and foreign pointers are refused.
func TestAlloc(t *testing.T) {
	for _, rt := range gputest.Runtimes() {
		t.Run(rt.Name, func(t *testing.T) {
			cfg, _ := rt.Config(t)
			r := gpu.Shared(cfg)
			al := rt.Allocator(t, cfg)
			kind, err := r.AllocProbe(0)
			assert.NilError(t, err)
			assert.Equal(t, kind, gpu.AllocVMM)
			_, err = r.AllocProbe(99)
			assert.ErrorIs(t, err, engine.ErrInvalidArgument)
			_, err = r.Alloc(99, 4096)
			assert.ErrorIs(t, err, engine.ErrInvalidArgument)

			const n = 3<<20 + 5
			p, err := r.Alloc(1, n)
			assert.NilError(t, err)
			info, err := r.Classify(uintptr(p), n, rt.Location(1))
			assert.NilError(t, err)
			assert.Equal(t, info.Kind, engine.MemoryDevice)
			assert.Equal(t, info.Device, 1)
			dev, ok := r.DeviceOf(p + n - 1)
			assert.Assert(t, ok)
			assert.Equal(t, dev, 1)
			// Every device may touch it: a copy from device 0's memory.
			src, err := al.MemAlloc(0, 4096)
			assert.NilError(t, err)
			defer func() { assert.Check(t, al.MemFree(0, src)) }()
			assert.NilError(t, al.MemcpySync(0, p+n-4096, src, 4096))

			assert.NilError(t, r.Free(p))
			_, ok = r.DeviceOf(p)
			assert.Assert(t, !ok, "VMM memory still mapped after Free")
			assert.ErrorIs(t, r.Free(p), engine.ErrInvalidArgument)

			// Plain memory from the binding frees too; host memory is refused.
			q, err := al.MemAlloc(0, 1<<16)
			assert.NilError(t, err)
			assert.NilError(t, r.Free(q))
			host, err := cmem.Malloc(64)
			assert.NilError(t, err)
			defer cmem.Free(host)
			assert.ErrorIs(t, r.Free(uint64(host)), engine.ErrInvalidArgument)
		})
	}
}

// TestAllocHIPWithoutVMM: a HIP runtime without the VMM entry points (an
// older ROCm) gets hipMalloc memory, which same-host peers map by its
// legacy IPC handle. That fake lies at the same device addresses as the
// other, so the test runs in a process of its own.
func TestAllocHIPWithoutVMM(t *testing.T) {
	if os.Getenv(noVMMChild) != "1" {
		lib := fakecuda.HIPPath(t, true)
		cmd := exec.Command(os.Args[0], "-test.run=^TestAllocHIPWithoutVMM$", "-test.count=1")
		cmd.Env = append(os.Environ(), noVMMChild+"=1", "KVFERRY_TEST_NOVMM_LIB="+lib)
		out, err := cmd.CombinedOutput()
		assert.NilError(t, err, "%s", out)
		return
	}
	r := gpu.Shared(gpu.Config{HIPLibrary: os.Getenv("KVFERRY_TEST_NOVMM_LIB"), Runtime: gpu.HIP})
	kind, err := r.AllocProbe(0)
	assert.NilError(t, err)
	assert.Equal(t, kind, gpu.AllocPlain)
	p, err := r.Alloc(0, 1<<20)
	assert.NilError(t, err)
	info, err := r.Classify(uintptr(p), 1<<20, "cuda:0")
	assert.NilError(t, err)
	assert.Equal(t, info.Kind, engine.MemoryDevice)
	assert.Equal(t, info.Share, engine.ShareLegacyIPC)
	assert.NilError(t, r.Free(p))
}

// noVMMChild marks the child process of TestAllocHIPWithoutVMM.
const noVMMChild = "KVFERRY_TEST_NOVMM_CHILD"
