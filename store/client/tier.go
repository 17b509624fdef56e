package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/rpc"
	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/store/ssd"
	"github.com/kvferry/kvferry/store/wire"
)

// Tasks and the disk tier (store/master tasks.go, tier.go).
//
// A client that lends memory (or a disk tier) runs a task loop: it
// long-polls FetchTasks and runs what the master hands it, each kind on a
// bounded pool of workers: OFFLOAD (write a replica in its own segment to
// its disk tier), LOAD (read a file back into space of its own segment),
// DELETE (a file), COPY (a replica in its own segment into another
// segment, with the transfer engine: copy and move tasks, and the drain of
// a graceful unmount). Results go back at once on a short FetchTasks. The
// master names addresses; every one is checked to lie inside this
// client's mounted segment before a byte is touched.

// Task loop tunables.
const (
	taskPoll        = 10 * time.Second // one long poll
	taskRetry       = 200 * time.Millisecond
	diskMountBatch  = 4096 // entries per MountDiskSegment
	offloadWorkers  = 2    // the bounded writer pool of the disk tier
	loadWorkers     = 4
	copyWorkers     = 4
	deleteWorkers   = 1
	taskResultBatch = 256
)

// tasks runs the task loop's workers.
type tasks struct {
	offload, load, copy, del chan struct{} // worker slots
	results                  chan *wire.TaskResult
	wg                       sync.WaitGroup
}

func newTasks() *tasks {
	return &tasks{
		offload: make(chan struct{}, offloadWorkers), load: make(chan struct{}, loadWorkers),
		copy: make(chan struct{}, copyWorkers), del: make(chan struct{}, deleteWorkers),
		results: make(chan *wire.TaskResult, taskResultBatch),
	}
}

// openDisk opens the disk tier of cfg (New).
func (c *Client) openDisk() error {
	if c.cfg.SSDOffloadPath == "" {
		return nil
	}
	s, err := ssd.Open(ssd.Config{Dir: c.cfg.SSDOffloadPath, Capacity: c.cfg.SSDCapacity, Logger: c.log})
	if err != nil {
		return fmt.Errorf("store client: disk tier: %w", err)
	}
	c.disk = s
	return c.startDiskServer()
}

// mountDisk mounts the disk tier at the master with the files it holds,
// and deletes those the master says are stale.
func (c *Client) mountDisk(ctx context.Context, mc *masterConn) error {
	if c.disk == nil {
		return nil
	}
	seg := &wire.DiskSegment{Id: c.disk.ID(), Name: c.segName, Capacity: c.disk.Capacity(), Path: c.disk.Dir()}
	entries := c.disk.Entries()
	for first := true; first || len(entries) > 0; first = false {
		n := min(len(entries), diskMountBatch)
		batch := entries[:n]
		entries = entries[n:]
		req := &wire.MountDiskSegmentRequest{ClientId: c.clientID, Segment: seg}
		for _, e := range batch {
			req.Entries = append(req.Entries, &wire.DiskEntry{TenantId: e.Tenant, Key: e.Key, Uid: e.UID, Size: e.Size,
				FileBytes: e.FileBytes})
		}
		rctx, cancel := c.rpcCtx(ctx)
		resp, err := mc.mc.MountDiskSegment(rctx, req)
		cancel()
		if err != nil {
			return fmt.Errorf("mount disk tier at master %s: %w", mc.addr, c.rpcErr(err))
		}
		for _, i := range resp.GetDrop() {
			if int(i) < len(batch) {
				e := batch[i]
				c.disk.Delete(e.Tenant, e.Key, e.UID)
			}
		}
	}
	return nil
}

// startTasks starts the task loop (New, and the first segment mounted
// after it), when the client lends memory or disk; once.
func (c *Client) startTasks() {
	c.segMu.Lock()
	defer c.segMu.Unlock()
	if c.tasks != nil || (len(c.segments) == 0 && c.disk == nil) || c.closed.Load() {
		return
	}
	c.tasks = newTasks()
	c.wg.Add(2)
	go c.pollTasks()   // owned by c; stops on Close
	go c.reportTasks() // owned by c; stops on Close
}

