package cuda

import (
	"fmt"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Device attributes kvferry reads (CUdevice_attribute).
const (
	AttrPCIBusID        = 33
	AttrPCIDeviceID     = 34
	AttrUnifiedAddress  = 41
	AttrPCIDomainID     = 50
	AttrVMM             = 102
	AttrPosixFDHandles  = 103
	AttrGDRWithVMM      = 110
	AttrGPUDirectRDMA   = 116
	AttrDmaBuf          = 124
	AttrFabricHandles   = 128
	AttrComputeCapMajor = 75
	AttrComputeCapMinor = 76
)

// Flags.
const (
	streamNonBlocking  = 0x1 // CU_STREAM_NON_BLOCKING
	eventBlockingSync  = 0x1 // CU_EVENT_BLOCKING_SYNC
	eventDisableTiming = 0x2 // CU_EVENT_DISABLE_TIMING
	hostAllocPortable  = 0x1 // CU_MEMHOSTALLOC_PORTABLE
	hostRegPortable    = 0x1 // CU_MEMHOSTREGISTER_PORTABLE
	ipcLazyPeerAccess  = 0x1 // CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
	memAttachGlobal    = 0x1 // CU_MEM_ATTACH_GLOBAL
	accessReadWrite    = 3   // CU_MEM_ACCESS_FLAGS_PROT_READWRITE
)

// DeviceInfo describes one device.
type DeviceInfo struct {
	Ordinal int
	Name    string
	// PCIBusID is "dddd:bb:dd.f".
	PCIBusID string
	// TotalMem is the device memory in bytes.
	TotalMem uint64
	// UnifiedAddressing: one address space with the host (every 64-bit
	// Linux device); kvferry needs it.
	UnifiedAddressing bool
	// VMM: cuMemCreate and friends; PosixFD and Fabric: which shareable
	// handles VMM memory may carry; GPUDirectRDMA and DmaBuf: what an RDMA
	// NIC may register.
	VMM, PosixFD, Fabric, GPUDirectRDMA, DmaBuf bool
	// ComputeCapability is major*10+minor.
	ComputeCapability int
}

// Device returns what the driver says about device dev.
func (d *Driver) Device(dev int) (DeviceInfo, error) {
	if err := d.checkDevice(dev); err != nil {
		return DeviceInfo{}, err
	}
	info := DeviceInfo{Ordinal: dev}
	attr := func(a int32) (int, error) {
		var v int32
		if err := d.check("cuDeviceGetAttribute", d.f.deviceGetAttribute(&v, a, int32(dev))); err != nil {
			return 0, err
		}
		return int(v), nil
	}
	var buf [128]byte
	if err := d.check("cuDeviceGetName", d.f.deviceGetName(&buf[0], int32(len(buf)), int32(dev))); err != nil {
		return info, err
	}
	info.Name = goString(&buf[0])
	if err := d.check("cuDeviceGetPCIBusId", d.f.deviceGetPCIBusID(&buf[0], int32(len(buf)), int32(dev))); err != nil {
		return info, err
	}
	info.PCIBusID = goString(&buf[0])
	if err := d.check("cuDeviceTotalMem", d.f.deviceTotalMem(&info.TotalMem, int32(dev))); err != nil {
		return info, err
	}
	for _, a := range []struct {
		attr int32
		to   *bool
	}{{AttrUnifiedAddress, &info.UnifiedAddressing}, {AttrVMM, &info.VMM}, {AttrPosixFDHandles, &info.PosixFD},
		{AttrFabricHandles, &info.Fabric}, {AttrGPUDirectRDMA, &info.GPUDirectRDMA}, {AttrDmaBuf, &info.DmaBuf}} {
		v, err := attr(a.attr)
		if err != nil {
			return info, err
		}
		*a.to = v != 0
	}
	major, err := attr(AttrComputeCapMajor)
	if err != nil {
		return info, err
	}
	minor, err := attr(AttrComputeCapMinor)
	if err != nil {
		return info, err
	}
	info.ComputeCapability = 10*major + minor
	if d.f.memCreate == nil {
		info.VMM, info.PosixFD, info.Fabric = false, false, false
	}
	return info, nil
}

// Attribute returns device attribute attr of dev.
func (d *Driver) Attribute(dev int, attr int) (int, error) {
	if err := d.checkDevice(dev); err != nil {
		return 0, err
	}
	var v int32
	err := d.check("cuDeviceGetAttribute", d.f.deviceGetAttribute(&v, int32(attr), int32(dev)))
	return int(v), err
}

// CanAccessPeer reports whether dev can map peer's memory (NVLink/PCIe P2P).
func (d *Driver) CanAccessPeer(dev, peer int) (bool, error) {
	if err := d.checkDevice(dev); err != nil {
		return false, err
	}
	if err := d.checkDevice(peer); err != nil {
		return false, err
	}
	var v int32
	err := d.check("cuDeviceCanAccessPeer", d.f.deviceCanAccessPeer(&v, int32(dev), int32(peer)))
	return v != 0, err
}

// EnablePeerAccess lets dev's context access peer's memory; enabling it
// twice is not an error.
func (d *Driver) EnablePeerAccess(dev, peer int) error {
	pc, err := d.primary(peer)
	if err != nil {
		return err
	}
	return d.Do(dev, func() error {
		r := d.f.ctxEnablePeerAccess(pc, 0)
		if r == ErrorPeerAccessAlreadyEnabled {
			return nil
		}
		return d.check("cuCtxEnablePeerAccess", r)
	})
}

// ---- memory ----

// MemAlloc allocates n bytes of device memory on dev (cuMemAlloc).
func (d *Driver) MemAlloc(dev int, n uint64) (uint64, error) {
	var p uint64
	err := d.Do(dev, func() error { return d.check("cuMemAlloc", d.f.memAlloc(&p, n)) })
	return p, err
}

// MemFree frees memory from MemAlloc or MemAllocManaged.
func (d *Driver) MemFree(dev int, p uint64) error {
	return d.Do(dev, func() error { return d.check("cuMemFree", d.f.memFree(p)) })
}

// MemAllocManaged allocates n bytes of managed memory (cuMemAllocManaged).
func (d *Driver) MemAllocManaged(dev int, n uint64) (uint64, error) {
	var p uint64
	err := d.Do(dev, func() error { return d.check("cuMemAllocManaged", d.f.memAllocManaged(&p, n, memAttachGlobal)) })
	return p, err
}

// HostAlloc allocates n bytes of pinned host memory usable by every
// context (cuMemHostAlloc, portable).
func (d *Driver) HostAlloc(n uint64) (uintptr, error) {
	var p uintptr
	err := d.Do(0, func() error { return d.check("cuMemHostAlloc", d.f.memHostAlloc(&p, n, hostAllocPortable)) })
	return p, err
}

// HostFree frees memory from HostAlloc.
func (d *Driver) HostFree(p uintptr) error {
	return d.Do(0, func() error { return d.check("cuMemFreeHost", d.f.memFreeHost(p)) })
}

// HostRegister pins n bytes of existing host memory (cuMemHostRegister).
func (d *Driver) HostRegister(p uintptr, n uint64) error {
	return d.Do(0, func() error { return d.check("cuMemHostRegister", d.f.memHostRegister(p, n, hostRegPortable)) })
}

// HostUnregister undoes HostRegister.
func (d *Driver) HostUnregister(p uintptr) error {
	return d.Do(0, func() error { return d.check("cuMemHostUnregister", d.f.memHostUnregister(p)) })
}

// AddressRange returns the allocation containing p (cuMemGetAddressRange).
func (d *Driver) AddressRange(p uint64) (base, size uint64, err error) {
	err = d.check("cuMemGetAddressRange", d.f.memGetAddressRange(&base, &size, p))
	return base, size, err
}

// Memset sets n bytes at device address p to v, synchronously.
func (d *Driver) Memset(dev int, p uint64, v byte, n uint64) error {
	return d.Do(dev, func() error { return d.check("cuMemsetD8", d.f.memsetD8(p, v, n)) })
}

// MemcpySync copies n bytes from src to dst (any kinds) synchronously
// with dev's context (cuMemcpy).
func (d *Driver) MemcpySync(dev int, dst, src, n uint64) error {
	return d.Do(dev, func() error { return d.check("cuMemcpy", d.f.memcpy(dst, src, n)) })
}

// ---- legacy IPC ----

// IPCGetHandle returns the legacy IPC handle of the cuMemAlloc allocation
// holding p (on device dev).
func (d *Driver) IPCGetHandle(dev int, p uint64) (IPCHandle, error) {
	var h IPCHandle
	err := d.Do(dev, func() error { return d.check("cuIpcGetMemHandle", d.f.ipcGetMemHandle(&h, p)) })
	return h, err
}

// IPCOpen maps another process's allocation into this one on device dev
// and returns its base address here.
func (d *Driver) IPCOpen(dev int, h IPCHandle) (uint64, error) {
	var p uint64
	err := d.Do(dev, func() error { return d.check("cuIpcOpenMemHandle", d.f.ipcOpenMemHandle(&p, h, ipcLazyPeerAccess)) })
	return p, err
}

// IPCClose unmaps an address IPCOpen returned.
func (d *Driver) IPCClose(dev int, p uint64) error {
	return d.Do(dev, func() error { return d.check("cuIpcCloseMemHandle", d.f.ipcCloseMemHandle(p)) })
}

// ---- streams, events ----

// stream makes a non-blocking stream on dev.
func (d *Driver) newStream(dev int) (uintptr, error) {
	var s uintptr
	err := d.Do(dev, func() error { return d.check("cuStreamCreate", d.f.streamCreate(&s, streamNonBlocking)) })
	return s, err
}

func (d *Driver) destroyStream(dev int, s uintptr) {
	_ = d.Do(dev, func() error { return d.check("cuStreamDestroy", d.f.streamDestroy(s)) })
}

// newEvent makes an event whose waiters block instead of spinning.
func (d *Driver) newEvent(dev int) (uintptr, error) {
	var e uintptr
	err := d.Do(dev, func() error {
		return d.check("cuEventCreate", d.f.eventCreate(&e, eventBlockingSync|eventDisableTiming))
	})
	return e, err
}

func (d *Driver) destroyEvent(dev int, e uintptr) {
	_ = d.Do(dev, func() error { return d.check("cuEventDestroy", d.f.eventDestroy(e)) })
}

// ---- stream ordering ----

// StreamGate holds stream at its current end until Open: work queued on
// the stream before the call has completed when Ready fires, and work
// queued after it waits for Open. It runs on the calling thread with that
// thread's current context, as the caller's stream belongs to it (stream
// 0 is the legacy default stream of the thread's current context).
type StreamGate struct {
	ready, done int
	opened      bool
}

// Gate places a gate on stream (a CUstream; 0 = the default stream of the
// calling thread's current context).
func (d *Driver) Gate(stream uintptr) (*StreamGate, error) {
	ready, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("stream gate: eventfd: %w", err)
	}
	done, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(ready)
		return nil, fmt.Errorf("stream gate: eventfd: %w", err)
	}
	arg := newGate(ready, done)
	if arg == 0 {
		unix.Close(ready)
		unix.Close(done)
		return nil, fmt.Errorf("stream gate: out of memory")
	}
	if err := d.check("cuLaunchHostFunc", d.f.launchHostFunc(stream, gateFn(), arg)); err != nil {
		unix.Close(ready)
		unix.Close(done)
		freeC(arg)
		return nil, err
	}
	return &StreamGate{ready: ready, done: done}, nil
}

// Wait waits until the stream reached the gate, at most timeout; false on
// timeout.
func (g *StreamGate) Wait(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		ms := int(time.Until(deadline) / time.Millisecond)
		if ms <= 0 {
			return false
		}
		fds := []unix.PollFd{{Fd: int32(g.ready), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, min(ms, 1000))
		if err == nil && n > 0 {
			return true
		}
	}
}

// Open lets the stream continue. The gate's host function then frees it;
// Open must be called exactly once, even after a failed Wait.
func (g *StreamGate) Open() {
	if g.opened {
		return
	}
	g.opened = true
	one := uint64(1)
	_, _ = unix.Write(g.done, (*[8]byte)(unsafe.Pointer(&one))[:])
}
