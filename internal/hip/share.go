package hip

import (
	"fmt"
	"unsafe"
)

// The VMM share of device memory between processes: what the same-host
// transport needs to export an allocation by address and to map another
// process's allocations side by side (the shape of internal/cuda's
// SharedMapping, so that engine/gpu offers one interface over both).

// Shareable reports whether p lies in memory made by hipMemCreate
// (hipMemRetainAllocationHandle succeeds only there), which may be
// exported as a POSIX file descriptor. Legacy hipMalloc memory and
// runtimes without the VMM entry points answer false.
func (r *Runtime) Shareable(p uint64) bool {
	if !r.f.hasVMM() {
		return false
	}
	var h uint64
	if r.f.memRetainAllocHandle(&h, p) != 0 {
		return false
	}
	r.f.memRelease(h)
	return true
}

// ExportFDAt returns a POSIX file descriptor of the VMM allocation mapped
// at p (the caller closes it) and the allocation's base and size here
// (hipMemRetainAllocationHandle, hipMemExportToShareableHandle,
// hipMemGetAddressRange).
func (r *Runtime) ExportFDAt(p uint64) (fd int, base, size uint64, err error) {
	if err := r.needVMM("hipMemRetainAllocationHandle"); err != nil {
		return -1, 0, 0, err
	}
	pi, err := r.Pointer(p)
	if err != nil {
		return -1, 0, 0, err
	}
	if pi.Type != MemoryTypeDevice || pi.Managed {
		return -1, 0, 0, fmt.Errorf("export %#x: not device memory: %w", p, &Error{Call: "hipMemRetainAllocationHandle", Code: ErrorInvalidValue})
	}
	err = r.Do(pi.Device, func() error {
		var h uint64
		if err := r.check("hipMemRetainAllocationHandle", r.f.memRetainAllocHandle(&h, p)); err != nil {
			return err
		}
		defer r.f.memRelease(h)
		v := int32(-1)
		if err := r.check("hipMemExportToShareableHandle", r.f.memExportShareable(unsafe.Pointer(&v), h, handlePosixFD, 0)); err != nil {
			return err
		}
		fd = int(v)
		return nil
	})
	if err != nil {
		return -1, 0, 0, err
	}
	return fd, pi.RangeStart, pi.RangeSize, nil
}

// VMMAlloc allocates at least n bytes of shareable device memory on dev
// (hipMemCreate with the POSIX-fd handle type, a reservation, hipMemMap,
// read-write access for every device), and returns its address and size
// (rounded up to the granularity). Free it with VMMFree.
func (r *Runtime) VMMAlloc(dev int, n uint64) (p, size uint64, err error) {
	return r.VMMAllocChunks(dev, n, 1)
}

// VMMAllocChunks allocates n chunks of at least chunk bytes each (rounded
// up to the granularity) side by side in one reservation, one hipMemCreate
// and hipMemMap per chunk (the layout of PyTorch's expandable segments),
// shareable as POSIX fds. It returns the address and the whole size; free
// it with VMMFree.
func (r *Runtime) VMMAllocChunks(dev int, chunk uint64, n int) (p, size uint64, err error) {
	if n <= 0 {
		return 0, 0, fmt.Errorf("VMM allocation of %d chunks: %w", n, &Error{Call: "hipMemCreate", Code: ErrorInvalidValue})
	}
	g, err := r.Granularity(dev)
	if err != nil {
		return 0, 0, err
	}
	chunk = max((chunk+g-1)/g*g, g)
	size = chunk * uint64(n)
	if p, err = r.Reserve(size, g); err != nil {
		return 0, 0, err
	}
	undo := func(mapped int) {
		for j := range mapped {
			r.f.memUnmap(p+uint64(j)*chunk, chunk)
		}
		r.f.memAddressFree(p, size)
	}
	for i := range n {
		h, err := r.MemCreate(dev, chunk)
		if err == nil {
			err = r.check("hipMemMap", r.f.memMap(p+uint64(i)*chunk, chunk, 0, h, 0))
			r.f.memRelease(h) // the mapping holds the allocation
		}
		if err != nil {
			undo(i)
			return 0, 0, err
		}
	}
	if err := r.setAccessAll(p, size); err != nil {
		undo(n)
		return 0, 0, err
	}
	return p, size, nil
}

