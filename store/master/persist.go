package master

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/kvferry/kvferry/store/oplog"
)

// Persistence (an operation log plus snapshots, store/oplog).
//
// What the log says: which segments exist (their id, owner, name and
// absolute range) and which complete objects exist, each with its
// replicas as (segment id, offset, size). A restarted master (or a new HA
// leader) replays it and knows every committed object, but none of the
// segments is mounted: its clients remount them when Ping answers
// NEED_REMOUNT, each with the id and range it had. A remounted segment
// gets its restored replicas back (their ranges reserved in it before
// anything else is allocated there) and their objects are readable again
// at once, without any client putting anything again. Until then a
// restored object exists (a put of its key is OBJECT_ALREADY_EXISTS) but
// has no readable replica (reads answer REPLICA_IS_NOT_READY). A segment
// that does not come back within RestoreWindow is dropped with its
// replicas, and objects left with none are dropped (their holder died with
// the old master, or came back as a new client).
//
// Leases, the LRU order, unfinished puts, grants and fences are runtime
// state and not logged: an unfinished put fails at PutEnd (OBJECT_NOT_FOUND)
// and a grant at its next commit, as they did without persistence.
//
// Ordering: records are queued under the Service lock, and every mutating
// call answers after the journal stored them (journal.go). So an
// acknowledged put is in the log, and a removal (eviction, upsert,
// remove, an unmount) is stored before the space it freed is handed out
// again by any answer: a replayed object never points at memory that a
// later committed object was written to.

// Record kinds.
const (
	recSegMount byte = 1
	recSegGone  byte = 2
	recObject   byte = 3
	recRemove   byte = 4
)

// Default persistence tunables.
const (
	// DefaultSnapshotRecords: a snapshot is taken after this many records.
	DefaultSnapshotRecords = 100_000
	// DefaultSnapshotInterval: a snapshot is taken at least this often
	// while records were added.
	DefaultSnapshotInterval = 5 * time.Minute
)

// pendingReplica is a restored replica whose segment has not been
// remounted yet.
type pendingReplica struct {
	segID     string
	off, size uint64
}

// awaited is a logged segment not mounted since the restart.
type awaited struct {
	info SegmentInfo
	objs map[*object]struct{}
}

type encoder struct{ b []byte }

func (e *encoder) byte(v byte)     { e.b = append(e.b, v) }
func (e *encoder) uint(v uint64)   { e.b = binary.AppendUvarint(e.b, v) }
func (e *encoder) string(v string) { e.uint(uint64(len(v))); e.b = append(e.b, v...) }

type decoder struct {
	b   []byte
	err error
}

var errBadRecord = errors.New("bad oplog record")

func (d *decoder) byte() byte {
	if d.err != nil || len(d.b) == 0 {
		d.err = errBadRecord
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) uint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errBadRecord
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) string() string {
	n := d.uint()
	if d.err != nil || n > uint64(len(d.b)) {
		d.err = errBadRecord
		return ""
	}
	v := string(d.b[:n])
	d.b = d.b[n:]
	return v
}

func encodeSegMount(e *encoder, info SegmentInfo) {
	e.byte(recSegMount)
	e.string(info.ID)
	e.string(info.Name)
	e.string(info.Protocol)
	e.string(info.ClientID)
	e.uint(info.Base)
	e.uint(info.Size)
}

func encodeSegGone(id string) []byte {
	e := encoder{}
	e.byte(recSegGone)
	e.string(id)
	return e.b
}

// objRec is a logged object.
type objRec struct {
	id            objectKey
	size          uint64
	hardPin       bool
	softPinTTL    time.Duration
	softPinExpiry time.Time
	version       uint64
	uid           uint64
	reps          []pendingReplica
	group         string // its group id (group.go), "" when ungrouped
}

const (
	flagHardPin = 1
	// flagGroup: the record ends with the object's group id.
	flagGroup = 2
)

func encodeObject(e *encoder, r objRec) {
	e.byte(recObject)
	e.string(r.id.tenant)
	e.string(r.id.key)
	e.uint(r.size)
	var flags uint64
	if r.hardPin {
		flags |= flagHardPin
	}
	if r.group != "" {
		flags |= flagGroup
	}
	e.uint(flags)
	e.uint(uint64(r.softPinTTL / time.Millisecond))
	var exp uint64
	if !r.softPinExpiry.IsZero() {
		exp = uint64(r.softPinExpiry.UnixMilli())
	}
	e.uint(exp)
	e.uint(r.version)
	e.uint(r.uid)
	e.uint(uint64(len(r.reps)))
	for _, p := range r.reps {
		e.string(p.segID)
		e.uint(p.off)
		e.uint(p.size)
	}
	if r.group != "" {
		e.string(r.group)
	}
}

func encodeRemove(id objectKey) []byte {
	e := encoder{}
	e.byte(recRemove)
	e.string(id.tenant)
	e.string(id.key)
	return e.b
}

