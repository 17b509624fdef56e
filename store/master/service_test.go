package master

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/internal/testutil"
	"github.com/kvferry/kvferry/store/wire"
)

// fakeClock is a Clock that moves only when told.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestDataDriven runs the state-machine cases under testdata/: allocation,
// leases, eviction order, pins, zombie cleanup, regex removal, client expiry.
func TestDataDriven(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	assert.NilError(t, err)
	assert.Assert(t, len(files) > 0)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			h := &ddHarness{}
			testutil.RunDataDriven(t, f, h.run)
		})
	}
}

type ddHarness struct {
	clock *fakeClock
	svc   *Service
	// grantBase is the service's grant id counter at start (random): the
	// files name grants by their id less grantBase (1, 2, ...).
	grantBase uint64
	// jobs are the drain jobs the file created, by the name it gave them.
	jobs map[string]string
}

// grantID turns a grant number of a file into the service's id.
func (h *ddHarness) grantID(t *testing.T, d *testutil.TestData, v string) uint64 {
	n, err := strconv.ParseUint(v, 0, 64)
	if err != nil {
		d.Fatalf(t, "grant id %q: %v", v, err)
	}
	return h.grantBase + n
}

func argStr(d *testutil.TestData, key, def string) string {
	if a, ok := d.Arg(key); ok && len(a.Vals) > 0 {
		return a.Vals[0]
	}
	return def
}

func argUint(t *testing.T, d *testutil.TestData, key string, def uint64) uint64 {
	s := argStr(d, key, "")
	if s == "" {
		return def
	}
	v, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		d.Fatalf(t, "argument %s: %v", key, err)
	}
	return v
}

func argDur(t *testing.T, d *testutil.TestData, key string, def time.Duration) time.Duration {
	s := argStr(d, key, "")
	if s == "" {
		return def
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		d.Fatalf(t, "argument %s: %v", key, err)
	}
	return v
}

func argFloat(t *testing.T, d *testutil.TestData, key string, def float64) float64 {
	s := argStr(d, key, "")
	if s == "" {
		return def
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		d.Fatalf(t, "argument %s: %v", key, err)
	}
	return v
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return "error: " + wire.CodeOf(err).String()
}

func fmtReplicas(rs []Replica) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = fmt.Sprintf("%s@%#x+%d", r.SegmentName, r.Addr, r.Size)
	}
	return strings.Join(parts, " ")
}

func (h *ddHarness) run(t *testing.T, d *testutil.TestData) string {
	out := h.runCmd(t, d)
	if h.svc != nil {
		// Every command leaves the bookkeeping consistent, with or without
		// the invariants build tag.
		h.svc.mu.Lock()
		err := h.svc.verifyLocked()
		h.svc.mu.Unlock()
		if err != nil {
			d.Fatalf(t, "invariant broken after %s: %v", d.Cmd, err)
		}
	}
	return out
}

