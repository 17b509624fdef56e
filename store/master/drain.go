package master

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/kvferry/kvferry/store/wire"
)

// Drain jobs (Mooncake's CreateDrainJob, QueryDrainJob and CancelDrainJob,
// master_service.h; its admin port's /api/v1/drain_jobs).
//
// A drain job empties a set of memory segments before their nodes are
// unmounted or decommissioned: every memory replica on them moves to
// another segment, and the objects stay readable throughout. The job marks
// its segments DRAINING (they stay readable and take no new allocation;
// the put grants carved from them are taken back), then moves replicas in
// units of (object, source segment): each unit is a COPY task for the
// holder of the source, which writes the replica's bytes into space the
// master allocated on a target; once the holder reports the copy, the
// target replica is added and the source replica dropped (its memory is
// freed once no read lease or task covers it). At most MaxConcurrency
// units are in flight; the next one is handed out as soon as one ends,
// and the maintenance tick (Tick) goes on down the queue, or plans again
// once it is done (at most every second while planning starts nothing).
//
// A unit goes to the least used (by fraction) target segment that takes
// allocations and does not hold a replica of the object yet: one of the
// requested targets, or any other segment when none was named. An object
// still being written, or one a task reads at the moment, waits (blocked);
// so does a unit no target has room for. A unit whose copy failed is
// tried again, up to maxDrainRetries times. When every segment that could
// take a replica of an object already holds one, and the object has a
// memory replica on a segment that is not being drained, the drained
// replica is dropped instead (a dropped unit: the object keeps its other
// replicas).
//
// The job ends SUCCEEDED once no object has a replica on its segments;
// they are then DRAINED, still mounted and taking nothing, until their
// owners unmount them. It ends FAILED when every unit left failed for good,
// when it had nothing in flight and moved nothing for DrainStallTimeout
// while units remain, or when one of its segments was unmounted with
// replicas it had not moved (they are gone with it); a failed job puts
// its segments back to OK. CancelDrainJob stops a job at any point:
// nothing more is handed out, the segments are OK again at once, and the
// moves already handed out finish (each bounded by TaskTimeout: a move
// that completes is a consistent move, one that fails leaves the source).
// Jobs live in the master's memory only: a restarted master, or a new HA
// leader, has none, and its segments are all OK.

// Drain tunables.
const (
	// DefaultDrainConcurrency is the units a job has in flight when its
	// request names none (Mooncake's max_concurrency default).
	DefaultDrainConcurrency = 4
	// MaxDrainConcurrency caps a job's MaxConcurrency.
	MaxDrainConcurrency = 1024
	// DefaultDrainStallTimeout: see Config.DrainStallTimeout.
	DefaultDrainStallTimeout = time.Minute
	// maxDrainRetries is how many times a unit's copy may fail before it
	// fails for good (Mooncake's kMaxDrainUnitRetries).
	maxDrainRetries = 3
	// maxDrainJobs bounds the jobs kept for QueryDrainJob; finished ones
	// older than userTaskRetention go first.
	maxDrainJobs = 1024
	// drainReplan is how long a job whose last full round could start
	// nothing waits before the next (a full round walks and sorts every
	// replica of its segments).
	drainReplan = time.Second
)

// DrainJobRequest is what CreateDrainJob drains (Mooncake's
// CreateDrainJobRequest).
type DrainJobRequest struct {
	// Segments are the transfer-engine names of the segments to empty
	// (every mounted segment of each name); at least one, no repeats.
	Segments []string
	// Targets restrict where replicas go; empty means any other segment.
	Targets []string
	// MaxConcurrency is the units in flight at once: 0 means
	// DefaultDrainConcurrency, more than MaxDrainConcurrency is capped,
	// negative is INVALID_PARAMS.
	MaxConcurrency int
}

// JobInfo is QueryDrainJob's answer (Mooncake's QueryJobResponse).
type JobInfo struct {
	ID      string
	Type    wire.JobType
	Status  wire.JobStatus
	Created time.Time
	Updated time.Time
	// Segments are the request's segment names.
	Segments []string
	// SucceededUnits counts replicas moved off the segments (or dropped:
	// DroppedUnits), FailedUnits failed copies (a unit may fail up to
	// three times), BlockedUnits the units that could not be handed out at
	// the last planning round, ActiveUnits those in flight.
	SucceededUnits, FailedUnits, BlockedUnits, ActiveUnits uint64
	// DroppedUnits counts units that ended by dropping a replica the
	// object had elsewhere too (a kvferry addition).
	DroppedUnits uint64
	// MigratedBytes counts the bytes of the replicas moved.
	MigratedBytes uint64
	Message       string
}

