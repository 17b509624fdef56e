package master

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/kvferry/kvferry/store/wire"
)

// Put grants: one master round trip per put.
//
// A put through PutStart and PutEnd costs two master round trips around
// the copy of its bytes. With grants it costs one: the master reserves
// space in a segment for one client ahead of time (AcquireGrants, amortized
// over many puts); the client places each object inside its grants itself,
// writes its bytes there, and PutCommit publishes it. The master checks
// that every replica lies inside a grant of the committing client, in a
// part no earlier commit took, and publishes the object complete at once,
// under the one lock, with the same key rules as PutStart (immutable
// objects, upsert, zombie preemption). What Mooncake's clients see does not
// change: an object is readable by others once put returns, a failed put
// leaves nothing visible (a write that failed is never committed; its
// range stays in the grant for the next put), and objects are evicted,
// leased, pinned and removed as any other.
//
// Space. A grant is allocated in its segment like a replica: the whole
// range counts as used (capacity, watermark, eviction) from AcquireGrants
// on. A commit moves a part of it from the grant to a replica; the replica
// is freed like any other. ReturnGrants gives back the parts no commit
// took. When space runs short (an allocation failed, or eviction ran) Ping
// answers ask clients to return the grants they are not writing into.
//
// Safety. A client writes into its grants without asking the master first,
// so the master must never hand out space a client may still write into.
// Clients write into a grant only within GrantLease (minus a margin for
// the copy) after the send time of the last request whose answer confirmed
// it: a Ping, AcquireGrants or PutCommit answered at the same grant
// generation, over the same connection as the one that acquired it (and
// while that connection is not closed by the master). So:
//   - ReturnGrants (the client says it is done) frees at once;
//   - a grant the master takes back on its own (its segment is unmounted,
//     its client expired) bumps the client's grant generation, so no later
//     answer confirms it, and its free parts are fenced: kept out of use,
//     under the segment's name and absolute addresses even if the segment
//     goes and comes back, for GrantLease;
//   - a restarted master knows no grant, and a client of the old one may
//     be writing into its grants until GrantLease after the old one's last
//     answer: for its first GrantLease a plain master (NewServer)
//     allocates nothing in the segments of clients it answered
//     NEED_REMOUNT (clients of a previous instance; fresh clients' segments
//     serve at once), and a new HA leader (whose predecessor may still
//     have been answering) allocates nothing at all. An allocation that
//     finds room only in fenced space answers UNAVAILABLE_IN_CURRENT_STATUS,
//     which clients retry;
//   - grant ids start at a random point in every instance, so an id of a
//     previous instance names no grant of this one.
// Under the invariants build tag every mutation ends with checkLocked: in
// each segment the replicas, the free parts of grants, the fences and the
// allocator's free list tile the segment exactly.

// grant is space of one segment reserved for one client's puts.
type grant struct {
	id     uint64
	client *clientState
	seg    *segment
	off    uint64   // start of the reserved range, relative to the segment base
	size   uint64   // length of the reserved range (a multiple of allocAlign)
	free   []extent // parts no commit took, sorted by offset, never adjacent
	gen    uint64   // the client's grant generation when granted
}

func (g *grant) freeBytes() uint64 {
	var n uint64
	for _, e := range g.free {
		n += e.len
	}
	return n
}

// take removes [off, off+n) from the free parts; false when that range is
// not wholly free.
func (g *grant) take(off, n uint64) bool {
	free, ok := carve(g.free, off, n)
	g.free = free
	return ok
}

// fence keeps the free part of a taken-back grant out of use until a
// client that may still write into it has stopped (GrantLease). It is known
// by segment name and absolute address, so it outlives an unmount of its
// segment and is applied again to a segment mounted over it.
type fence struct {
	name  string
	addr  uint64 // absolute start
	len   uint64
	until time.Time
	// seg is the mounted segment whose allocator holds [off, off+n) of the
	// fence, or nil.
	seg    *segment
	off, n uint64
}

// GrantInfo describes a grant handed to a client.
type GrantInfo struct {
	// ID names the grant in PutCommit and ReturnGrants.
	ID          uint64
	SegmentID   string
	SegmentName string
	Protocol    string
	// Addr and Size are the reserved range (absolute).
	Addr uint64
	Size uint64
}

// GrantedReplica places one replica of a PutCommit: Addr inside grant
// GrantID.
type GrantedReplica struct {
	GrantID uint64
	Addr    uint64
}

// maxGrantsPerCall caps AcquireGrants' count.
const maxGrantsPerCall = 16

