// Package hip is kvferry's one binding of the HIP runtime API (ROCm's
// libamdhip64.so), beside internal/cuda for CUDA. No other package calls
// HIP: they use this package's Go API.
//
// The runtime (libamdhip64.so, or the file KVFERRY_HIP_LIB names) is
// loaded at run time with purego, so nothing of ROCm is needed to build:
// Load returns an error wrapping ErrUnavailable on a machine without it.
// The entry points every path needs are required at load; the VMM ones
// (hipMemCreate and friends) and dma-buf export
// (hipMemGetHandleForAddressRange) are optional, as older ROCm releases
// lack them: a call whose symbol is missing returns an error wrapping
// ErrNotSupported. The facts the binding relies on (signatures, enum
// values, layouts) are in docs/specs/hip.md.
//
// HIP keeps a current device per host thread instead of CUDA's context
// stack. Every call that acts on a device runs through Runtime.Do, which
// locks the goroutine to its OS thread, makes the device current and puts
// the thread's previous device back after, so a host thread that calls
// into the library (PyTorch on ROCm) finds its current device unchanged.
package hip

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// DefaultLibrary is the runtime's file name.
const DefaultLibrary = "libamdhip64.so"

// Result is a hipError_t.
type Result int32

// Results kvferry tells apart (hipError_t; the values match CUresult's).
const (
	Success                       Result = 0
	ErrorInvalidValue             Result = 1
	ErrorOutOfMemory              Result = 2
	ErrorNotInitialized           Result = 3
	ErrorInvalidDevicePointer     Result = 17
	ErrorNoDevice                 Result = 100
	ErrorInvalidDevice            Result = 101
	ErrorInvalidContext           Result = 201
	ErrorInvalidHandle            Result = 400
	ErrorNotFound                 Result = 500
	ErrorNotReady                 Result = 600
	ErrorIllegalAddress           Result = 700
	ErrorPeerAccessAlreadyEnabled Result = 704
	ErrorNotSupported             Result = 801
)

var (
	// ErrUnavailable: no HIP runtime could be loaded or initialized here.
	ErrUnavailable = errors.New("HIP runtime unavailable")
	// ErrNotSupported: the loaded runtime lacks an entry point (an older
	// ROCm) or the device refuses the operation.
	ErrNotSupported = errors.New("not supported by the HIP runtime")
)

// Error is a failed runtime call.
type Error struct {
	// Call is the entry point's name ("hipMemcpyAsync").
	Call string
	// Code is the runtime's result.
	Code Result
	// Name is the code's name from hipGetErrorName.
	Name string
}

func (e *Error) Error() string {
	if e.Name != "" {
		return fmt.Sprintf("%s: %s (%d)", e.Call, e.Name, int(e.Code))
	}
	return fmt.Sprintf("%s: HIP error %d", e.Call, int(e.Code))
}

// Is makes errors.Is(err, ErrUnavailable) true for a runtime that reports
// no device or is not initialized, and errors.Is(err, ErrNotSupported)
// true for hipErrorNotSupported.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrUnavailable:
		return e.Code == ErrorNoDevice || e.Code == ErrorNotInitialized
	case ErrNotSupported:
		return e.Code == ErrorNotSupported
	}
	return false
}