// pollTasks long-polls FetchTasks and runs what comes.
func (c *Client) pollTasks() {
	defer c.wg.Done()
	for c.ctx.Err() == nil {
		mc := c.conn.Load()
		if mc == nil {
			return
		}
		ctx, cancel := context.WithTimeout(c.ctx, taskPoll+c.cfg.RPCTimeout)
		resp, err := mc.mc.FetchTasks(ctx, &wire.FetchTasksRequest{ClientId: c.clientID, WaitMs: uint32(taskPoll / time.Millisecond)})
		cancel()
		if err != nil {
			select {
			case <-c.ctx.Done():
			case <-time.After(taskRetry):
			}
			continue
		}
		c.runTasks(resp.GetTasks())
	}
}

// reportTasks sends results back as they come, several at a time.
func (c *Client) reportTasks() {
	defer c.wg.Done()
	for {
		var done []*wire.TaskResult
		select {
		case <-c.ctx.Done():
			return
		case r := <-c.tasks.results:
			done = append(done, r)
		}
	more:
		for len(done) < taskResultBatch {
			select {
			case r := <-c.tasks.results:
				done = append(done, r)
			default:
				break more
			}
		}
		mc := c.conn.Load()
		if mc == nil {
			return
		}
		ctx, cancel := c.rpcCtx(c.ctx)
		resp, err := mc.mc.FetchTasks(ctx, &wire.FetchTasksRequest{ClientId: c.clientID, Done: done})
		cancel()
		if err != nil {
			// The master went away: it failed these tasks already, or
			// will when their deadline passes.
			c.log.Debug("task results not delivered", "results", len(done), "err", wire.FromStatus(err))
			continue
		}
		c.runTasks(resp.GetTasks())
	}
}

// runTasks hands each task to a worker of its kind; it blocks while all
// of them are busy (the master hands out no more than it bounds).
func (c *Client) runTasks(ts []*wire.Task) {
	for _, t := range ts {
		var slots chan struct{}
		switch t.GetKind() {
		case wire.TaskKind_TASK_KIND_OFFLOAD:
			slots = c.tasks.offload
		case wire.TaskKind_TASK_KIND_LOAD:
			slots = c.tasks.load
		case wire.TaskKind_TASK_KIND_COPY:
			slots = c.tasks.copy
		default:
			slots = c.tasks.del
		}
		select {
		case slots <- struct{}{}:
		case <-c.ctx.Done():
			return
		}
		c.tasks.wg.Add(1)
		go func() { // owned by c (tasks.wg, waited for in teardown)
			defer c.tasks.wg.Done()
			defer func() { <-slots }()
			res := c.runTask(t)
			select {
			case c.tasks.results <- res:
			case <-c.ctx.Done():
			}
		}()
	}
}

// runTask does one task and returns its result.
func (c *Client) runTask(t *wire.Task) *wire.TaskResult {
	res := &wire.TaskResult{Id: t.GetId()}
	err := func() error {
		switch t.GetKind() {
		case wire.TaskKind_TASK_KIND_OFFLOAD:
			if c.disk == nil {
				return fmt.Errorf("no disk tier: %w", wire.ErrNotSupported)
			}
			src, release, err := c.ownRange(t.GetSrcAddress(), t.GetSize())
			if err != nil {
				return err
			}
			defer release()
			fb, err := c.disk.Write(t.GetTenantId(), t.GetKey(), t.GetUid(), src)
			res.FileBytes = fb
			if err == nil {
				c.metrics.offloads.Add(1)
			}
			return err
		case wire.TaskKind_TASK_KIND_LOAD:
			if c.disk == nil {
				return fmt.Errorf("no disk tier: %w", wire.ErrNotSupported)
			}
			dst, release, err := c.ownRange(t.GetDstAddress(), t.GetSize())
			if err != nil {
				return err
			}
			defer release()
			if err := c.disk.Read(t.GetTenantId(), t.GetKey(), t.GetUid(), dst); err != nil {
				return err
			}
			c.metrics.diskLoads.Add(1)
			return nil
		case wire.TaskKind_TASK_KIND_DELETE:
			if c.disk != nil {
				c.disk.Delete(t.GetTenantId(), t.GetKey(), t.GetUid())
			}
			return nil
		case wire.TaskKind_TASK_KIND_COPY:
			return c.copyReplica(t)
		}
		return fmt.Errorf("task kind %v: %w", t.GetKind(), wire.ErrNotSupported)
	}()
	if err != nil {
		res.Code, res.Message = int32(wire.CodeOf(err)), err.Error()
		if res.Code == 0 {
			res.Code = int32(wire.ErrInternal)
		}
	}
	return res
}

