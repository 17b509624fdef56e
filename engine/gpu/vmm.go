package gpu

import (
	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/internal/cuda"
	"github.com/kvferry/kvferry/internal/hip"
)

// SharedMapping is device address space of this process holding another
// process's VMM allocations, imported from POSIX file descriptors and
// mapped side by side as they lie in the owner (cuda.SharedMapping,
// hip.SharedMapping). Make it with Runtime.ReserveShared, map every part
// with MapFD, then Finish; Close unmaps (a second Close is harmless). One
// goroutine at a time.
type SharedMapping interface {
	// Addr returns the mapping's start in this process.
	Addr() uint64
	// MapFD maps size bytes of the allocation exported as fd (which stays
	// the caller's) at offset off.
	MapFD(off, size uint64, fd int) error
	// Finish grants every device access; every byte must be mapped.
	Finish() error
	// Close unmaps every part and frees the address space.
	Close() error
}

var (
	_ SharedMapping = (*cuda.SharedMapping)(nil)
	_ SharedMapping = (*hip.SharedMapping)(nil)
)

// ExportFD returns a POSIX file descriptor of the VMM allocation mapped at
// p (cuMemCreate or hipMemCreate memory; the caller closes it) and the
// allocation's base and size, on the process's GPU runtime.
func (r *Runtime) ExportFD(p uint64) (fd int, base, size uint64, err error) {
	k, err := r.load(CUDA)
	if err != nil {
		return -1, 0, 0, err
	}
	if k == HIP {
		return r.hip.ExportFDAt(p)
	}
	return r.drv.ExportFD(p)
}

// ReserveShared reserves size bytes of device address space for another
// process's VMM allocations, used with device dev, on the process's GPU
// runtime.
func (r *Runtime) ReserveShared(dev int, size uint64) (SharedMapping, error) {
	k, err := r.load(CUDA)
	if err != nil {
		return nil, err
	}
	if k == HIP {
		m, err := r.hip.ReserveShared(dev, size)
		if err != nil {
			return nil, err
		}
		return m, nil
	}
	m, err := r.drv.ReserveShared(dev, size)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// ImportFD maps size bytes of one allocation exported as fd (which stays
// the caller's) for device dev; Close of the result unmaps it.
func (r *Runtime) ImportFD(dev, fd int, size uint64) (SharedMapping, error) {
	m, err := r.ReserveShared(dev, size)
	if err != nil {
		return nil, err
	}
	if err := m.MapFD(0, size, fd); err != nil {
		m.Close()
		return nil, err
	}
	if err := m.Finish(); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// hipVMM reports the allocations of a HIP registration that are all VMM
// memory (hipMemCreate), which same-host peers map by POSIX fd.
func hipVMM(h *hip.Runtime, chunks []allocation) bool {
	for _, c := range chunks {
		if !h.Shareable(c.base) {
			return false
		}
	}
	return len(chunks) > 0
}

// shareHIPVMM fills info for HIP VMM memory: shared by POSIX fd, with the
// allocations' layout when there are several (the owner exports each on
// request, as for CUDA).
func shareHIPVMM(info *engine.MemoryInfo, chunks []allocation) {
	info.Share = engine.SharePosixFD
	if len(chunks) > 1 {
		for _, c := range chunks {
			info.Chunks = append(info.Chunks, engine.MemoryChunk{Base: c.base, Size: c.size})
		}
	}
}
