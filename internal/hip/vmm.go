package hip

import (
	"fmt"
	"unsafe"
)

// VMM and dma-buf enum values (the ROCm 6 headers).
const (
	allocTypePinned     = 1 // hipMemAllocationTypePinned
	locTypeDevice       = 1 // hipMemLocationTypeDevice
	handlePosixFD       = 1 // hipMemHandleTypePosixFileDescriptor
	accessReadWrite     = 3 // hipMemAccessFlagsProtReadWrite
	granularityMinimum  = 0 // hipMemAllocationGranularityMinimum
	rangeHandleDmaBufFD = 1 // hipMemRangeHandleTypeDmaBufFd
)

// needVMM returns an ErrNotSupported error when the runtime lacks the VMM
// entry points.
func (r *Runtime) needVMM(call string) error {
	if !r.f.hasVMM() {
		return r.missing(call)
	}
	return nil
}

func deviceProp(dev int) allocProp {
	return allocProp{typ: allocTypePinned, handleType: handlePosixFD, locType: locTypeDevice, locID: int32(dev)}
}

// Granularity returns the minimum VMM allocation granularity of dev, in
// bytes.
func (r *Runtime) Granularity(dev int) (uint64, error) {
	if err := r.needVMM("hipMemGetAllocationGranularity"); err != nil {
		return 0, err
	}
	if err := r.checkDevice(dev); err != nil {
		return 0, err
	}
	prop := deviceProp(dev)
	var g uint64
	err := r.check("hipMemGetAllocationGranularity", r.f.memGetGranularity(&g, &prop, granularityMinimum))
	return g, err
}

// MemCreate makes size bytes of physical memory on dev that may be
// exported as a POSIX file descriptor, and returns its allocation handle.
func (r *Runtime) MemCreate(dev int, size uint64) (uint64, error) {
	if err := r.needVMM("hipMemCreate"); err != nil {
		return 0, err
	}
	prop := deviceProp(dev)
	var h uint64
	err := r.Do(dev, func() error { return r.check("hipMemCreate", r.f.memCreate(&h, size, &prop, 0)) })
	return h, err
}

// MemRelease drops an allocation handle; the memory goes once unmapped.
func (r *Runtime) MemRelease(h uint64) error {
	if err := r.needVMM("hipMemRelease"); err != nil {
		return err
	}
	return r.check("hipMemRelease", r.f.memRelease(h))
}

// ExportFD exports an allocation handle as a POSIX file descriptor the
// caller owns (hipMemExportToShareableHandle).
func (r *Runtime) ExportFD(h uint64) (int, error) {
	if err := r.needVMM("hipMemExportToShareableHandle"); err != nil {
		return -1, err
	}
	fd := int32(-1)
	if err := r.check("hipMemExportToShareableHandle", r.f.memExportShareable(unsafe.Pointer(&fd), h, handlePosixFD, 0)); err != nil {
		return -1, err
	}
	return int(fd), nil
}

// importByValueVersion is the first HIP runtime version (7.1) whose
// hipMemImportFromShareableHandle takes the fd by value, cast to a
// pointer; earlier ones take a pointer to the int holding it.
const importByValueVersion = 70100000

// ImportFD imports a POSIX file descriptor another process exported and
// returns an allocation handle of this process; fd stays the caller's.
// The descriptor is passed as the runtime's version takes it (by value
// from ROCm 7.1, by pointer before).
func (r *Runtime) ImportFD(fd int) (uint64, error) {
	if err := r.needVMM("hipMemImportFromShareableHandle"); err != nil {
		return 0, err
	}
	if fd < 0 {
		return 0, fmt.Errorf("hipMemImportFromShareableHandle: fd %d: %w", fd, &Error{Call: "hipMemImportFromShareableHandle", Code: ErrorInvalidValue})
	}
	var h uint64
	var c Result
	if r.version >= importByValueVersion {
		c = r.f.memImportShareable(&h, uintptr(fd), handlePosixFD)
	} else {
		v := int32(fd)
		c = r.f.memImportShareablePtr(&h, &v, handlePosixFD)
	}
	return h, r.check("hipMemImportFromShareableHandle", c)
}

// Reserve reserves size bytes of device address space.
func (r *Runtime) Reserve(size, align uint64) (uint64, error) {
	if err := r.needVMM("hipMemAddressReserve"); err != nil {
		return 0, err
	}
	var p uint64
	err := r.check("hipMemAddressReserve", r.f.memAddressReserve(&p, size, align, 0, 0))
	return p, err
}

// Free releases a reservation made by Reserve.
func (r *Runtime) Free(p, size uint64) error {
	if err := r.needVMM("hipMemAddressFree"); err != nil {
		return err
	}
	return r.check("hipMemAddressFree", r.f.memAddressFree(p, size))
}

// Map maps size bytes of allocation h at p and gives dev read-write
// access to them (hipMemMap, hipMemSetAccess); on a failed access grant
// the mapping is undone.
func (r *Runtime) Map(dev int, p, size, h uint64) error {
	if err := r.needVMM("hipMemMap"); err != nil {
		return err
	}
	if err := r.check("hipMemMap", r.f.memMap(p, size, 0, h, 0)); err != nil {
		return err
	}
	desc := accessDesc{locType: locTypeDevice, locID: int32(dev), flags: accessReadWrite}
	if err := r.check("hipMemSetAccess", r.f.memSetAccess(p, size, &desc, 1)); err != nil {
		r.f.memUnmap(p, size)
		return err
	}
	return nil
}

// Unmap undoes Map.
func (r *Runtime) Unmap(p, size uint64) error {
	if err := r.needVMM("hipMemUnmap"); err != nil {
		return err
	}
	return r.check("hipMemUnmap", r.f.memUnmap(p, size))
}

// DmaBufFD exports [p, p+size) of device memory of dev as a dma-buf file
// descriptor the caller owns (hipMemGetHandleForAddressRange), for an RDMA
// NIC (ibv_reg_dmabuf_mr).
func (r *Runtime) DmaBufFD(dev int, p, size uint64) (int, error) {
	if r.f.memGetHandleForAR == nil {
		return -1, r.missing("hipMemGetHandleForAddressRange")
	}
	fd := int32(-1)
	err := r.Do(dev, func() error {
		return r.check("hipMemGetHandleForAddressRange", r.f.memGetHandleForAR(unsafe.Pointer(&fd), p, size, rangeHandleDmaBufFD, 0))
	})
	if err != nil {
		return -1, err
	}
	return int(fd), nil
}