// grantSegmentShare: a grant takes at most 1/grantSegmentShare of its
// segment.
const grantSegmentShare = 8

// AcquireGrants reserves up to n grants for clientID, each on a distinct
// segment name not in exclude, each at least minBytes: GrantBytes where a
// segment has the room. It first takes back the grants in returns, as
// ReturnGrants does. A lack of space evicts once, as PutStart does; it
// returns at least one grant or NO_AVAILABLE_HANDLE. It also returns the
// client's grant generation. The client must be registered (a mount or
// remount), else CLIENT_NOT_FOUND; a master with grants off answers
// NOT_SUPPORTED.
func (s *Service) AcquireGrants(clientID string, n int, minBytes uint64, exclude []string, returns []uint64) (_ []GrantInfo, _ uint64, err error) {
	now := s.clock.Now()
	defer s.durable(&err)
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.checkLocked()
	s.returnGrantsLocked(clientID, returns)
	if s.cfg.DisableGrants {
		return nil, 0, fmt.Errorf("acquire grants: put grants are off: %w", wire.ErrNotSupported)
	}
	if n < 1 || n > maxGrantsPerCall || minBytes == 0 || alignedLen(minBytes) < minBytes {
		return nil, 0, fmt.Errorf("acquire grants (%d of %d bytes): %w", n, minBytes, wire.ErrInvalidParams)
	}
	c, ok := s.mu.clients[clientID]
	if !ok {
		return nil, 0, fmt.Errorf("acquire grants: client %q: %w", clientID, wire.ErrClientNotFound)
	}
	c.expiry = now.Add(s.cfg.ClientTTL)
	if err := s.fencedLocked(now); err != nil {
		return nil, c.grantGen, fmt.Errorf("acquire grants: %w", err)
	}
	s.unfenceLocked(now)
	if room := s.cfg.MaxGrantsPerClient - len(c.grants); n > room {
		if room <= 0 {
			return nil, c.grantGen, fmt.Errorf("acquire grants: client %q holds %d grants: %w",
				clientID, len(c.grants), wire.ErrNoAvailableHandle)
		}
		n = room
	}
	need := alignedLen(minBytes)
	out := s.grantLocked(c, n, need, exclude)
	fenced := s.anyFencedLocked() // nothing is evicted for want of fenced space
	if len(out) == 0 && fenced {
		return nil, c.grantGen, fmt.Errorf("acquire grants: %w", s.remountFencedErrLocked(now))
	}
	// Objects are evicted for a grant only when the client got none: a
	// client with some grants can put, and committed objects must not
	// make room for reservations nobody wrote into yet.
	if len(out) == 0 && !fenced && s.fitsSegmentExceptLocked(need, exclude) {
		target := max(uint64(s.cfg.EvictionRatio*float64(s.mu.capacity)), mulSat(need, uint64(n-len(out))))
		if s.evictLocked(target, now) > 0 {
			more := slices.Clone(exclude)
			for _, g := range out {
				more = append(more, g.SegmentName)
			}
			out = append(out, s.grantLocked(c, n-len(out), need, more)...)
		}
	}
	s.mu.counters.grantRequests++
	if len(out) == 0 {
		s.mu.counters.noSpace++
		s.mu.pressureUntil = now.Add(s.cfg.GrantLease)
		return nil, c.grantGen, fmt.Errorf("acquire grants: %d bytes in %d segments: %w",
			need, len(s.mu.order), wire.ErrNoAvailableHandle)
	}
	return out, c.grantGen, nil
}

// fitsSegmentExceptLocked reports whether some segment not named in
// exclude could hold need bytes once emptied: when the only segments with
// room are excluded (the client already holds grants on them, for other
// replicas), evicting objects frees nothing it could be granted.
func (s *Service) fitsSegmentExceptLocked(need uint64, exclude []string) bool {
	for _, seg := range s.mu.order {
		if need <= seg.info.Size && !slices.Contains(exclude, seg.info.Name) {
			return true
		}
	}
	return false
}

