package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/store/master"
)

// ctlRun runs kvferry-ctl with args and returns its output.
func ctlRun(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := run(args, &out)
	return out.String(), err
}

// TestDrainAndUsage: drain jobs through the admin port (create, query,
// wait, cancel, their errors), and usage with the segments' states and a
// disk tier's capacity, files and writers' queue.
func TestDrainAndUsage(t *testing.T) {
	srv, err := master.NewServer(master.Config{RPCAddr: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0",
		MaintenanceInterval: 10 * time.Millisecond})
	assert.NilError(t, err)
	defer srv.Close()
	svc := srv.Service()
	assert.NilError(t, svc.MountSegment("c1", master.SegmentInfo{ID: "s1", Name: "host:1", Base: 1 << 20, Size: 1 << 20}))
	assert.NilError(t, svc.MountSegment("c2", master.SegmentInfo{ID: "s2", Name: "host:2", Base: 1 << 20, Size: 4 << 20}))
	_, err = svc.MountDiskSegment("c2", master.DiskSegmentInfo{ID: "d2", Name: "host:2", Path: "/ssd", Capacity: 64 << 20},
		[]master.DiskEntry{{Key: "cold", UID: 1, Size: 1000, FileBytes: 8192}})
	assert.NilError(t, err)
	for _, k := range []string{"a", "b", "c"} {
		_, err := svc.PutStart("c1", "", k, 100<<10, master.ReplicateConfig{PreferredSegments: []string{"host:1"}}, false)
		assert.NilError(t, err)
		assert.NilError(t, svc.PutEnd("c1", "", k))
	}
	// c1 stands in for the holder: it reports every copy it is handed
	// as done (the data path is tested in store/client).
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var done []master.TaskResult
		for ctx.Err() == nil {
			tasks, err := svc.FetchTasks(ctx, "c1", done, 50*time.Millisecond, 0)
			if err != nil {
				return
			}
			done = done[:0]
			for _, tk := range tasks {
				done = append(done, master.TaskResult{ID: tk.GetId()})
			}
		}
	}()
	defer wg.Wait()
	defer cancel()
	admin := "--master_admin=" + srv.MetricsAddr()

	out, err := ctlRun(t, admin, "--json", "usage")
	assert.NilError(t, err)
	var use []struct {
		Tier, Segment, Status string
		Capacity              float64  `json:"capacity_bytes"`
		Used                  float64  `json:"used_bytes"`
		Objects               *float64 `json:"objects"`
		Queue                 *float64 `json:"offload_queue"`
	}
	assert.NilError(t, json.Unmarshal([]byte(out), &use), out)
	assert.Equal(t, len(use), 3, out)
	assert.Equal(t, use[0].Segment, "host:1")
	assert.Equal(t, use[0].Status, "OK")
	assert.Equal(t, use[2].Tier, "disk")
	assert.Equal(t, use[2].Capacity, float64(64<<20))
	assert.Equal(t, use[2].Used, float64(8192))
	assert.Equal(t, *use[2].Objects, 1.0)
	assert.Equal(t, *use[2].Queue, 0.0)
	out, err = ctlRun(t, admin, "usage")
	assert.NilError(t, err)
	assert.Assert(t, strings.Contains(out, "TIER") && strings.Contains(out, "QUEUE") && strings.Contains(out, "64.0 MiB"), out)

	// Errors carry Mooncake's codes.
	_, err = ctlRun(t, admin, "drain", "create", "host:9")
	assert.ErrorContains(t, err, "SEGMENT_NOT_FOUND (-101)")
	_, err = ctlRun(t, admin, "drain", "create", "--target", "host:1", "host:1")
	assert.ErrorContains(t, err, "INVALID_PARAMS (-600)")
	_, err = ctlRun(t, admin, "drain", "query", "123e4567-e89b-42d3-a456-426614174000")
	assert.ErrorContains(t, err, "JOB_NOT_FOUND (-1402)")
	_, err = ctlRun(t, admin, "drain", "create")
	assert.ErrorContains(t, err, "name the segments")

	out, err = ctlRun(t, admin, "--json", "drain", "create", "--target", "host:2", "--max_concurrency", "2", "host:1")
	assert.NilError(t, err)
	var created struct {
		JobID  string `json:"job_id"`
		Status string `json:"status"`
	}
	assert.NilError(t, json.Unmarshal([]byte(out), &created), out)
	assert.Equal(t, created.Status, "CREATED")
	out, err = ctlRun(t, admin, "drain", "wait", "--interval=20ms", "--max_wait=20s", created.JobID)
	assert.NilError(t, err, out)
	assert.Assert(t, strings.Contains(out, "SUCCEEDED") && strings.Contains(out, created.JobID), out)
	out, err = ctlRun(t, admin, "--json", "drain", "query", created.JobID)
	assert.NilError(t, err)
	var jobs []drainJob
	assert.NilError(t, json.Unmarshal([]byte(out), &jobs), out)
	assert.Equal(t, len(jobs), 1)
	assert.Equal(t, jobs[0].SucceededUnits, uint64(3))
	assert.Equal(t, jobs[0].MigratedBytes, uint64(300<<10))
	assert.DeepEqual(t, jobs[0].Segments, []string{"host:1"})
	_, err = ctlRun(t, admin, "drain", "cancel", created.JobID)
	assert.ErrorContains(t, err, "UNAVAILABLE_IN_CURRENT_STATUS (-1010)")
	out, err = ctlRun(t, admin, "usage")
	assert.NilError(t, err)
	assert.Assert(t, strings.Contains(out, "DRAINED"), out)
}