func (h *ddHarness) runCmd(t *testing.T, d *testutil.TestData) string {
	if d.Cmd != "new" && h.svc == nil {
		d.Fatalf(t, "no service: start the file with new")
	}
	client := argStr(d, "client", "c1")
	tenant := argStr(d, "tenant", "")
	switch d.Cmd {
	case "new":
		h.clock = newFakeClock()
		cfg := Config{
			Clock:                      h.clock,
			Seed:                       argUint(t, d, "seed", 1),
			AllocationStrategy:         argStr(d, "strategy", StrategyFreeRatioFirst),
			DefaultKVLeaseTTL:          argDur(t, d, "lease", 0),
			DefaultKVSoftPinTTL:        argDur(t, d, "soft-pin-ttl", 0),
			ClientTTL:                  argDur(t, d, "client-ttl", 0),
			PutStartDiscardTimeout:     argDur(t, d, "discard", 0),
			PutStartReleaseTimeout:     argDur(t, d, "release", 0),
			EvictionRatio:              argFloat(t, d, "ratio", 0),
			EvictionHighWatermarkRatio: argFloat(t, d, "hw", 0),
			KeepSoftPinned:             d.HasArg("keep-soft-pinned"),
			GrantBytes:                 argUint(t, d, "grant-bytes", 0),
			GrantLease:                 argDur(t, d, "grant-lease", 0),
			MaxGrantsPerClient:         int(argUint(t, d, "max-grants", 0)),
			DisableGrants:              d.HasArg("no-grants"),
			TaskTimeout:                argDur(t, d, "task-timeout", 0),
			DrainStallTimeout:          argDur(t, d, "drain-stall", 0),
		}
		fence := fenceNone
		switch {
		case d.HasArg("fenced"):
			fence = fenceAll
		case d.HasArg("fenced-remounted"):
			fence = fenceRemounted
		}
		svc, err := newService(cfg, 1, fence)
		if err != nil {
			return "error: " + err.Error()
		}
		h.svc = svc
		h.grantBase = svc.mu.lastGrant
		h.jobs = map[string]string{}
		return "ok"

	case "mount":
		return errText(h.svc.MountSegment(client, SegmentInfo{
			ID:   argStr(d, "id", ""),
			Name: argStr(d, "name", ""),
			Base: argUint(t, d, "base", 0),
			Size: argUint(t, d, "size", 0),
		}))

	case "remount":
		var segs []SegmentInfo
		testutil.ScanLines(d.Input, func(line string) {
			f := strings.Fields(line)
			if len(f) != 4 {
				d.Fatalf(t, "remount line %q: want id name base size", line)
			}
			base, err1 := strconv.ParseUint(f[2], 0, 64)
			size, err2 := strconv.ParseUint(f[3], 0, 64)
			if err1 != nil || err2 != nil {
				d.Fatalf(t, "remount line %q: bad number", line)
			}
			segs = append(segs, SegmentInfo{ID: f[0], Name: f[1], Base: base, Size: size})
		})
		return errText(h.svc.ReMountSegments(client, segs))

	case "unmount":
		return errText(h.svc.UnmountSegment(client, argStr(d, "id", "")))

	case "ping":
		st, err := h.svc.Ping(client)
		if err != nil {
			return errText(err)
		}
		return strings.TrimPrefix(st.String(), "CLIENT_STATUS_")

	case "put-start", "put", "upsert":
		cfg := ReplicateConfig{
			ReplicaNum: int(argUint(t, d, "replicas", 1)),
			HardPin:    d.HasArg("hard-pin"),
			SoftPinTTL: argDur(t, d, "pin-ttl", 0),
		}
		if d.HasArg("soft-pin") {
			cfg.SoftPin = wire.SoftPinAction_SOFT_PIN_ENABLE
		}
		if a, ok := d.Arg("prefer"); ok {
			cfg.PreferredSegments = a.Vals
		}
		if a, ok := d.Arg("group"); ok {
			cfg.GroupIDs = a.Vals
		}
		key := argStr(d, "key", "")
		reps, err := h.svc.PutStart(client, tenant, key, argUint(t, d, "size", 0), cfg, d.Cmd == "upsert" || d.HasArg("upsert"))
		if err != nil {
			return errText(err)
		}
		if d.Cmd != "put-start" {
			if err := h.svc.PutEnd(client, tenant, key); err != nil {
				return errText(err)
			}
		}
		return fmtReplicas(reps)

	case "put-end":
		return errText(h.svc.PutEnd(client, tenant, argStr(d, "key", "")))

	case "heartbeat":
		p, err := h.svc.Heartbeat(client)
		if err != nil {
			return errText(err)
		}
		return fmt.Sprintf("%s gen=%d return-grants=%v", strings.TrimPrefix(p.Status.String(), "CLIENT_STATUS_"),
			p.GrantGeneration, p.ReturnGrants)

	case "grant":
		var exclude []string
		if a, ok := d.Arg("exclude"); ok {
			exclude = a.Vals
		}
		var returns []uint64
		if a, ok := d.Arg("return"); ok {
			for _, v := range a.Vals {
				returns = append(returns, h.grantID(t, d, v))
			}
		}
		gs, gen, err := h.svc.AcquireGrants(client, int(argUint(t, d, "n", 1)), argUint(t, d, "min", 0), exclude, returns)
		if err != nil {
			return errText(err)
		}
		var b strings.Builder
		for _, g := range gs {
			fmt.Fprintf(&b, "grant %d %s@%#x+%d\n", g.ID-h.grantBase, g.SegmentName, g.Addr, g.Size)
		}
		fmt.Fprintf(&b, "gen=%d", gen)
		return b.String()

	case "commit":
		cfg := ReplicateConfig{
			ReplicaNum: int(argUint(t, d, "replicas", 1)),
			HardPin:    d.HasArg("hard-pin"),
		}
		if d.HasArg("soft-pin") {
			cfg.SoftPin = wire.SoftPinAction_SOFT_PIN_ENABLE
		}
		if a, ok := d.Arg("group"); ok {
			cfg.GroupIDs = a.Vals
		}
		var reps []GrantedReplica
		if a, ok := d.Arg("at"); ok {
			for _, v := range a.Vals {
				id, addr, ok := strings.Cut(v, ":")
				ad, err := strconv.ParseUint(addr, 0, 64)
				if !ok || err != nil {
					d.Fatalf(t, "commit: at=%s: want grant:address", v)
				}
				reps = append(reps, GrantedReplica{GrantID: h.grantID(t, d, id), Addr: ad})
			}
		}
		gen, err := h.svc.PutCommit(client, tenant, argStr(d, "key", ""), argUint(t, d, "size", 0), cfg, d.HasArg("upsert"), reps)
		if err != nil {
			return errText(err)
		}
		return fmt.Sprintf("ok gen=%d", gen)

	case "return":
		var ids []uint64
		if a, ok := d.Arg("ids"); ok {
			for _, v := range a.Vals {
				ids = append(ids, h.grantID(t, d, v))
			}
		}
		h.svc.ReturnGrants(client, ids)
		return "ok"

	case "grant-metrics":
		m := h.svc.Metrics()
		return fmt.Sprintf("used=%d grants=%d granted=%d fenced=%d\n"+
			"grant-requests=%d grants-total=%d returns=%d taken-back=%d commits=%d commit-fails=%d no-space=%d",
			m.UsedBytes, m.Grants, m.GrantedBytes, m.FencedBytes, m.GrantRequestsTotal, m.GrantsTotal,
			m.GrantReturnsTotal, m.GrantsTakenBackTotal, m.PutCommitsTotal, m.PutCommitFailsTotal, m.NoSpaceTotal)

	case "put-revoke":
		return errText(h.svc.PutRevoke(client, tenant, argStr(d, "key", "")))

	case "exist":
		var out []string
		for _, k := range strings.Split(argStr(d, "key", ""), ",") {
			ok, err := h.svc.ExistKey(tenant, k)
			if err != nil {
				out = append(out, k+": "+errText(err))
			} else {
				out = append(out, fmt.Sprintf("%s: %v", k, ok))
			}
		}
		return strings.Join(out, "\n")

	case "get":
		var out []string
		for _, k := range strings.Split(argStr(d, "key", ""), ",") {
			l, err := h.svc.GetReplicaList(tenant, k)
			if err != nil {
				out = append(out, k+": "+errText(err))
			} else {
				out = append(out, fmt.Sprintf("%s: size=%d %s", k, l.Size, fmtReplicas(l.Replicas)))
			}
		}
		return strings.Join(out, "\n")

	case "remove":
		var out []string
		for _, k := range strings.Split(argStr(d, "key", ""), ",") {
			out = append(out, k+": "+errText(h.svc.Remove(tenant, k, d.HasArg("force"))))
		}
		return strings.Join(out, "\n")

	case "remove-regex":
		n, err := h.svc.RemoveByRegex(tenant, d.Input, d.HasArg("force"))
		if err != nil {
			return errText(err)
		}
		return fmt.Sprintf("removed %d", n)

	case "remove-all":
		n, err := h.svc.RemoveAll(tenant, d.HasArg("force"))
		if err != nil {
			return errText(err)
		}
		return fmt.Sprintf("removed %d", n)

	case "keys":
		keys, err := h.svc.Keys(tenant)
		if err != nil {
			return errText(err)
		}
		return fmt.Sprintf("%q", keys)

	case "advance":
		if len(d.CmdArgs) == 0 {
			d.Fatalf(t, "advance takes a duration")
		}
		dur, err := time.ParseDuration(d.CmdArgs[0].Key)
		if err != nil {
			d.Fatalf(t, "advance: %v", err)
		}
		h.clock.Advance(dur)
		if d.HasArg("tick") {
			h.svc.Tick()
		}
		return ""

	case "tick":
		h.svc.Tick()
		return ""

	case "state":
		return h.state()

	case "get-regex", "query-ip", "cache-stats", "drain", "drain-query", "drain-cancel", "segment-status",
		"tasks", "mount-disk":
		return h.runQueryCmd(t, d, client, tenant)

	case "metrics":
		m := h.svc.Metrics()
		return fmt.Sprintf("clients=%d segments=%d objects=%d processing=%d capacity=%d used=%d discarded=%d\n"+
			"evicted=%d/%dB rounds=%d expired-clients=%d zombie-puts=%d no-space=%d removes=%d",
			m.Clients, m.Segments, m.Objects, m.ProcessingObjects, m.CapacityBytes, m.UsedBytes, m.DiscardedBytes,
			m.EvictedObjectsTotal, m.EvictedBytesTotal, m.EvictionRoundsTotal, m.ExpiredClientsTotal,
			m.ZombiePutsTotal, m.NoSpaceTotal, m.RemovesTotal)
	}
	d.Fatalf(t, "unknown command %q", d.Cmd)
	return ""
}

