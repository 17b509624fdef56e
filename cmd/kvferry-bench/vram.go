package main

import (
	"fmt"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/internal/hostenv"
)

// region is the benchmark's registered buffer.
type region struct {
	addr uintptr
	n    uint64
}

// benchBuffer allocates and registers the --buffer_size buffer: host memory
// at cpu:0, or with --use_vram device memory of --gpu_id at cuda:N (as
// Mooncake's transfer_engine_bench does). release unregisters and frees it.
func benchBuffer(e *engine.Engine) (region, func(), error) {
	if !*useVRAM {
		buf, err := mapBuffer(*bufferSize)
		if err != nil {
			return region{}, nil, err
		}
		if err := e.RegisterMemory(buf.Addr(), buf.Len(), "cpu:0", true); err != nil {
			buf.Close()
			return region{}, nil, err
		}
		return region{buf.Addr(), buf.Len()}, func() { e.UnregisterMemory(buf.Addr()); buf.Close() }, nil
	}
	d, err := stack.GPURuntime(stack.ConfigFromEnv(hostenv.Lookup)).Driver()
	if err != nil {
		return region{}, nil, fmt.Errorf("--use_vram: %w", err)
	}
	p, err := d.MemAlloc(*gpuID, *bufferSize)
	if err != nil {
		return region{}, nil, fmt.Errorf("--use_vram: allocate %d bytes on GPU %d: %w", *bufferSize, *gpuID, err)
	}
	if err := e.RegisterMemory(uintptr(p), *bufferSize, fmt.Sprintf("cuda:%d", *gpuID), true); err != nil {
		d.MemFree(*gpuID, p)
		return region{}, nil, err
	}
	return region{uintptr(p), *bufferSize}, func() { e.UnregisterMemory(uintptr(p)); d.MemFree(*gpuID, p) }, nil
}
