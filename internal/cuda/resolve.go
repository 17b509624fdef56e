package cuda

import (
	"fmt"
	"unsafe"

	"github.com/ebitengine/purego"
)

// IPCHandle is a CUipcMemHandle (passed by value to cuIpcOpenMemHandle).
type IPCHandle struct{ Reserved [64]byte }

// FabricHandle is a CUmemFabricHandle.
type FabricHandle struct{ Data [64]byte }

// allocProp is CUmemAllocationProp (32 bytes).
type allocProp struct {
	typ         int32 // CU_MEM_ALLOCATION_TYPE_PINNED = 1
	handleTypes int32 // CUmemAllocationHandleType bits
	locType     int32 // CU_MEM_LOCATION_TYPE_DEVICE = 1
	locID       int32
	_           uintptr // win32HandleMetaData
	_           uint8   // compressionType
	gdrCapable  uint8
	_           uint16   // usage
	_           [4]uint8 // reserved
}

// accessDesc is CUmemAccessDesc (12 bytes).
type accessDesc struct {
	locType int32
	locID   int32
	flags   int32 // CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
}

// funcs are the typed entry points, bound with purego.
type funcs struct {
	init                 func(flags uint32) Result
	getErrorName         func(r Result, s **byte) Result
	deviceGetCount       func(n *int32) Result
	deviceGetAttribute   func(v *int32, attr, dev int32) Result
	deviceGetName        func(buf *byte, n, dev int32) Result
	deviceGetPCIBusID    func(buf *byte, n, dev int32) Result
	deviceTotalMem       func(b *uint64, dev int32) Result
	deviceCanAccessPeer  func(can *int32, dev, peer int32) Result
	primaryCtxRetain     func(ctx *uintptr, dev int32) Result
	primaryCtxRelease    func(dev int32) Result
	ctxPushCurrent       func(ctx uintptr) Result
	ctxPopCurrent        func(ctx *uintptr) Result
	ctxGetCurrent        func(ctx *uintptr) Result
	ctxEnablePeerAccess  func(peer uintptr, flags uint32) Result
	memAlloc             func(p *uint64, n uint64) Result
	memFree              func(p uint64) Result
	memAllocManaged      func(p *uint64, n uint64, flags uint32) Result
	memHostAlloc         func(p *uintptr, n uint64, flags uint32) Result
	memFreeHost          func(p uintptr) Result
	memHostRegister      func(p uintptr, n uint64, flags uint32) Result
	memHostUnregister    func(p uintptr) Result
	memGetAddressRange   func(base, size *uint64, p uint64) Result
	streamCreate         func(s *uintptr, flags uint32) Result
	streamDestroy        func(s uintptr) Result
	streamSynchronize    func(s uintptr) Result
	eventCreate          func(e *uintptr, flags uint32) Result
	eventDestroy         func(e uintptr) Result
	memcpy               func(dst, src, n uint64) Result
	memsetD8             func(dst uint64, v uint8, n uint64) Result
	ipcGetMemHandle      func(h *IPCHandle, p uint64) Result
	ipcOpenMemHandle     func(p *uint64, h IPCHandle, flags uint32) Result
	ipcCloseMemHandle    func(p uint64) Result
	memGetGranularity    func(g *uint64, prop *allocProp, option int32) Result
	memCreate            func(h *uint64, size uint64, prop *allocProp, flags uint64) Result
	memRelease           func(h uint64) Result
	memAddressReserve    func(p *uint64, size, align, addr, flags uint64) Result
	memAddressFree       func(p, size uint64) Result
	memMap               func(p, size, offset, h, flags uint64) Result
	memSetAccess         func(p, size uint64, desc *accessDesc, count uint64) Result
	memUnmap             func(p, size uint64) Result
	memRetainAllocHandle func(h *uint64, p uintptr) Result
	memExportShareable   func(out unsafe.Pointer, h uint64, typ int32, flags uint64) Result
	memImportShareable   func(h *uint64, os uintptr, typ int32) Result
	memImportFabric      func(h *uint64, os *FabricHandle, typ int32) Result
	memGetHandleForRange func(out *int32, p, size uint64, typ int32, flags uint64) Result
	launchHostFunc       func(s, fn, arg uintptr) Result
}