// VMMFree unmaps and frees memory from VMMAlloc or VMMAllocChunks (p its
// address, size its size).
func (r *Runtime) VMMFree(p, size uint64) error {
	if err := r.Unmap(p, size); err != nil {
		return err
	}
	return r.Free(p, size)
}

// setAccessAll grants every device read-write access to [p, p+size), as
// Mooncake's HIP transport does for the memory it imports.
func (r *Runtime) setAccessAll(p, size uint64) error {
	if r.ndev == 0 {
		return fmt.Errorf("hipMemSetAccess: no device: %w", &Error{Call: "hipMemSetAccess", Code: ErrorInvalidValue})
	}
	descs := make([]accessDesc, r.ndev)
	for i := range descs {
		descs[i] = accessDesc{locType: locTypeDevice, locID: int32(i), flags: accessReadWrite}
	}
	return r.check("hipMemSetAccess", r.f.memSetAccess(p, size, &descs[0], uint64(len(descs))))
}

// SharedMapping is device address space of this process holding another
// process's VMM allocations, imported from POSIX fds and mapped side by
// side as they lie in the owner: a range of the owner that spans several
// allocations is one contiguous range here. Make it with ReserveShared,
// map every part, then Finish; Close unmaps. One goroutine at a time.
type SharedMapping struct {
	r     *Runtime
	dev   int
	addr  uint64
	size  uint64
	g     uint64
	parts [][2]uint64 // offset, size of each mapped part
	ready bool
}

// ReserveShared reserves size bytes (a multiple of dev's granularity) of
// address space for imported allocations.
func (r *Runtime) ReserveShared(dev int, size uint64) (*SharedMapping, error) {
	g, err := r.Granularity(dev)
	if err != nil {
		return nil, err
	}
	if size == 0 || size%g != 0 {
		return nil, fmt.Errorf("shared mapping of %d bytes (granularity %d): %w", size, g, &Error{Call: "hipMemAddressReserve", Code: ErrorInvalidValue})
	}
	p, err := r.Reserve(size, g)
	if err != nil {
		return nil, err
	}
	return &SharedMapping{r: r, dev: dev, addr: p, size: size, g: g}, nil
}

// Addr returns the mapping's start in this process.
func (m *SharedMapping) Addr() uint64 { return m.addr }

// Size returns the mapping's size.
func (m *SharedMapping) Size() uint64 { return m.size }

// MapFD maps size bytes of the allocation exported as POSIX fd (which
// stays the caller's) at offset off of the mapping.
func (m *SharedMapping) MapFD(off, size uint64, fd int) error {
	if m.ready || size == 0 || size%m.g != 0 || off%m.g != 0 || off > m.size || size > m.size-off {
		return fmt.Errorf("map %d bytes at offset %d of a %d-byte shared mapping (granularity %d): %w", size, off, m.size, m.g,
			&Error{Call: "hipMemMap", Code: ErrorInvalidValue})
	}
	for _, p := range m.parts {
		if off < p[0]+p[1] && p[0] < off+size {
			return fmt.Errorf("map at offset %d: already mapped: %w", off, &Error{Call: "hipMemMap", Code: ErrorInvalidValue})
		}
	}
	h, err := m.r.ImportFD(fd)
	if err != nil {
		return err
	}
	defer m.r.f.memRelease(h) // the mapping holds it
	if err := m.r.check("hipMemMap", m.r.f.memMap(m.addr+off, size, 0, h, 0)); err != nil {
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
		return fmt.Errorf("shared mapping of %d bytes has %d mapped: %w", m.size, mapped, &Error{Call: "hipMemSetAccess", Code: ErrorInvalidValue})
	}
	if err := m.r.setAccessAll(m.addr, m.size); err != nil {
		return err
	}
	m.ready = true
	return nil
}

// Close unmaps every part and frees the address space; a second Close is
// harmless. The first error is returned; the rest is released anyway.
func (m *SharedMapping) Close() error {
	if m == nil || m.addr == 0 {
		return nil
	}
	var first error
	for _, p := range m.parts {
		if err := m.r.check("hipMemUnmap", m.r.f.memUnmap(m.addr+p[0], p[1])); err != nil && first == nil {
			first = err
		}
	}
	if err := m.r.check("hipMemAddressFree", m.r.f.memAddressFree(m.addr, m.size)); err != nil && first == nil {
		first = err
	}
	m.addr, m.parts = 0, nil
	return first
}
