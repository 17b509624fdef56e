package engine

import (
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/kvferry/kvferry/engine/descriptor"
)

// MemoryKind is the kind of a registered region's memory. It is decided
// once, at registration, by the engine's MemoryClassifier (the CUDA driver
// through engine/gpu), and travels with the Region: transports ask the
// region, never the driver (DESIGN.md decision 11).
type MemoryKind uint8

// Memory kinds.
const (
	// MemoryHost is pageable host memory (or memory no driver knows).
	MemoryHost MemoryKind = iota
	// MemoryPinned is page-locked host memory the CUDA driver knows
	// (cuMemHostAlloc, cuMemHostRegister): the CPU touches it, and the GPU
	// copies to and from it at full speed.
	MemoryPinned
	// MemoryDevice is GPU memory: the CPU cannot touch it; only CUDA
	// copies (or a NIC with GPUDirect) can.
	MemoryDevice
	// MemoryManaged is CUDA managed memory: the owning process's CPU and
	// its GPUs touch it (pages migrate on fault); other processes cannot
	// reach it through the kernel's cross-memory calls.
	MemoryManaged
)

func (k MemoryKind) String() string {
	switch k {
	case MemoryHost:
		return "host"
	case MemoryPinned:
		return "pinned"
	case MemoryDevice:
		return "device"
	case MemoryManaged:
		return "managed"
	}
	return fmt.Sprintf("memory(%d)", uint8(k))
}

// HostAccessible reports whether the owning process's CPU may read and
// write the memory directly (memcpy, writev, readv).
func (k MemoryKind) HostAccessible() bool { return k != MemoryDevice }

// GPU reports device or managed memory.
func (k MemoryKind) GPU() bool { return k == MemoryDevice || k == MemoryManaged }

// ShareKind says how another process of this host may map GPU memory.
type ShareKind uint8

// Share kinds (a set).
const (
	// ShareLegacyIPC: cuIpcGetMemHandle / cuIpcOpenMemHandle (memory from
	// cuMemAlloc / cudaMalloc); MemoryInfo.Handle holds the handle.
	ShareLegacyIPC ShareKind = 1 << iota
	// SharePosixFD: VMM memory (cuMemCreate) exportable as a POSIX file
	// descriptor, passed over a Unix socket.
	SharePosixFD
	// ShareFabric: VMM memory exportable as a fabric handle (MNNVL, IMEX);
	// MemoryInfo.Handle holds it when the region is one allocation.
	ShareFabric
)

// MemoryInfo is what classification found out about a registered range.
// Region embeds it.
type MemoryInfo struct {
	// Kind is the memory kind.
	Kind MemoryKind
	// Device is the CUDA device ordinal of device and managed memory (0
	// for host memory).
	Device int
	// Share says how same-host processes may map device memory.
	Share ShareKind
	// AllocBase and AllocSize give the driver allocation (for VMM memory:
	// the mapping) holding the start of the range.
	AllocBase, AllocSize uint64
	// Handle is the 64-byte handle a same-host peer opens the allocation
	// with (legacy IPC, or fabric): what Mooncake publishes as shm_name.
	Handle []byte
	// Chunks lists the allocations of device memory that spans several
	// (PyTorch's expandable segments, adjacent cudaMalloc ranges), in
	// address order, each with its handle where it is shared by handle;
	// Handle is then nil. Nil for a range inside one allocation.
	Chunks []MemoryChunk
}

// MemoryChunk is one driver allocation under a registered range.
type MemoryChunk struct {
	// Base and Size give the allocation (VMM memory: its mapping).
	Base, Size uint64
	// Handle is its legacy IPC or fabric handle (nil for none).
	Handle []byte
}

// MemoryClassifier classifies memory at registration. location is the
// registration's location string ("cpu:0", "cuda:1", "*", ...). An error
// refuses the registration (wrapping ErrInvalidArgument for memory that does
// not match its location, ErrNotSupported when no driver can tell).
type MemoryClassifier interface {
	Classify(addr uintptr, length uint64, location string) (MemoryInfo, error)
}

// IsCUDALocation reports whether a location string names GPU memory
// ("cuda", "cuda:N").
func IsCUDALocation(location string) bool {
	l := strings.ToLower(strings.TrimSpace(location))
	return l == "cuda" || strings.HasPrefix(l, "cuda:")
}

// classify sets the memory info of every region before registration.
func (e *Engine) classify(rs []*Region) error {
	for _, r := range rs {
		if e.cfg.Memory == nil {
			if IsCUDALocation(r.Location) {
				return fmt.Errorf("register %#x+%d at %q: no CUDA driver in this process: %w", r.Addr, r.Length, r.Location, ErrNotSupported)
			}
			r.MemoryInfo = MemoryInfo{}
			continue
		}
		info, err := e.cfg.Memory.Classify(r.Addr, r.Length, r.Location)
		if err != nil {
			return fmt.Errorf("register %#x+%d at %q: %w", r.Addr, r.Length, r.Location, err)
		}
		r.MemoryInfo = info
	}
	return nil
}