// entry is one entry point: its base name (what cuGetProcAddress takes),
// the export that holds the CUDA 12.0 ABI on old drivers, and where it goes.
type entry struct {
	name     string
	export   string // "" = same as name
	optional bool   // missing on some drivers; the feature is then off
	fn       any    // pointer to a funcs field, or nil
	raw      *uintptr
}

func (d *Driver) entries() []entry {
	f, t := &d.f, &d.tab
	return []entry{
		{name: "cuInit", fn: &f.init},
		{name: "cuGetErrorName", fn: &f.getErrorName},
		{name: "cuDeviceGetCount", fn: &f.deviceGetCount},
		{name: "cuDeviceGetAttribute", fn: &f.deviceGetAttribute},
		{name: "cuDeviceGetName", fn: &f.deviceGetName},
		{name: "cuDeviceGetPCIBusId", fn: &f.deviceGetPCIBusID},
		{name: "cuDeviceTotalMem", export: "cuDeviceTotalMem_v2", fn: &f.deviceTotalMem},
		{name: "cuDeviceCanAccessPeer", fn: &f.deviceCanAccessPeer},
		{name: "cuDevicePrimaryCtxRetain", fn: &f.primaryCtxRetain},
		{name: "cuDevicePrimaryCtxRelease", export: "cuDevicePrimaryCtxRelease_v2", fn: &f.primaryCtxRelease},
		{name: "cuCtxPushCurrent", export: "cuCtxPushCurrent_v2", fn: &f.ctxPushCurrent, raw: t.ptr(&t.tab.ctx_push)},
		{name: "cuCtxPopCurrent", export: "cuCtxPopCurrent_v2", fn: &f.ctxPopCurrent, raw: t.ptr(&t.tab.ctx_pop)},
		{name: "cuCtxGetCurrent", fn: &f.ctxGetCurrent},
		{name: "cuCtxEnablePeerAccess", fn: &f.ctxEnablePeerAccess},
		{name: "cuMemAlloc", export: "cuMemAlloc_v2", fn: &f.memAlloc},
		{name: "cuMemFree", export: "cuMemFree_v2", fn: &f.memFree},
		{name: "cuMemAllocManaged", fn: &f.memAllocManaged},
		{name: "cuMemHostAlloc", fn: &f.memHostAlloc},
		{name: "cuMemFreeHost", fn: &f.memFreeHost},
		{name: "cuMemHostRegister", export: "cuMemHostRegister_v2", fn: &f.memHostRegister},
		{name: "cuMemHostUnregister", fn: &f.memHostUnregister},
		{name: "cuMemGetAddressRange", export: "cuMemGetAddressRange_v2", fn: &f.memGetAddressRange},
		{name: "cuPointerGetAttributes", raw: t.ptr(&t.tab.pointer_attrs)},
		{name: "cuStreamCreate", fn: &f.streamCreate},
		{name: "cuStreamDestroy", export: "cuStreamDestroy_v2", fn: &f.streamDestroy},
		{name: "cuStreamSynchronize", fn: &f.streamSynchronize},
		{name: "cuStreamWaitEvent", raw: t.ptr(&t.tab.stream_wait_event)},
		{name: "cuEventCreate", fn: &f.eventCreate},
		{name: "cuEventDestroy", export: "cuEventDestroy_v2", fn: &f.eventDestroy},
		{name: "cuEventRecord", raw: t.ptr(&t.tab.event_record)},
		{name: "cuEventQuery", raw: t.ptr(&t.tab.event_query)},
		{name: "cuEventSynchronize", raw: t.ptr(&t.tab.event_sync)},
		{name: "cuLaunchHostFunc", fn: &f.launchHostFunc, raw: t.ptr(&t.tab.launch_host_func)},
		{name: "cuMemcpy", fn: &f.memcpy},
		{name: "cuMemcpyAsync", raw: t.ptr(&t.tab.memcpy_async)},
		{name: "cuMemsetD8", export: "cuMemsetD8_v2", fn: &f.memsetD8},
		{name: "cuIpcGetMemHandle", fn: &f.ipcGetMemHandle},
		{name: "cuIpcOpenMemHandle", export: "cuIpcOpenMemHandle_v2", fn: &f.ipcOpenMemHandle},
		{name: "cuIpcCloseMemHandle", fn: &f.ipcCloseMemHandle},
		{name: "cuMemGetAllocationGranularity", optional: true, fn: &f.memGetGranularity},
		{name: "cuMemCreate", optional: true, fn: &f.memCreate},
		{name: "cuMemRelease", optional: true, fn: &f.memRelease},
		{name: "cuMemAddressReserve", optional: true, fn: &f.memAddressReserve},
		{name: "cuMemAddressFree", optional: true, fn: &f.memAddressFree},
		{name: "cuMemMap", optional: true, fn: &f.memMap},
		{name: "cuMemSetAccess", optional: true, fn: &f.memSetAccess},
		{name: "cuMemUnmap", optional: true, fn: &f.memUnmap},
		{name: "cuMemRetainAllocationHandle", optional: true, fn: &f.memRetainAllocHandle},
		{name: "cuMemExportToShareableHandle", optional: true, fn: &f.memExportShareable},
		{name: "cuMemImportFromShareableHandle", optional: true, fn: &f.memImportShareable},
		{name: "cuMemGetHandleForAddressRange", optional: true, fn: &f.memGetHandleForRange},
	}
}

