package abi

/*
#include <stdint.h>
#include <stddef.h>
#include "kvferry.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/gpu"
	"github.com/kvferry/kvferry/internal/cuda"
	"github.com/kvferry/kvferry/internal/hostenv"
)

// gpuRuntime is the process's GPU runtime for the environment's settings
// (KVFERRY_CUDA_LIB, KVFERRY_CUDA).
func gpuRuntime() *gpu.Runtime { return gpu.Shared(gpu.ConfigFromEnv(hostenv.Lookup)) }

// gpuAvailable reports whether a GPU runtime (CUDA or HIP) loads here
// (then VRAM is among the NIXL plugin's memory types).
func gpuAvailable() bool {
	_, err := gpuRuntime().AllocProbe(0)
	return err == nil
}

//export kvf_cuda_malloc
func kvf_cuda_malloc(size C.size_t, device C.int) (p C.uintptr_t) {
	defer func() {
		if r := recover(); r != nil {
			_ = panicked(r)
			p = 0
		}
	}()
	// The process's GPU runtime, CUDA or HIP (a ROCm PyTorch's pluggable
	// allocator calls here too): shareable VMM memory where the device has
	// it, else cuMemAlloc / hipMalloc memory (legacy IPC).
	v, err := gpuRuntime().Alloc(int(device), uint64(size))
	if err != nil {
		logger.Warn("kvferry_cuda_malloc failed", "bytes", size, "device", device, "err", err)
		return 0
	}
	return C.uintptr_t(v)
}

//export kvf_cuda_free
func kvf_cuda_free(p C.uintptr_t, device C.int) {
	defer func() {
		if r := recover(); r != nil {
			_ = panicked(r)
		}
	}()
	if err := gpuRuntime().Free(uint64(p)); err != nil {
		logger.Warn("kvferry_cuda_free failed", "ptr", uint64(p), "device", device, "err", err)
	}
}

//export kvf_cuda_probe
func kvf_cuda_probe(device C.int, fabricOnly C.int) (rc C.int) {
	defer func() {
		if r := recover(); r != nil {
			_ = panicked(r)
			rc = -2
		}
	}()
	r := gpuRuntime()
	kind, err := r.AllocProbe(int(device))
	if err != nil {
		return -2
	}
	if fabricOnly == 0 {
		return C.int(kind)
	}
	// Fabric handles are CUDA's (HIP has none).
	d, err := r.Driver()
	if err != nil {
		return 0
	}
	info, err := d.Device(int(device))
	if err == nil && d.VMM() && info.VMM && info.Fabric {
		return 1
	}
	return 0
}

//export kvf_transfer_on_stream
func kvf_transfer_on_stream(h C.uintptr_t, stream C.uintptr_t, target *C.char, bufs *C.uintptr_t, peers *C.uint64_t, lens *C.size_t, n C.size_t, opcode C.int) (rc C.int) {
	defer recoverResource(&rc)
	e, err := lookupEngine(uintptr(h))
	if err != nil {
		return C.int(resourceCode(err))
	}
	name, ok := cstr(target)
	if !ok || name == "" || (n > 0 && (bufs == nil || peers == nil || lens == nil)) || n > 1<<20 || (opcode != 0 && opcode != 1) {
		engineFail(e, fmt.Errorf("transfer on stream: bad arguments: %w", engine.ErrInvalidArgument))
		return errInvalidArgument
	}
	d, derr := gpuRuntime().Driver()
	if derr != nil && stream != 0 {
		engineFail(e, fmt.Errorf("transfer on stream: %w", derr))
		return C.int(resourceCode(derr))
	}
	ctx, cancel := metaCtx(e)
	seg, err := e.OpenSegment(ctx, name)
	cancel()
	if err != nil {
		engineFail(e, err)
		return C.int(resourceCode(err))
	}
	reqs := make([]engine.Request, int(n))
	if n > 0 {
		bs := unsafe.Slice(bufs, int(n))
		ps := unsafe.Slice(peers, int(n))
		ls := unsafe.Slice(lens, int(n))
		for i := range reqs {
			reqs[i] = engine.Request{Op: engine.OpCode(opcode), Source: uintptr(bs[i]), Target: seg, TargetOffset: uint64(ps[i]), Length: uint64(ls[i])}
		}
	}
	// The gate goes on the caller's stream from the caller's thread (this
	// goroutine runs on it), with the caller's current context. Stream 0
	// without a driver, or on a thread without a current context, orders
	// nothing: the transfer then runs now, synchronously.
	var g *cuda.StreamGate
	if derr == nil {
		g, err = d.Gate(uintptr(stream))
	}
	if derr != nil || (err != nil && stream == 0 && cuda.Code(err) == cuda.ErrorInvalidContext) {
		if err := e.Transfer(context.Background(), reqs); err != nil {
			engineFail(e, fmt.Errorf("transfer on stream to %q: %w", name, err))
			return errTransfer
		}
		return 0
	}
	if err != nil {
		engineFail(e, fmt.Errorf("transfer on stream: %w", err))
		return C.int(resourceCode(fmt.Errorf("%w: %w", engine.ErrInvalidArgument, err)))
	}
	timeout := e.Config().TransferTimeout
	go func() {
		defer g.Open()
		if !g.Wait(timeout + 5*time.Second) {
			engineFail(e, fmt.Errorf("transfer on stream: the stream did not reach the transfer within %s: %w", timeout, engine.ErrTimeout))
			return
		}
		if err := e.Transfer(context.Background(), reqs); err != nil {
			e.Logger().Error("stream-ordered transfer failed", "target", name, "requests", len(reqs), "err", err)
			engineFail(e, fmt.Errorf("transfer on stream to %q: %w", name, err))
		}
	}()
	return 0
}

//export kvf_cuda_memcpy
func kvf_cuda_memcpy(dst, src C.uintptr_t, n C.size_t) (rc C.int) {
	defer recoverResource(&rc)
	if n == 0 {
		return 0
	}
	if dst == 0 || src == 0 {
		return errInvalidArgument
	}
	// The process's GPU runtime, CUDA or HIP (a ROCm PyTorch's tensors
	// come here as torch.cuda ones), with the device the memory belongs to
	// (either end) current.
	r := gpuRuntime()
	dev := 0
	for _, p := range []C.uintptr_t{dst, src} {
		if d, ok := r.DeviceOf(uint64(p)); ok {
			dev = d
			break
		}
	}
	if err := r.MemcpySync(dev, uint64(dst), uint64(src), uint64(n)); err != nil {
		if errors.Is(err, engine.ErrNotSupported) {
			return C.int(resourceCode(err))
		}
		logger.Warn("kvferry_cuda_memcpy failed", "dst", uint64(dst), "src", uint64(src), "bytes", n, "err", err)
		return errInvalidArgument
	}
	return 0
}

// kvferry.h's KVFERRY_MEM_* are engine.MemoryKind's values (checked when
// compiling: a mismatch indexes out of range).
var (
	_ = [1]struct{}{}[int(C.KVFERRY_MEM_HOST)-int(engine.MemoryHost)]
	_ = [1]struct{}{}[int(C.KVFERRY_MEM_PINNED)-int(engine.MemoryPinned)]
	_ = [1]struct{}{}[int(C.KVFERRY_MEM_DEVICE)-int(engine.MemoryDevice)]
	_ = [1]struct{}{}[int(C.KVFERRY_MEM_MANAGED)-int(engine.MemoryManaged)]
)

//export kvf_memory_kind
func kvf_memory_kind(p C.uintptr_t, device *C.int) (rc C.int) {
	defer recoverResource(&rc)
	if p == 0 {
		return C.int(engine.MemoryHost)
	}
	info, err := gpuRuntime().Classify(uintptr(p), 1, "*")
	if err != nil {
		return C.int(engine.MemoryHost)
	}
	if device != nil {
		*device = C.int(info.Device)
	}
	return C.int(info.Kind)
}
