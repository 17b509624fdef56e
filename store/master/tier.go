package master

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/kvferry/kvferry/store/wire"
)

// The disk tier (Mooncake's LOCAL_DISK replicas; specs/mooncake.md §7.3).
//
// A client with a disk tier (an SSD directory) mounts it with
// MountDiskSegment. Once one of its memory segments is fuller than
// OffloadWatermark, the master hands it OFFLOAD tasks for the least
// recently used complete objects whose replica lies in that segment: the
// client writes the bytes to a checksummed file, and the object gains a
// LOCAL_DISK replica on that client. Eviction takes objects that have a
// disk replica first and drops only their memory replicas: the object
// stays, readable from disk. A read that finds no memory replica asks for
// a promotion (PromoteObject): the master allocates space in the disk
// holder's memory segment and hands it a LOAD task; once the file is read
// back (and its checksum verified) the object has a memory replica again.
// Removing or replacing an object deletes its files (DELETE tasks).
//
// A client that restarts finds its files and announces the intact ones
// with MountDiskSegment: an object the master still has under the same
// version (uid) gains the disk replica; one it no longer knows (dropped
// with the dead client, or a master restart) comes back from disk; a file
// of a version that was replaced meanwhile is deleted. While a holder is
// away the master remembers which objects its files hold (awayFiles); a
// remove or an upsert of one of them meanwhile (or a new put of its key)
// leaves a tombstone, and the returning holder is told to delete that file
// instead of offering it. Tombstones live in the master's memory only: a
// master restarted while a holder is away does not have them.
//
// Disk replicas are not in the operation log: after a master restart the
// holders announce them again, like memory segments are remounted.

// Disk tier tunables.
const (
	// DefaultOffloadWatermark is the memory segment usage above which
	// objects in it are offloaded to its client's disk tier.
	DefaultOffloadWatermark = 0.7
	// maxOffloadsPerClient bounds the OFFLOAD tasks one client has at once.
	maxOffloadsPerClient = 8
	// offloadScan bounds the LRU entries looked at per scheduling round.
	offloadScan = 4096
	// offloadWalk bounds the LRU entries walked per round, those only on
	// disk included.
	offloadWalk = 16 * offloadScan
)

// DiskSegmentInfo describes a client's disk tier.
type DiskSegmentInfo struct {
	ID       string
	Name     string // the client's transfer-engine segment name
	Path     string
	Capacity uint64
	ClientID string
	// UsedBytes is filled in by the master in views.
	UsedBytes uint64
}

// diskSeg is a mounted disk tier.
type diskSeg struct {
	info      DiskSegmentInfo
	client    *clientState
	used      uint64 // file bytes of its replicas, and reserved for offloads in flight
	reps      map[*object]*diskReplica
	unmounted bool
}

// diskReplica is an object's file on a disk tier.
type diskReplica struct {
	seg       *diskSeg
	fileBytes uint64
}

// DiskEntry is an object whose file a disk tier announces.
type DiskEntry struct {
	Tenant    string
	Key       string
	UID       uint64
	Size      uint64
	FileBytes uint64
}

// diskFileBytes is what a file of size bytes takes (a 4 KiB header, the
// data rounded up to 4 KiB): the reservation of an offload.
func diskFileBytes(size uint64) uint64 {
	return 4096 + (size+4095)&^4095
}

