package gpu

import (
	"fmt"
	"sync"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/internal/cuda"
	"github.com/kvferry/kvferry/internal/hip"
)

// AllocBackend says what Alloc hands out on a device (Mooncake's
// MemoryBackend values).
type AllocBackend int

// What Alloc hands out.
const (
	// AllocPlain: cuMemAlloc / hipMalloc memory (legacy IPC).
	AllocPlain AllocBackend = 0
	// AllocVMM: shareable VMM memory (cuMemCreate / hipMemCreate, POSIX
	// fds; fabric handles too where a CUDA device has them).
	AllocVMM AllocBackend = 1
)

// hipAlloc is one VMM allocation Alloc made on HIP: size bytes of device
// dev mapped at its address.
type hipAlloc struct {
	dev  int
	size uint64
}

// hipAllocs are the HIP VMM allocations of the process, by address (HIP
// has no pointer attribute that tells a VMM mapping from hipMalloc memory).
var hipAllocs = struct {
	sync.Mutex
	m map[uint64]hipAlloc
}{m: make(map[uint64]hipAlloc)}

// AllocProbe returns what Alloc hands out on device dev, loading the
// process's GPU runtime on first use (an error wrapping
// engine.ErrNotSupported without one, engine.ErrInvalidArgument for a
// device that does not exist).
func (r *Runtime) AllocProbe(dev int) (AllocBackend, error) {
	k, err := r.load(CUDA)
	if err != nil {
		return 0, err
	}
	if k == HIP {
		info, err := r.hip.Device(dev)
		if err != nil {
			return 0, fmt.Errorf("probe HIP device %d: %w: %w", dev, engine.ErrInvalidArgument, err)
		}
		if info.VMM {
			return AllocVMM, nil
		}
		return AllocPlain, nil
	}
	if dev < 0 || dev >= r.drv.DeviceCount() {
		return 0, fmt.Errorf("probe CUDA device %d of %d: %w", dev, r.drv.DeviceCount(), engine.ErrInvalidArgument)
	}
	if cudaVMMDevice(r.drv, dev) {
		return AllocVMM, nil
	}
	return AllocPlain, nil
}

// cudaVMMDevice reports whether CUDA device dev gives shareable VMM memory.
func cudaVMMDevice(d *cuda.Driver, dev int) bool {
	info, err := d.Device(dev)
	return err == nil && d.VMM() && info.VMM && (info.PosixFD || info.Fabric)
}

// Alloc allocates at least n bytes of device dev's memory that same-host
// peers can map: VMM memory where the device offers it (rounded up to the
// granularity, mapped for every device), else cuMemAlloc / hipMalloc
// memory, which legacy IPC shares. Free frees it.
func (r *Runtime) Alloc(dev int, n uint64) (uint64, error) {
	kind, err := r.AllocProbe(dev)
	if err != nil {
		return 0, err
	}
	n = max(n, 1)
	if r.Kind() == HIP {
		if kind == AllocVMM {
			p, err := r.hipVMMAlloc(dev, n)
			if err == nil {
				return p, nil
			}
			r.log.Warn("HIP VMM allocation failed, falling back to hipMalloc", "bytes", n, "device", dev, "err", err)
		}
		return r.hip.MemAlloc(dev, n)
	}
	if kind == AllocVMM {
		p, _, err := r.drv.VMMAlloc(dev, n)
		if err == nil {
			return p, nil
		}
		r.log.Warn("CUDA VMM allocation failed, falling back to cuMemAlloc", "bytes", n, "device", dev, "err", err)
	}
	return r.drv.MemAlloc(dev, n)
}

// hipVMMAlloc makes n bytes (rounded up to the granularity) of VMM memory
// of dev, exportable as POSIX fds, mapped and accessible from every device,
// and remembers its size for Free.
func (r *Runtime) hipVMMAlloc(dev int, n uint64) (uint64, error) {
	p, size, err := r.hip.VMMAlloc(dev, n)
	if err != nil {
		return 0, err
	}
	hipAllocs.Lock()
	hipAllocs.m[p] = hipAlloc{dev: dev, size: size}
	hipAllocs.Unlock()
	return p, nil
}

// Free frees memory from Alloc (p its address). Anything else is refused
// with an error wrapping engine.ErrInvalidArgument.
func (r *Runtime) Free(p uint64) error {
	k, err := r.load(CUDA)
	if err != nil {
		return err
	}
	if k == HIP {
		return r.hipFree(p)
	}
	d := r.drv
	pi, err := d.Pointer(p)
	if err != nil {
		return fmt.Errorf("free %#x: %w: %w", p, engine.ErrInvalidArgument, err)
	}
	if pi.Type != cuda.MemoryTypeDevice {
		return fmt.Errorf("free %#x: not CUDA device memory: %w", p, engine.ErrInvalidArgument)
	}
	if pi.MappingBase != 0 || pi.HandleTypes != 0 {
		return d.VMMFree(p)
	}
	return d.MemFree(pi.Device, p)
}

func (r *Runtime) hipFree(p uint64) error {
	h := r.hip
	hipAllocs.Lock()
	a, vmm := hipAllocs.m[p]
	delete(hipAllocs.m, p)
	hipAllocs.Unlock()
	if vmm {
		if err := h.VMMFree(p, a.size); err != nil {
			return fmt.Errorf("free HIP VMM memory %#x+%d of device %d: %w", p, a.size, a.dev, err)
		}
		return nil
	}
	pi, err := h.Pointer(p)
	if err != nil {
		return fmt.Errorf("free %#x: %w: %w", p, engine.ErrInvalidArgument, err)
	}
	if pi.Type != hip.MemoryTypeDevice || pi.Managed {
		return fmt.Errorf("free %#x: not HIP device memory: %w", p, engine.ErrInvalidArgument)
	}
	return h.MemFree(pi.Device, p)
}
