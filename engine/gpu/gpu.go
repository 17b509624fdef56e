// Package gpu connects the engine to the GPU runtime bindings
// (internal/cuda for NVIDIA, internal/hip for AMD): the classifier
// registration uses (engine.Config.Memory) and the per-process GPU runtime
// the transports share for device memory (a copier per device, pinned
// stagers, IPC mappings, dma-buf export), behind one API (Copier, Stager,
// Copy), so that transports do not learn a second one.
//
// A process loads at most one GPU runtime, lazily: only a registration at
// a GPU location ("cuda", "hip", "rocm", with or without ":N"), or one made
// while the process already has a runtime loaded (PyTorch with CUDA or
// ROCm, for one), asks it anything. The runtime already in the process
// wins; otherwise the location's (HIP for "hip"/"rocm", CUDA for "cuda"),
// then the other; Config.Runtime (KVFERRY_GPU_RUNTIME) forces one. A
// process that never touches a GPU loads neither, and a host without one
// runs every host path as before; a GPU registration then fails with
// engine.ErrNotSupported.
package gpu

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/descriptor"
	"github.com/kvferry/kvferry/internal/cuda"
	"github.com/kvferry/kvferry/internal/hip"
)

// Config configures GPU support.
type Config struct {
	// Library is the CUDA driver to load (KVFERRY_CUDA_LIB; default
	// libcuda.so.1).
	Library string
	// HIPLibrary is the HIP runtime to load (KVFERRY_HIP_LIB; default
	// libamdhip64.so).
	HIPLibrary string
	// Runtime forces the GPU runtime (KVFERRY_GPU_RUNTIME=cuda|hip); empty:
	// chosen by what is present.
	Runtime Kind
	// Disabled turns GPU support off: memory is never classified as GPU
	// memory and "cuda" registrations are refused (KVFERRY_CUDA=0).
	Disabled bool
	// Streams is the number of streams of each device's copier (default
	// cuda.DefaultStreams; KVFERRY_CUDA_STREAMS).
	Streams int
	// StagePieceBytes and StageDepth size the pinned bounce buffers that
	// stage device memory through host memory (defaults
	// cuda.DefaultPieceBytes and cuda.DefaultDepth;
	// KVFERRY_GPU_STAGE_BYTES, KVFERRY_GPU_STAGE_DEPTH).
	StagePieceBytes uint64
	StageDepth      int
	// Logger receives logs (nil: discarded).
	Logger *slog.Logger
}

// Runtime is the GPU support of a process for one driver file. It is
// shared by every engine of the process (Shared) and never closed.
type Runtime struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	kind    Kind // the runtime loaded, "" until one is
	drv     *cuda.Driver
	hip     *hip.Runtime
	copiers map[int]Copier
}

var shared = struct {
	sync.Mutex
	m map[string]*Runtime
}{m: make(map[string]*Runtime)}

// Shared returns the process's runtime for cfg's runtime and libraries
// (the first caller's other settings win).
func Shared(cfg Config) *Runtime {
	lib, hlib := cfg.Library, cfg.HIPLibrary
	if lib == "" {
		lib = cuda.DefaultLibrary
	}
	if hlib == "" {
		hlib = hip.DefaultLibrary
	}
	key := string(cfg.Runtime) + "\x00" + lib + "\x00" + hlib
	if cfg.Disabled {
		key = "\x00disabled"
	}
	shared.Lock()
	defer shared.Unlock()
	if r := shared.m[key]; r != nil {
		return r
	}
	r := &Runtime{cfg: cfg, log: cfg.Logger, copiers: make(map[int]Copier)}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	shared.m[key] = r
	return r
}

