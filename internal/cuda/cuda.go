// Package cuda is kvferry's one binding of the CUDA driver API (DESIGN.md
// decision 11). No other package calls CUDA: they use this package's Go
// API.
//
// The driver (libcuda.so.1, or the file KVFERRY_CUDA_LIB names) is loaded
// at run time with purego, so the library loads and runs every host path on
// a machine without one: Load then returns an error wrapping
// ErrUnavailable. Entry points are resolved with cuGetProcAddress_v2 for the
// CUDA 12.0 ABI (drivers >= 12.0), cuGetProcAddress (11.3 - 11.8), or by
// their versioned export names (older), so the _v2 variants cuda.h selects
// are the ones called, never the old exports of the same base name.
//
// The current CUDA context is per OS thread. Every call that needs one runs
// with the device's primary context (shared with PyTorch and the CUDA
// runtime) pushed onto the calling thread's context stack and popped after,
// so a host thread that calls into the library (Python, NIXL, TensorRT-LLM)
// finds its own current context unchanged. Cold calls go through purego
// from a goroutine locked to its OS thread (Driver.Do); the hot ones (a
// batch of async copies with its event, an event wait, pointer
// classification) are one cgo call each into a small C trampoline that
// pushes the context, calls the driver's function pointers and pops it.
//
// Copies run on non-blocking streams; completion is observed through
// events by goroutines that block in cuEventSynchronize (events made with
// CU_EVENT_BLOCKING_SYNC), so nothing spins a core while copies run or when
// idle.
package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// DefaultLibrary is the driver's file name.
const DefaultLibrary = "libcuda.so.1"

// abiVersion is the CUDA version whose ABI the typed calls below follow;
// cuGetProcAddress returns the variant of each entry point for it.
const abiVersion = 12000

// Result is a CUresult.
type Result int32

// Results kvferry tells apart.
const (
	Success                       Result = 0
	ErrorInvalidValue             Result = 1
	ErrorOutOfMemory              Result = 2
	ErrorNotInitialized           Result = 3
	ErrorNoDevice                 Result = 100
	ErrorInvalidDevice            Result = 101
	ErrorInvalidContext           Result = 201
	ErrorAlreadyMapped            Result = 208
	ErrorInvalidHandle            Result = 400
	ErrorNotFound                 Result = 500
	ErrorNotReady                 Result = 600
	ErrorIllegalAddress           Result = 700
	ErrorPeerAccessAlreadyEnabled Result = 704
	ErrorNotPermitted             Result = 800
	ErrorNotSupported             Result = 801
)

// ErrUnavailable: no CUDA driver could be loaded or initialized here.
var ErrUnavailable = errors.New("CUDA driver unavailable")

// Error is a failed driver call.
type Error struct {
	// Call is the entry point's base name ("cuMemcpyAsync").
	Call string
	// Code is the driver's result.
	Code Result
	// Name is the code's name from cuGetErrorName ("CUDA_ERROR_INVALID_VALUE").
	Name string
}

func (e *Error) Error() string {
	if e.Name != "" {
		return fmt.Sprintf("%s: %s (%d)", e.Call, e.Name, int(e.Code))
	}
	return fmt.Sprintf("%s: CUDA error %d", e.Call, int(e.Code))
}

// Is makes errors.Is(err, ErrUnavailable) true for a driver that reports
// no device or is not initialized.
func (e *Error) Is(target error) bool {
	return target == ErrUnavailable && (e.Code == ErrorNoDevice || e.Code == ErrorNotInitialized)
}

// Code returns the driver result inside err (Success for nil, -1 when err
// is not a driver error).
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

// Driver is a loaded and initialized CUDA driver. It is safe for
// concurrent use and lives as long as the process (Load caches it).
type Driver struct {
	path    string
	lib     uintptr
	version int
	ndev    int
	tab     cfuncs // raw entry points, for the C trampolines
	f       funcs

	mu   sync.Mutex
	ctxs []uintptr // primary contexts by device, 0 until retained
}

var loaded = struct {
	sync.Mutex
	m    map[string]*Driver
	seen map[string]seenLoad
}{m: make(map[string]*Driver)}

// Load returns the process's driver loaded from path (DefaultLibrary when
// empty), loading and initializing it on first use. A failed load is not
// cached: a later call tries again.
func Load(path string) (*Driver, error) {
	if path == "" {
		path = DefaultLibrary
	}
	loaded.Lock()
	defer loaded.Unlock()
	if d := loaded.m[path]; d != nil {
		return d, nil
	}
	d, err := open(path)
	if err != nil {
		return nil, err
	}
	loaded.m[path] = d
	return d, nil
}

