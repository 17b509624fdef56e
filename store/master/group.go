package master

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/kvferry/kvferry/store/wire"
)

// Groups (Mooncake's ReplicateConfig.group_ids): a put may name a group
// for each of its keys; the objects of one group (in one tenant) share
// their lifecycle:
//   - a read lease granted to any member (GetReplicaList, ExistKey) covers
//     every member that joined before it, so a reader of part of a group
//     keeps the whole group from removal and eviction (Mooncake grants the
//     lease to each member; here the group holds it, with the same effect
//     at O(1) per read);
//   - eviction takes a group as a whole: it skips every member while any
//     member is leased, and when it picks one it evicts every member it
//     may (not hard-pinned, complete, soft-pinned only in the pass that
//     allows them);
//   - membership is fixed while the object exists: an upsert that names a
//     different group fails with INVALID_PARAMS, one that names none keeps
//     the object's group.
// A group never changes where replicas are placed (Mooncake's allocation
// strategies never see it; it only routes its members' metadata to one
// shard there). A group exists while it has members.

// groupKey names a group: a group id in one tenant.
type groupKey struct {
	tenant string
	id     string
}

// objGroup is a group with at least one member.
type objGroup struct {
	key     groupKey
	members map[*object]struct{}
	// seq counts joins and lease grants; a member is covered by the group
	// lease when it joined before the last grant (joinSeq < leaseSeq).
	seq         uint64
	leaseSeq    uint64
	leaseExpiry time.Time
}

// groupChoice is what a put says about one key's group.
type groupChoice struct {
	id  string // "" is ungrouped
	set bool   // the put named one (ReplicateConfig.GroupIDs non-nil)
}

// groupsOf returns the group choice of each of n keys of a call, or
// INVALID_PARAMS when cfg names groups but not exactly one per key.
func groupsOf(cfg ReplicateConfig, n int) ([]groupChoice, error) {
	out := make([]groupChoice, n)
	if cfg.GroupIDs == nil {
		return out, nil
	}
	if len(cfg.GroupIDs) != n {
		return nil, fmt.Errorf("%d group ids for %d keys: %w", len(cfg.GroupIDs), n, wire.ErrInvalidParams)
	}
	for i, g := range cfg.GroupIDs {
		out[i] = groupChoice{id: g, set: true}
	}
	return out, nil
}

// groupOf is groupsOf for a call of one key (without a list).
func groupOf(cfg ReplicateConfig) (groupChoice, error) {
	if cfg.GroupIDs == nil {
		return groupChoice{}, nil
	}
	if len(cfg.GroupIDs) != 1 {
		return groupChoice{}, fmt.Errorf("%d group ids for 1 key: %w", len(cfg.GroupIDs), wire.ErrInvalidParams)
	}
	return groupChoice{id: cfg.GroupIDs[0], set: true}, nil
}

// effectiveGroupLocked returns the group a new object under id gets: an
// upsert over a complete object keeps that object's group, and fails with
// INVALID_PARAMS when the put names another; otherwise the put's choice.
func (s *Service) effectiveGroupLocked(id objectKey, g groupChoice, upsert bool) (string, error) {
	o, ok := s.mu.objects[id]
	if !upsert || !ok || !o.complete {
		return g.id, nil
	}
	cur := o.groupID()
	if g.set && g.id != cur {
		return "", fmt.Errorf("object %v is in group %q, not %q (membership is fixed while it exists): %w",
			id, cur, g.id, wire.ErrInvalidParams)
	}
	return cur, nil
}

// groupID returns o's group id, "" when ungrouped.
func (o *object) groupID() string {
	if o.group == nil {
		return ""
	}
	return o.group.key.id
}

// joinGroupLocked makes o a member of group gid of its tenant ("" is no
// group).
func (s *Service) joinGroupLocked(o *object, gid string) {
	if gid == "" {
		return
	}
	k := groupKey{tenant: o.id.tenant, id: gid}
	g, ok := s.mu.groups[k]
	if !ok {
		g = &objGroup{key: k, members: make(map[*object]struct{})}
		s.mu.groups[k] = g
	}
	g.members[o] = struct{}{}
	g.seq++
	o.group, o.joinSeq = g, g.seq
}

// leaveGroupLocked removes o from its group; the group goes with its last
// member.
func (s *Service) leaveGroupLocked(o *object) {
	g := o.group
	if g == nil {
		return
	}
	delete(g.members, o)
	if len(g.members) == 0 && s.mu.groups[g.key] == g {
		delete(s.mu.groups, g.key)
	}
	o.group = nil
}

// leaseGroupLocked grants the group of o a read lease until expiry: it
// covers every member that joined before now.
func leaseGroupLocked(o *object, expiry time.Time) {
	g := o.group
	if g == nil {
		return
	}
	g.seq++
	g.leaseSeq = g.seq
	if expiry.After(g.leaseExpiry) {
		g.leaseExpiry = expiry
	}
}

// leaseEnd is the end of o's read lease: its own, or its group's when that
// covers it and lasts longer.
func (o *object) leaseEnd() time.Time {
	end := o.leaseExpiry
	if g := o.group; g != nil && o.joinSeq < g.leaseSeq && g.leaseExpiry.After(end) {
		end = g.leaseExpiry
	}
	return end
}

// groupLeasedLocked reports whether any member of g is leased at now.
func groupLeasedLocked(g *objGroup, now time.Time) bool {
	for m := range g.members {
		if m.leaseEnd().After(now) {
			return true
		}
	}
	return false
}

// evictableMembers returns the members of g that eviction may take at now,
// least recently used first: complete, in memory only (a disk replica's
// object loses only its memory, in eviction's first pass), not
// hard-pinned, leased or busy, and soft-pinned only with softPinned.
func evictableMembers(g *objGroup, now time.Time, softPinned bool) []*object {
	var out []*object
	for m := range g.members {
		if !m.complete || m.hardPin || m.leaseEnd().After(now) || m.busyUntil.After(now) || len(m.disk) > 0 ||
			len(m.replicas) == 0 || (!softPinned && m.softPinExpiry.After(now)) {
			continue
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b *object) int { return cmp.Compare(a.lastAccess, b.lastAccess) })
	return out
}
