package master

import (
	"cmp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvferry/kvferry/metrics"
	"github.com/kvferry/kvferry/store/wire"
)

// counters are the monotonic counts kept under Service.mu.
type counters struct {
	mounts, unmounts         uint64
	putStarts, putStartFails uint64
	putEnds, putRevokes      uint64
	gets, getHits, exists    uint64
	memHits, diskHits        uint64 // getHits by the kind of the first replica
	drainMoved, drainBytes   uint64 // drain units ended well, bytes moved
	removes                  uint64
	evictionRounds           uint64
	evictedObjects           uint64
	evictedBytes             uint64
	expiredClients           uint64
	zombiePuts               uint64
	noSpace                  uint64
	grantRequests, grants    uint64
	grantReturns             uint64
	grantsTakenBack          uint64
	commits, commitFails     uint64
	tasks, taskFailures      uint64
	offloads, offloadedBytes uint64
	promotions               uint64
	offloadWaits             uint64 // puts refused while memory awaited its files
	evictSkippedForFiles     uint64 // objects eviction passed over: their file is not written yet
}

// Metrics is a point-in-time snapshot of the master.
type Metrics struct {
	// Clients is the number of live clients (mounted or pinging).
	Clients int
	// Segments is the number of mounted segments.
	Segments int
	// Objects is the number of objects, complete or being written.
	Objects int
	// ProcessingObjects is the number of puts between PutStart and PutEnd.
	ProcessingObjects int
	// DiscardedBytes is space held by preempted or removed objects until a
	// writer or a lease can no longer touch it, in bytes.
	DiscardedBytes uint64
	// CapacityBytes is the total size of the mounted segments.
	CapacityBytes uint64
	// UsedBytes is the allocated part of CapacityBytes: objects, grants
	// and fences.
	UsedBytes uint64
	// Grants is the number of put grants held by clients.
	Grants int
	// GrantedBytes is the part of UsedBytes reserved in grants and not
	// yet taken by a commit.
	GrantedBytes uint64
	// FencedBytes is the part of UsedBytes kept out of use after grants
	// were taken back, until their clients can no longer write into them.
	FencedBytes uint64
	// LeasedObjects counts objects under a read lease; HardPinned and
	// SoftPinned those kept from eviction by a pin.
	LeasedObjects, HardPinned, SoftPinned int
	// SegmentUsage lists the mounted segments by name, in mount order.
	SegmentUsage []SegmentUsage

	// Counters since the Service was created.
	MountsTotal         uint64
	UnmountsTotal       uint64
	PutStartsTotal      uint64
	PutStartFailsTotal  uint64
	PutEndsTotal        uint64
	PutRevokesTotal     uint64
	GetsTotal           uint64
	GetHitsTotal        uint64
	ExistsTotal         uint64
	RemovesTotal        uint64
	EvictionRoundsTotal uint64
	EvictedObjectsTotal uint64
	EvictedBytesTotal   uint64
	ExpiredClientsTotal uint64
	// ZombiePutsTotal counts unfinished puts that were preempted or whose
	// space was reclaimed after PutStartReleaseTimeout.
	ZombiePutsTotal uint64
	// NoSpaceTotal counts puts and grant requests that failed with
	// NO_AVAILABLE_HANDLE.
	NoSpaceTotal uint64
	// GrantRequestsTotal counts AcquireGrants calls that got that far
	// (after argument checks).
	GrantRequestsTotal uint64
	// GrantsTotal counts grants handed out.
	GrantsTotal uint64
	// GrantReturnsTotal counts grants returned by their clients.
	GrantReturnsTotal uint64
	// GrantsTakenBackTotal counts grants the master took back on its own
	// (segment unmounted, client expired).
	GrantsTakenBackTotal uint64
	// PutCommitsTotal counts PutCommit calls; PutCommitFailsTotal those
	// that failed (the key existed, an address outside a grant, ...).
	PutCommitsTotal     uint64
	PutCommitFailsTotal uint64

	// Disk tier (tier.go) and tasks (tasks.go).
	DiskCapacityBytes uint64
	DiskUsedBytes     uint64
	DiskObjects       int
	// TasksTotal counts tasks handed to clients, TaskFailuresTotal those
	// that failed or timed out.
	TasksTotal        uint64
	TaskFailuresTotal uint64
	// OffloadsTotal and OffloadedBytesTotal count objects written to disk
	// tiers; PromotionsTotal objects loaded back into memory.
	OffloadsTotal       uint64
	OffloadedBytesTotal uint64
	PromotionsTotal     uint64
	// OffloadQueue is the number of OFFLOAD tasks handed out and not yet
	// done (the disk tiers' writers' queue).
	OffloadQueue int
	// OffloadWaitsTotal counts puts answered UNAVAILABLE_IN_CURRENT_STATUS
	// because memory held nothing eviction may take but objects whose disk
	// files were still being written (the client asks again; tier.go).
	OffloadWaitsTotal uint64
	// EvictSkippedForFilesTotal counts objects eviction passed over
	// because their disk file was not written yet.
	EvictSkippedForFilesTotal uint64
	// DiskTiers lists the mounted disk tiers, by their client's segment
	// name.
	DiskTiers []DiskTierUsage

	// MemoryHitsTotal and DiskHitsTotal count GetReplicaList answers by
	// the kind of their first replica (CalcCacheStats).
	MemoryHitsTotal, DiskHitsTotal uint64
	// DrainJobs counts drain jobs not ended; DrainMovedTotal the units
	// they ended well, DrainMovedBytesTotal the bytes they moved.
	DrainJobs                             int
	DrainMovedTotal, DrainMovedBytesTotal uint64
}