// load loads the process's GPU runtime on first use, preferring prefer
// (see the package comment), and returns its kind. Failures are not cached
// (the next call tries again) and wrap engine.ErrNotSupported.
func (r *Runtime) load(prefer Kind) (Kind, error) {
	if r.cfg.Disabled {
		return "", fmt.Errorf("GPU support is off (KVFERRY_CUDA=0): %w", engine.ErrNotSupported)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.kind != "" {
		return r.kind, nil
	}
	order := []Kind{prefer, other(prefer)}
	switch {
	case r.cfg.Runtime != "":
		order = []Kind{r.cfg.Runtime}
	case hip.Loaded(r.cfg.HIPLibrary) && !cuda.Loaded(r.cfg.Library):
		order = []Kind{HIP}
	case cuda.Loaded(r.cfg.Library):
		order = []Kind{CUDA}
	}
	var errs []error
	for _, k := range order {
		switch k {
		case CUDA:
			d, err := cuda.Load(r.cfg.Library)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			r.drv, r.kind = d, CUDA
			r.log.Info("CUDA driver loaded", "path", d.Path(), "version", d.Version(), "devices", d.DeviceCount())
		case HIP:
			h, err := hip.Load(r.cfg.HIPLibrary)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			r.hip, r.kind = h, HIP
			r.log.Info("HIP runtime loaded", "path", h.Path(), "version", h.Version(), "devices", h.DeviceCount())
		}
		return r.kind, nil
	}
	return "", fmt.Errorf("%w: %w", engine.ErrNotSupported, errors.Join(errs...))
}

func other(k Kind) Kind {
	if k == HIP {
		return CUDA
	}
	return HIP
}

// Kind returns the GPU runtime the process loaded, "" while none is.
func (r *Runtime) Kind() Kind {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.kind
}

// Driver returns the CUDA driver, loading the process's GPU runtime on
// first use. When that runtime is HIP, the CUDA-only paths (fabric
// handles, the CUDA VMM helpers, stream gates) get an error wrapping
// engine.ErrNotSupported.
func (r *Runtime) Driver() (*cuda.Driver, error) {
	k, err := r.load(CUDA)
	if err != nil {
		return nil, err
	}
	if k != CUDA {
		return nil, fmt.Errorf("this process's GPU runtime is %s, not CUDA: %w", k, engine.ErrNotSupported)
	}
	return r.drv, nil
}

// HIP returns the HIP runtime, loading the process's GPU runtime on first
// use; an error wrapping engine.ErrNotSupported when that runtime is CUDA.
func (r *Runtime) HIP() (*hip.Runtime, error) {
	k, err := r.load(HIP)
	if err != nil {
		return nil, err
	}
	if k != HIP {
		return nil, fmt.Errorf("this process's GPU runtime is %s, not HIP: %w", k, engine.ErrNotSupported)
	}
	return r.hip, nil
}

// loadedKind returns the runtime when this process already has one mapped
// (by us or by the host), without loading one otherwise.
func (r *Runtime) loadedKind() Kind {
	if r.cfg.Disabled {
		return ""
	}
	if k := r.Kind(); k != "" {
		return k
	}
	var prefer Kind
	switch {
	case r.cfg.Runtime != HIP && cuda.Loaded(r.cfg.Library):
		prefer = CUDA
	case r.cfg.Runtime != CUDA && hip.Loaded(r.cfg.HIPLibrary):
		prefer = HIP
	default:
		return ""
	}
	k, err := r.load(prefer)
	if err != nil {
		return ""
	}
	return k
}

// Copier returns device dev's copier (made on first use).
func (r *Runtime) Copier(dev int) (Copier, error) {
	k, err := r.load(CUDA)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.copiers[dev]; c != nil {
		return c, nil
	}
	var c Copier
	switch k {
	case HIP:
		hc, err := r.hip.NewCopier(dev, r.cfg.Streams)
		if err != nil {
			return nil, err
		}
		c = hipCopier{hc}
	default:
		cc, err := r.drv.NewCopier(dev, r.cfg.Streams)
		if err != nil {
			return nil, err
		}
		c = cc
	}
	r.copiers[dev] = c
	return c, nil
}

// NewStager returns a stager of pinned bounce buffers; the caller owns it
// (one goroutine at a time) and closes it.
func (r *Runtime) NewStager() (Stager, error) {
	k, err := r.load(CUDA)
	if err != nil {
		return nil, err
	}
	if k == HIP {
		return r.hip.NewStager(r.cfg.StagePieceBytes, r.cfg.StageDepth)
	}
	return r.drv.NewStager(r.cfg.StagePieceBytes, r.cfg.StageDepth)
}

// HostRegister pins n bytes of host memory at p with the process's GPU
// runtime (cuMemHostRegister, hipHostRegister).
func (r *Runtime) HostRegister(p uintptr, n uint64) error {
	k, err := r.load(CUDA)
	if err != nil {
		return err
	}
	if k == HIP {
		return r.hip.HostRegister(p, n)
	}
	return r.drv.HostRegister(p, n)
}

// MemcpySync copies n bytes from src to dst (any kinds) synchronously,
// with device dev current.
func (r *Runtime) MemcpySync(dev int, dst, src, n uint64) error {
	k, err := r.load(CUDA)
	if err != nil {
		return err
	}
	if k == HIP {
		return r.hip.MemcpySync(dev, dst, src, n)
	}
	return r.drv.MemcpySync(dev, dst, src, n)
}

// HostUnregister undoes HostRegister.
func (r *Runtime) HostUnregister(p uintptr) error {
	k, err := r.load(CUDA)
	if err != nil {
		return err
	}
	if k == HIP {
		return r.hip.HostUnregister(p)
	}
	return r.drv.HostUnregister(p)
}

// maxAllocations bounds the driver allocations one registration may span.
const maxAllocations = descriptor.MaxChunks

// Classify implements engine.MemoryClassifier:
//
//   - a "cuda" location needs the driver; without one the registration is
//     refused (engine.ErrNotSupported);
//   - any other location is asked of the driver only when the process has
//     it loaded already (no device memory can exist otherwise);
//   - device memory at a "cpu" location is refused
//     (engine.ErrInvalidArgument): it is never memcpy'd or handed to the
//     kernel as host memory;
//   - device memory must be device memory of one device from end to end
//     (it may span several allocations: PyTorch's expandable segments);
//   - cuMemAlloc memory gets its legacy IPC handle, one per allocation
//     when the range spans several (MemoryInfo.Chunks); VMM memory its
//     shareable handle types, and its fabric handles (one per allocation)
//     when it may be shared as fabric memory.
func (r *Runtime) Classify(addr uintptr, length uint64, location string) (engine.MemoryInfo, error) {
	wantGPU := IsGPULocation(location)
	var k Kind
	if wantGPU {
		var err error
		if k, err = r.load(locationKind(location)); err != nil {
			return engine.MemoryInfo{}, fmt.Errorf("register at %q: %w", location, err)
		}
	} else if k = r.loadedKind(); k == "" {
		return engine.MemoryInfo{}, nil
	}
	if k == HIP {
		return r.classifyHIP(addr, length, location, wantGPU)
	}
	d := r.drv
	pi, err := d.Pointer(uint64(addr))
	if err != nil {
		return engine.MemoryInfo{}, fmt.Errorf("classify %#x: %w: %w", addr, engine.ErrInvalidArgument, err)
	}
	switch {
	case pi.Type == 0:
		if wantGPU {
			r.log.Debug("host memory registered at a cuda location; treated as host memory", "addr", addr, "location", location)
		}
		return engine.MemoryInfo{}, nil
	case pi.Type == cuda.MemoryTypeHost:
		return engine.MemoryInfo{Kind: engine.MemoryPinned}, nil
	case pi.Managed:
		return engine.MemoryInfo{Kind: engine.MemoryManaged, Device: pi.Device, AllocBase: pi.RangeStart, AllocSize: pi.RangeSize}, nil
	}
	if l := strings.ToLower(location); strings.HasPrefix(l, "cpu") {
		return engine.MemoryInfo{}, fmt.Errorf("%#x+%d is memory of CUDA device %d, registered as %q: %w",
			addr, length, pi.Device, location, engine.ErrInvalidArgument)
	}
	info := engine.MemoryInfo{Kind: engine.MemoryDevice, Device: pi.Device, AllocBase: pi.RangeStart, AllocSize: pi.RangeSize}
	if pi.MappingBase != 0 {
		info.AllocBase, info.AllocSize = pi.MappingBase, pi.MappingSize
	}
	chunks, err := walk(d, pi, uint64(addr), length)
	if err != nil {
		return engine.MemoryInfo{}, err
	}
	single, legacy, handles := len(chunks) == 1, true, ^uint64(0)
	for _, c := range chunks {
		legacy = legacy && c.legacy
		handles &= c.handles
	}
	switch {
	case legacy && single:
		h, err := d.IPCGetHandle(pi.Device, uint64(addr))
		if err != nil {
			r.log.Warn("device memory without a legacy IPC handle; same-host peers stage it", "addr", addr, "err", err)
			break
		}
		info.Share = engine.ShareLegacyIPC
		info.Handle = append([]byte(nil), h.Reserved[:]...)
	case legacy:
		// One legacy IPC handle per allocation.
		out := make([]engine.MemoryChunk, 0, len(chunks))
		for _, c := range chunks {
			h, err := d.IPCGetHandle(pi.Device, c.base)
			if err != nil {
				r.log.Warn("device memory without a legacy IPC handle; same-host peers stage it", "addr", addr, "allocation", c.base, "err", err)
				out = nil
				break
			}
			out = append(out, engine.MemoryChunk{Base: c.base, Size: c.size, Handle: append([]byte(nil), h.Reserved[:]...)})
		}
		if out != nil {
			info.Share, info.Chunks = engine.ShareLegacyIPC, out
		}
	case handles != 0:
		if handles&cuda.HandlePosixFD != 0 {
			info.Share |= engine.SharePosixFD
			if !single {
				// The layout, for the importer to map the allocations
				// side by side; the owner exports each on request.
				for _, c := range chunks {
					info.Chunks = append(info.Chunks, engine.MemoryChunk{Base: c.base, Size: c.size})
				}
			}
		}
		if handles&cuda.HandleFabric != 0 {
			r.shareFabric(d, &info, chunks, single, addr)
		}
	}
	return info, nil
}

// shareFabric adds the fabric handle of each allocation of VMM memory to
// info (one: Handle; several: Chunks).
func (r *Runtime) shareFabric(d *cuda.Driver, info *engine.MemoryInfo, chunks []allocation, single bool, addr uintptr) {
	if single {
		fh, err := d.ExportFabric(uint64(addr))
		if err != nil {
			r.log.Warn("VMM memory without a fabric handle", "addr", addr, "err", err)
			return
		}
		info.Share |= engine.ShareFabric
		info.Handle = append([]byte(nil), fh.Data[:]...)
		return
	}
	out := make([]engine.MemoryChunk, 0, len(chunks))
	for _, c := range chunks {
		fh, err := d.ExportFabric(c.base)
		if err != nil {
			r.log.Warn("VMM memory without a fabric handle", "addr", addr, "allocation", c.base, "err", err)
			return
		}
		out = append(out, engine.MemoryChunk{Base: c.base, Size: c.size, Handle: append([]byte(nil), fh.Data[:]...)})
	}
	info.Share |= engine.ShareFabric
	info.Chunks = out
}

// allocation is one driver allocation (VMM memory: one mapping) under a
// registered range.
type allocation struct {
	base, size uint64
	legacy     bool   // has a legacy IPC handle (cuMemAlloc memory)
	handles    uint64 // shareable handle types (VMM memory)
}

// walk checks that [addr, addr+length) is device memory of pi's device from
// end to end and returns the allocations it spans, in address order.
func walk(d *cuda.Driver, pi cuda.PointerInfo, addr, length uint64) ([]allocation, error) {
	end := addr + length
	cur := pi
	var out []allocation
	for n := 0; ; n++ {
		base, size := cur.RangeStart, cur.RangeSize
		if cur.MappingBase != 0 {
			base, size = cur.MappingBase, cur.MappingSize
		}
		if size == 0 || base+size <= addr || (n > 0 && base != out[n-1].base+out[n-1].size) {
			return nil, fmt.Errorf("classify %#x+%d: the driver reports no extent for device memory at %#x: %w", addr, length, base, engine.ErrInvalidArgument)
		}
		out = append(out, allocation{base: base, size: size, legacy: cur.LegacyIPC, handles: cur.HandleTypes})
		next := base + size
		if next >= end {
			return out, nil
		}
		if n+1 >= maxAllocations {
			return nil, fmt.Errorf("classify %#x+%d: spans more than %d allocations: %w", addr, length, maxAllocations, engine.ErrInvalidArgument)
		}
		var err error
		if cur, err = d.Pointer(next); err != nil {
			return nil, fmt.Errorf("classify %#x: %w: %w", next, engine.ErrInvalidArgument, err)
		}
		if cur.Type != cuda.MemoryTypeDevice || cur.Managed || cur.Device != pi.Device {
			return nil, fmt.Errorf("%#x+%d is not device memory of CUDA device %d from end to end (at %#x): %w",
				addr, length, pi.Device, next, engine.ErrInvalidArgument)
		}
	}
}

// ErrNoGPU is returned by transports asked to move device memory without
// a GPU runtime.
var ErrNoGPU = errors.New("no GPU runtime")

// ipcKey identifies a legacy IPC mapping of the process: the handle and
// the device whose context opened it.
type ipcKey struct {
	dev int
	h   cuda.IPCHandle
}

type ipcEntry struct {
	base uint64
	refs int
}

var ipcMaps = struct {
	sync.Mutex
	m map[ipcKey]*ipcEntry
}{m: make(map[ipcKey]*ipcEntry)}

// OpenIPC maps the allocation a legacy IPC handle names (another
// process's) for device dev and returns its base address here. Mappings
// are shared by the whole process and counted: every OpenIPC needs one
// CloseIPC.
func (r *Runtime) OpenIPC(dev int, h cuda.IPCHandle) (uint64, error) {
	k, err := r.load(CUDA)
	if err != nil {
		return 0, err
	}
	key := ipcKey{dev: dev, h: h}
	ipcMaps.Lock()
	defer ipcMaps.Unlock()
	if e := ipcMaps.m[key]; e != nil {
		e.refs++
		return e.base, nil
	}
	var base uint64
	if k == HIP {
		base, err = r.hip.IPCOpen(dev, hip.IPCHandle{Reserved: h.Reserved})
	} else {
		base, err = r.drv.IPCOpen(dev, h)
	}
	if err != nil {
		return 0, err
	}
	ipcMaps.m[key] = &ipcEntry{base: base, refs: 1}
	return base, nil
}

// CloseIPC drops a reference taken by OpenIPC; the last one unmaps.
func (r *Runtime) CloseIPC(dev int, h cuda.IPCHandle) {
	k := ipcKey{dev: dev, h: h}
	ipcMaps.Lock()
	defer ipcMaps.Unlock()
	e := ipcMaps.m[k]
	if e == nil {
		return
	}
	if e.refs--; e.refs > 0 {
		return
	}
	delete(ipcMaps.m, k)
	var err error
	switch r.Kind() {
	case HIP:
		err = r.hip.IPCClose(dev, e.base)
	case CUDA:
		err = r.drv.IPCClose(dev, e.base)
	}
	if err != nil {
		r.log.Warn("closing a GPU IPC mapping failed", "runtime", r.Kind(), "device", dev, "err", err)
	}
}

// RuntimeOf returns the GPU runtime an engine classifies memory with (the
// one engine/stack sets as its Config.Memory), or nil.
func RuntimeOf(e *engine.Engine) *Runtime {
	rt, _ := e.Config().Memory.(*Runtime)
	return rt
}

// DeviceOf returns the device whose memory p is, on the process's GPU
// runtime (either binding), and false for host memory, for a pointer the
// runtime does not know, or when no runtime loads.
func (r *Runtime) DeviceOf(p uint64) (int, bool) {
	k, err := r.load(CUDA)
	if err != nil {
		return 0, false
	}
	if k == HIP {
		pi, err := r.hip.Pointer(p)
		if err != nil || (pi.Type != hip.MemoryTypeDevice && !pi.Managed) {
			return 0, false
		}
		return pi.Device, true
	}
	pi, err := r.drv.Pointer(p)
	if err != nil || pi.Type != cuda.MemoryTypeDevice {
		return 0, false
	}
	return pi.Device, true
}