// grantLocked carves up to n grants of at least need bytes for c.
func (s *Service) grantLocked(c *clientState, n int, need uint64, exclude []string) []GrantInfo {
	var out []GrantInfo
	s.pickSegmentsLocked(n, nil, exclude, func(seg *segment) bool {
		size := max(min(s.cfg.GrantBytes, seg.info.Size/grantSegmentShare)&^(allocAlign-1), need)
		off, ok := seg.alloc.alloc(size)
		if !ok {
			// Less than a full grant, if the largest hole holds the object.
			size = seg.alloc.largestFree() &^ (allocAlign - 1)
			if size < need {
				return false
			}
			if off, ok = seg.alloc.alloc(size); !ok {
				return false
			}
		}
		s.mu.lastGrant++
		g := &grant{id: s.mu.lastGrant, client: c, seg: seg, off: off, size: size,
			free: []extent{{off, size}}, gen: c.grantGen}
		s.mu.grants[g.id] = g
		c.grants[g.id] = g
		seg.grants[g] = struct{}{}
		s.mu.used += size
		s.mu.granted += size
		s.mu.counters.grants++
		out = append(out, GrantInfo{ID: g.id, SegmentID: seg.info.ID, SegmentName: seg.info.Name,
			Protocol: seg.info.Protocol, Addr: seg.info.Base + off, Size: size})
		return true
	})
	return out
}

// PutCommit publishes an object of size bytes under key in tenant's
// namespace ("" is the default tenant) whose replicas
// clientID wrote into its grants, one replica per element of reps, on
// distinct segment names (at most max(cfg.ReplicaNum, 1)). Each replica
// must start on a 64-byte boundary of its segment and lie, with its
// aligned length, inside a part of its grant no earlier commit took; else
// INVALID_WRITE and nothing changes. Then the key rules of PutStart apply
// (OBJECT_ALREADY_EXISTS unless upsert; a zombie put is preempted), and the
// object is complete at once. It returns the client's grant generation.
func (s *Service) PutCommit(clientID, tenant, key string, size uint64, cfg ReplicateConfig, upsert bool, reps []GrantedReplica) (_ uint64, err error) {
	id, err := objectKeyOf(tenant, key)
	if err != nil {
		return 0, fmt.Errorf("put commit %q: %w", key, err)
	}
	g, err := groupOf(cfg)
	if err != nil {
		return 0, fmt.Errorf("put commit %q: %w", key, err)
	}
	now := s.clock.Now()
	defer s.durable(&err)
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.checkLocked()
	s.mu.counters.commits++
	gen, err := s.putCommitLocked(clientID, id, size, cfg, g, upsert, reps, now)
	if err != nil {
		s.mu.counters.commitFails++
	}
	return gen, err
}

func (s *Service) putCommitLocked(clientID string, id objectKey, size uint64, cfg ReplicateConfig, g groupChoice, upsert bool,
	reps []GrantedReplica, now time.Time) (uint64, error) {
	if id.key == "" || size == 0 || alignedLen(size) < size || cfg.ReplicaNum < 0 || len(reps) == 0 ||
		len(reps) > max(cfg.ReplicaNum, 1) {
		return 0, fmt.Errorf("put commit %v (size %d, %d replicas of %d): %w",
			id, size, len(reps), cfg.ReplicaNum, wire.ErrInvalidParams)
	}
	c, ok := s.mu.clients[clientID]
	if !ok {
		return 0, fmt.Errorf("put commit %v: client %q: %w", id, clientID, wire.ErrClientNotFound)
	}
	c.expiry = now.Add(s.cfg.ClientTTL)
	need := alignedLen(size)
	grants := make([]*grant, len(reps))
	for i, r := range reps {
		g, ok := c.grants[r.GrantID]
		if !ok {
			return c.grantGen, fmt.Errorf("put commit %v: client %q holds no grant %d: %w",
				id, clientID, r.GrantID, wire.ErrInvalidWrite)
		}
		// Overflow-free: r.Addr and size are the client's (holds never
		// adds an offset to a length).
		base := g.seg.info.Base
		if need > g.size || r.Addr < base || (r.Addr-base)%allocAlign != 0 || !g.holds(r.Addr-base, need) {
			return c.grantGen, fmt.Errorf("put commit %v: %d bytes at %#x are not free in grant %d [%#x, +%d): %w",
				id, need, r.Addr, g.id, base+g.off, g.size, wire.ErrInvalidWrite)
		}
		for _, h := range grants[:i] {
			if h.seg.info.Name == g.seg.info.Name {
				return c.grantGen, fmt.Errorf("put commit %v: two replicas on segment %q: %w",
					id, g.seg.info.Name, wire.ErrInvalidParams)
			}
		}
		grants[i] = g
	}
	if cfg.Versioned {
		if err := s.checkVersionLocked(id, cfg.ExpectedVersion); err != nil {
			return c.grantGen, err
		}
		upsert = true
	}
	if err := s.quotaLocked(id, size); err != nil {
		return c.grantGen, err
	}
	gid, err := s.effectiveGroupLocked(id, g, upsert)
	if err != nil {
		return c.grantGen, fmt.Errorf("put commit %v: %w", id, err)
	}
	if err := s.claimKeyLocked(id, upsert, now); err != nil {
		return c.grantGen, fmt.Errorf("put commit %v: %w", id, err)
	}
	var rec *objectRecord
	var out []*replica
	if len(reps) == 1 {
		rec = new(objectRecord)
		out = rec.reps[:]
	} else {
		out = make([]*replica, len(reps))
	}
	for i, g := range grants {
		off := reps[i].Addr - g.seg.info.Base
		g.take(off, need)
		s.mu.granted -= need
		var r *replica
		if rec != nil {
			r = s.initReplicaLocked(&rec.rep, g.seg, off, size)
		} else {
			r = s.newReplicaLocked(g.seg, off, size)
		}
		g.seg.replicas[r] = struct{}{}
		out[i] = r
	}
	var o *object
	if rec != nil {
		o = s.initObjectLocked(&rec.obj, clientID, id, size, out, cfg, gid, now)
	} else {
		o = s.newObjectLocked(clientID, id, size, out, cfg, gid, now)
	}
	s.completeLocked(o, now)
	return c.grantGen, nil
}

