package master

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/internal/testutil"
	"github.com/kvferry/kvferry/store/wire"
)

// runQueryCmd runs the datadriven commands of the queries (queries.go),
// the drain jobs (drain.go), the tasks they hand out and disk tiers:
//
//	get-regex [tenant=T]          (input: the pattern)
//	query-ip ids=(c1,c2)
//	cache-stats
//	drain as=NAME segments=(n1,n2) [targets=(n3)] [conc=N]
//	drain-query job=NAME | id=RAW
//	drain-cancel job=NAME | id=RAW
//	segment-status name=N
//	tasks client=C [ok=(1,2)] [fail=(3)]   (reports, then lists new tasks)
//	mount-disk client=C id=D name=N cap=BYTES   (input: "key size uid" lines)
func (h *ddHarness) runQueryCmd(t *testing.T, d *testutil.TestData, client, tenant string) string {
	jobID := func() string {
		if name := argStr(d, "job", ""); name != "" {
			id, ok := h.jobs[name]
			if !ok {
				d.Fatalf(t, "no job called %q", name)
			}
			return id
		}
		return argStr(d, "id", "")
	}
	list := func(key string) []string {
		a, _ := d.Arg(key)
		return a.Vals
	}
	switch d.Cmd {
	case "get-regex":
		hits, err := h.svc.GetReplicaListByRegex(tenant, d.Input)
		if err != nil {
			return errText(err)
		}
		var out []string
		for _, k := range hits {
			out = append(out, fmt.Sprintf("%s: size=%d %s", k.Key, k.Size, fmtReplicas(k.Replicas)))
		}
		return fmt.Sprintf("%d matched\n%s", len(hits), strings.Join(out, "\n"))

	case "query-ip":
		var out []string
		for _, c := range h.svc.BatchQueryIP(list("ids")) {
			out = append(out, fmt.Sprintf("%s: %s", c.ClientID, strings.Join(c.IPs, " ")))
		}
		return fmt.Sprintf("%d found\n%s", len(out), strings.Join(out, "\n"))

	case "cache-stats":
		st := h.svc.CalcCacheStats()
		return fmt.Sprintf("memory-hits=%d ssd-hits=%d memory-total=%d ssd-total=%d\n"+
			"memory-rate=%v ssd-rate=%v overall-rate=%v valid-get-rate=%v",
			st.MemoryHits, st.SSDHits, st.MemoryTotal, st.SSDTotal,
			st.MemoryHitRate, st.SSDHitRate, st.OverallHitRate, st.ValidGetRate)

	case "drain":
		conc, err := strconv.Atoi(argStr(d, "conc", "0"))
		if err != nil {
			d.Fatalf(t, "conc: %v", err)
		}
		id, err := h.svc.CreateDrainJob(DrainJobRequest{Segments: list("segments"), Targets: list("targets"),
			MaxConcurrency: conc})
		if err != nil {
			return errText(err)
		}
		h.jobs[argStr(d, "as", "j")] = id
		return "ok"

	case "drain-query":
		j, err := h.svc.QueryDrainJob(jobID())
		if err != nil {
			return errText(err)
		}
		return fmt.Sprintf("%s %s segments=%v succeeded=%d failed=%d blocked=%d active=%d dropped=%d bytes=%d\n%s",
			JobTypeName(j.Type), JobStatusName(j.Status), j.Segments, j.SucceededUnits, j.FailedUnits, j.BlockedUnits,
			j.ActiveUnits, j.DroppedUnits, j.MigratedBytes, j.Message)

	case "drain-cancel":
		return errText(h.svc.CancelDrainJob(jobID()))

	case "segment-status":
		st, err := h.svc.SegmentStatusOf(argStr(d, "name", ""))
		if err != nil {
			return errText(err)
		}
		return st.String()

	case "tasks":
		var done []TaskResult
		for _, v := range list("ok") {
			id, _ := strconv.ParseUint(v, 10, 64)
			done = append(done, TaskResult{ID: id})
		}
		for _, v := range list("fail") {
			id, _ := strconv.ParseUint(v, 10, 64)
			done = append(done, TaskResult{ID: id, Err: fmt.Errorf("test: %w", wire.ErrTransferFail)})
		}
		tasks, err := h.svc.FetchTasks(context.Background(), client, done, 0, 0)
		if err != nil {
			return errText(err)
		}
		var out []string
		for _, tk := range tasks {
			line := fmt.Sprintf("task %d %s %s src=%#x", tk.GetId(), strings.TrimPrefix(tk.GetKind().String(), "TASK_KIND_"),
				tk.GetKey(), tk.GetSrcAddress())
			if tk.GetDstSegmentName() != "" {
				line += fmt.Sprintf(" dst=%s@%#x", tk.GetDstSegmentName(), tk.GetDstAddress())
			}
			out = append(out, line)
		}
		return fmt.Sprintf("%d tasks\n%s", len(out), strings.Join(out, "\n"))

	case "mount-disk":
		var entries []DiskEntry
		testutil.ScanLines(d.Input, func(line string) {
			f := strings.Fields(line)
			if len(f) != 3 {
				d.Fatalf(t, "mount-disk line %q: want key size uid", line)
			}
			size, err1 := strconv.ParseUint(f[1], 0, 64)
			uid, err2 := strconv.ParseUint(f[2], 0, 64)
			if err1 != nil || err2 != nil {
				d.Fatalf(t, "mount-disk line %q: bad number", line)
			}
			entries = append(entries, DiskEntry{Tenant: tenant, Key: f[0], UID: uid, Size: size, FileBytes: diskFileBytes(size)})
		})
		drop, err := h.svc.MountDiskSegment(client, DiskSegmentInfo{ID: argStr(d, "id", ""), Name: argStr(d, "name", ""),
			Path: "/ssd", Capacity: argUint(t, d, "cap", 0)}, entries)
		if err != nil {
			return errText(err)
		}
		return fmt.Sprintf("ok drop=%v", drop)
	}
	d.Fatalf(t, "unknown command %q", d.Cmd)
	return ""
}

