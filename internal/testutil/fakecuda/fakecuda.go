// Package fakecuda builds the fake CUDA driver of tests/fakecuda (a test
// fixture: a libcuda.so.1 whose device memory is memfd-backed host memory
// the CPU cannot touch at the device address) and drives its fault
// injection. Only tests import it; the real binding (internal/cuda) loads
// the fake through KVFERRY_CUDA_LIB or an explicit path, unaware of it.
//
// With KVFERRY_HW=1 (Hardware) the same tests run on the machine's real
// driver: Build and Path name it, and Control reads and writes device
// memory through it.
package fakecuda

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/ebitengine/purego"

	"github.com/kvferry/kvferry/internal/cmem"
)

// fixture is one build of the fake: a source file (beside fake_cuda.c,
// which every fixture includes or is) compiled into a library name.
type fixture struct {
	src, lib string
	flags    []string

	once sync.Once
	path string
	err  error
}

var (
	cudaBuild     = &fixture{src: "fake_cuda.c", lib: "libcuda.so.1"}
	hipBuild      = &fixture{src: "fake_hip.c", lib: "libamdhip64.so"}
	hipNoVMMBuild = &fixture{src: "fake_hip.c", lib: "libamdhip64.so", flags: []string{"-DFAKEHIP_NO_VMM"}}
	clearVisible  sync.Once
)

// Source returns the path of fake_cuda.c.
func Source() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "tests", "fakecuda", "fake_cuda.c")
}

// Build compiles the fake (once per process; the file is cached in the
// temporary directory under a name derived from its source) and returns
// the path of libcuda.so.1. It clears CUDA_VISIBLE_DEVICES in this process
// (and so in the children it starts): the fake honours it as the real
// driver does, and the tests want all of the fake's devices. In a hardware
// run it returns the real driver's name, whether or not it loads (Path
// checks that), and leaves CUDA_VISIBLE_DEVICES as the machine has it.
func Build() (string, error) {
	if Hardware() {
		return realLibrary(), nil
	}
	return cudaBuild.build()
}

// BuildHIP compiles the fake HIP runtime (tests/fakecuda/fake_hip.c: the
// fake driver under HIP names) as Build does, and returns the path of its
// libamdhip64.so. With noVMM it leaves out the VMM and dma-buf entry
// points, as an older ROCm does.
func BuildHIP(noVMM bool) (string, error) {
	if noVMM {
		return hipNoVMMBuild.build()
	}
	return hipBuild.build()
}

// HIPPath builds the fake HIP runtime and returns its path, failing tb on
// error. The fake HIP runs only on the fake: a hardware run skips tb.
func HIPPath(tb testing.TB, noVMM bool) string {
	tb.Helper()
	if Hardware() {
		tb.Skip("the fake HIP runtime is a fake-only fixture")
	}
	p, err := BuildHIP(noVMM)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

func (f *fixture) build() (string, error) {
	f.once.Do(func() {
		clearVisible.Do(func() { os.Unsetenv("CUDA_VISIBLE_DEVICES") })
		dir := filepath.Dir(Source())
		sum := sha256.New()
		for _, name := range []string{"fake_cuda.c", f.src} {
			src, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				f.err = fmt.Errorf("fake source: %w", err)
				return
			}
			sum.Write(src)
		}
		for _, fl := range f.flags {
			sum.Write([]byte(fl))
		}
		out := filepath.Join(os.TempDir(), "kvferry-fake-"+hex.EncodeToString(sum.Sum(nil)[:8]), f.lib)
		if _, err := os.Stat(out); err == nil {
			f.path = out
			return
		}
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			f.err = err
			return
		}
		tmp, err := os.CreateTemp(filepath.Dir(out), "build-*.so")
		if err != nil {
			f.err = err
			return
		}
		tmp.Close()
		args := append([]string{"-O2", "-g", "-Wall", "-Wextra", "-std=gnu11", "-shared", "-fPIC", "-fvisibility=hidden"}, f.flags...)
		args = append(args, "-o", tmp.Name(), filepath.Join(dir, f.src), "-lpthread")
		if b, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
			os.Remove(tmp.Name())
			f.err = fmt.Errorf("build %s: %v: %s", f.src, err, b)
			return
		}
		if err := os.Rename(tmp.Name(), out); err != nil {
			f.err = err
			return
		}
		f.path = out
	})
	return f.path, f.err
}