// copyReplica writes a replica in this client's segment into the target
// the master allocated (a copy, a move or a drain).
func (c *Client) copyReplica(t *wire.Task) error {
	_, release, err := c.ownRange(t.GetSrcAddress(), t.GetSize())
	if err != nil {
		return err
	}
	defer release()
	if t.GetDstSegmentName() == c.segName {
		_, releaseDst, err := c.ownRange(t.GetDstAddress(), t.GetSize())
		if err != nil {
			return err
		}
		defer releaseDst()
		cmem.Copy(uintptr(t.GetDstAddress()), uintptr(t.GetSrcAddress()), t.GetSize())
		return nil
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.RPCTimeout)
	defer cancel()
	rep := &wire.Replica{SegmentName: t.GetDstSegmentName(), Address: t.GetDstAddress(), Size: t.GetSize()}
	ids, err := c.open(ctx, []*wire.Replica{rep})
	if err != nil {
		return err
	}
	return c.transfer(ctx, []engine.Request{{Op: engine.OpWrite, Source: uintptr(t.GetSrcAddress()), Target: ids[0],
		TargetOffset: t.GetDstAddress(), Length: t.GetSize()}}, []*wire.Replica{rep})
}

// promote asks the master to bring key back into memory from a disk
// replica and returns its memory replicas.
//
// A holder whose memory has no room yet (NO_AVAILABLE_HANDLE: it holds
// leased objects; promoted copies are leased briefly), or whose loaded copy
// was evicted before the master leased it (REPLICA_IS_NOT_READY), is asked again,
// after pauses that grow from allocRetryMin to allocRetry, until
// RPCTimeout has passed.
func (c *Client) promote(ctx context.Context, key string) ([]*wire.Replica, error) {
	var resp *wire.GetReplicaListResponse
	deadline := time.Now().Add(c.cfg.RPCTimeout)
	pause := allocRetryMin
	var err error
	for {
		err = c.readCall(func(mc *masterConn) error {
			rctx, cancel := context.WithTimeout(ctx, c.cfg.RPCTimeout+promoteWait)
			defer cancel()
			var err error
			resp, err = mc.mc.PromoteObject(rctx, &wire.KeyRequest{TenantId: c.tenant, Key: key})
			return c.rpcErr(err)
		})
		// No room yet, or the loaded copy was evicted before the master
		// leased it to us (another promotion needed the room): ask again.
		code := wire.CodeOf(err)
		if (code != wire.ErrNoAvailableHandle && code != wire.ErrReplicaIsNotReady) || !time.Now().Add(pause).Before(deadline) {
			break
		}
		c.metrics.promoteWaits.Add(1)
		if !c.pause(ctx, &pause) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("get %q: promote from disk: %w", key, err)
	}
	c.metrics.promotions.Add(1)
	return c.readOrder(nil, resp.GetReplicas()), nil
}

// promoteWait is the extra time a promotion may take (a file read).
const promoteWait = 30 * time.Second

// onDisk reports whether reps has a LOCAL_DISK replica.
func onDisk(reps []*wire.Replica) bool {
	for _, r := range reps {
		if r.GetKind() == wire.ReplicaKind_REPLICA_KIND_LOCAL_DISK {
			return true
		}
	}
	return false
}

// memoryReplicas appends to dst the MEMORY replicas of reps (readOrder),
// or returns those of a promotion when reps has none but a disk replica;
// then *start becomes the time the promotion was asked for (its answer
// granted a new lease).
func (c *Client) memoryReplicas(ctx context.Context, key string, dst, reps []*wire.Replica, start *time.Time) ([]*wire.Replica, error) {
	mem := c.readOrder(dst, reps)
	if len(mem) > 0 || !onDisk(reps) {
		return mem, nil
	}
	asked := time.Now()
	mem, err := c.promote(ctx, key)
	if err == nil {
		*start = asked
	} else {
		c.logDiskFailure(key, err)
	}
	return mem, err
}