// Code returns the runtime result inside err (Success for nil, -1 when
// err is not a runtime error).
func Code(err error) Result {
	if err == nil {
		return Success
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return -1
}

// Runtime is a loaded and initialized HIP runtime. It is safe for
// concurrent use and lives as long as the process (Load caches it).
type Runtime struct {
	path    string
	lib     uintptr
	version int
	ndev    int
	f       funcs
}

var loaded = struct {
	sync.Mutex
	m map[string]*Runtime
}{m: make(map[string]*Runtime)}

// Load returns the process's runtime loaded from path (DefaultLibrary when
// empty), loading and initializing it on first use. A failed load is not
// cached: a later call tries again.
func Load(path string) (*Runtime, error) {
	if path == "" {
		path = DefaultLibrary
	}
	loaded.Lock()
	defer loaded.Unlock()
	if r := loaded.m[path]; r != nil {
		return r, nil
	}
	r, err := open(path)
	if err != nil {
		return nil, err
	}
	loaded.m[path] = r
	return r, nil
}

func open(path string) (r *Runtime, err error) {
	defer func() {
		// purego panics on a symbol type it cannot bind; a broken runtime
		// file must not take the host process down.
		if p := recover(); p != nil {
			r, err = nil, fmt.Errorf("load %s: %v: %w", path, p, ErrUnavailable)
		}
	}()
	lib, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w: %w", path, ErrUnavailable, err)
	}
	r = &Runtime{path: path, lib: lib}
	if err := r.resolve(); err != nil {
		return nil, err
	}
	if c := r.f.init(0); c != Success {
		return nil, fmt.Errorf("load %s: %w: %w", path, ErrUnavailable, r.err("hipInit", c))
	}
	var v int32
	if r.f.runtimeGetVersion != nil && r.f.runtimeGetVersion(&v) == Success {
		r.version = int(v)
	}
	var n int32
	if err := r.check("hipGetDeviceCount", r.f.getDeviceCount(&n)); err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	r.ndev = int(n)
	return r, nil
}

// Path returns the file the runtime was loaded from.
func (r *Runtime) Path() string { return r.path }

// Version returns HIP_VERSION of the runtime (major*10^7 + minor*10^5 +
// patch), 0 when it does not say.
func (r *Runtime) Version() int { return r.version }

// DeviceCount returns the number of devices.
func (r *Runtime) DeviceCount() int { return r.ndev }

// err builds the error of a failed call.
func (r *Runtime) err(call string, c Result) error {
	e := &Error{Call: call, Code: c}
	if r.f.getErrorName != nil {
		e.Name = goString(r.f.getErrorName(c))
	}
	return e
}

// check returns nil for Success and the call's error otherwise.
func (r *Runtime) check(call string, c Result) error {
	if c == Success {
		return nil
	}
	return r.err(call, c)
}

// missing is the error of a call whose entry point the runtime lacks.
func (r *Runtime) missing(call string) error {
	return fmt.Errorf("%s: %s has no such entry point: %w", call, r.path, ErrNotSupported)
}

func goString(p *byte) string {
	if p == nil {
		return ""
	}
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 && n < 1024 {
		n++
	}
	return string(unsafe.Slice(p, n))
}

// checkDevice validates a device ordinal.
func (r *Runtime) checkDevice(dev int) error {
	if dev < 0 || dev >= r.ndev {
		return fmt.Errorf("HIP device %d of %d: %w", dev, r.ndev, &Error{Call: "device", Code: ErrorInvalidDevice, Name: "hipErrorInvalidDevice"})
	}
	return nil
}

// Do runs f on the calling goroutine, locked to its OS thread, with dev
// the thread's current device; the thread's previous current device is
// restored afterwards.
func (r *Runtime) Do(dev int, f func() error) error {
	if err := r.checkDevice(dev); err != nil {
		return err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var old int32
	if err := r.check("hipGetDevice", r.f.getDevice(&old)); err != nil {
		return err
	}
	if int(old) != dev {
		if err := r.check("hipSetDevice", r.f.setDevice(int32(dev))); err != nil {
			return err
		}
		defer r.f.setDevice(old)
	}
	return f()
}

// rtldNoload is glibc's RTLD_NOLOAD: dlopen only finds an object already
// loaded.
const rtldNoload = 0x4

// Loaded reports whether the runtime file path (DefaultLibrary when empty)
// is already mapped into this process (by kvferry or by the host, e.g.
// PyTorch on ROCm), without loading it.
func Loaded(path string) bool {
	if path == "" {
		path = DefaultLibrary
	}
	loaded.Lock()
	r := loaded.m[path]
	loaded.Unlock()
	if r != nil {
		return true
	}
	h, err := purego.Dlopen(path, purego.RTLD_LAZY|purego.RTLD_LOCAL|rtldNoload)
	if err != nil || h == 0 {
		return false
	}
	_ = purego.Dlclose(h)
	return true
}
