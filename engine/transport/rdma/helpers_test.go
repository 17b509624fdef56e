package rdma_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"testing"
	"testing/fstest"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/gpu"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/engine/transport/rdma"
	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/internal/testutil/fakecuda"
	"github.com/kvferry/kvferry/tests/rdma/fakeverbs"
)

// allDevices are the fake NICs every test process sees; a test picks some
// with Config.Devices (through nics). In a hardware run (KVFERRY_HW=1)
// they are the machine's NICs with an active port, and noNICs says why
// there are none.
var (
	allDevices = []string{"fake_mlx5_0", "fake_mlx5_1", "fake_mlx5_2", "fake_mlx5_3"}
	noNICs     string
)

var (
	fakeLib string
	fakeDir string
	fake    *fakeverbs.Control
	// cudaLib is the fake libcuda (tests/fakecuda), also the fake verbs
	// provider's peer-memory client (FAKEVERBS_PEERMEM).
	cudaLib string
)

func TestMain(m *testing.M) {
	if role := os.Getenv("RDMA_TEST_CHILD"); role != "" {
		os.Exit(childMain(role))
	}
	var err error
	if fakeverbs.Hardware() {
		fakeLib, _ = fakeverbs.Build()
		cudaLib, _ = fakecuda.Build()
		if allDevices, err = fakeverbs.Devices(); err != nil {
			noNICs = err.Error()
		}
		fakeverbs.Setenv(fakeLib, "")
		fake, _ = fakeverbs.Open(fakeLib)
		os.Exit(m.Run())
	}
	if fakeLib, err = fakeverbs.Build(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if fakeDir, err = os.MkdirTemp("", "fakeverbs-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if cudaLib, err = fakecuda.Build(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fakeverbs.Setenv(fakeLib, fakeDir, allDevices...)
	os.Setenv("FAKEVERBS_PEERMEM", cudaLib)
	if fake, err = fakeverbs.Open(fakeLib); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(fakeDir)
	os.Exit(code)
}

// emptySys is a sysfs tree with one NUMA node and nothing else.
var emptySys = fstest.MapFS{"devices/system/node/node0/cpulist": {Data: []byte("0-1\n")}}

// testSys is the sysfs tree of the tests' engines: emptySys on the fake
// NICs, the machine's own (nil: /sys) in a hardware run.
func testSys() fs.FS {
	if fakeverbs.Hardware() {
		return nil
	}
	return emptySys
}

func rdmaConfig(devices ...string) rdma.Config {
	return rdma.Config{Library: fakeLib, Devices: devices, SysFS: testSys()}
}

// nics returns k of the NICs, skipping tb where there are fewer (a
// hardware run on a machine with fewer NICs with an active port).
func nics(tb testing.TB, k int) []string {
	tb.Helper()
	if len(allDevices) < k {
		tb.Skipf("needs %d RDMA NICs with an active port, the machine has %d %v %s", k, len(allDevices), allDevices, noNICs)
	}
	return allDevices[:k]
}

// newEngine starts an engine with only the RDMA transport on devices.
func newEngine(t testing.TB, cfg rdma.Config, timeout time.Duration) *engine.Engine {
	t.Helper()
	return newEngineWith(t, stack.Config{
		Engine: engine.Config{LocalServerName: "127.0.0.1", Transports: []string{rdma.Name}, TransferTimeout: timeout},
		RDMA:   cfg,
	})
}

// newEngineWith starts an engine from cfg (the fake libcuda as its CUDA
// driver unless cfg names one).
func newEngineWith(t testing.TB, cfg stack.Config) *engine.Engine {
	t.Helper()
	if cfg.GPU.Library == "" {
		cfg.GPU.Library = cudaLib
	}
	e, err := stack.New(context.Background(), cfg)
	assert.NilError(t, err)
	t.Cleanup(func() { e.Close() })
	return e
}

func newBuf(t testing.TB, e *engine.Engine, n uint64) *cmem.Map {
	t.Helper()
	m, err := cmem.MapAnon(n)
	assert.NilError(t, err)
	assert.NilError(t, e.RegisterMemory(m.Addr(), n, "cpu:0", true))
	return m
}

func patternAt(seed, n uint64) []byte {
	b := make([]byte, n)
	pattern(b, seed)
	return b
}

func pattern(b []byte, seed uint64) {
	x := seed*0x9E3779B97F4A7C15 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
}

func nicBytes(e *engine.Engine) map[string]uint64 {
	out := map[string]uint64{}
	for _, s := range e.NICStats() {
		out[s.Device] = s.BytesCompleted
	}
	return out
}

// gpuConfig points GPU support at the fake libcuda.
func gpuConfig() gpu.Config { return gpu.Config{Library: cudaLib} }
