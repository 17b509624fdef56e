package hip

import "fmt"

// Device attributes kvferry reads (hipDeviceAttribute_t ordinals of the
// ROCm 6 headers).
const (
	AttrComputeCapMajor = 23
	AttrComputeCapMinor = 61
	AttrPCIBusID        = 67
	AttrPCIDeviceID     = 68
	AttrPCIDomainID     = 69
	AttrUnifiedAddress  = 85
	AttrVMM             = 89
)

// Memory types (hipMemoryType of ROCm 6).
const (
	MemoryTypeUnregistered = 0
	MemoryTypeHost         = 1
	MemoryTypeDevice       = 2
	MemoryTypeManaged      = 3
)

// Flags and enum values the calls pass.
const (
	memcpyDefault      = 4   // hipMemcpyDefault
	streamNonBlocking  = 0x1 // hipStreamNonBlocking
	eventBlockingSync  = 0x1 // hipEventBlockingSync
	eventDisableTiming = 0x2 // hipEventDisableTiming
	hostMallocPortable = 0x1 // hipHostMallocPortable
	hostRegPortable    = 0x1 // hipHostRegisterPortable
	ipcLazyPeerAccess  = 0x1 // hipIpcMemLazyEnablePeerAccess
	memAttachGlobal    = 0x1 // hipMemAttachGlobal
)

// DeviceInfo describes one device.
type DeviceInfo struct {
	Ordinal int
	Name    string
	// PCIBusID is "dddd:bb:dd.f".
	PCIBusID string
	// TotalMem is the device memory in bytes.
	TotalMem uint64
	// UnifiedAddressing: one address space with the host; kvferry needs it.
	UnifiedAddressing bool
	// VMM: hipMemCreate and friends (attribute and entry points);
	// DmaBuf: hipMemGetHandleForAddressRange is present (ROCm has no
	// device attribute for it).
	VMM, DmaBuf bool
	// Arch is the gcnArch as major*10+minor (94 for gfx942, MI300X).
	Arch int
}

// Device returns what the runtime says about device dev.
func (r *Runtime) Device(dev int) (DeviceInfo, error) {
	if err := r.checkDevice(dev); err != nil {
		return DeviceInfo{}, err
	}
	info := DeviceInfo{Ordinal: dev}
	var buf [128]byte
	if err := r.check("hipDeviceGetName", r.f.deviceGetName(&buf[0], int32(len(buf)), int32(dev))); err != nil {
		return info, err
	}
	info.Name = goString(&buf[0])
	if err := r.check("hipDeviceGetPCIBusId", r.f.deviceGetPCIBusID(&buf[0], int32(len(buf)), int32(dev))); err != nil {
		return info, err
	}
	info.PCIBusID = goString(&buf[0])
	if err := r.check("hipDeviceTotalMem", r.f.deviceTotalMem(&info.TotalMem, int32(dev))); err != nil {
		return info, err
	}
	var vals [4]int
	for i, a := range []int{AttrUnifiedAddress, AttrVMM, AttrComputeCapMajor, AttrComputeCapMinor} {
		v, err := r.Attribute(dev, a)
		if err != nil {
			return info, err
		}
		vals[i] = v
	}
	info.UnifiedAddressing = vals[0] != 0
	info.VMM = vals[1] != 0 && r.f.hasVMM()
	info.Arch = 10*vals[2] + vals[3]
	info.DmaBuf = r.f.memGetHandleForAR != nil
	return info, nil
}

// Attribute returns device attribute attr of dev.
func (r *Runtime) Attribute(dev int, attr int) (int, error) {
	if err := r.checkDevice(dev); err != nil {
		return 0, err
	}
	var v int32
	err := r.check("hipDeviceGetAttribute", r.f.deviceGetAttribute(&v, int32(attr), int32(dev)))
	return int(v), err
}

// CanAccessPeer reports whether dev can map peer's memory (xGMI/PCIe P2P).
func (r *Runtime) CanAccessPeer(dev, peer int) (bool, error) {
	if err := r.checkDevice(dev); err != nil {
		return false, err
	}
	if err := r.checkDevice(peer); err != nil {
		return false, err
	}
	var v int32
	err := r.check("hipDeviceCanAccessPeer", r.f.deviceCanAccessPeer(&v, int32(dev), int32(peer)))
	return v != 0, err
}

// EnablePeerAccess lets dev access peer's memory; enabling it twice is not
// an error.
func (r *Runtime) EnablePeerAccess(dev, peer int) error {
	if err := r.checkDevice(peer); err != nil {
		return err
	}
	return r.Do(dev, func() error {
		c := r.f.enablePeerAccess(int32(peer), 0)
		if c == ErrorPeerAccessAlreadyEnabled {
			return nil
		}
		return r.check("hipDeviceEnablePeerAccess", c)
	})
}

// ---- pointers ----

// PointerInfo classifies an address.
type PointerInfo struct {
	// Type is the hipMemoryType: MemoryTypeUnregistered (pageable host
	// memory), MemoryTypeHost (pinned or registered), MemoryTypeDevice,
	// MemoryTypeManaged.
	Type uint32
	// Device is the owning device (-1 for host memory).
	Device int
	// Managed: hipMallocManaged memory.
	Managed bool
	// RangeStart and RangeSize give the allocation holding the address
	// (hipMemGetAddressRange), for device and managed memory.
	RangeStart, RangeSize uint64
}

