package master

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"time"

	"github.com/kvferry/kvferry/store/wire"
)

// Tasks: work the master hands to clients (Mooncake's FetchTasks and
// MarkTaskToComplete). The master never touches data, so everything that
// moves bytes on its behalf is a task for the client that holds them:
//   - OFFLOAD: write a memory replica in the client's own segment to its
//     disk tier (tier.go);
//   - LOAD: read a file of its disk tier into space the master allocated
//     in its own segment (a promotion, tier.go);
//   - DELETE: remove a file of its disk tier;
//   - COPY: write a memory replica in its own segment into space the
//     master allocated in another segment (copy and move tasks, graceful
//     unmount).
// A client long-polls FetchTasks (on a connection of its own) and reports
// results with its next FetchTasks. While a task reads a replica, that
// replica's object is busy: eviction skips it and its memory is freed no
// earlier than the task's deadline (dropObjectLocked). A task not reported
// by its deadline failed; its client expiring fails it too.

// Task tunables.
const (
	// DefaultTaskTimeout is how long a client has to finish a task.
	DefaultTaskTimeout = 30 * time.Second
	// maxTaskWait bounds one FetchTasks wait.
	maxTaskWait = 30 * time.Second
	// defaultFetchMax is the number of tasks one FetchTasks hands out.
	defaultFetchMax = 16
	// maxUserTasks bounds the copy and move tasks kept for QueryTask;
	// finished ones older than userTaskRetention go first.
	maxUserTasks      = 10000
	userTaskRetention = 10 * time.Minute
)

// task is one unit of work for one client.
type task struct {
	id       uint64
	client   *clientState
	kind     wire.TaskKind
	obj      *object // the object it works on (nil for DELETE)
	oid      objectKey
	uid      uint64
	size     uint64
	src      uint64   // source address (OFFLOAD, COPY)
	dst      *replica // target space (LOAD, COPY): in its segment, obj nil until done
	disk     *diskSeg // OFFLOAD: the tier written; DELETE: the tier to delete from
	reserved uint64   // OFFLOAD: disk bytes reserved
	deadline time.Time
	sent     bool // handed out by FetchTasks
	done     chan struct{}
	err      error
	user     *userTask
	// dropSource (MOVE): the replica dropped once the copy succeeded.
	dropSource *replica
	// drain is the drain job whose unit (obj, uid, drainSrc) this COPY
	// moves (drain.go).
	drain    *drainJob
	drainSrc *segment
}

// userTask is a copy or move task a user created (CreateTask, QueryTask).
type userTask struct {
	id       string
	kind     wire.TaskKind
	status   wire.TaskStatus
	assigned string
	created  time.Time
	updated  time.Time
	message  string
	left     int // subtasks not finished
	failed   int
}

func newTaskUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	s := hex.EncodeToString(b[:])
	return s[:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:]
}

// queueTaskLocked gives t to its client and wakes its FetchTasks.
func (s *Service) queueTaskLocked(t *task, now time.Time) {
	s.mu.lastTask++
	t.id = s.mu.lastTask
	t.deadline = now.Add(s.cfg.TaskTimeout)
	t.done = make(chan struct{})
	s.mu.tasks[t.id] = t
	t.client.tasks = append(t.client.tasks, t)
	if t.obj != nil && t.kind != wire.TaskKind_TASK_KIND_LOAD {
		t.obj.busyUntil = later(t.obj.busyUntil, t.deadline)
		t.obj.busyTasks++
	}
	s.mu.counters.tasks++
	select {
	case t.client.taskWake <- struct{}{}:
	default:
	}
}

