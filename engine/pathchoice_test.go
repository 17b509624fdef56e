package engine

import (
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

func TestSizeClass(t *testing.T) {
	for n, want := range map[uint64]uint8{0: 0, 1: 0, 16 << 10: 0, 16<<10 + 1: 1, 64 << 10: 1, 1 << 20: 3, 4 << 20: 4, 16 << 20: 5, 16<<20 + 1: 6, 1 << 40: 6} {
		assert.Equal(t, sizeClass(n), want, "%d", n)
	}
	assert.Assert(t, !measuredEnds(Ends{Local: MemoryHost, Remote: MemoryHost}, OpWrite, 1).measured())
	assert.Assert(t, !measuredEnds(Ends{Local: MemoryDevice, Remote: MemoryDevice}, OpWrite, 1).measured())
	e := measuredEnds(Ends{Local: MemoryPinned, Remote: MemoryDevice}, OpRead, 1<<20)
	assert.Equal(t, e, Ends{Local: MemoryPinned, Remote: MemoryDevice, Op: OpRead, SizeClass: 4})
}

// run sends one submission of n bytes through ps at now, taking cost per
// route, and returns the route taken.
func run(ps *pathStats, now time.Time, n uint64, cost [2]time.Duration, fail bool) int {
	pp := ps.pick(now)
	pp.bytes = n
	pp.remaining.Add(1)
	pp.start = now
	if fail {
		pp.failed.Store(true)
	}
	pp.remaining.Add(-1)
	pp.done(now.Add(cost[pp.route]))
	return pp.route
}

func TestPathStats(t *testing.T) {
	ps := &pathStats{}
	ps.routes[0].name, ps.routes[1].name = "nvlink", "shm"
	now := time.Unix(1000, 0)
	slowMap := [2]time.Duration{40 * time.Millisecond, 4 * time.Millisecond}
	var taken []int
	for range 6 {
		taken = append(taken, run(ps, now, 1<<20, slowMap, false))
		now = now.Add(10 * time.Millisecond)
	}
	assert.DeepEqual(t, taken, []int{0, 1, 0, 1, 0, 1}) // calibration alternates
	for range 20 {
		assert.Equal(t, run(ps, now, 1<<20, slowMap, false), 1)
		now = now.Add(10 * time.Millisecond)
	}
	// After a second the slower route gets one probe; confirmed slower,
	// the next probe waits twice as long.
	now = now.Add(pathReprobeMin)
	assert.Equal(t, run(ps, now, 1<<20, slowMap, false), 0)
	assert.Equal(t, ps.reprobe, 2*pathReprobeMin)
	now = now.Add(pathReprobeMin + time.Millisecond)
	assert.Equal(t, run(ps, now, 1<<20, slowMap, false), 1)
	now = now.Add(pathReprobeMin)
	assert.Equal(t, run(ps, now, 1<<20, slowMap, false), 0)
	// The costs turn around: the next probe of the mapping switches.
	fastMap := [2]time.Duration{2 * time.Millisecond, 40 * time.Millisecond}
	for i := 0; ; i++ {
		assert.Assert(t, i < 1000, "never switched")
		now = now.Add(50 * time.Millisecond)
		run(ps, now, 1<<20, fastMap, false)
		if ps.best == 0 {
			break
		}
	}
	assert.Equal(t, ps.switchs, uint64(1))
	assert.Equal(t, ps.reprobe, pathReprobeMin)
	// A failure leaves the route alone for a while.
	now = now.Add(time.Millisecond)
	assert.Equal(t, run(ps, now, 1<<20, fastMap, true), 0)
	for range 5 {
		now = now.Add(time.Second)
		assert.Equal(t, run(ps, now, 1<<20, fastMap, false), 1)
	}
	now = now.Add(pathFailurePause)
	assert.Equal(t, run(ps, now, 1<<20, fastMap, false), 0)
	// Submissions in flight count during calibration: concurrent
	// submitters split over both routes.
	ps2 := &pathStats{}
	a, b := ps2.pick(now), ps2.pick(now)
	assert.Equal(t, a.route+b.route, 1)
	a.abandon()
	b.abandon()
	assert.Equal(t, ps2.routes[0].inflight+ps2.routes[1].inflight, 0)
	assert.Equal(t, ps2.routes[0].samples+ps2.routes[1].samples, 0)
}
