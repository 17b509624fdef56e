package client

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"google.golang.org/grpc"

	"github.com/kvferry/kvferry/store/wire"
	"github.com/kvferry/kvferry/store/wire/coro"
)

// Copy and move tasks on a Mooncake master. mooncake_master assigns a task
// to the client holding its source replica, which polls FetchTasks about
// once a second, calls CopyStart (MoveStart) for the source and target
// descriptors, writes the bytes and ends with CopyEnd (MoveEnd) or the
// revoke, then reports MarkTaskToComplete (Mooncake client_service.cpp,
// PollAndDispatchTasks, Copy, Move). moonMaster.FetchTasks turns each
// target of such a task into a kvferry COPY task for the client's task
// loop, and the loop's results back into those calls.

// Mooncake task tunables.
const (
	moonTaskPoll  = time.Second // Mooncake's client polls FetchTasks once a second
	moonTaskBatch = 16          // tasks asked for per FetchTasks
)

// moonJob is one Mooncake task being run as kvferry COPY tasks.
type moonJob struct {
	id          coro.UUID
	client      coro.UUID
	move        bool
	tenant, key string
	left        int    // COPY tasks not yet reported (under moonMaster.mu)
	failed      string // the first failure, "" while none (under moonMaster.mu until left is 0)
}

// moonPayload is the JSON payload of a Mooncake task (task_manager.h
// ReplicaCopyPayload and ReplicaMovePayload).
type moonPayload struct {
	TenantID string   `json:"tenant_id"`
	Key      string   `json:"key"`
	Source   string   `json:"source"`
	Targets  []string `json:"targets"`
	Target   string   `json:"target"`
	LeaseHi  uint64   `json:"dynamic_replication_lease_id_high"`
	LeaseLo  uint64   `json:"dynamic_replication_lease_id_low"`
}

// FetchTasks reports the results of earlier COPY tasks (ending their
// Mooncake tasks when all of a task's copies are in), then polls
// Mooncake's FetchTasks every moonTaskPoll until it hands out a task or
// wait_ms passes (within ctx), and answers that task's copies.
func (m *moonMaster) FetchTasks(ctx context.Context, in *wire.FetchTasksRequest, _ ...grpc.CallOption) (*wire.FetchTasksResponse, error) {
	cid, err := parseID("fetch tasks client id", in.GetClientId())
	if err != nil {
		return nil, err
	}
	for _, r := range in.GetDone() {
		m.taskDone(ctx, r)
	}
	if in.GetWaitMs() == 0 {
		return &wire.FetchTasksResponse{}, nil
	}
	deadline := time.Now().Add(time.Duration(in.GetWaitMs()) * time.Millisecond)
	for {
		a := coro.FetchTasksArgs{ClientID: cid, BatchSize: moonTaskBatch}
		r, err := invoke(ctx, m, coro.MethodFetchTasks, coro.FetchTasksArgsCodec, &a, coro.ExpTasksCodec)
		if err != nil {
			return nil, err
		}
		if !r.OK {
			return nil, m.codeErr(coro.MethodFetchTasks, r.Err)
		}
		var out []*wire.Task
		for _, as := range r.Value {
			out = append(out, m.startTask(ctx, cid, as)...)
		}
		left := time.Until(deadline)
		if len(out) > 0 || left <= 0 {
			return &wire.FetchTasksResponse{Tasks: out}, nil
		}
		t := time.NewTimer(min(left, moonTaskPoll))
		select {
		case <-t.C:
		case <-m.done:
			t.Stop()
			return nil, fmt.Errorf("mooncake master %s: FetchTasks: %w", m.addr, ErrClosed)
		case <-ctx.Done():
			t.Stop()
			return nil, m.transportErr(ctx, coro.MethodFetchTasks, ctx.Err())
		}
	}
}

