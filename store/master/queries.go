package master

import (
	"fmt"
	"math"
	"net"
	"regexp"
	"slices"
	"strings"

	"github.com/kvferry/kvferry/store/wire"
)

// Read-only master queries of Mooncake's master service
// (mooncake-store master_service.h): GetReplicaListByRegex, BatchQueryIp
// and CalcCacheStats, plus the segment status query of the admin port.

// MaxRegexMatches bounds the objects one GetReplicaListByRegex answers, the
// size of the largest batch call (wire.DefaultMaxBatchKeys): a pattern that
// matches more fails with BUFFER_OVERFLOW instead of answering a part.
const MaxRegexMatches = wire.DefaultMaxBatchKeys

// KeyReplicas is one object GetReplicaListByRegex matched.
type KeyReplicas struct {
	Key string
	ReplicaList
}

// GetReplicaListByRegex returns the readable replicas of every complete
// object of tenant ("" is the default) whose key matches pattern (Go RE2
// syntax, an unanchored search like Mooncake's std::regex_search), sorted
// by key, and grants each a read lease, as GetReplicaList would. Objects
// with no readable replica (a put in progress) are left out, as Mooncake
// does. A bad pattern or tenant is INVALID_PARAMS; more than
// MaxRegexMatches matches is BUFFER_OVERFLOW (and grants nothing).
func (s *Service) GetReplicaListByRegex(tenant, pattern string) ([]KeyReplicas, error) {
	t, err := tenantOf(tenant)
	if err != nil {
		return nil, fmt.Errorf("get replica list by regex %q: %w", pattern, err)
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, fmt.Errorf("get replica list by regex %q: %v: %w", pattern, err, wire.ErrInvalidParams)
	}
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var hits []*object
	for id, o := range s.mu.objects {
		if id.tenant != t || !o.complete || len(o.replicas) == 0 && len(o.disk) == 0 || !re.MatchString(id.key) {
			continue
		}
		if len(hits) == MaxRegexMatches {
			return nil, fmt.Errorf("get replica list by regex %q: more than %d objects match: %w",
				pattern, MaxRegexMatches, wire.ErrBufferOverflow)
		}
		hits = append(hits, o)
	}
	slices.SortFunc(hits, func(a, b *object) int { return strings.Compare(a.id.key, b.id.key) })
	out := make([]KeyReplicas, len(hits))
	for i, o := range hits {
		s.leaseLocked(o, now)
		out[i] = KeyReplicas{Key: o.id.key, ReplicaList: ReplicaList{Size: o.size, Replicas: o.descriptors(),
			LeaseTTL: s.cfg.DefaultKVLeaseTTL, UID: o.uid, Version: o.version}}
	}
	return out, nil
}

// ClientIPs is one client BatchQueryIP found.
type ClientIPs struct {
	ClientID string
	// IPs are the distinct hosts of the client's mounted segments (their
	// transfer-engine names without the port), sorted.
	IPs []string
}

// BatchQueryIP returns, for each client of clientIDs that has mounted
// segments, the hosts of those segments (Mooncake's BatchQueryIp): a client
// the master does not know, or one without a mounted segment, is left out
// of the answer, as Mooncake does. The answer is in the order of clientIDs
// (a repeated id answers once).
func (s *Service) BatchQueryIP(clientIDs []string) []ClientIPs {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []ClientIPs
	seen := make(map[string]bool, len(clientIDs))
	for _, id := range clientIDs {
		c, ok := s.mu.clients[id]
		if !ok || len(c.segments) == 0 || seen[id] {
			continue
		}
		seen[id] = true
		var ips []string
		for _, seg := range c.segments {
			if h := hostOf(seg.info.Name); h != "" && !slices.Contains(ips, h) {
				ips = append(ips, h)
			}
		}
		slices.Sort(ips)
		out = append(out, ClientIPs{ClientID: id, IPs: ips})
	}
	return out
}

// hostOf returns the host part of a transfer-engine segment name, as
// Mooncake's getHostNameWithoutPort: "h:p" gives h, "[v6]:p" and "[v6]"
// give v6, and a name with no port (a bare IPv6 address among them) is
// returned whole.
func hostOf(name string) string {
	if strings.HasPrefix(name, "[") {
		if i := strings.IndexByte(name, ']'); i > 0 {
			return name[1:i]
		}
		return name
	}
	if strings.Count(name, ":") != 1 {
		return name
	}
	h, _, err := net.SplitHostPort(name)
	if err != nil {
		return name
	}
	return h
}

// CacheStats is CalcCacheStats's answer: Mooncake's CacheHitStatDict
// (master_metric_manager.h), with its meaning. Hits count GetReplicaList
// answers since the master started, by the kind of their first replica
// (memory replicas come first, so a hit on disk is an object that had
// only disk replicas); the totals are the objects cached now. The "rates"
// divide the first by the second, as Mooncake's do (so they may exceed 1),
// rounded to two decimals; 0 when the divisor is 0.
type CacheStats struct {
	MemoryHits     uint64
	SSDHits        uint64
	MemoryTotal    uint64 // complete objects with a memory replica
	SSDTotal       uint64 // complete objects with a disk (LOCAL_DISK) replica
	MemoryHitRate  float64
	SSDHitRate     float64
	OverallHitRate float64
	// ValidGetRate is the share of GetReplicaList calls that found the
	// object readable.
	ValidGetRate float64
}