// DiskTierUsage is one mounted disk tier's size and use.
type DiskTierUsage struct {
	// Name is its client's transfer-engine segment name, ID the tier's.
	Name, ID                 string
	CapacityBytes, UsedBytes uint64
	Objects                  int
	// OffloadQueue is the OFFLOAD tasks handed to its writers, not done.
	OffloadQueue int
}

// Metrics returns a snapshot.
func (s *Service) Metrics() Metrics {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.mu.counters
	m := Metrics{
		Clients:                   len(s.mu.clients),
		Segments:                  len(s.mu.segments),
		Objects:                   len(s.mu.objects),
		ProcessingObjects:         len(s.mu.processing),
		CapacityBytes:             s.mu.capacity,
		UsedBytes:                 s.mu.used,
		MountsTotal:               c.mounts,
		UnmountsTotal:             c.unmounts,
		PutStartsTotal:            c.putStarts,
		PutStartFailsTotal:        c.putStartFails,
		PutEndsTotal:              c.putEnds,
		PutRevokesTotal:           c.putRevokes,
		GetsTotal:                 c.gets,
		GetHitsTotal:              c.getHits,
		ExistsTotal:               c.exists,
		RemovesTotal:              c.removes,
		EvictionRoundsTotal:       c.evictionRounds,
		EvictedObjectsTotal:       c.evictedObjects,
		EvictedBytesTotal:         c.evictedBytes,
		ExpiredClientsTotal:       c.expiredClients,
		ZombiePutsTotal:           c.zombiePuts,
		NoSpaceTotal:              c.noSpace,
		Grants:                    len(s.mu.grants),
		GrantedBytes:              s.mu.granted,
		GrantRequestsTotal:        c.grantRequests,
		GrantsTotal:               c.grants,
		GrantReturnsTotal:         c.grantReturns,
		GrantsTakenBackTotal:      c.grantsTakenBack,
		PutCommitsTotal:           c.commits,
		PutCommitFailsTotal:       c.commitFails,
		TasksTotal:                c.tasks,
		TaskFailuresTotal:         c.taskFailures,
		OffloadsTotal:             c.offloads,
		OffloadedBytesTotal:       c.offloadedBytes,
		PromotionsTotal:           c.promotions,
		OffloadWaitsTotal:         c.offloadWaits,
		EvictSkippedForFilesTotal: c.evictSkippedForFiles,
		MemoryHitsTotal:           c.memHits,
		DiskHitsTotal:             c.diskHits,
		DrainMovedTotal:           c.drainMoved,
		DrainMovedBytesTotal:      c.drainBytes,
	}
	tiers := map[*diskSeg]int{}
	for _, cl := range s.mu.clients {
		if d := cl.disk; d != nil {
			m.DiskCapacityBytes += d.info.Capacity
			m.DiskUsedBytes += d.used
			m.DiskObjects += len(d.reps)
			tiers[d] = len(m.DiskTiers)
			m.DiskTiers = append(m.DiskTiers, DiskTierUsage{Name: d.info.Name, ID: d.info.ID,
				CapacityBytes: d.info.Capacity, UsedBytes: d.used, Objects: len(d.reps)})
		}
	}
	for _, t := range s.mu.tasks {
		if t.kind == wire.TaskKind_TASK_KIND_OFFLOAD {
			m.OffloadQueue++
			if i, ok := tiers[t.disk]; ok {
				m.DiskTiers[i].OffloadQueue++
			}
		}
	}
	slices.SortFunc(m.DiskTiers, func(a, b DiskTierUsage) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.ID, b.ID))
	})
	for _, j := range s.mu.drainJobs {
		if !j.terminal() {
			m.DrainJobs++
		}
	}
	now := s.clock.Now()
	for _, o := range s.mu.objects {
		if o.leaseExpiry.After(now) {
			m.LeasedObjects++
		}
		if o.hardPin {
			m.HardPinned++
		} else if o.softPinTTL > 0 && (o.softPinExpiry.IsZero() || o.softPinExpiry.After(now)) {
			m.SoftPinned++
		}
	}
	for _, seg := range s.mu.order {
		if !seg.unmounted {
			m.SegmentUsage = append(m.SegmentUsage, SegmentUsage{Name: seg.info.Name, ID: seg.info.ID,
				CapacityBytes: seg.info.Size, UsedBytes: seg.alloc.used})
		}
	}
	for _, f := range s.mu.fences {
		if f.seg != nil && !f.seg.unmounted {
			m.FencedBytes += f.n
		}
	}
	for _, d := range s.mu.discarded {
		for _, r := range d.replicas {
			if !r.seg.unmounted {
				m.DiscardedBytes += alignedLen(r.size)
			}
		}
	}
	return m
}

