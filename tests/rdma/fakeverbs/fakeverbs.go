// Package fakeverbs builds and drives the fake libibverbs provider of
// c/fake_ibverbs.c for tests: a test fixture, loaded by the real shim of
// engine/transport/rdma/ibv through KVFERRY_IBVERBS_LIB. Nothing in the
// shipped library imports it.
package fakeverbs

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/ebitengine/purego"
)

var built struct {
	once sync.Once
	path string
	err  error
}

// Build compiles the fake provider (once per process) into a temporary
// directory and returns the path of its libibverbs.so.1. The directory
// holds nothing else, so LD_LIBRARY_PATH=filepath.Dir(path) makes programs
// linked against the real libibverbs load the fake instead.
func Build() (string, error) {
	built.once.Do(func() {
		dir, err := os.MkdirTemp("", "fakeverbs-lib-")
		if err != nil {
			built.err = err
			return
		}
		out := filepath.Join(dir, "libibverbs.so.1")
		cmd := exec.Command("cc", CompileArgs(out)...)
		if b, err := cmd.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("build fake libibverbs: %v: %s", err, b)
			return
		}
		built.path = out
	})
	return built.path, built.err
}

// CompileArgs are the arguments of cc that build the fake provider into
// out: the source, and the version script that gives its entry points
// rdma-core's symbol versions.
func CompileArgs(out string) []string {
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "c")
	return []string{"-shared", "-fPIC", "-O2", "-Wall",
		"-Wl,--version-script=" + filepath.Join(dir, "libibverbs.map"), "-Wl,-soname,libibverbs.so.1",
		"-o", out, filepath.Join(dir, "fake_ibverbs.c"), "-lpthread", "-ldl"}
}

// Env is the environment that points a process at the fake provider with
// the given devices, its sockets in dir.
func Env(lib, dir string, devices ...string) []string {
	return []string{
		"KVFERRY_IBVERBS_LIB=" + lib,
		"FAKEVERBS_DIR=" + dir,
		"FAKEVERBS_DEVICES=" + strings.Join(devices, ","),
	}
}

// Setenv sets Env in this process (before the shim loads the library).
func Setenv(lib, dir string, devices ...string) {
	for _, kv := range Env(lib, dir, devices...) {
		k, v, _ := strings.Cut(kv, "=")
		os.Setenv(k, v)
	}
}

// Control calls the fake's fault-injection functions in this process (the
// instance the shim loaded: dlopen of the same path shares it).
type Control struct {
	setPort  func(dev string, up int32) int32
	failNext func(dev string, count, status int32) int32
	delay    func(dev string, us int32) int32
	qpError  func(qpn uint32) int32
	bytes    func(dev string) uint64
}

// Open returns the controls of the fake at lib.
func Open(lib string) (*Control, error) {
	h, err := purego.Dlopen(lib, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, fmt.Errorf("dlopen %s: %w", lib, err)
	}
	c := &Control{}
	purego.RegisterLibFunc(&c.setPort, h, "fakeverbs_set_port")
	purego.RegisterLibFunc(&c.failNext, h, "fakeverbs_fail_next")
	purego.RegisterLibFunc(&c.delay, h, "fakeverbs_set_delay_us")
	purego.RegisterLibFunc(&c.qpError, h, "fakeverbs_qp_error")
	purego.RegisterLibFunc(&c.bytes, h, "fakeverbs_bytes")
	return c, nil
}

func check(what string, rc int32) error {
	if rc != 0 {
		return fmt.Errorf("fakeverbs %s: %d", what, rc)
	}
	return nil
}

// SetPort takes dev's port down or up (PORT_ERR / PORT_ACTIVE events).
func (c *Control) SetPort(dev string, up bool) error {
	v := int32(0)
	if up {
		v = 1
	}
	return check("set_port "+dev, c.setPort(dev, v))
}

// FailNext makes dev's next count work requests complete with status.
func (c *Control) FailNext(dev string, count, status int) error {
	return check("fail_next "+dev, c.failNext(dev, int32(count), int32(status)))
}

// SetDelay makes dev wait us microseconds before each work request.
func (c *Control) SetDelay(dev string, us int) error {
	return check("set_delay "+dev, c.delay(dev, int32(us)))
}

// QPError forces the QP numbered qpn to ERROR (with a QP_FATAL event).
func (c *Control) QPError(qpn uint32) error { return check("qp_error", c.qpError(qpn)) }

// Bytes returns the bytes dev moved as requester in this process.
func (c *Control) Bytes(dev string) uint64 { return c.bytes(dev) }