// FetchTasks records the results of done, then returns up to max tasks of
// clientID, waiting up to wait (at most 30 s) for one when there is none.
func (s *Service) FetchTasks(ctx context.Context, clientID string, done []TaskResult, wait time.Duration, max int) (_ []*wire.Task, err error) {
	if max <= 0 {
		max = defaultFetchMax
	}
	wait = min(wait, maxTaskWait)
	deadline := time.Now().Add(wait)
	defer s.durable(&err)
	for first := true; ; first = false {
		s.mu.Lock()
		now := s.clock.Now()
		c, ok := s.mu.clients[clientID]
		if !ok {
			s.mu.Unlock()
			return nil, fmt.Errorf("fetch tasks: client %q: %w", clientID, wire.ErrClientNotFound)
		}
		c.expiry = now.Add(s.cfg.ClientTTL)
		if first {
			for _, r := range done {
				s.finishTaskLocked(c, r, now)
			}
		}
		var out []*wire.Task
		for _, t := range c.tasks {
			if len(out) == max {
				break
			}
			if t.sent {
				continue
			}
			t.sent = true
			out = append(out, t.toWire())
		}
		wake := c.taskWake
		s.checkLocked()
		s.mu.Unlock()
		if len(out) > 0 || !time.Now().Before(deadline) {
			return out, nil
		}
		timer := time.NewTimer(time.Until(deadline))
		select {
		case <-wake:
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return nil, nil
		}
		timer.Stop()
	}
}

func (t *task) toWire() *wire.Task {
	w := &wire.Task{Id: t.id, Kind: t.kind, TenantId: t.oid.tenant, Key: t.oid.key, Uid: t.uid, Size: t.size,
		SrcAddress: t.src}
	if t.dst != nil {
		w.DstSegmentName, w.DstAddress = t.dst.seg.info.Name, t.dst.seg.info.Base+t.dst.off
	}
	return w
}

// TaskResult is a client's report on a task.
type TaskResult struct {
	ID        uint64
	Err       error
	FileBytes uint64
}

// finishTaskLocked applies a client's report on one of its tasks.
func (s *Service) finishTaskLocked(c *clientState, r TaskResult, now time.Time) {
	t, ok := s.mu.tasks[r.ID]
	if !ok || t.client != c {
		return // timed out already, or not this client's
	}
	s.endTaskLocked(t, r.Err, r.FileBytes, now)
}

// endTaskLocked ends t with err (nil: success) and applies its effect.
func (s *Service) endTaskLocked(t *task, err error, fileBytes uint64, now time.Time) {
	delete(s.mu.tasks, t.id)
	t.client.tasks = slices.DeleteFunc(t.client.tasks, func(x *task) bool { return x == t })
	if t.obj != nil && t.kind != wire.TaskKind_TASK_KIND_LOAD {
		// The client reported (or its deadline passed): it no longer
		// reads the object's memory for this task.
		if t.obj.busyTasks--; t.obj.busyTasks == 0 {
			t.obj.busyUntil = time.Time{}
		}
	}
	if err == nil {
		err = s.applyTaskLocked(t, fileBytes, now)
	} else {
		s.undoTaskLocked(t)
	}
	if err != nil {
		s.mu.counters.taskFailures++
		s.log.Info("task failed", "task", t.id, "kind", t.kind, "key", t.oid.key, "client", t.client.id, "err", err)
	}
	t.err = err
	close(t.done)
	if t.kind == wire.TaskKind_TASK_KIND_OFFLOAD {
		// Keep the writers busy: the next offloads go out now, not at the
		// next maintenance round (puts may be waiting for the room).
		s.scheduleOffloadsLocked(now)
	}
	if t.drain != nil {
		s.drainTaskDoneLocked(t, err, now)
	}
	if u := t.user; u != nil {
		u.left--
		u.updated = now
		if err != nil {
			u.failed++
			u.message = err.Error()
		}
		if u.left == 0 {
			if u.failed > 0 {
				u.status = wire.TaskStatus_TASK_STATUS_FAILED
			} else {
				u.status, u.message = wire.TaskStatus_TASK_STATUS_SUCCESS, "Task completed successfully"
			}
		}
	}
}

