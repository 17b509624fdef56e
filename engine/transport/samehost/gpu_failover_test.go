package samehost_test

import (
	"bytes"
	"strings"
	"testing"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine/gpu/gputest"
	"github.com/kvferry/kvferry/internal/testutil/fakecuda"
)

// TestNVLinkMappingRefusedFailsOver: the child's runtime refuses to open
// our IPC handles (every cuIpcOpenMemHandle, or hipIpcOpenMemHandle,
// fails), with the mapping route pinned (KVFERRY_GPU_HOST_PATH=map): the
// requests move to shm's staged path (engine failover) and complete with
// the right bytes, both ways; later ones go to shm at once. It runs on
// each GPU runtime.
func TestNVLinkMappingRefusedFailsOver(t *testing.T) {
	fakecuda.FakeOnly(t, "the fake driver's injected IPC open failure")
	for _, rt := range gputest.Runtimes() {
		t.Run(rt.Name, func(t *testing.T) { testNVLinkMappingRefusedFailsOver(t, rt) })
	}
}

func testNVLinkMappingRefusedFailsOver(t *testing.T, rt gputest.Runtime) {
	g, lib := rt.Config(t)
	fc := fakecuda.Open(lib)
	fc.Reset()
	defer fc.Reset()
	e, _, own := gpuOwner(t, rt, g, gpuStack(g))
	const n = 1 << 20
	env := append(rt.Env(lib), ownerEnv+"="+e.SegmentName(), "KVFERRY_GPU_HOST_PATH=map",
		"FAKECUDA_FAIL="+rt.Prefix+"IpcOpenMemHandle:1:1:1")
	c := startChild(t, childOpts{role: "gpu-initiator", env: env})
	var used []string
	for i, op := range []string{"w", "r", "w", "r", "w"} {
		seed := uint64(300 + i)
		dev := fc.Bytes(own.dev, n)
		if op == "w" {
			clear(dev)
		} else {
			copy(dev, patternAt(seed, n))
		}
		r := c.do("xfer %s host %d %d %d", op, own.dev, n, seed)
		u, ok := strings.CutPrefix(r, "ok ")
		assert.Assert(t, ok, "%s %d: %s", op, i, r)
		if op == "w" {
			assert.Assert(t, bytes.Equal(fc.Bytes(own.dev, n), patternAt(seed, n)), "write %d: bytes differ", i)
		}
		used = append(used, u)
	}
	t.Logf("transports that carried the requests: %v", used)
	assert.Equal(t, used[len(used)-1], "shm", "%v", used)
}