// drainUnit is one replica to move: an incarnation of an object, on one
// segment.
type drainUnit struct {
	obj *object
	uid uint64
	seg *segment
}

// drainJob is a drain job's state, guarded by Service.mu.
type drainJob struct {
	id       string
	status   wire.JobStatus
	names    []string   // the request's segment names
	segs     []*segment // the segments drained (mounted under names at creation)
	targets  []string
	maxConc  int
	created  time.Time
	updated  time.Time
	progress time.Time // the last unit that ended well (or the start)
	message  string

	succeeded, failed, blocked, dropped uint64
	migrated                            uint64
	started                             uint64 // copies handed out
	// lost: replicas that left with an unmounted segment before they moved.
	lost int

	active  map[drainUnit]*task
	retries map[drainUnit]int
	// queue are the units the last full round found, next the first not
	// tried yet (planDrainLocked); nextFull: no full round before it.
	queue    []drainItem
	next     int
	nextFull time.Time
}

func (j *drainJob) terminal() bool {
	switch j.status {
	case wire.JobStatus_JOB_STATUS_SUCCEEDED, wire.JobStatus_JOB_STATUS_FAILED, wire.JobStatus_JOB_STATUS_CANCELED:
		return true
	}
	return false
}

// CreateDrainJob starts a drain job over req.Segments and returns its id
// (a UUID). Errors, as Mooncake's: INVALID_PARAMS (no segment, a repeated
// one, a target among them, a negative MaxConcurrency), SEGMENT_NOT_FOUND
// (a segment or target no mounted segment is called), and
// UNAVAILABLE_IN_CURRENT_STATUS (a segment not OK, that is already
// draining, drained or leaving; a target that takes no allocation).
func (s *Service) CreateDrainJob(req DrainJobRequest) (string, error) {
	if len(req.Segments) == 0 || req.MaxConcurrency < 0 {
		return "", fmt.Errorf("create drain job (%d segments, max concurrency %d): %w",
			len(req.Segments), req.MaxConcurrency, wire.ErrInvalidParams)
	}
	conc := req.MaxConcurrency
	if conc == 0 {
		conc = DefaultDrainConcurrency
	}
	conc = min(conc, MaxDrainConcurrency)
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.checkLocked()
	names := make(map[string]bool, len(req.Segments))
	for _, name := range req.Segments {
		if names[name] {
			return "", fmt.Errorf("create drain job: segment %q named twice: %w", name, wire.ErrInvalidParams)
		}
		names[name] = true
		segs := s.mu.byName[name]
		if len(segs) == 0 {
			return "", fmt.Errorf("create drain job: segment %q: %w", name, wire.ErrSegmentNotFound)
		}
		for _, seg := range segs {
			if st := seg.statusLocked(); st != SegmentOK {
				return "", fmt.Errorf("create drain job: segment %q is %v: %w", name, st, wire.ErrUnavailableInStatus)
			}
		}
	}
	for _, name := range req.Targets {
		if names[name] {
			return "", fmt.Errorf("create drain job: target %q is drained too: %w", name, wire.ErrInvalidParams)
		}
		segs := s.mu.byName[name]
		if len(segs) == 0 {
			return "", fmt.Errorf("create drain job: target %q: %w", name, wire.ErrSegmentNotFound)
		}
		if !slices.ContainsFunc(segs, (*segment).allocatable) {
			return "", fmt.Errorf("create drain job: target %q takes no allocation: %w", name, wire.ErrUnavailableInStatus)
		}
	}
	s.forgetDrainJobsLocked(now)
	if len(s.mu.drainJobs) >= maxDrainJobs {
		return "", fmt.Errorf("create drain job: %d jobs kept: %w", len(s.mu.drainJobs), wire.ErrTaskPendingLimitExceeded)
	}
	j := &drainJob{id: newTaskUUID(), status: wire.JobStatus_JOB_STATUS_CREATED,
		names: slices.Clone(req.Segments), targets: slices.Clone(req.Targets), maxConc: conc,
		created: now, updated: now, progress: now, message: "Drain job created",
		active: make(map[drainUnit]*task), retries: make(map[drainUnit]int)}
	for _, name := range req.Segments {
		for _, seg := range s.mu.byName[name] {
			seg.job, seg.draining = j, true
			// Nothing new lands in the segment: the grants carved from
			// it go back (their holders put elsewhere).
			for _, g := range sortedGrants(seg.grants) {
				s.takeBackGrantLocked(g, now)
			}
			j.segs = append(j.segs, seg)
		}
	}
	s.mu.drainJobs[j.id] = j
	s.log.Info("drain job created", "job", j.id, "segments", j.names, "targets", j.targets, "max_concurrency", conc)
	return j.id, nil
}

