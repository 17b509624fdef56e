package cuda

import (
	"fmt"
	"unsafe"
)

// VMM reports whether the driver has the virtual memory management entry
// points (cuMemCreate and friends; CUDA >= 10.2).
func (d *Driver) VMM() bool { return d.f.memCreate != nil && d.f.memExportShareable != nil }

func (d *Driver) needVMM() error {
	if !d.VMM() {
		return &Error{Call: "cuMemCreate", Code: ErrorNotSupported, Name: "CUDA_ERROR_NOT_SUPPORTED"}
	}
	return nil
}

// Granularity returns the allocation granularity of VMM memory on dev.
func (d *Driver) Granularity(dev int, handleTypes uint64) (uint64, error) {
	if err := d.needVMM(); err != nil {
		return 0, err
	}
	prop := allocProp{typ: 1, handleTypes: int32(handleTypes), locType: 1, locID: int32(dev)}
	var g uint64
	err := d.check("cuMemGetAllocationGranularity", d.f.memGetGranularity(&g, &prop, 0))
	return g, err
}

// VMMAlloc allocates at least n bytes of shareable device memory on dev
// the way Mooncake's NVLink allocator and PyTorch's expandable segments
// do: cuMemCreate (with the POSIX-fd handle type, and fabric where the
// device supports it), an address reservation, cuMemMap and read-write
// access for every device. It returns the address and the size (rounded up
// to the granularity). Free it with VMMFree.
func (d *Driver) VMMAlloc(dev int, n uint64) (p, size uint64, err error) {
	err = d.Do(dev, func() error {
		p, size, err = d.vmmAlloc(dev, n)
		return err
	})
	return p, size, err
}

func (d *Driver) vmmAlloc(dev int, n uint64) (uint64, uint64, error) {
	if err := d.needVMM(); err != nil {
		return 0, 0, err
	}
	info, err := d.Device(dev)
	if err != nil {
		return 0, 0, err
	}
	if !info.VMM {
		return 0, 0, fmt.Errorf("device %d: %w", dev, &Error{Call: "cuMemCreate", Code: ErrorNotSupported, Name: "CUDA_ERROR_NOT_SUPPORTED"})
	}
	var types uint64
	if info.PosixFD {
		types |= HandlePosixFD
	}
	if info.Fabric {
		types |= HandleFabric
	}
	prop := allocProp{typ: 1, handleTypes: int32(types), locType: 1, locID: int32(dev)}
	if info.GPUDirectRDMA {
		prop.gdrCapable = 1
	}
	var g uint64
	if err := d.check("cuMemGetAllocationGranularity", d.f.memGetGranularity(&g, &prop, 0)); err != nil {
		return 0, 0, err
	}
	size := max((n+g-1)/g*g, g)
	var h uint64
	if err := d.check("cuMemCreate", d.f.memCreate(&h, size, &prop, 0)); err != nil {
		return 0, 0, err
	}
	var p uint64
	if err := d.check("cuMemAddressReserve", d.f.memAddressReserve(&p, size, g, 0, 0)); err != nil {
		d.f.memRelease(h)
		return 0, 0, err
	}
	if err := d.check("cuMemMap", d.f.memMap(p, size, 0, h, 0)); err != nil {
		d.f.memAddressFree(p, size)
		d.f.memRelease(h)
		return 0, 0, err
	}
	// The mapping holds the allocation from now on.
	d.f.memRelease(h)
	if err := d.setAccessAll(p, size); err != nil {
		d.f.memUnmap(p, size)
		d.f.memAddressFree(p, size)
		return 0, 0, err
	}
	return p, size, nil
}

// setAccessAll grants every device read-write access to [p, p+size).
func (d *Driver) setAccessAll(p, size uint64) error {
	descs := make([]accessDesc, d.ndev)
	for i := range descs {
		descs[i] = accessDesc{locType: 1, locID: int32(i), flags: accessReadWrite}
	}
	return d.check("cuMemSetAccess", d.f.memSetAccess(p, size, &descs[0], uint64(len(descs))))
}

// VMMFree unmaps and frees memory from VMMAlloc (p its address).
func (d *Driver) VMMFree(p uint64) error {
	if err := d.needVMM(); err != nil {
		return err
	}
	info, err := d.Pointer(p)
	if err != nil {
		return err
	}
	base, size := info.MappingBase, info.MappingSize
	if base == 0 {
		base, size = info.RangeStart, info.RangeSize
	}
	if base != p || size == 0 {
		return fmt.Errorf("free VMM memory %#x: not the start of a mapping: %w", p, &Error{Call: "cuMemUnmap", Code: ErrorInvalidValue, Name: "CUDA_ERROR_INVALID_VALUE"})
	}
	return d.UnmapImported(info.Device, p, size)
}