// Path builds the fake and returns its path, failing tb on error. In a
// hardware run it returns the real driver, and skips tb where the
// machine has no CUDA device.
func Path(tb testing.TB) string {
	tb.Helper()
	if Hardware() {
		requireDevice(tb)
		return realLibrary()
	}
	p, err := Build()
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// Control drives the fake loaded in this process. In a hardware run it
// reads and writes device memory through the real driver (Bytes, Write,
// Zero; Reset does nothing) and its fake-only calls panic: tests guard
// them with Fake or FakeOnly.
type Control struct {
	real          *realDriver
	fail          func(name string, nth, sticky, code int32) int32
	reset         func()
	setCopyDelay  func(us int32)
	setCopyMBps   func(pageable, pinned, device int32)
	loseContext   func(dev int32)
	backing       func(p uint64) uintptr
	calls         func(name string) uint64
	wrongVersions func() uint64
	count         func(kind int32) int32
}

// Open returns the control of the fake at path (loading it if the binding
// has not yet); it panics when the file is not the fake. In a hardware
// run it returns a control over the real driver at path.
func Open(path string) *Control {
	if Hardware() {
		r, err := openReal(path)
		if err != nil {
			panic(fmt.Sprintf("fakecuda: %v", err))
		}
		return &Control{real: r}
	}
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		panic(fmt.Sprintf("fakecuda: %v", err))
	}
	c := &Control{}
	for name, fp := range map[string]any{
		"fakecuda_fail": &c.fail, "fakecuda_reset": &c.reset, "fakecuda_set_copy_delay_us": &c.setCopyDelay,
		"fakecuda_set_copy_mbps": &c.setCopyMBps, "fakecuda_lose_context": &c.loseContext, "fakecuda_backing": &c.backing,
		"fakecuda_calls": &c.calls, "fakecuda_wrong_version_calls": &c.wrongVersions, "fakecuda_count": &c.count,
	} {
		purego.RegisterLibFunc(fp, h, name)
	}
	return c
}

// Fail makes the nth call (1-based, counted from now) of entry point name
// return code; with sticky, every call from the nth on. Name "copy" fails a stream copy on
// the fake's worker, which loses the device's context.
func (c *Control) Fail(name string, nth int, sticky bool, code int) {
	c.fakeOnly("Fail")
	s := int32(0)
	if sticky {
		s = 1
	}
	c.fail(name, int32(nth), s, int32(code))
}

// Reset removes every fault, copy delay and copy speed limit and restores
// lost contexts.
func (c *Control) Reset() {
	if c.real == nil {
		c.reset()
	}
}

// SetCopyDelay makes every stream copy sleep us microseconds first.
func (c *Control) SetCopyDelay(us int) {
	c.fakeOnly("SetCopyDelay")
	c.setCopyDelay(int32(us))
}

// SetCopyMBps sets how fast copies run (MB/s; 0 = unthrottled): those
// with a pageable host end, those with a pinned (registered, managed) host
// end, and device to device (also FAKECUDA_PAGEABLE_MBPS,
// FAKECUDA_PINNED_MBPS, FAKECUDA_DEVICE_MBPS in a child's environment).
func (c *Control) SetCopyMBps(pageable, pinned, device int) {
	c.fakeOnly("SetCopyMBps")
	c.setCopyMBps(int32(pageable), int32(pinned), int32(device))
}

// LoseContext makes device dev's context unusable (error 700 from then on).
func (c *Control) LoseContext(dev int) {
	c.fakeOnly("LoseContext")
	c.loseContext(int32(dev))
}

// Bytes returns the n bytes at device address p through the fake's own
// host mapping (nil when p is not device memory). In a hardware run they
// are a copy, read through the driver: write with Write and Zero.
func (c *Control) Bytes(p uint64, n int) []byte {
	if c.real != nil {
		return c.real.read(p, n)
	}
	b := c.backing(p)
	if b == 0 {
		return nil
	}
	return cmem.Bytes(b, uint64(n))
}

// Calls returns how often entry point name was called.
func (c *Control) Calls(name string) uint64 {
	c.fakeOnly("Calls")
	return c.calls(name)
}

// WrongVersionCalls counts calls of old-ABI exports (cuMemAlloc instead of
// cuMemAlloc_v2, ...) and of cuGetProcAddress_v2 on a pre-12.0 driver.
func (c *Control) WrongVersionCalls() uint64 {
	c.fakeOnly("WrongVersionCalls")
	return c.wrongVersions()
}

// Kinds for Count.
const (
	KindAll        = 0
	KindDevice     = 1
	KindPinned     = 2
	KindRegistered = 3
	KindManaged    = 4
	KindIPCOpen    = 5
	KindVMMMapping = 6
	KindVMMPhys    = -1
)

// Count returns how many live allocations (or mappings) of a kind exist.
func (c *Control) Count(kind int) int {
	c.fakeOnly("Count")
	return int(c.count(int32(kind)))
}

// Fake reports whether c drives the fake (false in a hardware run).
func (c *Control) Fake() bool { return c.real == nil }

func (c *Control) fakeOnly(what string) {
	if c.real != nil {
		panic("fakecuda: " + what + " needs the fake driver; guard it with Fake or FakeOnly (KVFERRY_HW=1)")
	}
}

// Write copies b to device address p.
func (c *Control) Write(p uint64, b []byte) {
	if c.real != nil {
		c.real.write(p, b)
		return
	}
	dst := c.Bytes(p, len(b))
	if dst == nil {
		panic(fmt.Sprintf("fakecuda: write: %#x is not device memory", p))
	}
	copy(dst, b)
}

// Zero clears the n bytes at device address p.
func (c *Control) Zero(p uint64, n int) {
	if c.real != nil {
		c.real.zero(p, n)
		return
	}
	dst := c.Bytes(p, n)
	if dst == nil {
		panic(fmt.Sprintf("fakecuda: zero: %#x is not device memory", p))
	}
	clear(dst)
}