// startTask starts one Mooncake task: CopyStart or MoveStart, and one
// COPY task per target to write. A task that cannot start is reported
// FAILED at once; one with nothing to write ends at once.
func (m *moonMaster) startTask(ctx context.Context, cid coro.UUID, as coro.TaskAssignment) []*wire.Task {
	job := &moonJob{id: as.ID, client: cid, move: as.Type == coro.TaskReplicaMove}
	var p moonPayload
	if err := json.Unmarshal([]byte(as.Payload), &p); err != nil {
		m.completeTask(ctx, job, fmt.Sprintf("kvferry client: task payload: %v", err))
		return nil
	}
	job.tenant, job.key = p.TenantID, p.Key
	var src coro.ReplicaDescriptor
	var dsts []coro.ReplicaDescriptor
	switch {
	case as.Type != coro.TaskReplicaCopy && as.Type != coro.TaskReplicaMove:
		m.completeTask(ctx, job, fmt.Sprintf("kvferry client: task type %d is not supported", as.Type))
		return nil
	case p.LeaseHi != 0 || p.LeaseLo != 0:
		m.completeTask(ctx, job, "kvferry client: dynamic replica copies are not supported")
		return nil
	case job.move:
		a := coro.MoveStartArgs{ClientID: cid, Key: p.Key, TenantID: p.TenantID, Source: p.Source, Target: p.Target}
		r, err := invoke(ctx, m, coro.MethodMoveStart, coro.MoveStartArgsCodec, &a, coro.ExpMoveStartCodec)
		if err == nil && !r.OK {
			err = m.codeErr(coro.MethodMoveStart, r.Err)
		}
		if err != nil {
			m.completeTask(ctx, job, err.Error()) // nothing started: nothing to revoke
			return nil
		}
		src = r.Value.Source
		if r.Value.Target != nil {
			dsts = []coro.ReplicaDescriptor{*r.Value.Target}
		}
	default:
		a := coro.CopyStartArgs{ClientID: cid, Key: p.Key, TenantID: p.TenantID, Source: p.Source, Targets: nonNil(p.Targets)}
		r, err := invoke(ctx, m, coro.MethodCopyStart, coro.CopyStartArgsCodec, &a, coro.ExpCopyStartCodec)
		if err == nil && !r.OK {
			err = m.codeErr(coro.MethodCopyStart, r.Err)
		}
		if err != nil {
			m.completeTask(ctx, job, err.Error())
			return nil
		}
		src, dsts = r.Value.Source, r.Value.Targets
	}
	if len(dsts) == 0 {
		m.endTask(ctx, job)
		return nil
	}
	if src.Kind != coro.KindMemory {
		job.failed = "kvferry client: the source is no memory replica"
		m.endTask(ctx, job)
		return nil
	}
	out := make([]*wire.Task, 0, len(dsts))
	m.mu.Lock()
	job.left = len(dsts)
	for _, d := range dsts {
		m.mu.nextTask++
		id := m.mu.nextTask
		m.mu.jobs[id] = job
		out = append(out, &wire.Task{Id: id, Kind: wire.TaskKind_TASK_KIND_COPY, TenantId: p.TenantID, Key: p.Key,
			Size: src.Buffer.Size, SrcAddress: src.Buffer.BufferAddress, DstSegmentName: d.Buffer.TransportEndpoint,
			DstAddress: d.Buffer.BufferAddress})
	}
	m.mu.Unlock()
	return out
}

// taskDone takes one COPY task's result; the last of a job ends it.
func (m *moonMaster) taskDone(ctx context.Context, r *wire.TaskResult) {
	m.mu.Lock()
	job, ok := m.mu.jobs[r.GetId()]
	if ok {
		delete(m.mu.jobs, r.GetId())
		job.left--
		if r.GetCode() != 0 && job.failed == "" {
			job.failed = r.GetMessage()
			if job.failed == "" {
				job.failed = wire.Code(r.GetCode()).Error()
			}
		}
	}
	last := ok && job.left == 0
	m.mu.Unlock()
	if last {
		m.endTask(ctx, job)
	}
}

// endTask ends a started job: CopyEnd (MoveEnd) when every copy
// succeeded, else the revoke; then MarkTaskToComplete.
func (m *moonMaster) endTask(ctx context.Context, job *moonJob) {
	fn := coro.MethodCopyEnd
	switch {
	case job.move && job.failed == "":
		fn = coro.MethodMoveEnd
	case job.move:
		fn = coro.MethodMoveRevoke
	case job.failed != "":
		fn = coro.MethodCopyRevoke
	}
	a := coro.ClientKeyArgs{ClientID: job.client, Key: job.key, TenantID: job.tenant}
	r, err := invoke(ctx, m, fn, coro.ClientKeyArgsCodec, &a, coro.ExpVoidCodec)
	if err == nil && !r.OK {
		err = m.codeErr(fn, r.Err)
	}
	if err != nil && job.failed == "" {
		job.failed = err.Error()
	}
	m.completeTask(ctx, job, job.failed)
}

// completeTask reports a job SUCCESS (failed "") or FAILED. A report that
// does not arrive leaves the task to the master's own timeout.
func (m *moonMaster) completeTask(ctx context.Context, job *moonJob, failed string) {
	req := coro.TaskCompleteRequest{ID: job.id, Status: coro.TaskSuccess}
	if failed != "" {
		req.Status, req.Message = coro.TaskFailed, failed
	}
	a := coro.MarkTaskToCompleteArgs{ClientID: job.client, Request: req}
	_, _ = invoke(ctx, m, coro.MethodMarkTaskToComplete, coro.MarkTaskToCompleteArgsCodec, &a, coro.ExpVoidCodec)
}