// objRecOf describes o's logged form: its live and pending replicas.
func objRecOf(o *object) objRec {
	r := objRec{id: o.id, size: o.size, hardPin: o.hardPin, softPinTTL: o.softPinTTL,
		softPinExpiry: o.softPinExpiry, version: o.version, uid: o.uid, group: o.groupID()}
	for _, rep := range o.replicas {
		r.reps = append(r.reps, pendingReplica{segID: rep.seg.info.ID, off: rep.off, size: rep.size})
	}
	r.reps = append(r.reps, o.pending...)
	return r
}

// logObjectLocked logs o (complete) as it is now.
func (s *Service) logObjectLocked(o *object) {
	if s.jr == nil {
		return
	}
	e := encoder{}
	encodeObject(&e, objRecOf(o))
	s.jr.add(e.b)
}

func (s *Service) logSegMountLocked(info SegmentInfo) {
	if s.jr == nil {
		return
	}
	e := encoder{}
	encodeSegMount(&e, info)
	s.jr.add(e.b)
}

// encodeStateLocked writes every known segment and complete object as
// records, each prefixed by its length: the snapshot's data.
func (s *Service) encodeStateLocked() []byte {
	var out []byte
	put := func(rec []byte) {
		out = binary.AppendUvarint(out, uint64(len(rec)))
		out = append(out, rec...)
	}
	for _, seg := range s.mu.order {
		e := encoder{}
		encodeSegMount(&e, seg.info)
		put(e.b)
	}
	for _, a := range s.mu.awaiting {
		e := encoder{}
		encodeSegMount(&e, a.info)
		put(e.b)
	}
	for _, o := range s.mu.objects {
		if !o.complete {
			continue
		}
		e := encoder{}
		encodeObject(&e, objRecOf(o))
		put(e.b)
	}
	return out
}

// replayed is the state a log describes.
type replayed struct {
	segs map[string]SegmentInfo
	objs map[objectKey]*objRec
}

func (r *replayed) apply(data []byte) error {
	d := decoder{b: data}
	switch kind := d.byte(); kind {
	case recSegMount:
		info := SegmentInfo{ID: d.string(), Name: d.string(), Protocol: d.string(), ClientID: d.string()}
		info.Base, info.Size = d.uint(), d.uint()
		if d.err == nil {
			r.segs[info.ID] = info
		}
	case recSegGone:
		id := d.string()
		if d.err != nil {
			break
		}
		delete(r.segs, id)
		for k, o := range r.objs {
			o.reps = slices.DeleteFunc(o.reps, func(p pendingReplica) bool { return p.segID == id })
			if len(o.reps) == 0 {
				delete(r.objs, k)
			}
		}
	case recObject:
		o := &objRec{id: objectKey{tenant: d.string(), key: d.string()}, size: d.uint()}
		flags := d.uint()
		o.hardPin = flags&flagHardPin != 0
		o.softPinTTL = time.Duration(d.uint()) * time.Millisecond
		if exp := d.uint(); exp != 0 {
			o.softPinExpiry = time.UnixMilli(int64(exp))
		}
		o.version = d.uint()
		o.uid = d.uint()
		n := d.uint()
		if n > uint64(len(d.b)) {
			d.err = errBadRecord
		}
		for i := uint64(0); i < n && d.err == nil; i++ {
			o.reps = append(o.reps, pendingReplica{segID: d.string(), off: d.uint(), size: d.uint()})
		}
		if flags&flagGroup != 0 {
			o.group = d.string()
		}
		if d.err == nil {
			r.objs[o.id] = o
		}
	case recRemove:
		id := objectKey{tenant: d.string(), key: d.string()}
		if d.err == nil {
			delete(r.objs, id)
		}
	default:
		return fmt.Errorf("oplog record of kind %d: %w", kind, errBadRecord)
	}
	return d.err
}

// replay builds the state of st: its snapshot, then its records.
func replay(st oplog.State) (*replayed, error) {
	r := &replayed{segs: make(map[string]SegmentInfo), objs: make(map[objectKey]*objRec)}
	b := st.Snapshot
	for len(b) > 0 {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return nil, fmt.Errorf("snapshot at seq %d: %w", st.SnapshotSeq, errBadRecord)
		}
		if err := r.apply(b[k : k+int(n)]); err != nil {
			return nil, fmt.Errorf("snapshot at seq %d: %w", st.SnapshotSeq, err)
		}
		b = b[k+int(n):]
	}
	for _, rec := range st.Records {
		if err := r.apply(rec.Data); err != nil {
			return nil, fmt.Errorf("oplog record %d: %w", rec.Seq, err)
		}
	}
	return r, nil
}

