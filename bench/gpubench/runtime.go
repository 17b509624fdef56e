package main

import (
	"fmt"

	"github.com/kvferry/kvferry/engine/gpu"
	"github.com/kvferry/kvferry/internal/cuda"
	"github.com/kvferry/kvferry/internal/hip"
	"github.com/kvferry/kvferry/internal/hostenv"
)

// gpuAPI is what the benchmark asks of the GPU runtime it measures, the
// same rows on CUDA (internal/cuda) or HIP (internal/hip).
type gpuAPI interface {
	// Kind is the runtime ("cuda", "hip").
	Kind() gpu.Kind
	// Describe names device dev and the runtime, for the log.
	Describe(dev int) (string, error)
	MemAlloc(dev int, n uint64) (uint64, error)
	HostAlloc(n uint64) (uintptr, error)
	MemcpySync(dev int, dst, src, n uint64) error
	// OneStream returns a copier of one stream on dev (the baseline's
	// plain async copy) and its close.
	OneStream(dev int) (func([]gpu.Copy) error, func(), error)
	// Names of the baseline calls and of the IPC path, for the rows.
	AsyncName() string
	SyncName() string
	IPCName() string
}

// openAPI loads the process's GPU runtime (KVFERRY_GPU_RUNTIME,
// KVFERRY_CUDA_LIB, KVFERRY_HIP_LIB) and returns it.
func openAPI() (gpuAPI, error) {
	rt := gpu.Shared(gpu.ConfigFromEnv(hostenv.Lookup))
	if gpu.ConfigFromEnv(hostenv.Lookup).Runtime == gpu.HIP {
		h, err := rt.HIP()
		if err != nil {
			return nil, err
		}
		return hipAPI{h}, nil
	}
	d, err := rt.Driver()
	if err != nil {
		return nil, err
	}
	return cudaAPI{d}, nil
}

type cudaAPI struct{ d *cuda.Driver }

func (c cudaAPI) Kind() gpu.Kind { return gpu.CUDA }
func (c cudaAPI) Describe(dev int) (string, error) {
	info, err := c.d.Device(dev)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s (%s), CUDA driver %d, %d devices", info.Name, info.PCIBusID, c.d.Version(), c.d.DeviceCount()), nil
}
func (c cudaAPI) MemAlloc(dev int, n uint64) (uint64, error) { return c.d.MemAlloc(dev, n) }
func (c cudaAPI) HostAlloc(n uint64) (uintptr, error)        { return c.d.HostAlloc(n) }
func (c cudaAPI) MemcpySync(dev int, dst, src, n uint64) error {
	return c.d.MemcpySync(dev, dst, src, n)
}
func (c cudaAPI) OneStream(dev int) (func([]gpu.Copy) error, func(), error) {
	cp, err := c.d.NewCopier(dev, 1)
	if err != nil {
		return nil, nil, err
	}
	return cp.Copy, cp.Close, nil
}
func (c cudaAPI) AsyncName() string { return "cuMemcpyAsync" }
func (c cudaAPI) SyncName() string  { return "cuMemcpy" }
func (c cudaAPI) IPCName() string   { return "CUDA IPC" }

type hipAPI struct{ h *hip.Runtime }

func (a hipAPI) Kind() gpu.Kind { return gpu.HIP }
func (a hipAPI) Describe(dev int) (string, error) {
	info, err := a.h.Device(dev)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s (%s, gfx arch %d), HIP runtime %d at %s, %d devices", info.Name, info.PCIBusID, info.Arch, a.h.Version(), a.h.Path(), a.h.DeviceCount()), nil
}
func (a hipAPI) MemAlloc(dev int, n uint64) (uint64, error) { return a.h.MemAlloc(dev, n) }
func (a hipAPI) HostAlloc(n uint64) (uintptr, error)        { return a.h.HostAlloc(n) }
func (a hipAPI) MemcpySync(dev int, dst, src, n uint64) error {
	return a.h.MemcpySync(dev, dst, src, n)
}
func (a hipAPI) OneStream(dev int) (func([]gpu.Copy) error, func(), error) {
	cp, err := a.h.NewCopier(dev, 1)
	if err != nil {
		return nil, nil, err
	}
	var ops []hip.Copy // reused: the benchmark copies from one goroutine
	return func(in []gpu.Copy) error {
		ops = ops[:0]
		for _, o := range in {
			ops = append(ops, hip.Copy{Dst: o.Dst, Src: o.Src, N: o.N})
		}
		return cp.Copy(ops)
	}, cp.Close, nil
}
func (a hipAPI) AsyncName() string { return "hipMemcpyAsync" }
func (a hipAPI) SyncName() string  { return "hipMemcpy" }
func (a hipAPI) IPCName() string   { return "HIP IPC" }