func TestHostOf(t *testing.T) {
	for in, want := range map[string]string{
		"8.8.8.8:4321":       "8.8.8.8",
		"example.com:4321":   "example.com",
		"[2001:db8::1]:4321": "2001:db8::1",
		"[2001:db8::1]":      "2001:db8::1",
		"2001:db8::1":        "2001:db8::1",
		"node-a":             "node-a",
		"[broken":            "[broken",
	} {
		assert.Equal(t, hostOf(in), want, in)
	}
}

func TestValidUUID(t *testing.T) {
	assert.Assert(t, validUUID(newTaskUUID()))
	for _, bad := range []string{"", "1-2", "123e4567-e89b-12d3-a456-42661417400", "123e4567+e89b-12d3-a456-426614174000",
		"123e4567-e89b-12d3-a456-42661417400g"} {
		assert.Assert(t, !validUUID(bad), bad)
	}
}

// TestRegexAnswerBound: a pattern matching more than MaxRegexMatches
// objects fails with BUFFER_OVERFLOW and grants no lease; one just at the
// bound answers every object, sorted.
func TestRegexAnswerBound(t *testing.T) {
	svc, err := NewService(Config{}, 1)
	assert.NilError(t, err)
	assert.NilError(t, svc.MountSegment("c1", SegmentInfo{ID: "s1", Name: "n1", Base: 1 << 20, Size: 64 << 20}))
	keys := make([]string, MaxRegexMatches+1)
	sizes := make([]uint64, len(keys))
	for i := range keys {
		keys[i] = fmt.Sprintf("k%06d", i)
		sizes[i] = 64
	}
	keys[MaxRegexMatches] = "other"
	_, errs := svc.BatchPutStart("c1", "", keys, sizes, ReplicateConfig{}, false)
	for _, err := range errs {
		assert.NilError(t, err)
	}
	for _, err := range svc.BatchPutEnd("c1", "", keys, false) {
		assert.NilError(t, err)
	}
	_, err = svc.GetReplicaListByRegex("", ".")
	assert.Assert(t, errors.Is(err, wire.ErrBufferOverflow), "%v", err)
	assert.Equal(t, svc.Metrics().LeasedObjects, 0)
	hits, err := svc.GetReplicaListByRegex("", "^k") // k000000 .. k065535
	assert.NilError(t, err)
	assert.Equal(t, len(hits), MaxRegexMatches)
	assert.Equal(t, svc.Metrics().LeasedObjects, MaxRegexMatches)
	assert.Assert(t, slices.IsSortedFunc(hits, func(a, b KeyReplicas) int { return strings.Compare(a.Key, b.Key) }))
	assert.Equal(t, hits[0].Key, "k000000")
	assert.Equal(t, len(hits[0].Replicas), 1)
}