// holds reports whether [off, off+n) is wholly inside one free part, for
// any off and n (no sum of them can wrap).
func (g *grant) holds(off, n uint64) bool {
	if n > g.size {
		return false
	}
	for _, e := range g.free {
		if e.inside(off, n) {
			return true
		}
	}
	return false
}

// ReturnGrants frees what no commit took of the listed grants of clientID.
// Grants it does not hold (taken back already, or never its own) are
// ignored.
func (s *Service) ReturnGrants(clientID string, ids []uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.checkLocked()
	s.returnGrantsLocked(clientID, ids)
}

func (s *Service) returnGrantsLocked(clientID string, ids []uint64) {
	c, ok := s.mu.clients[clientID]
	if !ok {
		return
	}
	for _, id := range ids {
		if g, ok := c.grants[id]; ok {
			s.forgetGrantLocked(g)
			for _, e := range g.free {
				g.seg.alloc.release(e.off, e.len)
				s.mu.used -= e.len
			}
			s.mu.counters.grantReturns++
		}
	}
}

// forgetGrantLocked removes g from every index; its free parts are the
// caller's to release or fence.
func (s *Service) forgetGrantLocked(g *grant) {
	delete(s.mu.grants, g.id)
	delete(g.client.grants, g.id)
	delete(g.seg.grants, g)
	s.mu.granted -= g.freeBytes()
}

// takeBackGrantLocked takes g back without its client's word: the client
// learns it from its grant generation, and g's free parts are fenced for
// GrantLease.
func (s *Service) takeBackGrantLocked(g *grant, now time.Time) {
	s.forgetGrantLocked(g)
	s.mu.grantGen++
	g.client.grantGen = s.mu.grantGen
	until := now.Add(s.cfg.GrantLease)
	for _, e := range g.free {
		f := &fence{name: g.seg.info.Name, addr: g.seg.info.Base + e.off, len: e.len, until: until}
		if !g.seg.unmounted {
			f.seg, f.off, f.n = g.seg, e.off, e.len // stays allocated
		}
		s.mu.fences = append(s.mu.fences, f)
	}
	s.mu.counters.grantsTakenBack++
	s.log.Info("grant taken back", "client", g.client.id, "segment", g.seg.info.Name, "grant", g.id,
		"bytes", g.freeBytes())
}

