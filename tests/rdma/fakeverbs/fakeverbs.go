// Package fakeverbs builds and drives the fake libibverbs provider of
// c/fake_ibverbs.c for tests: a test fixture, loaded by the real shim of
// engine/transport/rdma/ibv through KVFERRY_IBVERBS_LIB. Nothing in the
// shipped library imports it.
//
// With KVFERRY_HW=1 (Hardware) the same tests run on the machine's
// libibverbs and NICs: Build names the real library, Env and Setenv point
// at it alone, Devices lists the NICs with an active port, and Control's
// fault injection reports ErrFakeOnly (tests guard it with FakeOnly);
// Control.Bytes reads the ports' kernel counters instead of the fake's.
package fakeverbs

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/ebitengine/purego"

	"github.com/kvferry/kvferry/engine/transport/rdma"
	"github.com/kvferry/kvferry/engine/transport/rdma/ibv"
	"github.com/kvferry/kvferry/internal/testutil/hw"
)

var built struct {
	once sync.Once
	path string
	err  error
}

// Build compiles the fake provider (once per process) into a temporary
// directory and returns the path of its libibverbs.so.1. The directory
// holds nothing else, so LD_LIBRARY_PATH=filepath.Dir(path) makes programs
// linked against the real libibverbs load the fake instead. In a hardware
// run it returns the real library's name (KVFERRY_IBVERBS_LIB, else
// libibverbs.so.1).
func Build() (string, error) {
	if Hardware() {
		return realLibrary(), nil
	}
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
// the given devices, its sockets in dir (in a hardware run: at lib alone).
func Env(lib, dir string, devices ...string) []string {
	if Hardware() {
		return []string{"KVFERRY_IBVERBS_LIB=" + lib}
	}
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
// instance the shim loaded: dlopen of the same path shares it). In a
// hardware run it injects nothing (ErrFakeOnly) and Bytes reads the
// ports' counters.
type Control struct {
	real     bool
	setPort  func(dev string, up int32) int32
	failNext func(dev string, count, status int32) int32
	delay    func(dev string, us int32) int32
	hold     func(dev string, pass int32) int32
	held     func(dev string) int32
	qpError  func(qpn uint32) int32
	bytes    func(dev string) uint64
}

// Open returns the controls of the fake at lib (of the real NICs in a
// hardware run).
func Open(lib string) (*Control, error) {
	if Hardware() {
		return &Control{real: true}, nil
	}
	h, err := purego.Dlopen(lib, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, fmt.Errorf("dlopen %s: %w", lib, err)
	}
	c := &Control{}
	purego.RegisterLibFunc(&c.setPort, h, "fakeverbs_set_port")
	purego.RegisterLibFunc(&c.failNext, h, "fakeverbs_fail_next")
	purego.RegisterLibFunc(&c.delay, h, "fakeverbs_set_delay_us")
	purego.RegisterLibFunc(&c.hold, h, "fakeverbs_hold")
	purego.RegisterLibFunc(&c.held, h, "fakeverbs_held")
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
	if c.real {
		return ErrFakeOnly
	}
	v := int32(0)
	if up {
		v = 1
	}
	return check("set_port "+dev, c.setPort(dev, v))
}

// FailNext makes dev's next count work requests complete with status.
func (c *Control) FailNext(dev string, count, status int) error {
	if c.real {
		return ErrFakeOnly
	}
	return check("fail_next "+dev, c.failNext(dev, int32(count), int32(status)))
}

// SetDelay makes dev wait us microseconds before each work request.
func (c *Control) SetDelay(dev string, us int) error {
	if c.real {
		return ErrFakeOnly
	}
	return check("set_delay "+dev, c.delay(dev, int32(us)))
}

// Hold lets dev's next pass work requests run and makes every later one
// wait at the device (at most a minute) until Release: a test sees work
// requests in flight (Held), changes the device (a port down) and releases
// them, knowing they meet the change however loaded the machine is.
func (c *Control) Hold(dev string, pass int) error {
	if c.real {
		return ErrFakeOnly
	}
	if pass < 0 {
		return fmt.Errorf("fakeverbs hold %s: pass %d < 0", dev, pass)
	}
	return check("hold "+dev, c.hold(dev, int32(pass)))
}

// Release lets dev's held work requests (and later ones) run.
func (c *Control) Release(dev string) error {
	if c.real {
		return ErrFakeOnly
	}
	return check("release "+dev, c.hold(dev, -1))
}

// Held returns how many of dev's work requests wait at its hold now.
func (c *Control) Held(dev string) (int, error) {
	if c.real {
		return 0, ErrFakeOnly
	}
	n := c.held(dev)
	if n < 0 {
		return 0, fmt.Errorf("fakeverbs held %s: no such device", dev)
	}
	return int(n), nil
}

// QPError forces the QP numbered qpn to ERROR (with a QP_FATAL event).
func (c *Control) QPError(qpn uint32) error {
	if c.real {
		return ErrFakeOnly
	}
	return check("qp_error", c.qpError(qpn))
}

// Bytes returns the bytes dev moved as requester in this process. In a
// hardware run: the bytes its port 1 sent and received, every process's
// (the kernel's port_xmit_data and port_rcv_data), 0 where unreadable
// (CountersReadable).
func (c *Control) Bytes(dev string) uint64 {
	if c.real {
		n, _ := portBytes(dev)
		return n
	}
	return c.bytes(dev)
}

// Fake reports whether c drives the fake provider.
func (c *Control) Fake() bool { return !c.real }

// ErrFakeOnly: a fault was asked of real NICs (a hardware run).
var ErrFakeOnly = errors.New("fakeverbs: fault injection needs the fake provider (KVFERRY_HW=1 runs on real NICs)")

// Hardware reports whether the tests run on this machine's libibverbs and
// NICs (KVFERRY_HW=1).
func Hardware() bool { return hw.Enabled() }

// FakeOnly skips tb in a hardware run: what it checks needs the fake
// provider (fault injection, its GID tables or limits). why says what.
func FakeOnly(tb testing.TB, why string) {
	tb.Helper()
	if Hardware() {
		tb.Skipf("fake verbs only: %s (KVFERRY_HW=1 runs on real NICs)", why)
	}
}

func realLibrary() string {
	if v := hw.Getenv("KVFERRY_IBVERBS_LIB"); v != "" {
		return v
	}
	return ibv.DefaultLibrary
}

// Devices lists the NICs a hardware run uses: those libibverbs lists
// whose port 1 is active, sorted (none when the library or the devices
// are missing, with the reason).
func Devices() ([]string, error) {
	if err := ibv.Load(realLibrary()); err != nil {
		return nil, err
	}
	names, err := ibv.DeviceNames()
	if err != nil {
		return nil, err
	}
	var out []string
	var why []string
	for _, n := range names {
		ctx, err := ibv.Open(n)
		if err != nil {
			why = append(why, fmt.Sprintf("%s: %v", n, err))
			continue
		}
		pa, err := ctx.QueryPort(1)
		ctx.Close()
		switch {
		case err != nil:
			why = append(why, fmt.Sprintf("%s: %v", n, err))
		case pa.State != ibv.PortActive:
			why = append(why, fmt.Sprintf("%s: port 1 not active", n))
		default:
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no RDMA device with an active port 1 (of %v): %s", names, strings.Join(why, "; "))
	}
	return out, nil
}

// portBytes reads dev's port 1 traffic from its kernel counters.
func portBytes(dev string) (uint64, error) {
	pc, err := rdma.RdmamapClass{}.PortCounters(dev, 1)
	if err != nil {
		return 0, err
	}
	return 4 * (pc.Counters["port_xmit_data"] + pc.Counters["port_rcv_data"]), nil
}

// CountersReadable reports whether Bytes means something for dev: always
// on the fake, where the kernel has port counters for it on real NICs.
func (c *Control) CountersReadable(dev string) bool {
	if !c.real {
		return true
	}
	_, err := portBytes(dev)
	return err == nil
}
