package fakecuda

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/kvferry/kvferry/internal/testutil/hw"
)

// Hardware reports whether the tests run on this machine's real CUDA
// driver instead of the fake: KVFERRY_HW=1 (make hw-check sets it). Then
// Build and Path return the real driver (KVFERRY_CUDA_LIB when it names
// one, else libcuda.so.1), Open returns a Control that reads and writes
// device memory through that driver, and the fake's fault injection and
// bookkeeping are not there: tests that need them call FakeOnly.
func Hardware() bool { return hw.Enabled() }

// realLibrary is the driver a hardware run uses.
func realLibrary() string {
	if v := hw.Getenv("KVFERRY_CUDA_LIB"); v != "" {
		return v
	}
	return "libcuda.so.1"
}

// FakeOnly skips tb in a hardware run: what it checks needs the fake
// (fault injection, slowed copies, the fake's counts of live objects or
// its device model). why says what.
func FakeOnly(tb testing.TB, why string) {
	tb.Helper()
	if Hardware() {
		tb.Skipf("fake CUDA only: %s (KVFERRY_HW=1 runs on the real driver)", why)
	}
}

var probed struct {
	once  sync.Once
	count int
	err   error
}

// probe loads the real driver and counts its devices (cuInit,
// cuDeviceGetCount).
func probe() (int, error) {
	probed.once.Do(func() {
		lib := realLibrary()
		h, err := purego.Dlopen(lib, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			probed.err = fmt.Errorf("load %s: %w", lib, err)
			return
		}
		var cuInit func(uint32) int32
		var cuDeviceGetCount func(*int32) int32
		for name, fp := range map[string]any{"cuInit": &cuInit, "cuDeviceGetCount": &cuDeviceGetCount} {
			sym, err := purego.Dlsym(h, name)
			if err != nil {
				probed.err = fmt.Errorf("%s: %w", lib, err)
				return
			}
			purego.RegisterFunc(fp, sym)
		}
		if r := cuInit(0); r != 0 {
			probed.err = fmt.Errorf("%s: cuInit: CUresult %d", lib, r)
			return
		}
		var n int32
		if r := cuDeviceGetCount(&n); r != 0 || n <= 0 {
			probed.err = fmt.Errorf("%s: cuDeviceGetCount: CUresult %d, %d devices", lib, r, n)
			return
		}
		probed.count = int(n)
	})
	return probed.count, probed.err
}

// requireDevice skips tb in a hardware run on a machine without a CUDA
// device.
func requireDevice(tb testing.TB) {
	tb.Helper()
	if _, err := probe(); err != nil {
		tb.Skipf("KVFERRY_HW=1 but no CUDA device: %v", err)
	}
}

// Devices returns how many devices the tests' driver has: the fake's two
// (FAKECUDA_DEVICES), or the real driver's count.
func Devices(tb testing.TB) int {
	tb.Helper()
	if !Hardware() {
		return 2
	}
	requireDevice(tb)
	n, _ := probe()
	return n
}

// Second returns the device tests use as "another device": 1, or 0 on a
// machine with one GPU (the transfers then stay on one device).
func Second(tb testing.TB) int {
	tb.Helper()
	return min(1, Devices(tb)-1)
}

// SecondOf is Second for a driver that reports n devices (child
// processes, which have no testing.TB).
func SecondOf(n int) int { return min(1, n-1) }

// realDriver reads and writes device memory through the real driver, as
// a CUDA application does: the primary context of the pointer's device
// made current on a locked thread around a synchronous copy.
type realDriver struct {
	retain func(*uintptr, int32) int32
	push   func(uintptr) int32
	pop    func(*uintptr) int32
	attr   func(unsafe.Pointer, int32, uint64) int32
	dtoh   func(unsafe.Pointer, uint64, uint64) int32
	htod   func(uint64, unsafe.Pointer, uint64) int32
	memset func(uint64, uint8, uint64) int32
}

// cuPointerAttributeDeviceOrdinal is CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL.
const cuPointerAttributeDeviceOrdinal = 9

func openReal(path string) (*realDriver, error) {
	if _, err := probe(); err != nil {
		return nil, err
	}
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	r := &realDriver{}
	for name, fp := range map[string]any{
		"cuDevicePrimaryCtxRetain": &r.retain, "cuCtxPushCurrent_v2": &r.push, "cuCtxPopCurrent_v2": &r.pop,
		"cuPointerGetAttribute": &r.attr, "cuMemcpyDtoH_v2": &r.dtoh, "cuMemcpyHtoD_v2": &r.htod, "cuMemsetD8_v2": &r.memset,
	} {
		sym, err := purego.Dlsym(h, name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		purego.RegisterFunc(fp, sym)
	}
	return r, nil
}

// with runs f with the primary context of p's device current.
func (r *realDriver) with(p uint64, what string, f func() int32) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var dev int32
	if rc := r.attr(unsafe.Pointer(&dev), cuPointerAttributeDeviceOrdinal, p); rc != 0 {
		panic(fmt.Sprintf("fakecuda: %s: %#x is not device memory (CUresult %d)", what, p, rc))
	}
	var ctx uintptr
	if rc := r.retain(&ctx, dev); rc != 0 {
		panic(fmt.Sprintf("fakecuda: %s: cuDevicePrimaryCtxRetain(%d): CUresult %d", what, dev, rc))
	}
	if rc := r.push(ctx); rc != 0 {
		panic(fmt.Sprintf("fakecuda: %s: cuCtxPushCurrent: CUresult %d", what, rc))
	}
	defer func() {
		var old uintptr
		r.pop(&old)
	}()
	if rc := f(); rc != 0 {
		panic(fmt.Sprintf("fakecuda: %s at %#x: CUresult %d", what, p, rc))
	}
}

func (r *realDriver) read(p uint64, n int) []byte {
	b := make([]byte, n)
	if n == 0 {
		return b
	}
	r.with(p, "cuMemcpyDtoH", func() int32 { return r.dtoh(unsafe.Pointer(&b[0]), p, uint64(n)) })
	return b
}

func (r *realDriver) write(p uint64, b []byte) {
	if len(b) == 0 {
		return
	}
	r.with(p, "cuMemcpyHtoD", func() int32 { return r.htod(p, unsafe.Pointer(&b[0]), uint64(len(b))) })
	runtime.KeepAlive(b)
}

func (r *realDriver) zero(p uint64, n int) {
	if n == 0 {
		return
	}
	r.with(p, "cuMemsetD8", func() int32 { return r.memset(p, 0, uint64(n)) })
}
