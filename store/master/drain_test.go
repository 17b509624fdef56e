package master

import (
	"context"
	"fmt"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/internal/invariants"
)

// TestDrainManyObjects drains a segment of 50000 objects with a holder
// that reports every copy done: the job succeeds with every object moved,
// and the master's planning stays linear (each unit is queued and tried
// once per round; a round runs when the last one's queue is done).
func TestDrainManyObjects(t *testing.T) {
	if testing.Short() || invariants.Enabled {
		t.Skip("50000 objects (the invariants build checks every object after each call)")
	}
	clock := newFakeClock()
	svc, err := NewService(Config{Clock: clock}, 1)
	assert.NilError(t, err)
	assert.NilError(t, svc.MountSegment("c1", SegmentInfo{ID: "s1", Name: "n1", Base: 1 << 30, Size: 64 << 20}))
	assert.NilError(t, svc.MountSegment("c2", SegmentInfo{ID: "s2", Name: "n2", Base: 1 << 30, Size: 64 << 20}))
	const n = 50000
	keys := make([]string, n)
	sizes := make([]uint64, n)
	for i := range keys {
		keys[i], sizes[i] = fmt.Sprintf("k%d", i), 1000
	}
	_, errs := svc.BatchPutStart("c1", "", keys, sizes, ReplicateConfig{PreferredSegments: []string{"n1"}}, false)
	for _, err := range errs {
		assert.NilError(t, err)
	}
	svc.BatchPutEnd("c1", "", keys, false)
	id, err := svc.CreateDrainJob(DrainJobRequest{Segments: []string{"n1"}, MaxConcurrency: 64})
	assert.NilError(t, err)
	svc.Tick()
	var done []TaskResult
	t0 := time.Now()
	for rounds := 0; ; rounds++ {
		tasks, err := svc.FetchTasks(context.Background(), "c1", done, 0, 1024)
		assert.NilError(t, err)
		done = done[:0]
		for _, tk := range tasks {
			done = append(done, TaskResult{ID: tk.GetId()})
		}
		if len(tasks) == 0 {
			svc.Tick()
			j, err := svc.QueryDrainJob(id)
			assert.NilError(t, err)
			if st := JobStatusName(j.Status); st != "CREATED" && st != "PLANNING" && st != "RUNNING" {
				assert.Equal(t, st, "SUCCEEDED", j.Message)
				assert.Equal(t, j.SucceededUnits, uint64(n))
				break
			}
		}
		assert.Assert(t, rounds < 10*n, "no end")
	}
	t.Logf("drained %d objects in %v", n, time.Since(t0))
	m := svc.Metrics()
	assert.Equal(t, m.SegmentUsage[0].UsedBytes, uint64(0))
	assert.Equal(t, m.DrainMovedTotal, uint64(n))
}