// applyTaskLocked makes a successful task's effect real, if the object it
// worked on is still the same; otherwise it undoes the task.
func (s *Service) applyTaskLocked(t *task, fileBytes uint64, now time.Time) error {
	live := t.obj != nil && s.mu.objects[t.oid] == t.obj && t.obj.uid == t.uid
	switch t.kind {
	case wire.TaskKind_TASK_KIND_OFFLOAD:
		t.obj.offloading = false
		if !live || t.disk.unmounted {
			s.undoTaskLocked(t)
			if !t.disk.unmounted {
				s.deleteFileLocked(t.disk, t.oid, t.uid, now)
			}
			return fmt.Errorf("offload of %v: the object changed meanwhile: %w", t.oid, wire.ErrObjectNotFound)
		}
		s.addDiskReplicaLocked(t.obj, t.disk, fileBytes, t.reserved)
		s.mu.counters.offloads++
		s.mu.counters.offloadedBytes += t.size
	case wire.TaskKind_TASK_KIND_LOAD, wire.TaskKind_TASK_KIND_COPY:
		if !live || t.dst.seg.unmounted {
			s.undoTaskLocked(t)
			return fmt.Errorf("%v of %v: the object or the target changed meanwhile: %w", t.kind, t.oid, wire.ErrObjectNotFound)
		}
		t.dst.obj = t.obj
		t.obj.replicas = append(t.obj.replicas, t.dst)
		if t.kind == wire.TaskKind_TASK_KIND_LOAD {
			t.obj.loading = nil
			s.mu.counters.promotions++
		}
		if src := t.dropSource; src != nil && src.obj == t.obj {
			s.dropReplicaLocked(t.obj, src, now)
		}
		s.mu.lru.touch(t.obj)
		s.logObjectLocked(t.obj)
	case wire.TaskKind_TASK_KIND_DELETE:
	}
	return nil
}

// undoTaskLocked gives back what a task that failed held.
func (s *Service) undoTaskLocked(t *task) {
	switch t.kind {
	case wire.TaskKind_TASK_KIND_OFFLOAD:
		if t.obj != nil {
			t.obj.offloading = false
			t.obj.noOffloadUntil = s.clock.Now().Add(s.cfg.TaskTimeout)
		}
		if !t.disk.unmounted {
			t.disk.used -= t.reserved
		}
	case wire.TaskKind_TASK_KIND_LOAD, wire.TaskKind_TASK_KIND_COPY:
		if t.obj != nil && t.obj.loading == t {
			t.obj.loading = nil
		}
		if t.dst != nil && t.dst.obj == nil {
			s.freeLocked(t.dst)
		}
	}
}

// expireTasksLocked fails the tasks past their deadline.
func (s *Service) expireTasksLocked(now time.Time) {
	var late []*task
	for _, t := range s.mu.tasks {
		if now.After(t.deadline) {
			late = append(late, t)
		}
	}
	slices.SortFunc(late, func(a, b *task) int { return int(a.id - b.id) })
	for _, t := range late {
		s.endTaskLocked(t, fmt.Errorf("task %d (%v of %v) not done by client %q in %v: %w",
			t.id, t.kind, t.oid, t.client.id, s.cfg.TaskTimeout, wire.ErrRPCTimeout), 0, now)
	}
	// Forget old finished user tasks.
	if len(s.mu.userTasks) > maxUserTasks/2 {
		for id, u := range s.mu.userTasks {
			if u.left == 0 && now.Sub(u.updated) > userTaskRetention {
				delete(s.mu.userTasks, id)
			}
		}
	}
}

// failClientTasksLocked fails every task of an expiring client.
func (s *Service) failClientTasksLocked(c *clientState, now time.Time) {
	for _, t := range slices.Clone(c.tasks) {
		s.endTaskLocked(t, fmt.Errorf("task %d: client %q expired: %w", t.id, c.id, wire.ErrClientNotFound), 0, now)
	}
}

// dropReplicaLocked removes one memory replica of o (a move's source, a
// drained segment's copy); its memory is freed once no reader's lease or
// task covers it.
func (s *Service) dropReplicaLocked(o *object, r *replica, now time.Time) {
	o.replicas = slices.DeleteFunc(o.replicas, func(x *replica) bool { return x == r })
	r.obj = nil
	release := later(o.leaseExpiry, o.busyUntil)
	if release.After(now) {
		s.mu.discarded = append(s.mu.discarded, discardEntry{replicas: []*replica{r}, release: release, id: o.id})
	} else {
		s.freeLocked(r)
	}
	if len(o.replicas) == 0 {
		s.mu.lru.remove(o)
	}
}