// CalcCacheStats returns the cache statistics (Mooncake's CalcCacheStats).
func (s *Service) CalcCacheStats() CacheStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.mu.counters
	st := CacheStats{MemoryHits: c.memHits, SSDHits: c.diskHits}
	for _, o := range s.mu.objects {
		if !o.complete {
			continue
		}
		if len(o.replicas) > 0 {
			st.MemoryTotal++
		}
		if len(o.disk) > 0 {
			st.SSDTotal++
		}
	}
	st.MemoryHitRate = ratio2(st.MemoryHits, st.MemoryTotal)
	st.SSDHitRate = ratio2(st.SSDHits, st.SSDTotal)
	st.OverallHitRate = ratio2(st.MemoryHits+st.SSDHits, st.MemoryTotal+st.SSDTotal)
	st.ValidGetRate = ratio2(c.getHits, c.gets)
	return st
}

// ratio2 is a/b rounded to two decimals (0 when b is 0).
func ratio2(a, b uint64) float64 {
	if b == 0 {
		return 0
	}
	return math.Round(float64(a)/float64(b)*100) / 100
}

// SegmentStatus is the life-cycle state of a mounted segment, with
// Mooncake's values (mooncake-store segment.h).
type SegmentStatus int32

// Segment states.
const (
	SegmentUndefined SegmentStatus = iota
	// SegmentOK: mounted, allocations go to it.
	SegmentOK
	// SegmentDraining: a drain job moves its replicas out; it stays
	// readable and takes no new allocation.
	SegmentDraining
	// SegmentDrained: a drain job emptied it; it takes no new allocation
	// and waits to be unmounted.
	SegmentDrained
	// SegmentGracefullyUnmounting: a graceful unmount moves its objects
	// out before it goes.
	SegmentGracefullyUnmounting
	// SegmentUnmounting: being unmounted (never seen from outside here:
	// an unmount is one step).
	SegmentUnmounting
)

var segmentStatusNames = [...]string{"UNDEFINED", "OK", "DRAINING", "DRAINED", "GRACEFULLY_UNMOUNTING", "UNMOUNTING"}

// String returns Mooncake's name of the state ("DRAINING").
func (st SegmentStatus) String() string {
	if st >= 0 && int(st) < len(segmentStatusNames) {
		return segmentStatusNames[st]
	}
	return fmt.Sprintf("UNKNOWN(%d)", int32(st))
}

// statusLocked is seg's state.
func (seg *segment) statusLocked() SegmentStatus {
	switch {
	case seg.unmounted:
		return SegmentUnmounting
	case seg.leaving:
		return SegmentGracefullyUnmounting
	case seg.drained:
		return SegmentDrained
	case seg.job != nil:
		return SegmentDraining
	}
	return SegmentOK
}

// SegmentStatusOf returns the state of the mounted segment called name (a
// transfer-engine segment name; Mooncake's QuerySegmentStatus). A name
// several segments share answers the state of the first mounted.
// Errors: INVALID_PARAMS (empty name), SEGMENT_NOT_FOUND.
func (s *Service) SegmentStatusOf(name string) (SegmentStatus, error) {
	if name == "" {
		return SegmentUndefined, fmt.Errorf("segment status: empty name: %w", wire.ErrInvalidParams)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	segs := s.mu.byName[name]
	if len(segs) == 0 {
		return SegmentUndefined, fmt.Errorf("segment status %q: %w", name, wire.ErrSegmentNotFound)
	}
	return segs[0].statusLocked(), nil
}

// SegmentStatusByID returns the state of the mounted segment with the id
// (Mooncake's QuerySegmentStatusById). Errors: SEGMENT_NOT_FOUND.
func (s *Service) SegmentStatusByID(id string) (SegmentStatus, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	seg := s.mu.segments[id]
	if seg == nil {
		return SegmentUndefined, fmt.Errorf("segment status of id %q: %w", id, wire.ErrSegmentNotFound)
	}
	return seg.statusLocked(), nil
}

// ClientHosts returns, per client id that has mounted segments, the
// distinct hosts of its segments' transfer-engine names (the name without
// its port), sorted (Mooncake's BatchQueryIp). A client without segments,
// or unknown, is left out.
func (s *Service) ClientHosts(ids []string) map[string][]string {
	out := make(map[string][]string, len(ids))
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		c := s.mu.clients[id]
		if c == nil {
			continue
		}
		seen := map[string]bool{}
		var hosts []string
		for _, seg := range c.segments {
			h := seg.info.Name
			if host, _, err := net.SplitHostPort(h); err == nil {
				h = host
			}
			if h != "" && !seen[h] {
				seen[h] = true
				hosts = append(hosts, h)
			}
		}
		if len(hosts) > 0 {
			slices.Sort(hosts)
			out[id] = hosts
		}
	}
	return out
}
