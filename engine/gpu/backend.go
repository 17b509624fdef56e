package gpu

import (
	"fmt"
	"strings"
	"unsafe"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/internal/cuda"
	"github.com/kvferry/kvferry/internal/hip"
)

// Kind names a GPU runtime. A process loads at most one.
type Kind string

// The GPU runtimes.
const (
	// CUDA is NVIDIA's driver API (internal/cuda, libcuda.so.1).
	CUDA Kind = "cuda"
	// HIP is ROCm's HIP runtime (internal/hip, libamdhip64.so).
	HIP Kind = "hip"
)

// Copy is one copy of a batch, between any two addresses of the unified
// address space (host, pinned, device).
type Copy = cuda.Copy

// Copier runs batches of copies on one device's streams; the runtime's
// copier of each device is shared and never closed by its users.
type Copier interface {
	// Device returns the copier's device.
	Device() int
	// Submit queues ops in order and calls done once they completed or
	// failed (from a completer goroutine; done must not block for long).
	Submit(ops []Copy, done func(error))
	// Copy queues ops and waits for them.
	Copy(ops []Copy) error
}

// Stager moves device memory to and from a host-side byte stream through
// pinned bounce buffers; one goroutine at a time, closed by its owner.
type Stager interface {
	PieceBytes() uint64
	FromDevice(dev int, src, n uint64, sink func([]byte) error) error
	ToDevice(dev int, dst, n uint64, source func([]byte) error) error
	Close()
}

var (
	_ Copier = (*cuda.Copier)(nil)
	_ Copier = hipCopier{}
	_ Stager = (*cuda.Stager)(nil)
	_ Stager = (*hip.Stager)(nil)
)

// The two bindings' Copy have one layout, so a batch passes from one to
// the other without a copy (gpu_test checks the layout).
func hipOps(ops []Copy) []hip.Copy {
	if len(ops) == 0 {
		return nil
	}
	return unsafe.Slice((*hip.Copy)(unsafe.Pointer(&ops[0])), len(ops))
}

// hipCopier is a HIP copier behind Copier.
type hipCopier struct{ c *hip.Copier }

func (h hipCopier) Device() int                         { return h.c.Device() }
func (h hipCopier) Submit(ops []Copy, done func(error)) { h.c.Submit(hipOps(ops), done) }
func (h hipCopier) Copy(ops []Copy) error               { return h.c.Copy(hipOps(ops)) }

// IsGPULocation reports whether a location string names GPU memory:
// Mooncake's "cuda:N" (CUDA builds) and "hip:N" (HIP builds), and the
// "rocm" location type of its TENT engine, with or without the ordinal.
// PyTorch on ROCm calls its devices "cuda:N" too: the prefix says GPU,
// not which runtime.
func IsGPULocation(location string) bool {
	if engine.IsCUDALocation(location) {
		return true
	}
	l := strings.ToLower(strings.TrimSpace(location))
	for _, p := range []string{"hip", "rocm"} {
		if l == p || strings.HasPrefix(l, p+":") {
			return true
		}
	}
	return false
}

// locationKind returns the runtime a location prefers: HIP for "hip" and
// "rocm" locations, CUDA otherwise.
func locationKind(location string) Kind {
	l := strings.ToLower(strings.TrimSpace(location))
	if strings.HasPrefix(l, "hip") || strings.HasPrefix(l, "rocm") {
		return HIP
	}
	return CUDA
}

// ParseKind reads a KVFERRY_GPU_RUNTIME value ("cuda", "hip"; "" or
// "auto" for the choice by what is present).
func ParseKind(s string) (Kind, error) {
	switch k := Kind(strings.ToLower(strings.TrimSpace(s))); k {
	case "", "auto":
		return "", nil
	case CUDA, HIP:
		return k, nil
	}
	return "", fmt.Errorf("GPU runtime %q is neither cuda nor hip: %w", s, engine.ErrInvalidArgument)
}
