package hip

import (
	"fmt"
	"unsafe"

	"github.com/ebitengine/purego"
)

// IPCHandle is a hipIpcMemHandle_t (64 bytes, passed by value to
// hipIpcOpenMemHandle).
type IPCHandle struct{ Reserved [64]byte }

// allocProp is hipMemAllocationProp (32 bytes).
type allocProp struct {
	typ        int32 // hipMemAllocationTypePinned = 1
	handleType int32 // hipMemAllocationHandleType bits
	locType    int32 // hipMemLocationTypeDevice = 1
	locID      int32
	_          uintptr // win32HandleMetaData
	_          uint8   // compressionType
	_          uint8   // gpuDirectRDMACapable
	_          uint16  // usage
	_          [4]byte // padding to the struct's 8-byte alignment
}

// accessDesc is hipMemAccessDesc (12 bytes).
type accessDesc struct {
	locType int32
	locID   int32
	flags   int32 // hipMemAccessFlagsProtReadWrite = 3
}

// pointerAttrs is hipPointerAttribute_t of ROCm 6 (32 bytes).
type pointerAttrs struct {
	typ       uint32 // hipMemoryType
	device    int32
	_         uintptr // devicePointer
	_         uintptr // hostPointer
	isManaged int32
	_         uint32 // allocationFlags
}

// funcs are the typed entry points, bound with purego. The optional ones
// are nil when the runtime lacks them.
type funcs struct {
	init                func(flags uint32) Result
	runtimeGetVersion   func(v *int32) Result
	getErrorName        func(c Result) *byte
	getDeviceCount      func(n *int32) Result
	getDevice           func(dev *int32) Result
	setDevice           func(dev int32) Result
	deviceGetAttribute  func(v *int32, attr, dev int32) Result
	deviceGetName       func(buf *byte, n, dev int32) Result
	deviceGetPCIBusID   func(buf *byte, n, dev int32) Result
	deviceTotalMem      func(b *uint64, dev int32) Result
	deviceCanAccessPeer func(can *int32, dev, peer int32) Result
	enablePeerAccess    func(peer int32, flags uint32) Result
	malloc              func(p *uint64, n uint64) Result
	free                func(p uint64) Result
	mallocManaged       func(p *uint64, n uint64, flags uint32) Result
	hostMalloc          func(p *uintptr, n uint64, flags uint32) Result
	hostFree            func(p uintptr) Result
	hostRegister        func(p uintptr, n uint64, flags uint32) Result
	hostUnregister      func(p uintptr) Result
	memGetAddressRange  func(base *uint64, size *uint64, p uint64) Result
	pointerGetAttrs     func(a *pointerAttrs, p uint64) Result
	memset              func(p uint64, v int32, n uint64) Result
	memcpy              func(dst, src, n uint64, kind int32) Result
	memcpyAsync         func(dst, src, n uint64, kind int32, s uintptr) Result
	streamCreate        func(s *uintptr, flags uint32) Result
	streamDestroy       func(s uintptr) Result
	streamSynchronize   func(s uintptr) Result
	eventCreate         func(e *uintptr, flags uint32) Result
	eventDestroy        func(e uintptr) Result
	eventRecord         func(e, s uintptr) Result
	eventQuery          func(e uintptr) Result
	eventSynchronize    func(e uintptr) Result
	ipcGetMemHandle     func(h *IPCHandle, p uint64) Result
	ipcOpenMemHandle    func(p *uint64, h IPCHandle, flags uint32) Result
	ipcCloseMemHandle   func(p uint64) Result

	// VMM and dma-buf (optional).
	memGetGranularity  func(g *uint64, prop *allocProp, option int32) Result
	memCreate          func(h *uint64, size uint64, prop *allocProp, flags uint64) Result
	memRelease         func(h uint64) Result
	memAddressReserve  func(p *uint64, size, align, addr, flags uint64) Result
	memAddressFree     func(p, size uint64) Result
	memMap             func(p, size, offset, h, flags uint64) Result
	memSetAccess       func(p, size uint64, desc *accessDesc, count uint64) Result
	memUnmap           func(p, size uint64) Result
	memExportShareable func(out unsafe.Pointer, h uint64, typ int32, flags uint64) Result
	memImportShareable func(h *uint64, os uintptr, typ int32) Result
	// memImportShareablePtr is the same entry point as ROCm before 7.1
	// takes it: a pointer to the int holding the fd.
	memImportShareablePtr func(h *uint64, os *int32, typ int32) Result
	memRetainAllocHandle  func(h *uint64, p uint64) Result
	memGetHandleForAR     func(out unsafe.Pointer, p, size uint64, typ int32, flags uint64) Result
}