// SegmentUsage is one mounted segment's size and allocated bytes.
type SegmentUsage struct {
	Name, ID                 string
	CapacityBytes, UsedBytes uint64
}

// metricDesc is one exported metric read from a Metrics snapshot.
type metricDesc struct {
	spec  *metrics.Spec
	value func(*Metrics) float64
}

// collector exposes a master on a Prometheus registry; each scrape takes
// one snapshot of the active Service.
type collector struct {
	s     *Server
	descs []metricDesc
	segs  *metrics.Folder
	// disks folds disk tier labels past SegmentLabelCap into "other".
	disks *metrics.Folder
	// tenants folds tenant labels past SegmentLabelCap into "other".
	tenants *metrics.Folder
}

// SegmentLabelCap is how many segments get their own segment label in
// kvferry_store_master_segment_*; the rest share "other".
const SegmentLabelCap = 256

func newCollector(s *Server) *collector {
	f := func(spec *metrics.Spec, v func(*Metrics) float64) metricDesc { return metricDesc{spec, v} }
	u := func(p func(*Metrics) uint64) func(*Metrics) float64 {
		return func(m *Metrics) float64 { return float64(p(m)) }
	}
	i := func(p func(*Metrics) int) func(*Metrics) float64 {
		return func(m *Metrics) float64 { return float64(p(m)) }
	}
	return &collector{s: s, segs: metrics.NewFolder(SegmentLabelCap), disks: metrics.NewFolder(SegmentLabelCap), tenants: metrics.NewFolder(SegmentLabelCap), descs: []metricDesc{
		f(metrics.MasterClients, i(func(m *Metrics) int { return m.Clients })),
		f(metrics.MasterSegments, i(func(m *Metrics) int { return m.Segments })),
		f(metrics.MasterObjects, i(func(m *Metrics) int { return m.Objects })),
		f(metrics.MasterProcessing, i(func(m *Metrics) int { return m.ProcessingObjects })),
		f(metrics.MasterLeased, i(func(m *Metrics) int { return m.LeasedObjects })),
		f(metrics.MasterCapacity, u(func(m *Metrics) uint64 { return m.CapacityBytes })),
		f(metrics.MasterUsed, u(func(m *Metrics) uint64 { return m.UsedBytes })),
		f(metrics.MasterDiscarded, u(func(m *Metrics) uint64 { return m.DiscardedBytes })),
		f(metrics.MasterMounts, u(func(m *Metrics) uint64 { return m.MountsTotal })),
		f(metrics.MasterUnmounts, u(func(m *Metrics) uint64 { return m.UnmountsTotal })),
		f(metrics.MasterPutStarts, u(func(m *Metrics) uint64 { return m.PutStartsTotal })),
		f(metrics.MasterPutStartFails, u(func(m *Metrics) uint64 { return m.PutStartFailsTotal })),
		f(metrics.MasterPutEnds, u(func(m *Metrics) uint64 { return m.PutEndsTotal })),
		f(metrics.MasterPutRevokes, u(func(m *Metrics) uint64 { return m.PutRevokesTotal })),
		f(metrics.MasterGets, u(func(m *Metrics) uint64 { return m.GetsTotal })),
		f(metrics.MasterGetHits, u(func(m *Metrics) uint64 { return m.GetHitsTotal })),
		f(metrics.MasterExists, u(func(m *Metrics) uint64 { return m.ExistsTotal })),
		f(metrics.MasterRemoves, u(func(m *Metrics) uint64 { return m.RemovesTotal })),
		f(metrics.MasterEvictionRounds, u(func(m *Metrics) uint64 { return m.EvictionRoundsTotal })),
		f(metrics.MasterEvictedObjects, u(func(m *Metrics) uint64 { return m.EvictedObjectsTotal })),
		f(metrics.MasterEvictedBytes, u(func(m *Metrics) uint64 { return m.EvictedBytesTotal })),
		f(metrics.MasterExpiredClients, u(func(m *Metrics) uint64 { return m.ExpiredClientsTotal })),
		f(metrics.MasterZombiePuts, u(func(m *Metrics) uint64 { return m.ZombiePutsTotal })),
		f(metrics.MasterNoSpace, u(func(m *Metrics) uint64 { return m.NoSpaceTotal })),
		f(metrics.MasterGrants, i(func(m *Metrics) int { return m.Grants })),
		f(metrics.MasterGrantedBytes, u(func(m *Metrics) uint64 { return m.GrantedBytes })),
		f(metrics.MasterFencedBytes, u(func(m *Metrics) uint64 { return m.FencedBytes })),
		f(metrics.MasterGrantRequests, u(func(m *Metrics) uint64 { return m.GrantRequestsTotal })),
		f(metrics.MasterGrantsHanded, u(func(m *Metrics) uint64 { return m.GrantsTotal })),
		f(metrics.MasterGrantReturns, u(func(m *Metrics) uint64 { return m.GrantReturnsTotal })),
		f(metrics.MasterGrantsTakenBack, u(func(m *Metrics) uint64 { return m.GrantsTakenBackTotal })),
		f(metrics.MasterPutCommits, u(func(m *Metrics) uint64 { return m.PutCommitsTotal })),
		f(metrics.MasterPutCommitFails, u(func(m *Metrics) uint64 { return m.PutCommitFailsTotal })),
		f(metrics.MasterDiskCapacity, u(func(m *Metrics) uint64 { return m.DiskCapacityBytes })),
		f(metrics.MasterDiskUsed, u(func(m *Metrics) uint64 { return m.DiskUsedBytes })),
		f(metrics.MasterDiskObjects, i(func(m *Metrics) int { return m.DiskObjects })),
		f(metrics.MasterOffloadQueue, i(func(m *Metrics) int { return m.OffloadQueue })),
		f(metrics.MasterOffloadWaits, u(func(m *Metrics) uint64 { return m.OffloadWaitsTotal })),
		f(metrics.MasterEvictSkippedForFiles, u(func(m *Metrics) uint64 { return m.EvictSkippedForFilesTotal })),
		f(metrics.MasterTasks, u(func(m *Metrics) uint64 { return m.TasksTotal })),
		f(metrics.MasterTaskFailures, u(func(m *Metrics) uint64 { return m.TaskFailuresTotal })),
		f(metrics.MasterOffloads, u(func(m *Metrics) uint64 { return m.OffloadsTotal })),
		f(metrics.MasterOffloadedBytes, u(func(m *Metrics) uint64 { return m.OffloadedBytesTotal })),
		f(metrics.MasterPromotions, u(func(m *Metrics) uint64 { return m.PromotionsTotal })),
		f(metrics.MasterMemoryHits, u(func(m *Metrics) uint64 { return m.MemoryHitsTotal })),
		f(metrics.MasterDiskHits, u(func(m *Metrics) uint64 { return m.DiskHitsTotal })),
		f(metrics.MasterDrainJobs, i(func(m *Metrics) int { return m.DrainJobs })),
		f(metrics.MasterDrainMoved, u(func(m *Metrics) uint64 { return m.DrainMovedTotal })),
		f(metrics.MasterDrainMovedBytes, u(func(m *Metrics) uint64 { return m.DrainMovedBytesTotal })),
	}}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, spec := range metrics.Catalogue() {
		if spec.Component == metrics.CompMaster {
			ch <- spec.Desc()
		}
	}
}

