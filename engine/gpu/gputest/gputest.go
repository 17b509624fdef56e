// Package gputest is the table of GPU runtimes the GPU tests run on: the
// fake CUDA driver and the fake HIP runtime of internal/testutil/fakecuda.
// Only tests import it.
package gputest

import (
	"fmt"
	"testing"

	"github.com/kvferry/kvferry/engine/gpu"
	"github.com/kvferry/kvferry/internal/cuda"
	"github.com/kvferry/kvferry/internal/hip"
	"github.com/kvferry/kvferry/internal/testutil/fakecuda"
)

// Runtime is one GPU runtime the GPU tests run on, by table: the fake
// CUDA driver or the fake HIP runtime (the same fake under HIP names).
type Runtime struct {
	// Name is "cuda" or "hip" (engine/gpu's Kind).
	Name string
	// Prefix begins the runtime's entry point names ("cu", "hip"), for
	// Control.Calls and Control.Fail.
	Prefix string
	path   func(testing.TB) string
}

// Runtimes returns the runtimes the GPU tests run on. In a hardware
// run the HIP case skips (its fake is a fake-only fixture).
func Runtimes() []Runtime {
	return []Runtime{
		{Name: "cuda", Prefix: "cu", path: fakecuda.Path},
		{Name: "hip", Prefix: "hip", path: func(tb testing.TB) string { return fakecuda.HIPPath(tb, false) }},
	}
}

// Path builds the runtime's fake and returns its path.
func (g Runtime) Path(tb testing.TB) string { return g.path(tb) }

// Location returns the location string a registration of device dev's
// memory uses: Mooncake's "cuda:N" for CUDA and "hip:N" for HIP.
func (g Runtime) Location(dev int) string { return fmt.Sprintf("%s:%d", g.Name, dev) }

// Code returns the runtime result inside err (the two share their values).
func (g Runtime) Code(err error) int {
	if g.Name == "hip" {
		return int(hip.Code(err))
	}
	return int(cuda.Code(err))
}

// Allocator allocates device memory and copies synchronously; both
// bindings' runtimes are one.
type Allocator interface {
	MemAlloc(dev int, n uint64) (uint64, error)
	MemFree(dev int, p uint64) error
	MemcpySync(dev int, dst, src, n uint64) error
}

// Config builds the runtime's fake and returns the GPU configuration of
// an engine on it (the HIP case forces the HIP runtime) with the fake's
// path.
func (g Runtime) Config(tb testing.TB) (gpu.Config, string) {
	lib := g.Path(tb)
	return g.ConfigFor(lib), lib
}

// Allocator returns the binding the process's shared runtime for cfg
// loaded, failing tb when it cannot load.
func (g Runtime) Allocator(tb testing.TB, cfg gpu.Config) Allocator {
	tb.Helper()
	if g.Name == "hip" {
		h, err := gpu.Shared(cfg).HIP()
		if err != nil {
			tb.Fatal(err)
		}
		return h
	}
	d, err := gpu.Shared(cfg).Driver()
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

var (
	_ Allocator = (*cuda.Driver)(nil)
	_ Allocator = (*hip.Runtime)(nil)
)

// Env returns the environment a child process needs to load the same
// runtime from lib: the library variable and, for HIP, the forced runtime.
func (g Runtime) Env(lib string) []string {
	if g.Name == "hip" {
		return []string{"KVFERRY_HIP_LIB=" + lib, "KVFERRY_GPU_RUNTIME=hip"}
	}
	return []string{"KVFERRY_CUDA_LIB=" + lib}
}

// FromEnv returns the runtime and library a child started with Env
// loads, read through lookup (os.LookupEnv): HIP when KVFERRY_GPU_RUNTIME
// is "hip", else CUDA.
func FromEnv(lookup func(string) (string, bool)) (Runtime, string) {
	rts := Runtimes()
	if v, _ := lookup("KVFERRY_GPU_RUNTIME"); v == "hip" {
		lib, _ := lookup("KVFERRY_HIP_LIB")
		return rts[1], lib
	}
	lib, _ := lookup("KVFERRY_CUDA_LIB")
	return rts[0], lib
}

// ConfigFor returns the GPU configuration of an engine on the runtime's
// fake at lib, which Path or Config built before (a child's).
func (g Runtime) ConfigFor(lib string) gpu.Config {
	if g.Name == "hip" {
		return gpu.Config{HIPLibrary: lib, Runtime: gpu.HIP}
	}
	return gpu.Config{Library: lib}
}