// resolver looks one base name up.
type resolver func(name, export string) (uintptr, error)

// resolveAll binds every entry point: through cuGetProcAddress_v2 on a
// 12.x driver, cuGetProcAddress on 11.3 - 11.8, and by the versioned export
// names on older drivers.
func (d *Driver) resolveAll() error {
	res, how, err := d.resolver()
	if err != nil {
		return err
	}
	for _, e := range d.entries() {
		p, err := res(e.name, e.export)
		if err != nil || p == 0 {
			if e.optional {
				continue
			}
			return fmt.Errorf("load %s (driver %d, %s): %s: %w", d.path, d.version, how, e.name, ErrUnavailable)
		}
		if e.raw != nil {
			*e.raw = p
		}
		if e.fn != nil {
			purego.RegisterFunc(e.fn, p)
		}
	}
	// The fabric import takes a pointer to the handle where the POSIX fd
	// import takes the fd itself: two Go types for one entry point.
	if d.f.memImportShareable != nil {
		p, _ := res("cuMemImportFromShareableHandle", "")
		purego.RegisterFunc(&d.f.memImportFabric, p)
	}
	return nil
}

func (d *Driver) resolver() (resolver, string, error) {
	want := int32(min(d.version, abiVersion))
	if d.version >= 12000 {
		var gpa func(name string, pfn *uintptr, version int32, flags uint64, status *int32) Result
		if err := d.bindExport(&gpa, "cuGetProcAddress_v2"); err == nil {
			return func(name, _ string) (uintptr, error) {
				var p uintptr
				var st int32
				if r := gpa(name, &p, want, 0, &st); r != Success || st != 0 {
					return 0, d.err("cuGetProcAddress_v2("+name+")", r)
				}
				return p, nil
			}, "cuGetProcAddress_v2", nil
		}
	}
	if d.version >= 11030 {
		var gpa func(name string, pfn *uintptr, version int32, flags uint64) Result
		if err := d.bindExport(&gpa, "cuGetProcAddress"); err == nil {
			return func(name, _ string) (uintptr, error) {
				var p uintptr
				if r := gpa(name, &p, want, 0); r != Success {
					return 0, d.err("cuGetProcAddress("+name+")", r)
				}
				return p, nil
			}, "cuGetProcAddress", nil
		}
	}
	return func(name, export string) (uintptr, error) {
		if export == "" {
			export = name
		}
		return purego.Dlsym(d.lib, export)
	}, "versioned exports", nil
}