// state prints segments (with used bytes) and objects (with flags), sorted.
func (h *ddHarness) state() string {
	s := h.svc
	now := h.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "capacity=%d used=%d\n", s.mu.capacity, s.mu.used)
	for _, seg := range s.mu.order {
		st := ""
		if s := seg.statusLocked(); s != SegmentOK {
			st = " " + s.String()
		}
		fmt.Fprintf(&b, "segment %s %s client=%s used=%d/%d%s\n", seg.info.ID, seg.info.Name,
			seg.info.ClientID, seg.alloc.used, seg.info.Size, st)
	}
	// Objects of the default tenant print as their key, others as
	// tenant/key.
	keys := make([]string, 0, len(s.mu.objects))
	byName := make(map[string]*object, len(s.mu.objects))
	for id, o := range s.mu.objects {
		k := id.key
		if id.tenant != wire.DefaultTenant {
			k = id.tenant + "/" + id.key
		}
		keys = append(keys, k)
		byName[k] = o
	}
	slices.Sort(keys)
	for _, k := range keys {
		o := byName[k]
		var flags []string
		if o.complete {
			flags = append(flags, "complete")
		} else {
			flags = append(flags, "processing")
		}
		if lease := o.leaseEnd(); lease.After(now) {
			flags = append(flags, "leased="+lease.Sub(now).String())
		}
		if o.softPinExpiry.After(now) {
			flags = append(flags, "soft-pin="+o.softPinExpiry.Sub(now).String())
		}
		if o.hardPin {
			flags = append(flags, "hard-pin")
		}
		if o.group != nil {
			flags = append(flags, "group="+o.group.key.id)
		}
		fmt.Fprintf(&b, "object %s size=%d %s [%s]\n", k, o.size, fmtReplicas(o.descriptors()), strings.Join(flags, " "))
	}
	ids := make([]uint64, 0, len(s.mu.grants))
	for id := range s.mu.grants {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		g := s.mu.grants[id]
		parts := make([]string, len(g.free))
		for i, e := range g.free {
			parts[i] = fmt.Sprintf("%#x+%d", g.seg.info.Base+e.off, e.len)
		}
		fmt.Fprintf(&b, "grant %d client=%s %s@%#x+%d gen=%d free=[%s]\n", id-h.grantBase, g.client.id, g.seg.info.Name,
			g.seg.info.Base+g.off, g.size, g.gen, strings.Join(parts, " "))
	}
	for _, f := range s.mu.fences {
		held := "unmounted"
		if f.seg != nil {
			held = fmt.Sprintf("held %#x+%d", f.seg.info.Base+f.off, f.n)
		}
		fmt.Fprintf(&b, "fence %s@%#x+%d until=+%v %s\n", f.name, f.addr, f.len, f.until.Sub(now), held)
	}
	return b.String()
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"zero", Config{}, true},
		{"ratio", Config{EvictionRatio: 1.5}, false},
		{"watermark", Config{EvictionHighWatermarkRatio: -0.1}, false},
		{"strategy", Config{AllocationStrategy: "cxl"}, false},
		{"release before discard", Config{PutStartDiscardTimeout: time.Minute, PutStartReleaseTimeout: time.Second}, false},
		{"free ratio", Config{AllocationStrategy: StrategyFreeRatioFirst}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.ok {
				assert.NilError(t, err)
			} else {
				assert.Assert(t, err != nil)
			}
		})
	}
	assert.Assert(t, strings.Contains(Config{}.String(), "eviction_high_watermark_ratio=0.9"))
}