// restore loads st into a new, empty Service and starts its journal on be.
// Restored objects wait for their segments to be remounted (see above).
func (s *Service) restore(st oplog.State, be oplog.Backend) error {
	r, err := replay(st)
	if err != nil {
		return err
	}
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.awaiting = make(map[string]*awaited, len(r.segs))
	for id, info := range r.segs {
		s.mu.awaiting[id] = &awaited{info: info, objs: make(map[*object]struct{})}
	}
	objects := 0
	for id, rec := range r.objs {
		o := &object{id: id, size: rec.size, complete: true, putStart: now, hardPin: rec.hardPin,
			softPinTTL: rec.softPinTTL, softPinExpiry: rec.softPinExpiry, version: rec.version, uid: rec.uid}
		for _, p := range rec.reps {
			if a, ok := s.mu.awaiting[p.segID]; ok && p.size == rec.size {
				o.pending = append(o.pending, p)
				a.objs[o] = struct{}{}
			}
		}
		if len(o.pending) == 0 {
			continue
		}
		s.mu.objects[id] = o
		s.chargeLocked(o)
		s.mu.lastVersion = max(s.mu.lastVersion, o.version)
		s.joinGroupLocked(o, rec.group)
		objects++
	}
	s.mu.restoreUntil = now.Add(s.cfg.RestoreWindow)
	s.jr = newJournal(be, st.LastSeq(), s.cfg.PersistTimeout)
	s.log.Info("store master restored", "objects", objects, "segments", len(r.segs),
		"snapshot_seq", st.SnapshotSeq, "records", len(st.Records), "dropped_torn", st.Dropped,
		"restore_window", s.cfg.RestoreWindow)
	return nil
}

// attachRestoredLocked gives a freshly mounted segment the restored
// replicas that were on it, when it is the segment the log knows (same
// owner, name and range); otherwise they are dropped.
func (s *Service) attachRestoredLocked(seg *segment) {
	a, ok := s.mu.awaiting[seg.info.ID]
	if !ok {
		return
	}
	delete(s.mu.awaiting, seg.info.ID)
	same := a.info.ClientID == seg.info.ClientID && a.info.Name == seg.info.Name &&
		a.info.Base == seg.info.Base && a.info.Size == seg.info.Size
	if !same {
		s.log.Warn("remounted segment differs from the logged one; its restored replicas are dropped",
			"segment", seg.info.ID, "replicas", len(a.objs))
	}
	attached := 0
	for o := range a.objs {
		var keep []pendingReplica
		for _, p := range o.pending {
			if p.segID != seg.info.ID {
				keep = append(keep, p)
				continue
			}
			if !same || !seg.alloc.reserve(p.off, alignedLen(p.size)) {
				continue
			}
			r := s.newReplicaLocked(seg, p.off, p.size)
			r.obj = o
			seg.replicas[r] = struct{}{}
			s.mu.used += alignedLen(p.size)
			o.replicas = append(o.replicas, r)
			attached++
		}
		o.pending = keep
		s.settleRestoredLocked(o)
	}
	if attached > 0 {
		s.log.Info("restored replicas attached", "segment", seg.info.Name, "id", seg.info.ID, "replicas", attached)
	}
}

// settleRestoredLocked indexes a restored object once it has a replica, or
// forgets it once it can have none.
func (s *Service) settleRestoredLocked(o *object) {
	switch {
	case len(o.replicas) > 0:
		if !o.inLRU && s.mu.objects[o.id] == o {
			s.mu.lru.touch(o)
		}
	case len(o.pending) == 0 && len(o.disk) == 0:
		s.forgetObjectLocked(o)
	}
}

// forgetPendingLocked unlinks o's pending replicas from their awaited
// segments (o is being dropped).
func (s *Service) forgetPendingLocked(o *object) {
	for _, p := range o.pending {
		if a, ok := s.mu.awaiting[p.segID]; ok {
			delete(a.objs, o)
		}
	}
	o.pending = nil
}

// expireRestoredLocked drops the logged segments that were not remounted
// within RestoreWindow, with their replicas.
func (s *Service) expireRestoredLocked(now time.Time) {
	if s.mu.restoreUntil.IsZero() || now.Before(s.mu.restoreUntil) {
		return
	}
	s.mu.restoreUntil = time.Time{}
	ids := make([]string, 0, len(s.mu.awaiting))
	for id := range s.mu.awaiting {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	dropped := 0
	for _, id := range ids {
		a := s.mu.awaiting[id]
		delete(s.mu.awaiting, id)
		s.logLocked(encodeSegGone(id))
		for o := range a.objs {
			o.pending = slices.DeleteFunc(o.pending, func(p pendingReplica) bool { return p.segID == id })
			if len(o.replicas) == 0 && len(o.pending) == 0 {
				dropped++
			}
			s.settleRestoredLocked(o)
		}
		s.log.Warn("logged segment not remounted in time; its replicas are dropped",
			"segment", a.info.Name, "id", id, "client", a.info.ClientID, "replicas", len(a.objs))
	}
	if dropped > 0 {
		s.log.Warn("restored objects dropped: no holder came back", "objects", dropped)
	}
}