// ---------------------------------------------------------------------------
// Copy and move (CreateTask, QueryTask)

// CreateTask starts a copy of an object to every target segment (COPY), or
// a move of its replica on segment source to targets[0] (MOVE), and
// returns the task's id. Each target gets a replica once its holder's copy
// is done; a target that already holds one is skipped.
func (s *Service) CreateTask(tenant, key string, kind wire.TaskKind, source string, targets []string) (_ string, err error) {
	id, err := objectKeyOf(tenant, key)
	if err != nil {
		return "", fmt.Errorf("create task %q: %w", key, err)
	}
	if kind != wire.TaskKind_TASK_KIND_COPY && kind != wire.TaskKind_TASK_KIND_MOVE || len(targets) == 0 ||
		kind == wire.TaskKind_TASK_KIND_MOVE && (source == "" || len(targets) != 1) {
		return "", fmt.Errorf("create task %v (%v, source %q, targets %v): %w", id, kind, source, targets, wire.ErrInvalidParams)
	}
	now := s.clock.Now()
	defer s.durable(&err)
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.checkLocked()
	o, ok := s.mu.objects[id]
	if !ok || !o.complete {
		return "", fmt.Errorf("create task %v: %w", id, wire.ErrObjectNotFound)
	}
	var src *replica
	for _, r := range o.replicas {
		if kind == wire.TaskKind_TASK_KIND_COPY || r.seg.info.Name == source {
			src = r
			break
		}
	}
	if src == nil {
		return "", fmt.Errorf("create task %v: no memory replica on %q: %w", id, source, wire.ErrReplicaNotFound)
	}
	u := &userTask{id: newTaskUUID(), kind: kind, status: wire.TaskStatus_TASK_STATUS_PROCESSING,
		assigned: src.seg.info.ClientID, created: now, updated: now}
	holder := s.mu.clients[src.seg.info.ClientID]
	if holder == nil {
		return "", fmt.Errorf("create task %v: holder of the source is gone: %w", id, wire.ErrClientNotFound)
	}
	for _, name := range targets {
		if slices.ContainsFunc(o.replicas, func(r *replica) bool { return r.seg.info.Name == name }) {
			continue
		}
		dst := s.allocOnLocked(name, o.size)
		if dst == nil {
			return "", fmt.Errorf("create task %v: no room for %d bytes on segment %q: %w", id, o.size, name, wire.ErrNoAvailableHandle)
		}
		t := &task{client: holder, kind: wire.TaskKind_TASK_KIND_COPY, obj: o, oid: id, uid: o.uid, size: o.size,
			src: src.seg.info.Base + src.off, dst: dst, user: u}
		if kind == wire.TaskKind_TASK_KIND_MOVE {
			t.dropSource = src
		}
		u.left++
		s.queueTaskLocked(t, now)
	}
	if u.left == 0 {
		u.status, u.message = wire.TaskStatus_TASK_STATUS_SUCCESS, "every target holds a replica already"
	}
	s.mu.userTasks[u.id] = u
	return u.id, nil
}

// allocOnLocked allocates size bytes for a replica on one of the mounted
// segments named name (nil: no room).
func (s *Service) allocOnLocked(name string, size uint64) *replica {
	for _, seg := range s.mu.byName[name] {
		if seg.fenced || seg.draining {
			continue
		}
		if r := s.allocInLocked(seg, size); r != nil {
			return r
		}
	}
	return nil
}

// TaskInfo is QueryTask's answer (Mooncake's QueryTaskResponse).
type TaskInfo struct {
	ID             string
	Kind           wire.TaskKind
	Status         wire.TaskStatus
	Created        time.Time
	Updated        time.Time
	AssignedClient string
	Message        string
}

// QueryTask reports on a task CreateTask made.
func (s *Service) QueryTask(id string) (TaskInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, ok := s.mu.userTasks[id]
	if !ok {
		return TaskInfo{}, fmt.Errorf("query task %q: %w", id, wire.ErrTaskNotFound)
	}
	return TaskInfo{ID: u.id, Kind: u.kind, Status: u.status, Created: u.created, Updated: u.updated,
		AssignedClient: u.assigned, Message: u.message}, nil
}

