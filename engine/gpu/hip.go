package gpu

import (
	"errors"
	"fmt"
	"strings"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/internal/hip"
)

// classifyHIP is Classify on the HIP runtime. hipMalloc memory is shared
// with same-host peers by its IPC handle (one per allocation the range
// spans); VMM memory (hipMemCreate, found by hipMemRetainAllocationHandle
// as Mooncake's HIP transport finds it) by POSIX fds the owner exports on
// request, as CUDA's VMM memory; memory with neither (or a range mixing
// the two) is staged by those peers.
func (r *Runtime) classifyHIP(addr uintptr, length uint64, location string, wantGPU bool) (engine.MemoryInfo, error) {
	h := r.hip
	pi, err := h.Pointer(uint64(addr))
	if err != nil {
		return engine.MemoryInfo{}, fmt.Errorf("classify %#x: %w: %w", addr, engine.ErrInvalidArgument, err)
	}
	switch {
	case pi.Type == hip.MemoryTypeUnregistered:
		if wantGPU {
			r.log.Debug("host memory registered at a GPU location; treated as host memory", "addr", addr, "location", location)
		}
		return engine.MemoryInfo{}, nil
	case pi.Type == hip.MemoryTypeHost:
		return engine.MemoryInfo{Kind: engine.MemoryPinned}, nil
	case pi.Managed:
		return engine.MemoryInfo{Kind: engine.MemoryManaged, Device: pi.Device, AllocBase: pi.RangeStart, AllocSize: pi.RangeSize}, nil
	}
	if l := strings.ToLower(location); strings.HasPrefix(l, "cpu") {
		return engine.MemoryInfo{}, fmt.Errorf("%#x+%d is memory of HIP device %d, registered as %q: %w",
			addr, length, pi.Device, location, engine.ErrInvalidArgument)
	}
	info := engine.MemoryInfo{Kind: engine.MemoryDevice, Device: pi.Device, AllocBase: pi.RangeStart, AllocSize: pi.RangeSize}
	chunks, err := walkHIP(h, pi, uint64(addr), length)
	if err != nil {
		return engine.MemoryInfo{}, err
	}
	if hipVMM(h, chunks) {
		shareHIPVMM(&info, chunks)
		return info, nil
	}
	if len(chunks) == 1 {
		ih, err := h.IPCGetHandle(pi.Device, uint64(addr))
		if err != nil {
			r.log.Warn("HIP device memory without an IPC handle; same-host peers stage it", "addr", addr, "err", err)
			return info, nil
		}
		info.Share = engine.ShareLegacyIPC
		info.Handle = append([]byte(nil), ih.Reserved[:]...)
		return info, nil
	}
	out := make([]engine.MemoryChunk, 0, len(chunks))
	for _, c := range chunks {
		ih, err := h.IPCGetHandle(pi.Device, c.base)
		if err != nil {
			r.log.Warn("HIP device memory without an IPC handle; same-host peers stage it", "addr", addr, "allocation", c.base, "err", err)
			return info, nil
		}
		out = append(out, engine.MemoryChunk{Base: c.base, Size: c.size, Handle: append([]byte(nil), ih.Reserved[:]...)})
	}
	info.Share, info.Chunks = engine.ShareLegacyIPC, out
	return info, nil
}

// walkHIP checks that [addr, addr+length) is device memory of pi's device
// from end to end and returns the allocations it spans, in address order.
func walkHIP(h *hip.Runtime, pi hip.PointerInfo, addr, length uint64) ([]allocation, error) {
	end := addr + length
	cur := pi
	var out []allocation
	for n := 0; ; n++ {
		base, size := cur.RangeStart, cur.RangeSize
		if size == 0 || base+size <= addr || (n > 0 && base != out[n-1].base+out[n-1].size) {
			return nil, fmt.Errorf("classify %#x+%d: the HIP runtime reports no extent for device memory at %#x: %w", addr, length, base, engine.ErrInvalidArgument)
		}
		out = append(out, allocation{base: base, size: size, legacy: true})
		next := base + size
		if next >= end {
			return out, nil
		}
		if n+1 >= maxAllocations {
			return nil, fmt.Errorf("classify %#x+%d: spans more than %d allocations: %w", addr, length, maxAllocations, engine.ErrInvalidArgument)
		}
		var err error
		if cur, err = h.Pointer(next); err != nil {
			return nil, fmt.Errorf("classify %#x: %w: %w", next, engine.ErrInvalidArgument, err)
		}
		if cur.Type != hip.MemoryTypeDevice || cur.Managed || cur.Device != pi.Device {
			return nil, fmt.Errorf("%#x+%d is not device memory of HIP device %d from end to end (at %#x): %w",
				addr, length, pi.Device, next, engine.ErrInvalidArgument)
		}
	}
}

// exportDmaBufsHIP is ExportDmaBufs on the HIP runtime
// (hipMemGetHandleForAddressRange of each allocation the range spans).
func (r *Runtime) exportDmaBufsHIP(dev int, addr, length uint64) ([]DmaBuf, error) {
	h := r.hip
	return exportAllocations(addr, length, func(at uint64) (uint64, uint64, int, error) {
		pi, err := h.Pointer(at)
		if err != nil {
			return 0, 0, -1, fmt.Errorf("dma-buf export at %#x: %w", at, err)
		}
		base, size := pi.RangeStart, pi.RangeSize
		if pi.Type != hip.MemoryTypeDevice || pi.Managed || pi.Device != dev || size == 0 || at < base || at >= base+size {
			return 0, 0, -1, fmt.Errorf("dma-buf export: %#x is not device memory of HIP device %d: %w", at, dev, engine.ErrInvalidArgument)
		}
		fd, err := h.DmaBufFD(dev, base, size)
		if err != nil {
			if errors.Is(err, hip.ErrNotSupported) {
				err = fmt.Errorf("%w: %w", engine.ErrNotSupported, err)
			}
			return 0, 0, -1, fmt.Errorf("dma-buf export of %#x+%d: %w", base, size, err)
		}
		return base, size, fd, nil
	})
}