func TestRangeAllocator(t *testing.T) {
	a := newRangeAllocator(1024)
	offs := make([]uint64, 0, 16)
	for {
		off, ok := a.alloc(60)
		if !ok {
			break
		}
		offs = append(offs, off)
	}
	assert.Equal(t, len(offs), 16)
	assert.Equal(t, a.used, uint64(1024))
	// Free every other one, then the rest: everything coalesces back.
	for i := 0; i < len(offs); i += 2 {
		a.release(offs[i], 60)
	}
	assert.Equal(t, len(a.free), 8)
	_, ok := a.alloc(128)
	assert.Assert(t, !ok)
	for i := 1; i < len(offs); i += 2 {
		a.release(offs[i], 60)
	}
	assert.Assert(t, len(a.free) == 1 && a.free[0] == extent{0, 1024}, "free list %v", a.free)
	assert.Equal(t, a.used, uint64(0))
	assert.Equal(t, a.largestFree(), uint64(1024))
}

// TestRandomStrategySpreads checks that the random strategy uses every
// segment and keeps replicas on distinct segment names.
func TestRandomStrategySpreads(t *testing.T) {
	svc, err := NewService(Config{Seed: 7, Clock: newFakeClock()}, 1)
	assert.NilError(t, err)
	for i := range 4 {
		assert.NilError(t, svc.MountSegment("c", SegmentInfo{
			ID: fmt.Sprint("s", i), Name: fmt.Sprint("n", i), Base: uint64(i+1) << 32, Size: 1 << 20,
		}))
	}
	seen := map[string]bool{}
	for i := range 64 {
		reps, err := svc.PutStart("c", "", fmt.Sprint("k", i), 1000, ReplicateConfig{ReplicaNum: 3}, false)
		assert.NilError(t, err)
		assert.Equal(t, len(reps), 3)
		names := map[string]bool{}
		for _, r := range reps {
			assert.Assert(t, !names[r.SegmentName], "two replicas on %s", r.SegmentName)
			names[r.SegmentName] = true
			seen[r.SegmentName] = true
		}
	}
	assert.Equal(t, len(seen), 4)
}