// ---------------------------------------------------------------------------
// Graceful unmount (drain)

// DrainSegment moves the objects whose only memory replica is on segment
// segmentID of clientID to other segments (MOVE tasks to the holder), or,
// when the holder has a disk tier with room, writes them to it (OFFLOAD
// tasks: they stay readable from disk), waits for them up to grace, and
// then unmounts the segment. Nothing new is
// placed on the segment meanwhile. Objects that found no room elsewhere or
// whose move failed are dropped with the segment, as by UnmountSegment.
func (s *Service) DrainSegment(ctx context.Context, clientID, segmentID string, grace time.Duration) (err error) {
	now := s.clock.Now()
	s.mu.Lock()
	seg, ok := s.mu.segments[segmentID]
	if !ok || seg.info.ClientID != clientID {
		s.mu.Unlock()
		return s.UnmountSegment(clientID, segmentID) // its error
	}
	seg.draining, seg.leaving = true, true
	holder := s.mu.clients[clientID]
	var waits []chan struct{}
	moved := 0
	offloads := 0
	for r := range seg.replicas {
		o := r.obj
		if o == nil || !o.complete || len(o.replicas) > 1 || len(o.disk) > 0 {
			continue // (an object with a file stays readable from it)
		}
		if ch := s.flushToDiskLocked(holder, o, seg.info.Base+r.off, now); ch != nil {
			waits = append(waits, ch)
			offloads++
			continue
		}
		dst := s.placeOneLocked(o.size, []string{seg.info.Name})
		if dst == nil {
			continue
		}
		t := &task{client: holder, kind: wire.TaskKind_TASK_KIND_COPY, obj: o, oid: o.id, uid: o.uid, size: o.size,
			src: seg.info.Base + r.off, dst: dst, dropSource: r}
		s.queueTaskLocked(t, now)
		waits = append(waits, t.done)
		moved++
	}
	s.checkLocked()
	s.mu.Unlock()
	s.flushLog()
	s.log.Info("draining segment", "segment", seg.info.Name, "id", segmentID, "moves", moved, "offloads", offloads)
	timer := time.NewTimer(grace)
	defer timer.Stop()
wait:
	for _, ch := range waits {
		select {
		case <-ch:
		case <-timer.C:
			break wait
		case <-ctx.Done():
			break wait
		}
	}
	return s.UnmountSegment(clientID, segmentID)
}

// flushToDiskLocked makes sure o, whose only memory replica is at src in a
// segment of holder, gets a file on holder's disk tier: it returns the
// done channel of the offload in flight or of a new one, or nil when the
// tier cannot take it (none, full, or o's offload failed lately).
func (s *Service) flushToDiskLocked(holder *clientState, o *object, src uint64, now time.Time) chan struct{} {
	if holder == nil || holder.disk == nil || holder.disk.unmounted || !s.awaitingFileLocked(o, now) {
		return nil
	}
	if o.offloading {
		for _, t := range holder.tasks {
			if t.kind == wire.TaskKind_TASK_KIND_OFFLOAD && t.obj == o {
				return t.done
			}
		}
		return nil // offloaded by another holder of a replica
	}
	d := holder.disk
	need := diskFileBytes(o.size)
	d.used += need
	o.offloading = true
	t := &task{client: holder, kind: wire.TaskKind_TASK_KIND_OFFLOAD, obj: o, oid: o.id, uid: o.uid, size: o.size,
		src: src, disk: d, reserved: need}
	s.queueTaskLocked(t, now)
	return t.done
}

// placeOneLocked allocates one replica of size bytes on a segment not
// named in exclude (by the allocation strategy).
func (s *Service) placeOneLocked(size uint64, exclude []string) *replica {
	var out *replica
	s.pickSegmentsLocked(1, nil, exclude, func(seg *segment) bool {
		if seg.draining {
			return false
		}
		off, ok := seg.alloc.alloc(size)
		if !ok {
			return false
		}
		out = s.newReplicaLocked(seg, off, size)
		seg.replicas[out] = struct{}{}
		s.mu.used += alignedLen(size)
		return true
	})
	return out
}
