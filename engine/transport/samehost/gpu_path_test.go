package samehost_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/gpu/gputest"
	"github.com/kvferry/kvferry/internal/testutil/fakecuda"
)

// pathChoices formats the engine's measured path choices on one line.
func pathChoices(e *engine.Engine) string {
	var b strings.Builder
	for _, c := range e.PathChoices() {
		fmt.Fprintf(&b, "[%s op=%d class=%d %s=%.0fMB/s(%d) %s=%.0fMB/s(%d) best=%s switches=%d] ",
			c.Segment, c.Ends.Op, c.Ends.SizeClass, c.Routes[0], c.MBps[0], c.Samples[0], c.Routes[1], c.MBps[1], c.Samples[1],
			c.Routes[c.Best], c.Switches)
	}
	return b.String()
}

// TestGPUHostPathMeasured: a child writes and reads our device memory from
// its pageable host memory, and the engine measures mapping (nvlink)
// against staging (shm). With the fake's pageable copies slow in the child
// (as on a real GPU), staging wins, in both directions; once the child's
// copies are fast and our pinned ones (the owner's copies out of the
// staging chunk) are slow, the choice switches to the mapping. Every byte
// is checked, on each GPU runtime.
func TestGPUHostPathMeasured(t *testing.T) {
	fakecuda.FakeOnly(t, "the fake's copy speeds set per process")
	for _, rt := range gputest.Runtimes() {
		t.Run(rt.Name, func(t *testing.T) { testGPUHostPathMeasured(t, rt) })
	}
}

func testGPUHostPathMeasured(t *testing.T, rt gputest.Runtime) {
	g, lib := rt.Config(t)
	fc := fakecuda.Open(lib)
	fc.Reset()
	defer fc.Reset()
	e, _, own := gpuOwner(t, rt, g, gpuStack(g))
	const n = 1 << 20
	env := append(rt.Env(lib), ownerEnv+"="+e.SegmentName(), "FAKECUDA_PAGEABLE_MBPS=5")
	c := startChild(t, childOpts{role: "gpu-initiator", env: env})
	seed := uint64(100)
	xfer := func(op string) string {
		t.Helper()
		seed++
		dev := fc.Bytes(own.dev, n)
		if op == "w" {
			clear(dev)
		} else {
			copy(dev, patternAt(seed, n))
		}
		r := c.do("xfer %s host %d %d %d", op, own.dev, n, seed)
		used, ok := strings.CutPrefix(r, "ok ")
		assert.Assert(t, ok, "%s: %s", op, r)
		if op == "w" {
			assert.Assert(t, bytes.Equal(dev, patternAt(seed, n)), "write over %s: bytes differ", used)
		}
		return used
	}
	// settle runs transfers until k in a row took want.
	settle := func(op, want string, k int, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		var seen []string
		for run := 0; run < k; {
			assert.Assert(t, time.Now().Before(deadline), "%s: no %d transfers in a row over %s within %s: %v; %s",
				op, k, want, within, seen, c.do("paths"))
			used := xfer(op)
			seen = append(seen, used)
			if used == want {
				run++
			} else {
				run = 0
			}
		}
		t.Logf("%s settled on %s after %v", op, want, seen)
	}
	// Calibration sends the first transfers both ways.
	var first []string
	for range 6 {
		first = append(first, xfer("w"))
	}
	assert.Assert(t, strings.Contains(strings.Join(first, " "), "nvlink") && strings.Contains(strings.Join(first, " "), "shm"),
		"calibration used %v", first)
	settle("w", "shm", 4, 30*time.Second)
	settle("r", "shm", 4, 30*time.Second)
	t.Log(c.do("paths"))

	// Now the child's pageable copies are fast, and ours out of the pinned
	// staging chunk slow: the mapping wins after the next probe of it.
	assert.Equal(t, c.do("rate 0 0 0"), "ok")
	fc.SetCopyMBps(0, 5, 0)
	settle("w", "nvlink", 3, 30*time.Second)
	p := c.do("paths")
	t.Log(p)
	write := fmt.Sprintf("op=%d ", engine.OpWrite)
	_, w, _ := strings.Cut(p, write)
	w, _, _ = strings.Cut(w, "]")
	assert.Assert(t, strings.Contains(w, "best=nvlink") && !strings.Contains(w, "switches=0"), "%s", p)
}
