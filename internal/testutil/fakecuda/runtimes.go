package fakecuda

import (
	"fmt"
	"testing"

	"github.com/kvferry/kvferry/internal/cuda"
	"github.com/kvferry/kvferry/internal/hip"
)

// GPURuntime is one GPU runtime the GPU tests run on, by table: the fake
// CUDA driver or the fake HIP runtime (the same fake under HIP names).
type GPURuntime struct {
	// Name is "cuda" or "hip" (engine/gpu's Kind).
	Name string
	// Prefix begins the runtime's entry point names ("cu", "hip"), for
	// Control.Calls and Control.Fail.
	Prefix string
	path   func(testing.TB) string
}

// GPURuntimes returns the runtimes the GPU tests run on. In a hardware
// run the HIP case skips (its fake is a fake-only fixture).
func GPURuntimes() []GPURuntime {
	return []GPURuntime{
		{Name: "cuda", Prefix: "cu", path: Path},
		{Name: "hip", Prefix: "hip", path: func(tb testing.TB) string { return HIPPath(tb, false) }},
	}
}

// Path builds the runtime's fake and returns its path.
func (g GPURuntime) Path(tb testing.TB) string { return g.path(tb) }

// Location returns the location string a registration of device dev's
// memory uses: Mooncake's "cuda:N" for CUDA and "hip:N" for HIP.
func (g GPURuntime) Location(dev int) string { return fmt.Sprintf("%s:%d", g.Name, dev) }

// Code returns the runtime result inside err (the two share their values).
func (g GPURuntime) Code(err error) int {
	if g.Name == "hip" {
		return int(hip.Code(err))
	}
	return int(cuda.Code(err))
}

// Allocator allocates device memory; both bindings' runtimes are one.
type Allocator interface {
	MemAlloc(dev int, n uint64) (uint64, error)
	MemFree(dev int, p uint64) error
}

var (
	_ Allocator = (*cuda.Driver)(nil)
	_ Allocator = (*hip.Runtime)(nil)
)