// MountDiskSegment mounts clientID's disk tier (again) and adds the
// replicas of entries. It returns the indexes of the entries whose files
// are stale, which the client deletes.
func (s *Service) MountDiskSegment(clientID string, info DiskSegmentInfo, entries []DiskEntry) (_ []int, err error) {
	if clientID == "" || info.ID == "" || info.Name == "" || info.Capacity == 0 {
		return nil, fmt.Errorf("mount disk segment %q of %q (capacity %d): %w", info.ID, clientID, info.Capacity, wire.ErrInvalidParams)
	}
	now := s.clock.Now()
	defer s.durable(&err)
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.checkLocked()
	c := s.touchClientLocked(clientID, now)
	d := c.disk
	if d == nil || d.info.ID != info.ID {
		if d != nil {
			s.unmountDiskLocked(d)
		}
		// The same tier under an older client (this client restarted
		// before the master expired its previous self).
		for _, other := range s.mu.clients {
			if other.disk != nil && other.disk.info.ID == info.ID {
				s.unmountDiskLocked(other.disk)
			}
		}
		info.ClientID = clientID
		d = &diskSeg{info: info, client: c, reps: make(map[*object]*diskReplica)}
		c.disk = d
		s.log.Info("disk segment mounted", "client", clientID, "segment", info.Name, "path", info.Path, "bytes", info.Capacity)
	}
	var drop []int
	added := 0
	for i, e := range entries {
		id, err := objectKeyOf(e.Tenant, e.Key)
		if err != nil || e.Size == 0 || e.UID == 0 {
			drop = append(drop, i)
			continue
		}
		if uid, ok := s.mu.awayFiles[id]; ok && uid == e.UID {
			delete(s.mu.awayFiles, id) // its holder is back
		}
		if uid, ok := s.mu.tombstones[id]; ok && uid == e.UID {
			delete(s.mu.tombstones, id)
			drop = append(drop, i) // removed or replaced while its holder was away
			continue
		}
		o, ok := s.mu.objects[id]
		switch {
		case ok && o.complete && o.uid == e.UID && o.size == e.Size:
			if _, has := d.reps[o]; !has {
				s.addDiskReplicaLocked(o, d, e.FileBytes, 0)
				added++
			}
		case ok:
			drop = append(drop, i) // replaced (or being written) meanwhile
		default:
			o = &object{id: id, size: e.Size, complete: true, putStart: now, uid: e.UID}
			s.mu.objects[id] = o
			s.chargeLocked(o)
			s.addDiskReplicaLocked(o, d, e.FileBytes, 0)
			added++
		}
	}
	if added > 0 || len(drop) > 0 {
		s.log.Info("disk replicas announced", "client", clientID, "added", added, "stale", len(drop))
	}
	return drop, nil
}

// addDiskReplicaLocked records o's file on d; reserved bytes of d were
// set aside for it already.
func (s *Service) addDiskReplicaLocked(o *object, d *diskSeg, fileBytes, reserved uint64) {
	if fileBytes == 0 {
		fileBytes = diskFileBytes(o.size)
	}
	d.used += fileBytes - reserved
	dr := &diskReplica{seg: d, fileBytes: fileBytes}
	d.reps[o] = dr
	o.disk = append(o.disk, dr)
}

// unmountDiskLocked drops a disk tier with its replicas (its client went
// away; the files stay on its disk for a restart to announce).
func (s *Service) unmountDiskLocked(d *diskSeg) {
	d.unmounted = true
	if d.client.disk == d {
		d.client.disk = nil
	}
	for o := range d.reps {
		o.disk = slices.DeleteFunc(o.disk, func(x *diskReplica) bool { return x.seg == d })
		if len(o.replicas) == 0 && len(o.disk) == 0 && len(o.pending) == 0 && s.mu.objects[o.id] == o {
			s.forgetObjectLocked(o)
		}
	}
	if s.mu.awayFiles == nil {
		s.mu.awayFiles = make(map[objectKey]uint64)
	}
	for o := range d.reps {
		if len(s.mu.awayFiles) >= maxAwayFiles {
			s.log.Warn("disk tier: too many files of away holders to track; a remove meanwhile may not reach them",
				"limit", maxAwayFiles)
			break
		}
		s.mu.awayFiles[o.id] = o.uid
	}
	clear(d.reps)
	s.log.Info("disk segment unmounted", "client", d.info.ClientID, "segment", d.info.Name)
}

// maxAwayFiles bounds awayFiles and tombstones (each).
const maxAwayFiles = 1 << 20

// supersedeAwayLocked records that the file of id on an away disk tier, if
// any, is stale (its object was removed or replaced): the holder deletes
// it when it mounts its tier again. It reports whether there was one.
func (s *Service) supersedeAwayLocked(id objectKey) bool {
	uid, ok := s.mu.awayFiles[id]
	if !ok {
		return false
	}
	delete(s.mu.awayFiles, id)
	if s.mu.tombstones == nil {
		s.mu.tombstones = make(map[objectKey]uint64)
	}
	if len(s.mu.tombstones) < maxAwayFiles {
		s.mu.tombstones[id] = uid
	}
	return true
}

// dropDiskReplicasLocked deletes o's files (o is being removed).
func (s *Service) dropDiskReplicasLocked(o *object, now time.Time) {
	for _, dr := range o.disk {
		d := dr.seg
		if d.unmounted {
			continue
		}
		delete(d.reps, o)
		d.used -= dr.fileBytes
		s.deleteFileLocked(d, o.id, o.uid, now)
	}
	o.disk = nil
}

