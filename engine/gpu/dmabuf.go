package gpu

import (
	"fmt"
	"syscall"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/internal/cuda"
)

// DmaBuf is the share of a range of device memory that lies in one driver
// allocation, exported as a dma-buf for an RDMA NIC (ibv_reg_dmabuf_mr).
type DmaBuf struct {
	// Addr and Length give the part of the range in this allocation.
	Addr, Length uint64
	// FD is the dma-buf of the whole allocation; the caller closes it once
	// every NIC registered it (each registration keeps its own reference).
	FD int
	// Offset is where Addr lies in the dma-buf.
	Offset uint64
}

// ExportDmaBufs exports [addr, addr+length) of device memory of device dev
// as dma-bufs, one per driver allocation it spans, as Mooncake does for each
// allocation (cuMemGetAddressRange, then cuMemGetHandleForAddressRange of
// the whole allocation with the range's offset in it). The calls run with
// dev's primary context current. On error every descriptor already made is
// closed. An error wraps engine.ErrNotSupported when the driver or device
// cannot export dma-bufs.
func (r *Runtime) ExportDmaBufs(dev int, addr, length uint64) ([]DmaBuf, error) {
	k, err := r.load(CUDA)
	if err != nil {
		return nil, err
	}
	if k == HIP {
		return r.exportDmaBufsHIP(dev, addr, length)
	}
	d := r.drv
	info, err := d.Device(dev)
	if err != nil {
		return nil, fmt.Errorf("dma-buf export: device %d: %w", dev, err)
	}
	if !info.DmaBuf {
		return nil, fmt.Errorf("CUDA device %d does not support dma-buf (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is 0): %w", dev, engine.ErrNotSupported)
	}
	return exportAllocations(addr, length, func(at uint64) (uint64, uint64, int, error) {
		pi, err := d.Pointer(at)
		if err != nil {
			return 0, 0, -1, fmt.Errorf("dma-buf export at %#x: %w", at, err)
		}
		base, size := pi.RangeStart, pi.RangeSize
		if pi.MappingBase != 0 {
			base, size = pi.MappingBase, pi.MappingSize
		}
		if pi.Type != cuda.MemoryTypeDevice || pi.Managed || pi.Device != dev || size == 0 || at < base || at >= base+size {
			return 0, 0, -1, fmt.Errorf("dma-buf export: %#x is not device memory of CUDA device %d: %w", at, dev, engine.ErrInvalidArgument)
		}
		var fd int
		err = d.Do(dev, func() error {
			var err error
			fd, err = d.DmaBufFD(base, size)
			return err
		})
		if err != nil {
			if cuda.Code(err) == cuda.ErrorNotSupported {
				err = fmt.Errorf("%w: %w", engine.ErrNotSupported, err)
			}
			return 0, 0, -1, fmt.Errorf("dma-buf export of %#x+%d: %w", base, size, err)
		}
		return base, size, fd, nil
	})
}

// exportAllocations walks addr+length one allocation at a time: export
// returns the allocation holding at (its base and size, which contain at)
// and a dma-buf descriptor of it. It is the walk of ExportDmaBufs on
// either runtime; on error every descriptor already made is closed.
func exportAllocations(addr, length uint64, export func(at uint64) (base, size uint64, fd int, err error)) ([]DmaBuf, error) {
	var out []DmaBuf
	fail := func(err error) ([]DmaBuf, error) {
		for _, b := range out {
			syscall.Close(b.FD)
		}
		return nil, err
	}
	end := addr + length
	for at := addr; at < end; {
		if len(out) >= maxAllocations {
			return fail(fmt.Errorf("dma-buf export of %#x+%d: spans more than %d allocations: %w", addr, length, maxAllocations, engine.ErrInvalidArgument))
		}
		base, size, fd, err := export(at)
		if err != nil {
			return fail(err)
		}
		n := min(end, base+size) - at
		out = append(out, DmaBuf{Addr: at, Length: n, FD: fd, Offset: at - base})
		at += n
	}
	return out, nil
}