// resolve binds every entry point: a missing required one fails the load
// (ErrUnavailable), a missing optional one stays nil.
func (r *Runtime) resolve() error {
	f := &r.f
	for _, e := range []struct {
		name     string
		fptr     any
		optional bool
	}{
		{"hipInit", &f.init, false},
		{"hipRuntimeGetVersion", &f.runtimeGetVersion, true},
		{"hipGetErrorName", &f.getErrorName, true},
		{"hipGetDeviceCount", &f.getDeviceCount, false},
		{"hipGetDevice", &f.getDevice, false},
		{"hipSetDevice", &f.setDevice, false},
		{"hipDeviceGetAttribute", &f.deviceGetAttribute, false},
		{"hipDeviceGetName", &f.deviceGetName, false},
		{"hipDeviceGetPCIBusId", &f.deviceGetPCIBusID, false},
		{"hipDeviceTotalMem", &f.deviceTotalMem, false},
		{"hipDeviceCanAccessPeer", &f.deviceCanAccessPeer, false},
		{"hipDeviceEnablePeerAccess", &f.enablePeerAccess, false},
		{"hipMalloc", &f.malloc, false},
		{"hipFree", &f.free, false},
		{"hipMallocManaged", &f.mallocManaged, true},
		{"hipHostMalloc", &f.hostMalloc, false},
		{"hipHostFree", &f.hostFree, false},
		{"hipHostRegister", &f.hostRegister, false},
		{"hipHostUnregister", &f.hostUnregister, false},
		{"hipMemGetAddressRange", &f.memGetAddressRange, false},
		{"hipPointerGetAttributes", &f.pointerGetAttrs, false},
		{"hipMemset", &f.memset, false},
		{"hipMemcpy", &f.memcpy, false},
		{"hipMemcpyAsync", &f.memcpyAsync, false},
		{"hipStreamCreateWithFlags", &f.streamCreate, false},
		{"hipStreamDestroy", &f.streamDestroy, false},
		{"hipStreamSynchronize", &f.streamSynchronize, false},
		{"hipEventCreateWithFlags", &f.eventCreate, false},
		{"hipEventDestroy", &f.eventDestroy, false},
		{"hipEventRecord", &f.eventRecord, false},
		{"hipEventQuery", &f.eventQuery, false},
		{"hipEventSynchronize", &f.eventSynchronize, false},
		{"hipIpcGetMemHandle", &f.ipcGetMemHandle, false},
		{"hipIpcOpenMemHandle", &f.ipcOpenMemHandle, false},
		{"hipIpcCloseMemHandle", &f.ipcCloseMemHandle, false},
		{"hipMemGetAllocationGranularity", &f.memGetGranularity, true},
		{"hipMemCreate", &f.memCreate, true},
		{"hipMemRelease", &f.memRelease, true},
		{"hipMemAddressReserve", &f.memAddressReserve, true},
		{"hipMemAddressFree", &f.memAddressFree, true},
		{"hipMemMap", &f.memMap, true},
		{"hipMemSetAccess", &f.memSetAccess, true},
		{"hipMemUnmap", &f.memUnmap, true},
		{"hipMemExportToShareableHandle", &f.memExportShareable, true},
		{"hipMemImportFromShareableHandle", &f.memImportShareable, true},
		{"hipMemImportFromShareableHandle", &f.memImportShareablePtr, true},
		{"hipMemRetainAllocationHandle", &f.memRetainAllocHandle, true},
		{"hipMemGetHandleForAddressRange", &f.memGetHandleForAR, true},
	} {
		p, err := purego.Dlsym(r.lib, e.name)
		if err != nil || p == 0 {
			if e.optional {
				continue
			}
			return fmt.Errorf("load %s: no %s: %w", r.path, e.name, ErrUnavailable)
		}
		purego.RegisterFunc(e.fptr, p)
	}
	return nil
}

// hasVMM reports whether every VMM entry point is present.
func (f *funcs) hasVMM() bool {
	return f.memGetGranularity != nil && f.memCreate != nil && f.memRelease != nil && f.memAddressReserve != nil &&
		f.memAddressFree != nil && f.memMap != nil && f.memSetAccess != nil && f.memUnmap != nil &&
		f.memExportShareable != nil && f.memImportShareable != nil && f.memRetainAllocHandle != nil
}