func TestBatchCalls(t *testing.T) {
	clock := newFakeClock()
	svc, err := NewService(Config{Clock: clock, AllocationStrategy: StrategyFreeRatioFirst}, 1)
	assert.NilError(t, err)
	assert.NilError(t, svc.MountSegment("c", SegmentInfo{ID: "s", Name: "n", Base: 0x1000, Size: 4096}))
	reps, errs := svc.BatchPutStart("c", "", []string{"a", "b", "a", ""}, []uint64{100, 200, 100, 5}, ReplicateConfig{}, false)
	assert.NilError(t, errs[0])
	assert.NilError(t, errs[1])
	assert.Equal(t, wire.CodeOf(errs[2]), wire.ErrObjectAlreadyExists)
	assert.Equal(t, wire.CodeOf(errs[3]), wire.ErrInvalidParams)
	assert.Equal(t, reps[1][0].Addr, uint64(0x1000+128))
	ends := svc.BatchPutEnd("c", "", []string{"a", "b", "zz"}, false)
	assert.NilError(t, ends[0])
	assert.NilError(t, ends[1])
	assert.Equal(t, wire.CodeOf(ends[2]), wire.ErrObjectNotFound)
	assert.DeepEqual(t, svc.BatchExistKey("", []string{"a", "zz", "b"}), []int32{1, 0, 1})
	lists, gerrs := svc.BatchGetReplicaList("", []string{"b", "zz"})
	assert.NilError(t, gerrs[0])
	assert.Equal(t, lists[0].Size, uint64(200))
	assert.Equal(t, wire.CodeOf(gerrs[1]), wire.ErrObjectNotFound)
	rerrs := svc.BatchRemove("", []string{"a", "b"}, false)
	assert.Equal(t, wire.CodeOf(rerrs[0]), wire.ErrObjectHasLease)
	clock.Advance(11 * time.Second)
	rerrs = svc.BatchRemove("", []string{"a", "b"}, false)
	assert.NilError(t, rerrs[0])
	assert.NilError(t, rerrs[1])
	assert.Equal(t, svc.Metrics().UsedBytes, uint64(0))
}