// describeBuffer is the descriptor entry of region r: host memory as before
// (the segment name), GPU memory with its location, kind and IPC handle in
// Mooncake's shm_name form.
func (e *Engine) describeBuffer(r *Region) descriptor.Buffer {
	b := descriptor.Buffer{Name: e.name, Addr: uint64(r.Addr), Length: r.Length}
	if !r.Kind.GPU() {
		return b
	}
	b.Name = fmt.Sprintf("cuda:%d", r.Device)
	b.Mem = descriptor.MemDevice
	if r.Kind == MemoryManaged {
		b.Mem = descriptor.MemManaged
	}
	switch {
	case len(r.Handle) > 0 && uint64(r.Addr) == r.AllocBase:
		b.ShmName = strings.ToUpper(hex.EncodeToString(r.Handle))
	case len(r.Handle) > 0:
		// Mooncake's nvlink peers map a shm_name's allocation at the
		// buffer's address (they assume registrations start where their
		// allocation does) and would move bytes at the wrong offsets: a
		// buffer inside its allocation publishes the handle as its one
		// chunk instead, which kvferry peers open and Mooncake's skip.
		b.Chunks = []descriptor.Chunk{{Addr: r.AllocBase, Size: r.AllocSize, Handle: strings.ToUpper(hex.EncodeToString(r.Handle))}}
	}
	for _, c := range r.Chunks {
		dc := descriptor.Chunk{Addr: c.Base, Size: c.Size}
		if len(c.Handle) > 0 {
			dc.Handle = strings.ToUpper(hex.EncodeToString(c.Handle))
		}
		b.Chunks = append(b.Chunks, dc)
	}
	b.Share = r.Share.String()
	return b
}

// String lists the share kinds as a descriptor's kvferry_share does
// ("ipc,fd,fabric"; "" for none).
func (s ShareKind) String() string {
	var out []string
	for _, x := range []struct {
		k ShareKind
		n string
	}{{ShareLegacyIPC, "ipc"}, {SharePosixFD, "fd"}, {ShareFabric, "fabric"}} {
		if s&x.k != 0 {
			out = append(out, x.n)
		}
	}
	return strings.Join(out, ",")
}

// ParseShare reads a buffer's share kinds: its kvferry_share list, or for
// a buffer without one (a Mooncake peer's), a legacy IPC handle when it
// has a shm_name.
func ParseShare(b descriptor.Buffer) ShareKind {
	if b.Share == "" {
		if b.ShmName != "" {
			return ShareLegacyIPC
		}
		return 0
	}
	var s ShareKind
	for _, t := range strings.Split(b.Share, ",") {
		switch strings.TrimSpace(t) {
		case "ipc":
			s |= ShareLegacyIPC
		case "fd":
			s |= SharePosixFD
		case "fabric":
			s |= ShareFabric
		}
	}
	return s
}

// HasDeviceMemory reports whether any registered region is device memory
// (the fast check transports make before asking regions).
func (e *Engine) HasDeviceMemory() bool { return e.reg.devices.Load() > 0 }

// MemoryCarrier is implemented by transports that carry some memory kinds
// only, or GPU memory: the selector offers a request to such a transport
// only when Carries(p, local, remote) holds for the kinds of its two ends
// (local: the source region's; remote: the target buffer's, from the
// peer's descriptor). A transport that does not implement it carries
// host-accessible memory only (host, pinned, managed) on both ends.
type MemoryCarrier interface {
	Carries(p *Peer, e Ends) bool
}

// Ends describes the memory at the two ends of a request.
type Ends struct {
	// Local is the kind of the local (source or destination) memory.
	Local MemoryKind
	// Remote is the kind of the target memory (from the peer's
	// descriptor; from the registry for the own segment).
	Remote MemoryKind
	// RemoteShare says how the target's owner lets same-host processes
	// map it (device memory only).
	RemoteShare ShareKind
	// Op and SizeClass (1 + the request's size class) are set only where
	// the engine measures alternative routes (device memory at exactly one
	// end, see Alternative); zero otherwise.
	Op        OpCode
	SizeClass uint8
}

func carries(t Transport, p *Peer, e Ends) bool {
	if mc, ok := t.(MemoryCarrier); ok {
		return mc.Carries(p, e)
	}
	return e.Local.HostAccessible() && e.Remote.HostAccessible()
}

// route is a transport choice made during one submit.
type route struct {
	p     *Peer
	ends  Ends
	g     int        // index of the group
	probe *pathProbe // measures a measured route (nil otherwise)
}

// localKind is the kind of the local registered memory holding
// [addr, addr+n) (host when none does).
func (e *Engine) localKind(addr, n uint64) MemoryKind {
	if r := e.reg.find(addr, n); r != nil {
		return r.Kind
	}
	return MemoryHost
}

// gpuScan caches whether a descriptor lists GPU buffers.
type gpuScan struct {
	d   *descriptor.Segment
	has bool
}

// hasGPU reports whether p's current descriptor lists GPU buffers (scanned
// once per descriptor).
func (p *Peer) hasGPU() bool {
	d := p.Descriptor()
	if d == nil {
		return false
	}
	if g := p.gpu.Load(); g != nil && g.d == d {
		return g.has
	}
	g := &gpuScan{d: d}
	for _, b := range d.Buffers {
		if b.GPU() {
			g.has = true
			break
		}
	}
	p.gpu.Store(g)
	return g.has
}

// remoteKind is the kind of p's buffer holding [addr, addr+n) (host when
// no buffer does: the request fails its range check later).
func (p *Peer) remoteKind(addr, n uint64) (MemoryKind, ShareKind) {
	b, ok := p.buffer(addr, n)
	if !ok || !b.GPU() {
		return MemoryHost, 0
	}
	if b.Mem == descriptor.MemManaged {
		return MemoryManaged, 0
	}
	return MemoryDevice, ParseShare(b)
}

// RemoteBuffer returns p's descriptor buffer holding [addr, addr+n).
func (p *Peer) RemoteBuffer(addr, n uint64) (descriptor.Buffer, bool) {
	return p.buffer(addr, n)
}