// Collect implements prometheus.Collector. A master that follows (HA
// standby) exports its leader gauge and RPC figures only.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	leader := 0.0
	if c.s.Role() == RoleLeader {
		leader = 1
	}
	ch <- metrics.MasterLeader.Value(leader)
	c.s.rpc.collect(ch)
	svc := c.s.active.Load()
	if svc == nil {
		return
	}
	m := svc.Metrics()
	for _, d := range c.descs {
		ch <- d.spec.Value(d.value(&m))
	}
	ch <- metrics.MasterPinned.Value(float64(m.HardPinned), "hard")
	ch <- metrics.MasterPinned.Value(float64(m.SoftPinned), "soft")
	type use struct{ capacity, used uint64 }
	segs := map[string]*use{}
	var order []string
	for _, su := range m.SegmentUsage {
		l := c.segs.Label(su.Name)
		x := segs[l]
		if x == nil {
			x = new(use)
			segs[l] = x
			order = append(order, l)
		}
		x.capacity += su.CapacityBytes
		x.used += su.UsedBytes
	}
	for _, l := range order {
		ch <- metrics.MasterSegmentCapacity.Value(float64(segs[l].capacity), l)
		ch <- metrics.MasterSegmentUsed.Value(float64(segs[l].used), l)
	}
	type tier struct{ capacity, used, objects, queue float64 }
	tiers := map[string]*tier{}
	var torder []string
	for _, d := range m.DiskTiers {
		l := c.disks.Label(d.Name)
		x := tiers[l]
		if x == nil {
			x = new(tier)
			tiers[l] = x
			torder = append(torder, l)
		}
		x.capacity += float64(d.CapacityBytes)
		x.used += float64(d.UsedBytes)
		x.objects += float64(d.Objects)
		x.queue += float64(d.OffloadQueue)
	}
	for _, l := range torder {
		x := tiers[l]
		ch <- metrics.MasterDiskTierCapacity.Value(x.capacity, l)
		ch <- metrics.MasterDiskTierUsed.Value(x.used, l)
		ch <- metrics.MasterDiskTierObjects.Value(x.objects, l)
		ch <- metrics.MasterDiskTierQueue.Value(x.queue, l)
	}
	type tu struct{ objects, bytes, qb, qo, refused float64 }
	tenants := map[string]*tu{}
	torder = nil
	for _, u := range svc.TenantUsage() {
		l := c.tenants.Label(u.Tenant)
		x := tenants[l]
		if x == nil {
			x = new(tu)
			tenants[l] = x
			torder = append(torder, l)
		}
		x.objects += float64(u.Objects)
		x.bytes += float64(u.Bytes)
		x.qb += float64(u.Quota.Bytes)
		x.qo += float64(u.Quota.Objects)
		x.refused += float64(u.Refused)
	}
	for _, l := range torder {
		x := tenants[l]
		ch <- metrics.MasterTenantObjects.Value(x.objects, l)
		ch <- metrics.MasterTenantBytes.Value(x.bytes, l)
		ch <- metrics.MasterTenantQuotaBytes.Value(x.qb, l)
		ch <- metrics.MasterTenantQuotaObjects.Value(x.qo, l)
		ch <- metrics.MasterTenantRefused.Value(x.refused, l)
	}
}

// rpcStats are the master's RPC latencies and errors by method.
type rpcStats struct {
	mu sync.RWMutex
	m  map[string]*rpcMethod
}

type rpcMethod struct {
	h      metrics.Histogram
	errors atomic.Uint64
}

// observe records one call of method that took d and failed with err.
func (r *rpcStats) observe(method string, d time.Duration, err error) {
	if i := strings.LastIndexByte(method, '/'); i >= 0 {
		method = method[i+1:]
	}
	r.mu.RLock()
	m := r.m[method]
	r.mu.RUnlock()
	if m == nil {
		r.mu.Lock()
		if r.m == nil {
			r.m = map[string]*rpcMethod{}
		}
		if m = r.m[method]; m == nil {
			m = new(rpcMethod)
			r.m[method] = m
		}
		r.mu.Unlock()
	}
	m.h.Observe(d)
	if err != nil {
		m.errors.Add(1)
	}
}

func (r *rpcStats) collect(ch chan<- prometheus.Metric) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.m))
	for n := range r.m {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		m := r.m[n]
		h := m.h.Snapshot()
		ch <- metrics.MasterRPCDuration.Hist(&h, n)
		ch <- metrics.MasterRPCErrors.Value(float64(m.errors.Load()), n)
	}
}