// deleteFileLocked asks d's client to delete the file of (oid, uid).
func (s *Service) deleteFileLocked(d *diskSeg, oid objectKey, uid uint64, now time.Time) {
	s.queueTaskLocked(&task{client: d.client, kind: wire.TaskKind_TASK_KIND_DELETE, oid: oid, uid: uid, disk: d}, now)
}

// scheduleOffloadsLocked hands out OFFLOAD tasks to the clients with a
// disk tier whose memory segments are above the watermark.
func (s *Service) scheduleOffloadsLocked(now time.Time) {
	full := map[*clientState]int{} // clients wanting offloads: how many more
	for _, c := range s.mu.clients {
		d := c.disk
		if d == nil || d.used >= d.info.Capacity {
			continue
		}
		n := maxOffloadsPerClient
		for _, t := range c.tasks {
			if t.kind == wire.TaskKind_TASK_KIND_OFFLOAD {
				n--
			}
		}
		if n <= 0 {
			continue
		}
		for _, seg := range c.segments {
			if float64(seg.alloc.used) >= s.cfg.OffloadWatermark*float64(seg.info.Size) {
				full[c] = n
				break
			}
		}
	}
	if len(full) == 0 {
		return
	}
	scanned, walked := 0, 0
	for o := s.mu.lru.head; o != nil && scanned < offloadScan && walked < offloadWalk && len(full) > 0; o = o.next {
		walked++
		if o.offloading || len(o.disk) > 0 || len(o.replicas) == 0 || now.Before(o.noOffloadUntil) {
			continue // (objects only on disk do not count against the scan)
		}
		scanned++
		for _, r := range o.replicas {
			c := s.mu.clients[r.seg.info.ClientID]
			n, ok := full[c]
			if !ok {
				continue
			}
			d := c.disk
			need := diskFileBytes(o.size)
			if d.used+need > d.info.Capacity {
				delete(full, c)
				break
			}
			d.used += need
			o.offloading = true
			s.queueTaskLocked(&task{client: c, kind: wire.TaskKind_TASK_KIND_OFFLOAD, obj: o, oid: o.id, uid: o.uid,
				size: o.size, src: r.seg.info.Base + r.off, disk: d, reserved: need}, now)
			if n--; n == 0 {
				delete(full, c)
			} else {
				full[c] = n
			}
			break
		}
	}
}

// awaitingFileLocked reports whether o, a complete object with memory
// replicas and no disk replica, is to be written to a disk tier soon: an
// offload is in flight, or one of its replicas lies in the segment of a
// client whose disk tier has room for it (and no offload of o failed
// lately). Eviction never drops such an object: once its file is written
// eviction drops only its memory (pass 0), and until then a put that needs
// the room is asked to retry (backpressure, putStartLocked). An object no
// disk tier can take (none mounted, full, or failing) is evicted as
// without the tier.
func (s *Service) awaitingFileLocked(o *object, now time.Time) bool {
	if len(o.disk) > 0 || !o.complete || len(o.replicas) == 0 {
		return false
	}
	if o.offloading {
		return true
	}
	if now.Before(o.noOffloadUntil) {
		return false
	}
	need := diskFileBytes(o.size)
	for _, r := range o.replicas {
		if r.seg == nil {
			continue
		}
		c := s.mu.clients[r.seg.info.ClientID]
		if c != nil && c.disk != nil && !c.disk.unmounted && c.disk.used+need <= c.disk.info.Capacity {
			return true
		}
	}
	return false
}

// groupAwaitingFilesLocked reports whether a member of g awaits its file
// (a group is evicted as a whole).
func (s *Service) groupAwaitingFilesLocked(g *objGroup, now time.Time) bool {
	for m := range g.members {
		if s.awaitingFileLocked(m, now) {
			return true
		}
	}
	return false
}

// dropMemoryLocked takes an object that has a disk replica out of memory
// (eviction): its memory replicas are freed, the object stays, readable
// from disk. It returns the bytes freed.
func (s *Service) dropMemoryLocked(o *object, now time.Time) uint64 {
	var freed uint64
	for _, r := range slices.Clone(o.replicas) {
		freed += alignedLen(r.size)
		s.dropReplicaLocked(o, r, now)
	}
	// In the log the object is gone: after a master restart its disk
	// holder announces it again.
	s.logLocked(encodeRemove(o.id))
	return freed
}