// The read path of a disk replica (issue 32).
//
// An object whose only replicas are files is read from a file, never
// through a memory that may be full of leased objects:
//
//   - a file in this client's own disk tier is read straight into the
//     caller's buffer (host memory, one contiguous range), or through one
//     temporary buffer (GPU memory, several buffers);
//   - a file on another client (the holder) is read the way Mooncake's
//     offload RPC does it (diskserve.go): the holder reads it into its serve
//     buffer, this client pulls the bytes with the transfer engine and
//     releases the room. A busy serve buffer (NO_AVAILABLE_HANDLE) is asked
//     again with growing pauses until RPCTimeout has passed; a holder that
//     dies or stalls fails the read within the same deadline.
//
// Promotion into the holder's memory (PromoteObject) remains for the
// objects a holder does not serve: an object larger than its serve buffer,
// or a holder that serves no disk reads (another client of a shared engine
// serves them, or an older build). A failure there returns the master's
// code (NO_AVAILABLE_HANDLE when the holder's memory cannot take it), never
// an empty value.

// readDisk reads key from a file when reps says its only replicas are
// files: from this client's disk tier, else from a holder's. served is
// false when it is no such object, or when the holder does not serve the
// read (the caller asks for a promotion).
func (c *Client) readDisk(ctx context.Context, key string, uid, size uint64, reps []*wire.Replica, d span) (served bool, err error) {
	if served, err := c.readOwnDisk(key, uid, size, reps, d); served {
		return true, err
	}
	return c.readRemoteDisk(ctx, key, uid, size, reps, d)
}

// remoteDiskReplica returns a complete LOCAL_DISK replica of reps on
// another client, when reps has no complete memory replica; nil otherwise.
func (c *Client) remoteDiskReplica(reps []*wire.Replica) *wire.Replica {
	var far *wire.Replica
	for _, r := range reps {
		if r.GetStatus() != wire.ReplicaStatus_REPLICA_STATUS_COMPLETE {
			continue
		}
		switch r.GetKind() {
		case wire.ReplicaKind_REPLICA_KIND_MEMORY:
			return nil
		case wire.ReplicaKind_REPLICA_KIND_LOCAL_DISK:
			if far == nil && r.GetSegmentName() != c.segName && (c.disk == nil || r.GetSegmentId() != c.disk.ID()) {
				far = r
			}
		}
	}
	return far
}

