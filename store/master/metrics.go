package master

import (
	"github.com/prometheus/client_golang/prometheus"
)

// counters are the monotonic counts kept under Service.mu.
type counters struct {
	mounts, unmounts         uint64
	putStarts, putStartFails uint64
	putEnds, putRevokes      uint64
	gets, getHits, exists    uint64
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
}

// Metrics returns a snapshot.
func (s *Service) Metrics() Metrics {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.mu.counters
	m := Metrics{
		Clients:              len(s.mu.clients),
		Segments:             len(s.mu.segments),
		Objects:              len(s.mu.objects),
		ProcessingObjects:    len(s.mu.processing),
		CapacityBytes:        s.mu.capacity,
		UsedBytes:            s.mu.used,
		MountsTotal:          c.mounts,
		UnmountsTotal:        c.unmounts,
		PutStartsTotal:       c.putStarts,
		PutStartFailsTotal:   c.putStartFails,
		PutEndsTotal:         c.putEnds,
		PutRevokesTotal:      c.putRevokes,
		GetsTotal:            c.gets,
		GetHitsTotal:         c.getHits,
		ExistsTotal:          c.exists,
		RemovesTotal:         c.removes,
		EvictionRoundsTotal:  c.evictionRounds,
		EvictedObjectsTotal:  c.evictedObjects,
		EvictedBytesTotal:    c.evictedBytes,
		ExpiredClientsTotal:  c.expiredClients,
		ZombiePutsTotal:      c.zombiePuts,
		NoSpaceTotal:         c.noSpace,
		Grants:               len(s.mu.grants),
		GrantedBytes:         s.mu.granted,
		GrantRequestsTotal:   c.grantRequests,
		GrantsTotal:          c.grants,
		GrantReturnsTotal:    c.grantReturns,
		GrantsTakenBackTotal: c.grantsTakenBack,
		PutCommitsTotal:      c.commits,
		PutCommitFailsTotal:  c.commitFails,
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

// metricDesc is one exported metric read from a Metrics snapshot.
type metricDesc struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(*Metrics) float64
}

// collector exposes a Metrics source on a Prometheus registry; each scrape
// takes one snapshot.
type collector struct {
	source func() (Metrics, bool)
	descs  []metricDesc
}

func newCollector(source func() (Metrics, bool)) *collector {
	g := func(name, help string, f func(*Metrics) float64) metricDesc {
		return metricDesc{prometheus.NewDesc("kvferry_store_master_"+name, help, nil, nil), prometheus.GaugeValue, f}
	}
	c := func(name, help string, f func(*Metrics) float64) metricDesc {
		return metricDesc{prometheus.NewDesc("kvferry_store_master_"+name, help, nil, nil), prometheus.CounterValue, f}
	}
	return &collector{source: source, descs: []metricDesc{
		g("clients", "Live store clients.", func(m *Metrics) float64 { return float64(m.Clients) }),
		g("segments", "Mounted segments.", func(m *Metrics) float64 { return float64(m.Segments) }),
		g("objects", "Objects, complete or being written.", func(m *Metrics) float64 { return float64(m.Objects) }),
		g("processing_objects", "Puts between PutStart and PutEnd.", func(m *Metrics) float64 { return float64(m.ProcessingObjects) }),
		g("capacity_bytes", "Total size of the mounted segments.", func(m *Metrics) float64 { return float64(m.CapacityBytes) }),
		g("used_bytes", "Allocated bytes in the mounted segments.", func(m *Metrics) float64 { return float64(m.UsedBytes) }),
		g("discarded_bytes", "Bytes held for preempted or removed objects until no writer or lease can touch them.", func(m *Metrics) float64 { return float64(m.DiscardedBytes) }),
		c("mounts_total", "Segment mounts.", func(m *Metrics) float64 { return float64(m.MountsTotal) }),
		c("unmounts_total", "Segment unmounts, explicit or by client expiry.", func(m *Metrics) float64 { return float64(m.UnmountsTotal) }),
		c("put_starts_total", "PutStart requests.", func(m *Metrics) float64 { return float64(m.PutStartsTotal) }),
		c("put_start_failures_total", "PutStart requests that failed.", func(m *Metrics) float64 { return float64(m.PutStartFailsTotal) }),
		c("put_ends_total", "Completed puts.", func(m *Metrics) float64 { return float64(m.PutEndsTotal) }),
		c("put_revokes_total", "Revoked puts.", func(m *Metrics) float64 { return float64(m.PutRevokesTotal) }),
		c("gets_total", "GetReplicaList requests.", func(m *Metrics) float64 { return float64(m.GetsTotal) }),
		c("get_hits_total", "GetReplicaList requests that returned replicas.", func(m *Metrics) float64 { return float64(m.GetHitsTotal) }),
		c("exists_total", "ExistKey requests (per key).", func(m *Metrics) float64 { return float64(m.ExistsTotal) }),
		c("removes_total", "Objects removed by Remove, RemoveByRegex and RemoveAll.", func(m *Metrics) float64 { return float64(m.RemovesTotal) }),
		c("eviction_rounds_total", "Eviction rounds.", func(m *Metrics) float64 { return float64(m.EvictionRoundsTotal) }),
		c("evicted_objects_total", "Objects evicted.", func(m *Metrics) float64 { return float64(m.EvictedObjectsTotal) }),
		c("evicted_bytes_total", "Bytes freed by eviction.", func(m *Metrics) float64 { return float64(m.EvictedBytesTotal) }),
		c("expired_clients_total", "Clients expired for missing heartbeats.", func(m *Metrics) float64 { return float64(m.ExpiredClientsTotal) }),
		c("zombie_puts_total", "Unfinished puts preempted or reclaimed.", func(m *Metrics) float64 { return float64(m.ZombiePutsTotal) }),
		c("no_space_total", "Puts and grant requests that failed for lack of space.", func(m *Metrics) float64 { return float64(m.NoSpaceTotal) }),
		g("grants", "Put grants held by clients.", func(m *Metrics) float64 { return float64(m.Grants) }),
		g("granted_bytes", "Bytes reserved in put grants and not yet committed.", func(m *Metrics) float64 { return float64(m.GrantedBytes) }),
		g("fenced_bytes", "Bytes of taken-back grants kept out of use until their clients stop writing.", func(m *Metrics) float64 { return float64(m.FencedBytes) }),
		c("grant_requests_total", "AcquireGrants requests.", func(m *Metrics) float64 { return float64(m.GrantRequestsTotal) }),
		c("grants_total", "Put grants handed out.", func(m *Metrics) float64 { return float64(m.GrantsTotal) }),
		c("grant_returns_total", "Put grants returned by their clients.", func(m *Metrics) float64 { return float64(m.GrantReturnsTotal) }),
		c("grants_taken_back_total", "Put grants taken back by the master (segment unmounted, client expired).", func(m *Metrics) float64 { return float64(m.GrantsTakenBackTotal) }),
		c("put_commits_total", "PutCommit requests (one-round-trip puts).", func(m *Metrics) float64 { return float64(m.PutCommitsTotal) }),
		c("put_commit_failures_total", "PutCommit requests that failed.", func(m *Metrics) float64 { return float64(m.PutCommitFailsTotal) }),
	}}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d.desc
	}
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	m, ok := c.source()
	if !ok {
		return
	}
	for _, d := range c.descs {
		ch <- prometheus.MustNewConstMetric(d.desc, d.kind, d.value(&m))
	}
}