// PromoteObject returns the memory replicas of an object, bringing it back
// from a disk replica first when it has none in memory: space in the disk
// holder's memory segment (evicting if needed), a LOAD task, and a wait
// for it (bounded by ctx and the task timeout).
func (s *Service) PromoteObject(ctx context.Context, tenant, key string) (ReplicaList, error) {
	id, err := objectKeyOf(tenant, key)
	if err != nil {
		return ReplicaList{}, fmt.Errorf("promote %q: %w", key, err)
	}
	now := s.clock.Now()
	s.mu.Lock()
	o, ok := s.mu.objects[id]
	if !ok || !o.complete {
		s.mu.Unlock()
		return ReplicaList{}, fmt.Errorf("promote %v: %w", id, wire.ErrObjectNotFound)
	}
	t := o.loading
	if len(o.replicas) == 0 && t == nil {
		t, err = s.startLoadLocked(o, now)
		if err != nil {
			s.mu.Unlock()
			return ReplicaList{}, fmt.Errorf("promote %v: %w", id, err)
		}
	}
	s.checkLocked()
	s.mu.Unlock()
	s.flushLog()
	if t == nil {
		return s.GetReplicaList(tenant, key)
	}
	select {
	case <-t.done:
	case <-ctx.Done():
		return ReplicaList{}, fmt.Errorf("promote %v: %v: %w", id, ctx.Err(), wire.ErrRPCTimeout)
	}
	if t.err != nil {
		return ReplicaList{}, fmt.Errorf("promote %v: %w", id, t.err)
	}
	// The copy in memory is a cache of the file for this read: it is
	// leased for promotedLease only, so that a reader going through many
	// objects on disk does not fill memory with leased copies that no
	// further promotion could evict.
	now = s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok = s.mu.objects[id]
	if !ok || !o.complete || len(o.replicas) == 0 {
		return ReplicaList{}, fmt.Errorf("promote %v: evicted or removed right after its load: %w", id, wire.ErrReplicaIsNotReady)
	}
	ttl := min(s.cfg.DefaultKVLeaseTTL, promotedLease)
	s.mu.counters.gets++
	s.mu.counters.getHits++
	s.leaseForLocked(o, now, ttl)
	return ReplicaList{Size: o.size, Replicas: o.descriptors(), LeaseTTL: ttl, UID: o.uid, Version: o.version}, nil
}

// promotedLease is the read lease of an object promoted for a read.
const promotedLease = 2 * time.Second

// startLoadLocked allocates space for o in the memory segment of one of
// its disk holders and hands that holder a LOAD task.
func (s *Service) startLoadLocked(o *object, now time.Time) (*task, error) {
	for _, dr := range o.disk {
		c := dr.seg.client
		for _, name := range s.segmentNamesOfLocked(c) {
			dst := s.allocOnLocked(name, o.size)
			if dst == nil {
				// Make room, then try once more.
				if s.evictLocked(max(uint64(s.cfg.EvictionRatio*float64(s.mu.capacity)), alignedLen(o.size)), now) > 0 {
					dst = s.allocOnLocked(name, o.size)
				}
			}
			if dst == nil {
				continue
			}
			t := &task{client: c, kind: wire.TaskKind_TASK_KIND_LOAD, obj: o, oid: o.id, uid: o.uid, size: o.size, dst: dst}
			o.loading = t
			s.queueTaskLocked(t, now)
			return t, nil
		}
	}
	if len(o.disk) == 0 {
		return nil, wire.ErrReplicaIsNotReady
	}
	return nil, fmt.Errorf("no room for %d bytes in the memory of its disk holders: %w", o.size, wire.ErrNoAvailableHandle)
}

// segmentNamesOfLocked returns the names of c's mounted segments.
func (s *Service) segmentNamesOfLocked(c *clientState) []string {
	var out []string
	for _, seg := range c.segments {
		if !slices.Contains(out, seg.info.Name) {
			out = append(out, seg.info.Name)
		}
	}
	slices.Sort(out)
	return out
}

// DiskSegments returns the mounted disk tiers.
func (s *Service) DiskSegments() []DiskSegmentInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []DiskSegmentInfo
	for _, c := range s.mu.clients {
		if c.disk != nil {
			info := c.disk.info
			info.UsedBytes = c.disk.used
			out = append(out, info)
		}
	}
	slices.SortFunc(out, func(a, b DiskSegmentInfo) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return out
}