// TestGrantIDsDifferAcrossInstances: grant ids of two master instances
// (a restart), even with the same seed, do not collide, so a client that
// returns an id of the previous instance frees nothing of the new one.
func TestGrantIDsDifferAcrossInstances(t *testing.T) {
	var ids []uint64
	var svcs []*Service
	for range 2 {
		svc, err := NewService(Config{Seed: 1, Clock: newFakeClock()}, 1)
		assert.NilError(t, err)
		assert.NilError(t, svc.MountSegment("h", SegmentInfo{ID: "s", Name: "n", Base: 1 << 20, Size: 1 << 20}))
		assert.NilError(t, svc.ReMountSegments("w", nil))
		gs, _, err := svc.AcquireGrants("w", 1, 100, nil, nil)
		assert.NilError(t, err)
		assert.Equal(t, len(gs), 1)
		ids = append(ids, gs[0].ID)
		svcs = append(svcs, svc)
	}
	assert.Assert(t, ids[0] != ids[1], "grant id %d in both instances", ids[0])
	svcs[1].ReturnGrants("w", []uint64{ids[0]})
	assert.Equal(t, svcs[1].Metrics().Grants, 1)
	_, err := svcs[1].PutCommit("w", "", "k", 100, ReplicateConfig{}, false, []GrantedReplica{{GrantID: ids[1], Addr: 1 << 20}})
	assert.NilError(t, err)
}

// TestReplicaTags: every replica the master places has a tag of its own,
// so a client that read a replica before the master named it can tell it
// from a replica placed later at the same address (store/client spec.go):
// a remove and a new put of the same key and size lands at the same
// address here, with another uid and another tag; a put through a grant
// reports the tags it published.
func TestReplicaTags(t *testing.T) {
	clock := newFakeClock()
	svc, err := NewService(Config{Clock: clock, ClientTTL: time.Hour}, 7)
	assert.NilError(t, err)
	// Room for one object: the second lands where the first was.
	assert.NilError(t, svc.MountSegment("h", SegmentInfo{ID: "s", Name: "n", Base: 1 << 20, Size: 4096}))
	put := func() ReplicaList {
		t.Helper()
		_, err := svc.PutStart("w", "", "k", 4096, ReplicateConfig{}, false)
		assert.NilError(t, err)
		assert.NilError(t, svc.PutEnd("w", "", "k"))
		l, err := svc.GetReplicaList("", "k")
		assert.NilError(t, err)
		assert.Equal(t, len(l.Replicas), 1)
		assert.Assert(t, l.Replicas[0].Tag != 0)
		return l
	}
	a := put()
	again, err := svc.GetReplicaList("", "k")
	assert.NilError(t, err)
	assert.Equal(t, again.Replicas[0].Tag, a.Replicas[0].Tag) // the same replica
	assert.NilError(t, svc.Remove("", "k", true))
	clock.Advance(time.Minute) // past the removed replica's discard delay
	svc.Tick()
	b := put()
	assert.Equal(t, b.Replicas[0].Addr, a.Replicas[0].Addr)
	assert.Assert(t, b.UID != a.UID)
	assert.Assert(t, b.Replicas[0].Tag != a.Replicas[0].Tag)

	assert.NilError(t, svc.MountSegment("h", SegmentInfo{ID: "s2", Name: "n2", Base: 4 << 20, Size: 1 << 20}))
	assert.NilError(t, svc.ReMountSegments("w", nil))
	gs, _, err := svc.AcquireGrants("w", 1, 4096, nil, nil)
	assert.NilError(t, err)
	c, err := svc.PutCommitVersion("w", "", "g", 4096, ReplicateConfig{}, false, []GrantedReplica{{GrantID: gs[0].ID, Addr: gs[0].Addr}})
	assert.NilError(t, err)
	l, err := svc.GetReplicaList("", "g")
	assert.NilError(t, err)
	assert.Equal(t, c.UID, l.UID)
	assert.DeepEqual(t, c.Tags, []uint64{l.Replicas[0].Tag})
	assert.Assert(t, c.Tags[0] != b.Replicas[0].Tag)
}
