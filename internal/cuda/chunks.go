package cuda

import "fmt"

// VMMAllocChunks allocates n chunks of at least chunk bytes each (rounded
// up to the granularity) side by side in one address reservation, one
// cuMemCreate and cuMemMap per chunk: the layout of PyTorch's expandable
// segments, where a tensor or a registered pool may span chunks.
// handleTypes are the shareable handle types every chunk allows
// (HandlePosixFD, HandleFabric, or HandleNone). It returns the address and the whole size; free
// it with VMMFreeChunks.
func (d *Driver) VMMAllocChunks(dev int, chunk uint64, n int, handleTypes uint64) (p, size uint64, err error) {
	if err := d.needVMM(); err != nil {
		return 0, 0, err
	}
	if n <= 0 {
		return 0, 0, fmt.Errorf("VMM allocation of %d chunks: %w", n, &Error{Call: "cuMemCreate", Code: ErrorInvalidValue, Name: "CUDA_ERROR_INVALID_VALUE"})
	}
	err = d.Do(dev, func() error {
		prop := allocProp{typ: 1, handleTypes: int32(handleTypes), locType: 1, locID: int32(dev)}
		var g uint64
		if err := d.check("cuMemGetAllocationGranularity", d.f.memGetGranularity(&g, &prop, 0)); err != nil {
			return err
		}
		chunk = max((chunk+g-1)/g*g, g)
		size = chunk * uint64(n)
		if err := d.check("cuMemAddressReserve", d.f.memAddressReserve(&p, size, g, 0, 0)); err != nil {
			return err
		}
		for i := range n {
			var h uint64
			err := d.check("cuMemCreate", d.f.memCreate(&h, chunk, &prop, 0))
			if err == nil {
				err = d.check("cuMemMap", d.f.memMap(p+uint64(i)*chunk, chunk, 0, h, 0))
				d.f.memRelease(h) // the mapping holds it
			}
			if err != nil {
				for j := range i {
					d.f.memUnmap(p+uint64(j)*chunk, chunk)
				}
				d.f.memAddressFree(p, size)
				return err
			}
		}
		if err := d.setAccessAll(p, size); err != nil {
			for j := range n {
				d.f.memUnmap(p+uint64(j)*chunk, chunk)
			}
			d.f.memAddressFree(p, size)
			return err
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	return p, size, nil
}

// VMMFreeChunks unmaps every mapping of [p, p+size) (from VMMAllocChunks)
// one by one and frees the reservation.
func (d *Driver) VMMFreeChunks(dev int, p, size uint64) error {
	if err := d.needVMM(); err != nil {
		return err
	}
	return d.Do(dev, func() error {
		for a := p; a < p+size; {
			info, err := d.Pointer(a)
			if err != nil {
				return err
			}
			if info.MappingBase != a || info.MappingSize == 0 || info.MappingSize > p+size-a {
				return fmt.Errorf("free VMM chunks %#x+%d: no mapping starts at %#x: %w", p, size, a, &Error{Call: "cuMemUnmap", Code: ErrorInvalidValue, Name: "CUDA_ERROR_INVALID_VALUE"})
			}
			if err := d.check("cuMemUnmap", d.f.memUnmap(a, info.MappingSize)); err != nil {
				return err
			}
			a += info.MappingSize
		}
		return d.check("cuMemAddressFree", d.f.memAddressFree(p, size))
	})
}

// SharedMapping is device address space of this process holding another
// process's VMM allocations (imported from POSIX fds or fabric handles)
// mapped side by side, as they lie in the owner: a range of the owner that
// spans several allocations is one contiguous range here, and one copy.
// Make it with ReserveShared, map every part, then Finish; Close unmaps.
// One goroutine at a time.
type SharedMapping struct {
	d     *Driver
	dev   int
	addr  uint64
	size  uint64
	g     uint64
	parts [][2]uint64 // offset, size of each mapped part
	ready bool
}

// ReserveShared reserves size bytes of address space for imported
// allocations, used with device dev's context.
func (d *Driver) ReserveShared(dev int, size uint64) (*SharedMapping, error) {
	if err := d.needVMM(); err != nil {
		return nil, err
	}
	g, err := d.Granularity(dev, HandlePosixFD)
	if err != nil {
		return nil, err
	}
	if size == 0 || size%g != 0 {
		return nil, fmt.Errorf("shared mapping of %d bytes (granularity %d): %w", size, g, &Error{Call: "cuMemAddressReserve", Code: ErrorInvalidValue, Name: "CUDA_ERROR_INVALID_VALUE"})
	}
	m := &SharedMapping{d: d, dev: dev, size: size, g: g}
	err = d.Do(dev, func() error {
		return d.check("cuMemAddressReserve", d.f.memAddressReserve(&m.addr, size, g, 0, 0))
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Addr returns the mapping's start in this process.
func (m *SharedMapping) Addr() uint64 { return m.addr }

// Size returns the mapping's size.
func (m *SharedMapping) Size() uint64 { return m.size }

// MapFD maps size bytes of the allocation exported as POSIX fd (which
// stays the caller's) at offset off of the mapping.
func (m *SharedMapping) MapFD(off, size uint64, fd int) error {
	return m.mapPart(off, size, func(h *uint64) Result {
		return m.d.f.memImportShareable(h, uintptr(fd), HandlePosixFD)
	})
}

// MapFabric maps size bytes of the allocation a fabric handle names at
// offset off of the mapping.
func (m *SharedMapping) MapFabric(off, size uint64, fh FabricHandle) error {
	return m.mapPart(off, size, func(h *uint64) Result {
		return m.d.f.memImportFabric(h, &fh, HandleFabric)
	})
}

func (m *SharedMapping) mapPart(off, size uint64, imp func(h *uint64) Result) error {
	if m.ready || size == 0 || size%m.g != 0 || off%m.g != 0 || off > m.size || size > m.size-off {
		return fmt.Errorf("map %d bytes at offset %d of a %d-byte shared mapping (granularity %d): %w", size, off, m.size, m.g,
			&Error{Call: "cuMemMap", Code: ErrorInvalidValue, Name: "CUDA_ERROR_INVALID_VALUE"})
	}
	for _, p := range m.parts {
		if off < p[0]+p[1] && p[0] < off+size {
			return fmt.Errorf("map at offset %d: already mapped: %w", off, &Error{Call: "cuMemMap", Code: ErrorAlreadyMapped, Name: "CUDA_ERROR_ALREADY_MAPPED"})
		}
	}
	err := m.d.Do(m.dev, func() error {
		var h uint64
		if err := m.d.check("cuMemImportFromShareableHandle", imp(&h)); err != nil {
			return err
		}
		defer m.d.f.memRelease(h) // the mapping holds it
		return m.d.check("cuMemMap", m.d.f.memMap(m.addr+off, size, 0, h, 0))
	})
	if err != nil {
		return err
	}
	m.parts = append(m.parts, [2]uint64{off, size})
	return nil
}

// Finish grants every device read-write access to the mapping; every byte
// of it must be mapped.
func (m *SharedMapping) Finish() error {
	var mapped uint64
	for _, p := range m.parts {
		mapped += p[1]
	}
	if mapped != m.size {
		return fmt.Errorf("shared mapping of %d bytes has %d mapped: %w", m.size, mapped, &Error{Call: "cuMemSetAccess", Code: ErrorInvalidValue, Name: "CUDA_ERROR_INVALID_VALUE"})
	}
	if err := m.d.Do(m.dev, func() error { return m.d.setAccessAll(m.addr, m.size) }); err != nil {
		return err
	}
	m.ready = true
	return nil
}

// Close unmaps every part (one cuMemUnmap each) and frees the address
// space. The first error is returned; the rest is released anyway.
func (m *SharedMapping) Close() error {
	if m == nil || m.addr == 0 {
		return nil
	}
	err := m.d.Do(m.dev, func() error {
		var first error
		for _, p := range m.parts {
			if err := m.d.check("cuMemUnmap", m.d.f.memUnmap(m.addr+p[0], p[1])); err != nil && first == nil {
				first = err
			}
		}
		if err := m.d.check("cuMemAddressFree", m.d.f.memAddressFree(m.addr, m.size)); err != nil && first == nil {
			first = err
		}
		return first
	})
	m.parts, m.addr, m.ready = nil, 0, false
	return err
}