// Pointer classifies p (hipPointerGetAttributes). ROCm releases before 6.0
// answer hipErrorInvalidValue for memory they do not know; that is
// pageable host memory, as ROCm 6 reports it (hipMemoryTypeUnregistered).
func (r *Runtime) Pointer(p uint64) (PointerInfo, error) {
	var a pointerAttrs
	c := r.f.pointerGetAttrs(&a, p)
	if c == ErrorInvalidValue && p != 0 {
		return PointerInfo{Type: MemoryTypeUnregistered, Device: -1}, nil
	}
	if err := r.check("hipPointerGetAttributes", c); err != nil {
		return PointerInfo{}, err
	}
	pi := PointerInfo{Type: a.typ, Device: int(a.device), Managed: a.isManaged != 0 || a.typ == MemoryTypeManaged}
	switch {
	case pi.Type == MemoryTypeDevice || pi.Managed:
		var err error
		if pi.RangeStart, pi.RangeSize, err = r.AddressRange(p); err != nil {
			return PointerInfo{}, err
		}
	case pi.Type != MemoryTypeHost:
		pi.Type, pi.Device = MemoryTypeUnregistered, -1
	}
	return pi, nil
}

// AddressRange returns the allocation containing p (hipMemGetAddressRange).
func (r *Runtime) AddressRange(p uint64) (base, size uint64, err error) {
	err = r.check("hipMemGetAddressRange", r.f.memGetAddressRange(&base, &size, p))
	return base, size, err
}

// ---- memory ----

// MemAlloc allocates n bytes of device memory on dev (hipMalloc).
func (r *Runtime) MemAlloc(dev int, n uint64) (uint64, error) {
	var p uint64
	err := r.Do(dev, func() error { return r.check("hipMalloc", r.f.malloc(&p, n)) })
	return p, err
}

// MemFree frees memory from MemAlloc or MemAllocManaged.
func (r *Runtime) MemFree(dev int, p uint64) error {
	return r.Do(dev, func() error { return r.check("hipFree", r.f.free(p)) })
}

// MemAllocManaged allocates n bytes of managed memory (hipMallocManaged).
func (r *Runtime) MemAllocManaged(dev int, n uint64) (uint64, error) {
	if r.f.mallocManaged == nil {
		return 0, r.missing("hipMallocManaged")
	}
	var p uint64
	err := r.Do(dev, func() error { return r.check("hipMallocManaged", r.f.mallocManaged(&p, n, memAttachGlobal)) })
	return p, err
}

// HostAlloc allocates n bytes of pinned host memory usable by every
// device (hipHostMalloc, portable).
func (r *Runtime) HostAlloc(n uint64) (uintptr, error) {
	var p uintptr
	err := r.Do(0, func() error { return r.check("hipHostMalloc", r.f.hostMalloc(&p, n, hostMallocPortable)) })
	return p, err
}

// HostFree frees memory from HostAlloc.
func (r *Runtime) HostFree(p uintptr) error {
	return r.Do(0, func() error { return r.check("hipHostFree", r.f.hostFree(p)) })
}

// HostRegister pins n bytes of existing host memory (hipHostRegister).
func (r *Runtime) HostRegister(p uintptr, n uint64) error {
	return r.Do(0, func() error { return r.check("hipHostRegister", r.f.hostRegister(p, n, hostRegPortable)) })
}

// HostUnregister undoes HostRegister.
func (r *Runtime) HostUnregister(p uintptr) error {
	return r.Do(0, func() error { return r.check("hipHostUnregister", r.f.hostUnregister(p)) })
}

// Memset sets n bytes at device address p to v, synchronously.
func (r *Runtime) Memset(dev int, p uint64, v byte, n uint64) error {
	return r.Do(dev, func() error { return r.check("hipMemset", r.f.memset(p, int32(v), n)) })
}

// MemcpySync copies n bytes from src to dst (any kinds, hipMemcpyDefault)
// synchronously with dev current (hipMemcpy).
func (r *Runtime) MemcpySync(dev int, dst, src, n uint64) error {
	return r.Do(dev, func() error { return r.check("hipMemcpy", r.f.memcpy(dst, src, n, memcpyDefault)) })
}

// ---- legacy IPC ----

// IPCGetHandle returns the IPC handle of the hipMalloc allocation holding
// p (on device dev).
func (r *Runtime) IPCGetHandle(dev int, p uint64) (IPCHandle, error) {
	var h IPCHandle
	err := r.Do(dev, func() error { return r.check("hipIpcGetMemHandle", r.f.ipcGetMemHandle(&h, p)) })
	return h, err
}

// IPCOpen maps another process's allocation into this one on device dev
// and returns its base address here.
func (r *Runtime) IPCOpen(dev int, h IPCHandle) (uint64, error) {
	var p uint64
	err := r.Do(dev, func() error {
		return r.check("hipIpcOpenMemHandle", r.f.ipcOpenMemHandle(&p, h, ipcLazyPeerAccess))
	})
	if err == nil && p == 0 {
		err = fmt.Errorf("hipIpcOpenMemHandle: the runtime returned a null mapping: %w", ErrNotSupported)
	}
	return p, err
}

// IPCClose unmaps an address IPCOpen returned.
func (r *Runtime) IPCClose(dev int, p uint64) error {
	return r.Do(dev, func() error { return r.check("hipIpcCloseMemHandle", r.f.ipcCloseMemHandle(p)) })
}