// fenceMountedLocked applies to a newly mounted segment the fences that
// fall inside it: their parts are allocated until the fences end. A fence
// that reaches past the segment is split: the parts outside stay fences of
// their own, for a segment mounted there later. Fences are widened to
// allocation boundaries of the new base, so two that were apart may now
// share a block: those are merged into one fence held until the later of
// their ends, so every fenced byte stays allocated.
func (s *Service) fenceMountedLocked(seg *segment) {
	lo, hi := seg.info.Base, seg.info.Base+seg.info.Size
	// Bytes past the segment's last boundary are never allocated.
	limit := seg.info.Size &^ (allocAlign - 1)
	type held struct {
		f        *fence
		off, end uint64 // widened, relative to lo
	}
	var here []held
	var outside []*fence
	for _, f := range s.mu.fences {
		if f.seg != nil || f.name != seg.info.Name {
			continue
		}
		fend := f.addr + f.len
		a, b := max(f.addr, lo), min(fend, hi)
		if a >= b {
			continue
		}
		if f.addr < a {
			outside = append(outside, &fence{name: f.name, addr: f.addr, len: a - f.addr, until: f.until})
		}
		if b < fend {
			outside = append(outside, &fence{name: f.name, addr: b, len: fend - b, until: f.until})
		}
		f.addr, f.len = a, b-a
		off, end := (a-lo)&^(allocAlign-1), limit
		if b-lo < limit {
			end = alignedLen(b - lo) // <= limit: no overflow
		}
		if off < end {
			here = append(here, held{f, off, end})
		}
	}
	slices.SortFunc(here, func(x, y held) int { return cmp.Compare(x.off, y.off) })
	merged := make(map[*fence]bool)
	for i := 0; i < len(here); {
		h := here[i]
		first, last := h.f.addr, h.f.addr+h.f.len
		j := i + 1
		for ; j < len(here) && here[j].off < h.end; j++ {
			o := here[j]
			h.end = max(h.end, o.end)
			first, last = min(first, o.f.addr), max(last, o.f.addr+o.f.len)
			h.f.until = later(h.f.until, o.f.until)
			merged[o.f] = true
		}
		i = j
		h.f.addr, h.f.len = first, last-first
		if !seg.alloc.reserve(h.off, h.end-h.off) {
			// Cannot happen: the allocator is fresh and the merged ranges
			// are disjoint.
			s.log.Error("fence not held", "segment", seg.info.Name, "off", h.off, "bytes", h.end-h.off)
			continue
		}
		h.f.seg, h.f.off, h.f.n = seg, h.off, h.end-h.off
		s.mu.used += h.f.n
	}
	if len(merged) > 0 {
		s.mu.fences = slices.DeleteFunc(s.mu.fences, func(f *fence) bool { return merged[f] })
	}
	s.mu.fences = append(s.mu.fences, outside...)
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// releaseFencesLocked ends the fences whose time has come.
func (s *Service) releaseFencesLocked(now time.Time) {
	s.mu.fences = slices.DeleteFunc(s.mu.fences, func(f *fence) bool {
		if f.until.After(now) {
			return false
		}
		if f.seg != nil && !f.seg.unmounted {
			f.seg.alloc.release(f.off, f.n)
			s.mu.used -= f.n
		}
		return true
	})
}

// unfenceLocked ends the remount fence once its time has come.
func (s *Service) unfenceLocked(now time.Time) {
	if s.mu.remountFence.IsZero() || now.Before(s.mu.remountFence) {
		return
	}
	s.mu.remountFence = time.Time{}
	s.mu.remounting = nil
	for _, c := range s.mu.clients {
		c.previous = false
	}
	for _, seg := range s.mu.order {
		seg.fenced = false
	}
}

// anyFencedLocked reports whether a mounted segment is under the remount
// fence (unfenceLocked ran at now).
func (s *Service) anyFencedLocked() bool {
	for _, seg := range s.mu.order {
		if seg.fenced {
			return true
		}
	}
	return false
}

// remountFencedErrLocked is the error of an allocation that found no room
// outside the segments under the remount fence: the client asks again.
func (s *Service) remountFencedErrLocked(now time.Time) error {
	return fmt.Errorf("restarted master allocates nothing for %v in the segments of its predecessor's clients "+
		"(their grants): %w", s.mu.remountFence.Sub(now).Round(time.Millisecond), wire.ErrUnavailableInStatus)
}

// fencedLocked fails while a new HA leader waits out its predecessor's
// grants.
func (s *Service) fencedLocked(now time.Time) error {
	if now.Before(s.mu.allocFence) {
		return fmt.Errorf("new master allocates nothing for %v (grants of its predecessor): %w",
			s.mu.allocFence.Sub(now).Round(time.Millisecond), wire.ErrUnavailableInStatus)
	}
	return nil
}

// completeLocked makes o readable.
func (s *Service) completeLocked(o *object, now time.Time) {
	o.complete = true
	delete(s.mu.processing, o.id)
	if o.softPinTTL > 0 {
		o.softPinExpiry = now.Add(o.softPinTTL)
	}
	if o.uid == 0 {
		s.mu.lastUID++
		o.uid = s.mu.lastUID
	}
	o.version = s.nextVersionLocked(now)
	s.mu.lru.touch(o)
	s.logObjectLocked(o)
	s.publishedLocked(o.id)
}

func sortedGrants(m map[*grant]struct{}) []*grant {
	out := make([]*grant, 0, len(m))
	for g := range m {
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b *grant) int { return cmp.Compare(a.id, b.id) })
	return out
}

func sortedGrantsByID(m map[uint64]*grant) []*grant {
	out := make([]*grant, 0, len(m))
	for _, g := range m {
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b *grant) int { return cmp.Compare(a.id, b.id) })
	return out
}
