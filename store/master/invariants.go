package master

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/kvferry/kvferry/internal/invariants"
)

// checkLocked verifies the space bookkeeping when built with the
// invariants tag and panics on a broken invariant (a bug of this package):
// in every mounted segment the replicas (live or discarded), the free parts
// of grants, the fences and the allocator's free list tile the segment
// exactly, so no two live objects overlap and objects plus grants never
// exceed a segment; every count (used, granted, capacity) matches; every
// object's replicas are indexed in their segments; every grant is indexed
// by its client and segment; every replica has a tag no other has. Without
// the tag it compiles to nothing.
func (s *Service) checkLocked() {
	if !invariants.Enabled {
		return
	}
	if err := s.verifyLocked(); err != nil {
		panic("store master invariant: " + err.Error())
	}
}

type owned struct {
	off, len uint64
	what     string
}

func (s *Service) verifyLocked() error {
	var used, capacity, granted uint64
	tags := make(map[uint64]bool)
	for _, seg := range s.mu.order {
		if seg.unmounted || s.mu.segments[seg.info.ID] != seg {
			return fmt.Errorf("segment %q in order but not mounted", seg.info.ID)
		}
		capacity += seg.info.Size
		used += seg.alloc.used
		var parts []owned
		for r := range seg.replicas {
			if r.seg != seg {
				return fmt.Errorf("replica in segment %q points at %q", seg.info.ID, r.seg.info.ID)
			}
			if r.tag == 0 || tags[r.tag] {
				return fmt.Errorf("replica at %q+%d: tag %d zero or not its own", seg.info.ID, r.off, r.tag)
			}
			tags[r.tag] = true
			what := "discarded replica"
			if r.obj != nil {
				what = "replica of " + r.obj.id.String()
			}
			parts = append(parts, owned{r.off, alignedLen(r.size), what})
		}
		for g := range seg.grants {
			if s.mu.grants[g.id] != g || g.client.grants[g.id] != g || g.seg != seg {
				return fmt.Errorf("grant %d of segment %q not indexed", g.id, seg.info.ID)
			}
			granted += g.freeBytes()
			for _, e := range g.free {
				if e.off < g.off || e.off+e.len > g.off+g.size || e.len == 0 || e.len%allocAlign != 0 {
					return fmt.Errorf("grant %d: free part [%d, +%d) outside [%d, +%d) or unaligned",
						g.id, e.off, e.len, g.off, g.size)
				}
				parts = append(parts, owned{e.off, e.len, fmt.Sprintf("grant %d", g.id)})
			}
		}
		for _, f := range s.mu.fences {
			if f.seg == seg {
				parts = append(parts, owned{f.off, f.n, "fence"})
			}
		}
		var free uint64
		for _, e := range seg.alloc.free {
			parts = append(parts, owned{e.off, e.len, "free"})
			free += e.len
		}
		if seg.alloc.used != seg.info.Size-free {
			return fmt.Errorf("segment %q: used %d, size %d, free %d", seg.info.ID, seg.alloc.used, seg.info.Size, free)
		}
		slices.SortFunc(parts, func(a, b owned) int { return cmp.Compare(a.off, b.off) })
		var at uint64
		for _, p := range parts {
			if p.off != at {
				if p.off < at {
					return fmt.Errorf("segment %q: %s at [%d, +%d) overlaps what ends at %d", seg.info.ID, p.what, p.off, p.len, at)
				}
				return fmt.Errorf("segment %q: bytes [%d, %d) owned by nothing (next: %s)", seg.info.ID, at, p.off, p.what)
			}
			at = p.off + p.len
		}
		if at != seg.info.Size {
			return fmt.Errorf("segment %q: parts end at %d, size %d", seg.info.ID, at, seg.info.Size)
		}
	}
	if len(s.mu.order) != len(s.mu.segments) {
		return fmt.Errorf("%d segments in order, %d by id", len(s.mu.order), len(s.mu.segments))
	}
	if used != s.mu.used || capacity != s.mu.capacity || granted != s.mu.granted {
		return fmt.Errorf("counts: used %d (sum %d), capacity %d (sum %d), granted %d (sum %d)",
			s.mu.used, used, s.mu.capacity, capacity, s.mu.granted, granted)
	}
	nGrants := 0
	for _, c := range s.mu.clients {
		nGrants += len(c.grants)
		for _, g := range c.grants {
			if _, ok := g.seg.grants[g]; !ok || g.seg.unmounted {
				return fmt.Errorf("grant %d of client %q not in a mounted segment", g.id, c.id)
			}
		}
	}
	if nGrants != len(s.mu.grants) {
		return fmt.Errorf("%d grants by client, %d by id", nGrants, len(s.mu.grants))
	}
	perTenant := map[string][2]uint64{}
	for _, o := range s.mu.objects {
		c := perTenant[o.id.tenant]
		perTenant[o.id.tenant] = [2]uint64{c[0] + 1, c[1] + o.size}
	}
	for t, ts := range s.mu.tenants {
		if c := perTenant[t]; c[0] != ts.objects || c[1] != ts.bytes {
			return fmt.Errorf("tenant %q: counted %d objects, %d bytes; holds %d, %d", t, ts.objects, ts.bytes, c[0], c[1])
		}
		delete(perTenant, t)
	}
	if len(perTenant) > 0 {
		return fmt.Errorf("objects of uncounted tenants: %v", perTenant)
	}
	for k, o := range s.mu.objects {
		if o.id != k {
			return fmt.Errorf("object %v indexed as %v", o.id, k)
		}
		if len(o.replicas) == 0 && len(o.pending) == 0 && len(o.disk) == 0 {
			return fmt.Errorf("object %v has no replica", k)
		}
		for _, d := range o.disk {
			if d.seg.unmounted || d.seg.reps[o] != d {
				return fmt.Errorf("object %v: disk replica not indexed in a mounted disk segment", k)
			}
		}
		for _, p := range o.pending {
			a, ok := s.mu.awaiting[p.segID]
			if !ok {
				return fmt.Errorf("object %v: restored replica on segment %q, which is not awaited", k, p.segID)
			}
			if _, ok := a.objs[o]; !ok {
				return fmt.Errorf("object %v: restored replica not indexed in awaited segment %q", k, p.segID)
			}
		}
		for _, r := range o.replicas {
			if _, ok := r.seg.replicas[r]; !ok || r.obj != o || r.seg.unmounted {
				return fmt.Errorf("replica of %v not indexed in a mounted segment", k)
			}
		}
		if _, ok := s.mu.processing[k]; ok == o.complete {
			return fmt.Errorf("object %v: complete %v, processing %v", k, o.complete, ok)
		}
		if want := o.complete && len(o.replicas) > 0; want != o.inLRU {
			return fmt.Errorf("object %v: complete %v with %d replicas, in LRU %v", k, o.complete, len(o.replicas), o.inLRU)
		}
		if g := o.group; g != nil {
			if _, ok := g.members[o]; !ok || s.mu.groups[g.key] != g || g.key.tenant != k.tenant {
				return fmt.Errorf("object %v: not a member of its indexed group %q", k, g.key.id)
			}
		}
	}
	for k, g := range s.mu.groups {
		if g.key != k || len(g.members) == 0 {
			return fmt.Errorf("group %q of tenant %q: key %v, %d members", k.id, k.tenant, g.key, len(g.members))
		}
		for m := range g.members {
			if m.group != g || s.mu.objects[m.id] != m {
				return fmt.Errorf("group %q: member %v is not an indexed object of it", k.id, m.id)
			}
		}
	}
	return nil
}