// Loaded reports whether the driver file path (DefaultLibrary when empty)
// is already mapped into this process (by kvferry or by the host, e.g.
// PyTorch), without loading it. It reads the loader's list of objects in
// memory, and only when the process loaded an object since the last look
// (registrations ask it: it must be cheap).
func Loaded(path string) bool {
	if path == "" {
		path = DefaultLibrary
	}
	loaded.Lock()
	defer loaded.Unlock()
	if loaded.m[path] != nil {
		return true
	}
	if c, ok := loaded.seen[path]; ok {
		if loadCount() == c.adds {
			return c.found
		}
	}
	found, adds := loadedObject(path)
	if loaded.seen == nil {
		loaded.seen = make(map[string]seenLoad)
	}
	loaded.seen[path] = seenLoad{found: found, adds: adds}
	return found
}

// seenLoad is the answer of Loaded at a count of the loader's loads.
type seenLoad struct {
	found bool
	adds  uint64
}

func open(path string) (d *Driver, err error) {
	defer func() {
		// purego panics on a symbol type it cannot bind; a broken driver
		// file must not take the host process down.
		if r := recover(); r != nil {
			d, err = nil, fmt.Errorf("load %s: %v: %w", path, r, ErrUnavailable)
		}
	}()
	lib, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w: %w", path, ErrUnavailable, err)
	}
	d = &Driver{path: path, lib: lib}
	var getVersion func(*int32) Result
	if err := d.bindExport(&getVersion, "cuDriverGetVersion"); err != nil {
		return nil, err
	}
	var v int32
	if r := getVersion(&v); r != Success {
		return nil, fmt.Errorf("load %s: cuDriverGetVersion: %d: %w", path, r, ErrUnavailable)
	}
	d.version = int(v)
	if err := d.resolveAll(); err != nil {
		return nil, err
	}
	if r := d.f.init(0); r != Success {
		return nil, fmt.Errorf("load %s: %w: %w", path, ErrUnavailable, d.err("cuInit", r))
	}
	var n int32
	if err := d.check("cuDeviceGetCount", d.f.deviceGetCount(&n)); err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	d.ndev = int(n)
	d.ctxs = make([]uintptr, d.ndev)
	return d, nil
}

// bindExport binds fptr to the exported symbol name (no version lookup).
func (d *Driver) bindExport(fptr any, name string) error {
	p, err := purego.Dlsym(d.lib, name)
	if err != nil || p == 0 {
		return fmt.Errorf("load %s: no %s: %w", d.path, name, ErrUnavailable)
	}
	purego.RegisterFunc(fptr, p)
	return nil
}

// Path returns the file the driver was loaded from.
func (d *Driver) Path() string { return d.path }

// Version returns the driver's CUDA version (12080 for 12.8).
func (d *Driver) Version() int { return d.version }

// DeviceCount returns the number of devices.
func (d *Driver) DeviceCount() int { return d.ndev }

// err builds the error of a failed call.
func (d *Driver) err(call string, r Result) error {
	e := &Error{Call: call, Code: r}
	if d.f.getErrorName != nil {
		var s *byte
		if d.f.getErrorName(r, &s) == Success && s != nil {
			e.Name = goString(s)
		}
	}
	return e
}

// check returns nil for Success and the call's error otherwise.
func (d *Driver) check(call string, r Result) error {
	if r == Success {
		return nil
	}
	return d.err(call, r)
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
func (d *Driver) checkDevice(dev int) error {
	if dev < 0 || dev >= d.ndev {
		return fmt.Errorf("CUDA device %d of %d: %w", dev, d.ndev, &Error{Call: "device", Code: ErrorInvalidDevice, Name: "CUDA_ERROR_INVALID_DEVICE"})
	}
	return nil
}

// primary returns dev's primary context, retaining it on first use. The
// context is shared with the CUDA runtime (PyTorch) of the process.
func (d *Driver) primary(dev int) (uintptr, error) {
	if err := d.checkDevice(dev); err != nil {
		return 0, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if c := d.ctxs[dev]; c != 0 {
		return c, nil
	}
	var c uintptr
	if err := d.check("cuDevicePrimaryCtxRetain", d.f.primaryCtxRetain(&c, int32(dev))); err != nil {
		return 0, err
	}
	d.ctxs[dev] = c
	return c, nil
}

// Do runs f on the calling goroutine, locked to its OS thread, with dev's
// primary context pushed onto the thread's context stack; the context is
// popped afterwards, so the thread's own current context (a host thread's)
// is left as it was.
func (d *Driver) Do(dev int, f func() error) error {
	ctx, err := d.primary(dev)
	if err != nil {
		return err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := d.check("cuCtxPushCurrent", d.f.ctxPushCurrent(ctx)); err != nil {
		return err
	}
	defer func() {
		var old uintptr
		d.f.ctxPopCurrent(&old)
	}()
	return f()
}
