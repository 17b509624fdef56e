package client

import (
	"fmt"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/gpu"
)

// GPU memory in puts and gets. A span of C memory that is GPU device
// memory (registered with the engine as such, or, unregistered, classified
// by the process's CUDA driver) is marked with the GPU runtime: its copies
// into and out of the own segment, the staging buffer and the hot cache go
// through the driver (cuMemcpy, unified addressing), never memcpy, and the
// engine moves registered device memory with its GPU paths.

// gpuSpan returns s marked when any of its memory is device memory.
func (c *Client) gpuSpan(s span) span {
	if s.buf != nil || !s.valid() {
		return s
	}
	check := func(addr uintptr, n uint64) bool {
		kind, dev := c.kindOf(addr, n)
		if kind == engine.MemoryDevice {
			s.dev = dev
			return true
		}
		return false
	}
	device := false
	if s.parts == nil {
		device = check(s.addr, s.size)
	} else {
		var host *engine.Region // a registered host region holding the parts so far
		for _, p := range s.parts {
			if inRegion(host, p) {
				continue
			}
			if r := c.e.RegionOf(uint64(p.Addr), p.Size); r != nil && r.Kind != engine.MemoryDevice {
				host = r
				continue
			}
			if check(p.Addr, p.Size) {
				device = true
				break
			}
		}
	}
	if device {
		s.gpu = gpu.RuntimeOf(c.e)
		if s.gpu == nil {
			s.gpu = gpu.Shared(gpu.Config{})
		}
	}
	return s
}

// kindOf returns the memory kind of [addr, addr+n): the registered
// region's, else the driver's classification (host when no driver is
// loaded in the process).
func (c *Client) kindOf(addr uintptr, n uint64) (engine.MemoryKind, int) {
	if addr == 0 || n == 0 {
		return engine.MemoryHost, 0
	}
	if r := c.e.Pin(uint64(addr), n); r != nil {
		defer r.Release()
		return r.Kind, r.Device
	}
	if mc := c.e.Config().Memory; mc != nil {
		if info, err := mc.Classify(addr, n, "*"); err == nil {
			return info.Kind, info.Device
		}
	}
	return engine.MemoryHost, 0
}

// gpuCopy copies n bytes from src to dst with the GPU runtime (either may
// be device memory).
func (s span) gpuCopy(dst, src uintptr, n uint64) error {
	if err := s.gpu.MemcpySync(s.dev, uint64(dst), uint64(src), n); err != nil {
		return fmt.Errorf("copy of GPU memory: %w", err)
	}
	return nil
}