// allocatable reports whether allocations may go to seg.
func (seg *segment) allocatable() bool {
	return !seg.unmounted && !seg.fenced && !seg.draining
}

// QueryDrainJob reports on a drain job. Errors: INVALID_PARAMS (an id that
// is not a UUID), JOB_NOT_FOUND.
func (s *Service) QueryDrainJob(id string) (JobInfo, error) {
	if !validUUID(id) {
		return JobInfo{}, fmt.Errorf("query drain job %q: not a job id: %w", id, wire.ErrInvalidParams)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.mu.drainJobs[id]
	if !ok {
		return JobInfo{}, fmt.Errorf("query drain job %q: %w", id, wire.ErrJobNotFound)
	}
	return JobInfo{ID: j.id, Type: wire.JobType_JOB_TYPE_DRAIN, Status: j.status, Created: j.created, Updated: j.updated,
		Segments: slices.Clone(j.names), SucceededUnits: j.succeeded, FailedUnits: j.failed, BlockedUnits: j.blocked,
		ActiveUnits: uint64(len(j.active)), DroppedUnits: j.dropped, MigratedBytes: j.migrated, Message: j.message}, nil
}

// CancelDrainJob stops a drain job: nothing more is handed out and its
// segments are OK again (the moves in flight finish). Errors:
// INVALID_PARAMS (not a UUID), JOB_NOT_FOUND, UNAVAILABLE_IN_CURRENT_STATUS
// (the job ended already).
func (s *Service) CancelDrainJob(id string) error {
	if !validUUID(id) {
		return fmt.Errorf("cancel drain job %q: not a job id: %w", id, wire.ErrInvalidParams)
	}
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.checkLocked()
	j, ok := s.mu.drainJobs[id]
	if !ok {
		return fmt.Errorf("cancel drain job %q: %w", id, wire.ErrJobNotFound)
	}
	if j.terminal() {
		return fmt.Errorf("cancel drain job %q: it is %v already: %w", id, j.status, wire.ErrUnavailableInStatus)
	}
	s.endDrainJobLocked(j, wire.JobStatus_JOB_STATUS_CANCELED, "Drain job canceled", now)
	return nil
}

// validUUID reports whether id has the form of the ids newTaskUUID makes.
func validUUID(id string) bool {
	if len(id) != 36 {
		return false
	}
	for i, c := range []byte(id) {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
	}
	return true
}

// endDrainJobLocked ends j with status: a SUCCEEDED job leaves its
// segments DRAINED, any other end puts them back to OK.
func (s *Service) endDrainJobLocked(j *drainJob, status wire.JobStatus, msg string, now time.Time) {
	j.status, j.message, j.updated = status, msg, now
	for _, seg := range j.segs {
		if seg.job != j {
			continue
		}
		seg.job = nil
		if status == wire.JobStatus_JOB_STATUS_SUCCEEDED {
			seg.drained = true
			continue
		}
		seg.drained = false
		seg.draining = seg.leaving
	}
	clear(j.retries)
	clear(j.queue)
	j.queue, j.next = nil, 0
	s.log.Info("drain job ended", "job", j.id, "status", status, "moved", j.succeeded, "failed", j.failed,
		"bytes", j.migrated, "message", msg)
}

// forgetDrainJobsLocked forgets old finished jobs once many are kept.
func (s *Service) forgetDrainJobsLocked(now time.Time) {
	if len(s.mu.drainJobs) < maxDrainJobs/2 {
		return
	}
	for id, j := range s.mu.drainJobs {
		if j.terminal() && len(j.active) == 0 && now.Sub(j.updated) > userTaskRetention {
			delete(s.mu.drainJobs, id)
		}
	}
}

// runDrainJobsLocked plans every running job (Tick): down its queue
// while it has one, else a full round (at most every drainReplan while
// rounds start nothing).
func (s *Service) runDrainJobsLocked(now time.Time) {
	for _, j := range s.mu.drainJobs {
		switch {
		case j.terminal():
		case j.next < len(j.queue):
			s.planDrainLocked(j, now, false)
		case !now.Before(j.nextFull):
			s.planDrainLocked(j, now, true)
		}
	}
}

// drainItem is a unit waiting in a job's queue, with its replica.
type drainItem struct {
	u drainUnit
	r *replica
}

// planDrainLocked hands out j's units up to its concurrency. A full round
// (Tick, or when nothing is in flight) queues every unit of j's segments
// not in flight, in segment and address order, counts the blocked ones,
// marks the emptied segments DRAINED and ends the job when it is done,
// failed or stalled. A partial round (after a unit ended) goes on down the
// queue of the last full round.
func (s *Service) planDrainLocked(j *drainJob, now time.Time, full bool) {
	if j.status == wire.JobStatus_JOB_STATUS_CREATED {
		j.status = wire.JobStatus_JOB_STATUS_PLANNING
	}
	if !full {
		s.fillDrainLocked(j, now)
		j.status, j.message = wire.JobStatus_JOB_STATUS_RUNNING, "Drain job running"
		return
	}
	var remaining, dead uint64
	clear(j.queue)
	j.queue, j.next = j.queue[:0], 0
	for _, seg := range j.segs {
		if seg.unmounted {
			continue
		}
		first := len(j.queue)
		left := 0
		for r := range seg.replicas {
			o := r.obj
			if o == nil {
				continue // discarded: freed once its readers are done
			}
			left++
			u := drainUnit{obj: o, uid: o.uid, seg: seg}
			if _, ok := j.active[u]; ok {
				continue
			}
			if j.retries[u] >= maxDrainRetries {
				dead++
				continue
			}
			j.queue = append(j.queue, drainItem{u, r})
		}
		slices.SortFunc(j.queue[first:], func(a, b drainItem) int { return cmp.Compare(a.r.off, b.r.off) })
		remaining += uint64(left)
		if left == 0 && !seg.drained {
			seg.drained = true // emptied: DRAINED even while the job goes on
		}
	}
	dropped, started := j.dropped, j.started
	blocked := s.fillDrainLocked(j, now)
	remaining -= j.dropped - dropped // (dropped at once by the fill)
	j.nextFull = time.Time{}
	if j.dropped == dropped && j.started == started && len(j.active) < j.maxConc {
		j.nextFull = now.Add(drainReplan) // free slots, and nothing could take one
	}
	for _, it := range j.queue[j.next:] {
		// Not tried (no free slot): blocked if it could not start anyway.
		if o := it.u.obj; !o.complete || o.busyTasks > 0 {
			blocked++
		}
	}
	j.status, j.message = wire.JobStatus_JOB_STATUS_RUNNING, "Drain job running"
	j.blocked = blocked
	j.updated = now
	if len(j.active) > 0 {
		return
	}
	switch {
	case remaining == 0 && j.lost > 0:
		s.endDrainJobLocked(j, wire.JobStatus_JOB_STATUS_FAILED, fmt.Sprintf(
			"Drain job failed: %d replicas left with an unmounted segment before they moved", j.lost), now)
	case remaining == 0:
		s.endDrainJobLocked(j, wire.JobStatus_JOB_STATUS_SUCCEEDED, "Drain job finished successfully", now)
	case dead == remaining:
		s.endDrainJobLocked(j, wire.JobStatus_JOB_STATUS_FAILED, "Drain job failed: unrecoverable units remain", now)
	case now.Sub(j.progress) > s.cfg.DrainStallTimeout:
		s.endDrainJobLocked(j, wire.JobStatus_JOB_STATUS_FAILED, fmt.Sprintf(
			"Drain job failed: nothing moved for %v; %d units blocked (no room on the targets, or puts in progress)",
			s.cfg.DrainStallTimeout, blocked), now)
	}
}

// fillDrainLocked hands out units from j's queue until its slots are full
// or the queue is done, and returns how many it found blocked.
func (s *Service) fillDrainLocked(j *drainJob, now time.Time) (blocked uint64) {
	for ; j.next < len(j.queue) && len(j.active) < j.maxConc; j.next++ {
		it := j.queue[j.next]
		if it.r.obj != it.u.obj || it.u.obj.uid != it.u.uid || it.u.seg.unmounted {
			continue // moved, dropped or replaced since it was queued
		}
		if _, ok := j.active[it.u]; ok || j.retries[it.u] >= maxDrainRetries {
			continue
		}
		if !s.startDrainUnitLocked(j, it.u, it.r, now) {
			blocked++
		}
	}
	return blocked
}

// startDrainUnitLocked hands out unit u (replica r): a COPY task to the
// holder of r that drops r once done, or, when no segment could take
// another replica of the object and it has one outside j's segments, the
// drop of r. It reports false when u is blocked.
func (s *Service) startDrainUnitLocked(j *drainJob, u drainUnit, r *replica, now time.Time) bool {
	o := u.obj
	if !o.complete || o.busyTasks > 0 {
		return false // a put in progress, or a task reads it
	}
	holder := s.mu.clients[u.seg.info.ClientID]
	if holder == nil {
		return false
	}
	dst, distinct := s.drainTargetLocked(j, o, u.seg)
	if dst == nil {
		if distinct || !slices.ContainsFunc(o.replicas, func(x *replica) bool { return !x.seg.draining }) {
			return false
		}
		// Every segment that takes allocations holds the object already,
		// and one that stays keeps it: the drained replica is one too
		// many.
		s.dropReplicaLocked(o, r, now)
		s.logObjectLocked(o)
		j.succeeded++
		j.dropped++
		j.progress = now
		s.mu.counters.drainMoved++
		return true
	}
	t := &task{client: holder, kind: wire.TaskKind_TASK_KIND_COPY, obj: o, oid: o.id, uid: o.uid, size: o.size,
		src: u.seg.info.Base + r.off, dst: dst, dropSource: r, drain: j, drainSrc: u.seg}
	s.queueTaskLocked(t, now)
	j.active[u] = t
	j.started++
	return true
}

// drainTargetLocked allocates a replica of o for a unit of j on the least
// used (by fraction) segment that takes allocations, is not src's and
// holds no replica of o: among j's targets, or any when it names none.
// With none allocated, distinct reports whether some segment could take
// one of o but has no room now (false: all hold one already).
func (s *Service) drainTargetLocked(j *drainJob, o *object, src *segment) (_ *replica, distinct bool) {
	var cands []*segment
	if len(j.targets) > 0 {
		for _, name := range j.targets {
			cands = append(cands, s.mu.byName[name]...)
		}
	} else {
		cands = slices.Clone(s.mu.order)
	}
	cands = slices.DeleteFunc(cands, func(seg *segment) bool {
		return !seg.allocatable() || seg.info.Name == src.info.Name ||
			slices.ContainsFunc(o.replicas, func(r *replica) bool { return r.seg.info.Name == seg.info.Name })
	})
	slices.SortStableFunc(cands, func(a, b *segment) int {
		return cmp.Compare(float64(a.alloc.used)/float64(a.info.Size), float64(b.alloc.used)/float64(b.info.Size))
	})
	for _, seg := range cands {
		if r := s.allocInLocked(seg, o.size); r != nil {
			return r, true
		}
	}
	return nil, len(cands) > 0
}

// allocInLocked allocates size bytes for a replica in seg (nil: no room).
func (s *Service) allocInLocked(seg *segment, size uint64) *replica {
	off, ok := seg.alloc.alloc(size)
	if !ok {
		return nil
	}
	r := s.newReplicaLocked(seg, off, size)
	seg.replicas[r] = struct{}{}
	s.mu.used += alignedLen(size)
	return r
}

// drainTaskDoneLocked records the end of a drain unit's COPY t (err nil:
// the target replica is in, the source dropped) and hands out the next.
func (s *Service) drainTaskDoneLocked(t *task, err error, now time.Time) {
	j := t.drain
	u := drainUnit{obj: t.obj, uid: t.uid, seg: t.drainSrc}
	delete(j.active, u)
	live := s.mu.objects[t.oid] == t.obj && t.obj.uid == t.uid
	switch {
	case err == nil:
		j.succeeded++
		j.migrated += t.size
		j.progress = now
		s.mu.counters.drainMoved++
		s.mu.counters.drainBytes += t.size
	case live:
		// The copy failed: tried again later, up to maxDrainRetries.
		j.failed++
		j.retries[u]++
	case u.seg.unmounted:
		// The object went with its segment before its copy was in.
		j.lost++
	}
	// (A unit whose object was removed or replaced meanwhile is gone.)
	j.updated = now
	if j.terminal() {
		return
	}
	s.planDrainLocked(j, now, false)
	j.nextFull = time.Time{} // (what the last full round found may have changed)
	if len(j.active) == 0 && j.next >= len(j.queue) {
		s.planDrainLocked(j, now, true)
	}
}

// segmentGoneLocked records that seg, one of j's segments, is being
// unmounted: the replicas on it that are not being moved are lost to the
// job.
func (j *drainJob) segmentGoneLocked(seg *segment) {
	if j.terminal() {
		return
	}
	for r := range seg.replicas {
		if o := r.obj; o != nil {
			if _, moving := j.active[drainUnit{obj: o, uid: o.uid, seg: seg}]; !moving {
				j.lost++
			}
		}
	}
}