// ExportFD returns a POSIX file descriptor of the VMM allocation mapped
// at p (the caller closes it) and the mapping's base and size.
func (d *Driver) ExportFD(p uint64) (fd int, base, size uint64, err error) {
	if err := d.needVMM(); err != nil {
		return -1, 0, 0, err
	}
	info, err := d.Pointer(p)
	if err != nil {
		return -1, 0, 0, err
	}
	if info.HandleTypes&HandlePosixFD == 0 {
		return -1, 0, 0, fmt.Errorf("export %#x: the allocation allows no POSIX fd: %w", p, &Error{Call: "cuMemExportToShareableHandle", Code: ErrorNotPermitted, Name: "CUDA_ERROR_NOT_PERMITTED"})
	}
	var v int32 = -1
	err = d.Do(info.Device, func() error {
		var h uint64
		if err := d.check("cuMemRetainAllocationHandle", d.f.memRetainAllocHandle(&h, uintptr(p))); err != nil {
			return err
		}
		defer d.f.memRelease(h)
		return d.check("cuMemExportToShareableHandle", d.f.memExportShareable(unsafe.Pointer(&v), h, HandlePosixFD, 0))
	})
	if err != nil {
		return -1, 0, 0, err
	}
	base, size = info.MappingBase, info.MappingSize
	if base == 0 {
		base, size = info.RangeStart, info.RangeSize
	}
	return int(v), base, size, nil
}

// ExportFabric returns the fabric handle of the VMM allocation mapped at p.
func (d *Driver) ExportFabric(p uint64) (FabricHandle, error) {
	var fh FabricHandle
	if err := d.needVMM(); err != nil {
		return fh, err
	}
	info, err := d.Pointer(p)
	if err != nil {
		return fh, err
	}
	err = d.Do(info.Device, func() error {
		var h uint64
		if err := d.check("cuMemRetainAllocationHandle", d.f.memRetainAllocHandle(&h, uintptr(p))); err != nil {
			return err
		}
		defer d.f.memRelease(h)
		return d.check("cuMemExportToShareableHandle", d.f.memExportShareable(unsafe.Pointer(&fh), h, HandleFabric, 0))
	})
	return fh, err
}

// ImportFD maps size bytes of an allocation exported as POSIX fd (which
// stays the caller's) for device dev, and returns its address here.
func (d *Driver) ImportFD(dev int, fd int, size uint64) (uint64, error) {
	return d.importOne(dev, size, func(m *SharedMapping) error { return m.MapFD(0, size, fd) })
}

// ImportFabric maps size bytes of an allocation exported as a fabric
// handle for device dev.
func (d *Driver) ImportFabric(dev int, fh FabricHandle, size uint64) (uint64, error) {
	return d.importOne(dev, size, func(m *SharedMapping) error { return m.MapFabric(0, size, fh) })
}

// importOne maps one imported allocation; UnmapImported undoes it.
func (d *Driver) importOne(dev int, size uint64, mapIt func(*SharedMapping) error) (uint64, error) {
	m, err := d.ReserveShared(dev, size)
	if err != nil {
		return 0, err
	}
	if err := mapIt(m); err != nil {
		m.Close()
		return 0, err
	}
	if err := m.Finish(); err != nil {
		m.Close()
		return 0, err
	}
	return m.Addr(), nil
}

// UnmapImported unmaps memory from ImportFD or ImportFabric (on device dev).
func (d *Driver) UnmapImported(dev int, p, size uint64) error {
	if err := d.needVMM(); err != nil {
		return err
	}
	return d.Do(dev, func() error {
		if err := d.check("cuMemUnmap", d.f.memUnmap(p, size)); err != nil {
			return err
		}
		return d.check("cuMemAddressFree", d.f.memAddressFree(p, size))
	})
}

// DmaBufFD returns a dma-buf file descriptor for [p, p+size) of device
// memory, for ibv_reg_dmabuf_mr (the caller closes it).
func (d *Driver) DmaBufFD(p, size uint64) (int, error) {
	if d.f.memGetHandleForRange == nil {
		return -1, &Error{Call: "cuMemGetHandleForAddressRange", Code: ErrorNotSupported, Name: "CUDA_ERROR_NOT_SUPPORTED"}
	}
	var fd int32 = -1
	if err := d.check("cuMemGetHandleForAddressRange", d.f.memGetHandleForRange(&fd, p, size, 1, 0)); err != nil {
		return -1, err
	}
	return int(fd), nil
}