// readRemoteDisk reads key (version uid, size bytes) from the file of its
// holder into d, through the holder's serve buffer (diskserve.go).
func (c *Client) readRemoteDisk(ctx context.Context, key string, uid, size uint64, reps []*wire.Replica, d span) (bool, error) {
	rep := c.remoteDiskReplica(reps)
	if rep == nil {
		return false, nil
	}
	tenant, err := wire.TenantID(c.tenant)
	if err != nil {
		return true, fmt.Errorf("get %q: %w", key, err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RPCTimeout)
	defer cancel()
	err = c.pullDiskFile(ctx, rep, diskRead{uid: uid, size: size, tenant: tenant, disk: rep.GetSegmentId(), key: key}, d)
	switch code := wire.CodeOf(err); {
	case err == nil:
		c.metrics.remoteDiskReads.Add(1)
		c.metrics.remoteDiskReadBytes.Add(size)
		return true, nil
	case code == wire.ErrNotSupported || code == wire.ErrInvalidParams:
		// Not served there (no server, or larger than its buffer): a
		// promotion may still bring it into the holder's memory.
		c.log.Debug("disk replica not served by its holder, promoting", "key", key, "segment", rep.GetSegmentName(), "err", err)
		return false, nil
	}
	c.logDiskFailure(key, err)
	return true, fmt.Errorf("get %q: read from the disk of %s: %w", key, rep.GetSegmentName(), err)
}

// pullDiskFile asks the holder of rep to read req into its serve buffer,
// reads the bytes into d with the transfer engine and releases the room.
// A busy buffer is asked again, with growing pauses, until ctx is done.
func (c *Client) pullDiskFile(ctx context.Context, rep *wire.Replica, req diskRead, d span) error {
	ids, err := c.open(ctx, []*wire.Replica{rep})
	if err != nil {
		return err
	}
	pause := allocRetryMin
	body := make([]byte, 0, diskReadHeader+len(req.tenant)+len(req.disk)+len(req.key))
	for {
		asked := time.Now()
		dl, _ := ctx.Deadline()
		req.leaseMs = uint32(max(time.Until(dl), 0) / time.Millisecond)
		raw, err := c.e.CallPeer(ctx, ids[0], rpc.TypeStore, req.append(body[:0]))
		if err != nil {
			_ = c.e.RemoveSegment(rep.GetSegmentName()) // a restarted holder is looked up afresh
			code := wire.ErrRPCFail
			if ctx.Err() != nil {
				code = wire.ErrRPCTimeout
			}
			return fmt.Errorf("ask %s for its file: %v: %w", rep.GetSegmentName(), err, code)
		}
		r, err := decodeDiskReply(raw)
		if err == nil {
			err = r.err()
		}
		if wire.CodeOf(err) == wire.ErrNoAvailableHandle {
			c.metrics.remoteDiskWaits.Add(1)
			if c.pause(ctx, &pause) {
				continue
			}
			return fmt.Errorf("%w (until the deadline)", err)
		}
		if err != nil {
			return err
		}
		src := &wire.Replica{SegmentName: rep.GetSegmentName(), Address: r.addr, Size: req.size}
		err = c.readReplica(ctx, src, d, req.size)
		if err == nil && time.Since(asked) >= time.Duration(req.leaseMs)*time.Millisecond {
			err = fmt.Errorf("pull from %s outlasted its grant's lease: %w", rep.GetSegmentName(), wire.ErrLeaseExpired)
		}
		c.releaseDiskGrant(ids[0], rep.GetSegmentName(), r.token)
		return err
	}
}

// releaseDiskGrant gives a grant of a holder's serve buffer back (best
// effort: an unreleased grant lapses after its lease).
func (c *Client) releaseDiskGrant(id engine.SegmentID, holder string, token uint64) {
	ctx, cancel := context.WithTimeout(c.ctx, min(c.cfg.RPCTimeout, time.Second))
	defer cancel()
	var b [9]byte
	if _, err := c.e.CallPeer(ctx, id, rpc.TypeStore, appendDiskRelease(b[:0], token)); err != nil {
		c.log.Debug("disk grant not released", "segment", holder, "err", err)
	}
}

// ownDiskReplica returns the complete LOCAL_DISK replica of reps that is a
// file of this client's disk tier, when reps has no memory replica; nil
// otherwise.
func (c *Client) ownDiskReplica(reps []*wire.Replica) *wire.Replica {
	if c.disk == nil {
		return nil
	}
	var own *wire.Replica
	for _, r := range reps {
		switch {
		case r.GetKind() == wire.ReplicaKind_REPLICA_KIND_MEMORY && r.GetStatus() == wire.ReplicaStatus_REPLICA_STATUS_COMPLETE:
			return nil
		case r.GetKind() == wire.ReplicaKind_REPLICA_KIND_LOCAL_DISK && r.GetSegmentId() == c.disk.ID() &&
			r.GetStatus() == wire.ReplicaStatus_REPLICA_STATUS_COMPLETE:
			own = r
		}
	}
	return own
}

// readOwnDisk reads key (version uid, size bytes) from this client's disk
// tier into d, when reps says its only replicas are files and one is
// here. served is false when the object is not such a one (the caller
// reads it from memory, or asks for a promotion).
func (c *Client) readOwnDisk(key string, uid, size uint64, reps []*wire.Replica, d span) (served bool, err error) {
	if c.ownDiskReplica(reps) == nil {
		return false, nil
	}
	if err := c.readFile(key, uid, size, d); err != nil {
		c.logDiskFailure(key, err)
		return true, fmt.Errorf("get %q: read from the disk tier: %w", key, err)
	}
	c.metrics.diskReads.Add(1)
	c.metrics.diskReadBytes.Add(size)
	return true, nil
}

// readFile reads the file of key into d: into d's memory when it is one
// range of host memory, else through a temporary buffer.
func (c *Client) readFile(key string, uid, size uint64, d span) error {
	if d.size < size {
		return fmt.Errorf("buffer of %d bytes for %d: %w", d.size, size, wire.ErrInvalidParams)
	}
	tenant, err := wire.TenantID(c.tenant)
	if err != nil {
		return err
	}
	switch {
	case d.gpu == nil && d.parts == nil && d.buf != nil:
		return c.disk.Read(tenant, key, uid, d.buf[:size])
	case d.gpu == nil && d.parts == nil && d.addr != 0:
		return c.disk.Read(tenant, key, uid, cmem.Bytes(d.addr, size))
	}
	m, err := cmem.MapAnon(size)
	if err != nil {
		return fmt.Errorf("temporary buffer of %d bytes: %v: %w", size, err, wire.ErrInternal)
	}
	defer m.Close()
	if err := c.disk.Read(tenant, key, uid, m.Bytes()[:size]); err != nil {
		return err
	}
	return d.copyFrom(0, m.Addr(), size)
}

// diskLogInterval is how often a failing disk-replica read is logged (the
// others are counted in GetErrors).
const diskLogInterval = 10 * time.Second

// logDiskFailure logs, at most once per diskLogInterval, that an existing
// object could not be served from its disk replica, with the cause.
func (c *Client) logDiskFailure(key string, err error) {
	now := time.Now().UnixNano()
	last := c.diskLogAt.Load()
	if now-last < int64(diskLogInterval) || !c.diskLogAt.CompareAndSwap(last, now) {
		return
	}
	c.log.Warn("disk replica not served", "key", key, "code", wire.CodeOf(err), "err", err)
}

// ErrNoDiskTier is returned by DiskTier on a client without one.
var ErrNoDiskTier = errors.New("store client: no disk tier")

// DiskTier returns the client's disk tier (ErrNoDiskTier without one).
func (c *Client) DiskTier() (*ssd.Store, error) {
	if c.disk == nil {
		return nil, ErrNoDiskTier
	}
	return c.disk, nil
}

// ---------------------------------------------------------------------------
// Copy and move tasks (Mooncake's CreateCopyTask, CreateMoveTask, QueryTask)

// CreateCopyTask starts copying the object of key to every segment in
// targets (transfer-engine segment names) and returns the task's id. The
// holder of a replica does the copy; QueryTask follows it.
func (c *Client) CreateCopyTask(ctx context.Context, key string, targets []string) (string, error) {
	return c.createTask(ctx, key, wire.TaskKind_TASK_KIND_COPY, "", targets)
}

// CreateMoveTask starts moving the object's replica on segment source to
// segment target and returns the task's id.
func (c *Client) CreateMoveTask(ctx context.Context, key, source, target string) (string, error) {
	return c.createTask(ctx, key, wire.TaskKind_TASK_KIND_MOVE, source, []string{target})
}

func (c *Client) createTask(ctx context.Context, key string, kind wire.TaskKind, source string, targets []string) (string, error) {
	mc, err := c.master()
	if err != nil {
		return "", err
	}
	rctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	resp, err := mc.mc.CreateTask(rctx, &wire.CreateTaskRequest{TenantId: c.tenant, Key: key, Kind: kind, Source: source,
		Targets: targets})
	if err != nil {
		return "", fmt.Errorf("create %v task for %q: %w", kind, key, c.rpcErr(err))
	}
	return resp.GetTaskId(), nil
}

// TaskInfo is the state of a copy or move task (Mooncake's
// QueryTaskResponse).
type TaskInfo struct {
	ID string
	// Move is false for a copy.
	Move bool
	// Status is PENDING, PROCESSING, SUCCESS or FAILED.
	Status         string
	Created        time.Time
	Updated        time.Time
	AssignedClient string
	Message        string
}

// QueryTask returns the state of a copy or move task.
func (c *Client) QueryTask(ctx context.Context, id string) (TaskInfo, error) {
	var resp *wire.QueryTaskResponse
	err := c.readCall(func(mc *masterConn) error {
		rctx, cancel := c.rpcCtx(ctx)
		defer cancel()
		var err error
		resp, err = mc.mc.QueryTask(rctx, &wire.QueryTaskRequest{TaskId: id})
		return c.rpcErr(err)
	})
	if err != nil {
		return TaskInfo{}, fmt.Errorf("query task %q: %w", id, err)
	}
	return TaskInfo{ID: resp.GetId(), Move: resp.GetType() == wire.TaskKind_TASK_KIND_MOVE,
		Status:  strings.TrimPrefix(resp.GetStatus().String(), "TASK_STATUS_"),
		Created: time.UnixMilli(resp.GetCreatedAtMsEpoch()), Updated: time.UnixMilli(resp.GetLastUpdatedAtMsEpoch()),
		AssignedClient: resp.GetAssignedClient(), Message: resp.GetMessage()}, nil
}
