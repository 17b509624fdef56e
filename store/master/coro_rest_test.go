package master

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/store/wire"
	"github.com/kvferry/kvferry/store/wire/coro"
	sp "github.com/kvferry/kvferry/store/wire/structpack"
)

// TestCoroRPCRestMethods drives the handlers beyond the put/get path:
// BatchReplicaClear, copy and move tasks (run by a kvferry client holding
// the source, reported through QueryTask), and the refusals of the
// client-driven copy, the SSD offload and the NVMe-oF RPCs, each with
// Mooncake's own error code.
func TestCoroRPCRestMethods(t *testing.T) {
	var logs lockedBuffer
	clk := newFakeClock()
	srv, err := StartEmbedded(Config{Logger: slog.New(slog.NewTextHandler(&logs, nil)), Clock: clk, DefaultKVLeaseTTL: time.Millisecond})
	assert.NilError(t, err)
	defer srv.Close()
	svc := srv.active.Load()
	cc := dialCoro(t, srv.Addr())
	tenant := wire.DefaultTenant

	// A Mooncake client (mc) and a kvferry client (kvc), a segment each.
	cid := coro.UUID{Hi: 0xa1, Lo: 0xa2}
	const mcSeg, kvSeg = "127.0.0.1:20001", "127.0.0.1:20002"
	assert.DeepEqual(t, call(cc, coro.MethodMountSegment, coro.MountSegmentArgsCodec, coro.MountSegmentArgs{
		Segment:  coro.Segment{ID: coro.UUID{Hi: 0xb1}, Name: mcSeg, Base: 1 << 40, Size: 16 << 20, TEEndpoint: mcSeg, Protocol: "tcp"},
		ClientID: cid}, coro.ExpVoidCodec), coro.OK(struct{}{}))
	assert.NilError(t, svc.MountSegment("kvc", SegmentInfo{ID: "kvc-seg", Name: kvSeg, Protocol: "tcp", Base: 1 << 41, Size: 16 << 20}))

	put := func(key, seg string) {
		t.Helper()
		s := call(cc, coro.MethodPutStart, coro.PutStartArgsCodec, coro.PutStartArgs{ClientID: cid, Key: key, SliceLength: 4096,
			Config: coro.ReplicateConfig{ReplicaNum: 1, PreferredSegment: seg}, TenantID: tenant}, coro.ExpDescriptorsCodec)
		assert.Assert(t, s.OK, "put start %s: %d", key, s.Err)
		assert.Equal(t, s.Value[0].Buffer.TransportEndpoint, seg)
		assert.DeepEqual(t, call(cc, coro.MethodPutEnd, coro.PutEndArgsCodec, coro.PutEndArgs{ClientID: cid,
			Meta: coro.ObjectMeta{Key: key}, ReplicaType: coro.ReplicaAll, TenantID: tenant}, coro.ExpVoidCodec), coro.OK(struct{}{}))
	}
	replicasOn := func(key string) []string {
		t.Helper()
		l := call(cc, coro.MethodGetReplicaList, coro.KeyArgsCodec, coro.KeyArgs{Key: key, TenantID: tenant}, coro.ExpReplicaListCodec)
		assert.Assert(t, l.OK, "%s: %d", key, l.Err)
		var on []string
		for _, r := range l.Value.Replicas {
			on = append(on, r.Buffer.TransportEndpoint)
		}
		return on
	}

	// Copy: the kvferry client holding the source gets the task; once it
	// reports it done, QueryTask says SUCCESS and both segments hold one.
	put("c1", kvSeg)
	ct := call(cc, coro.MethodCreateCopyTask, coro.CreateCopyTaskArgsCodec, coro.CreateCopyTaskArgs{Key: "c1", TenantID: tenant,
		Targets: []string{mcSeg}}, coro.ExpUUIDCodec)
	assert.Assert(t, ct.OK, "create copy task: %d", ct.Err)
	query := func(id coro.UUID) coro.QueryTaskResponse {
		t.Helper()
		q := call(cc, coro.MethodQueryTask, coro.UUIDCodec, id, coro.ExpQueryTaskCodec)
		assert.Assert(t, q.OK, "query task: %d", q.Err)
		assert.Equal(t, q.Value.ID, id)
		return q.Value
	}
	q := query(ct.Value)
	assert.Equal(t, q.Type, coro.TaskReplicaCopy)
	assert.Equal(t, q.Status, coro.TaskProcessing)
	assert.Assert(t, q.CreatedAtMsEpoch > 0)
	tasks, err := svc.FetchTasks(context.Background(), "kvc", nil, 0, 0)
	assert.NilError(t, err)
	assert.Equal(t, len(tasks), 1)
	assert.Equal(t, tasks[0].GetKind(), wire.TaskKind_TASK_KIND_COPY)
	assert.Equal(t, tasks[0].GetDstSegmentName(), mcSeg)
	_, err = svc.FetchTasks(context.Background(), "kvc", []TaskResult{{ID: tasks[0].GetId()}}, 0, 0)
	assert.NilError(t, err)
	assert.Equal(t, query(ct.Value).Status, coro.TaskSuccess)
	on := replicasOn("c1")
	assert.Equal(t, len(on), 2, "%v", on)

	// Move c2 from kvc's segment to mc's: a failed report fails the task
	// and the source replica stays.
	put("c2", kvSeg)
	mt := call(cc, coro.MethodCreateMoveTask, coro.CreateMoveTaskArgsCodec, coro.CreateMoveTaskArgs{Key: "c2", TenantID: tenant,
		Source: kvSeg, Target: mcSeg}, coro.ExpUUIDCodec)
	assert.Assert(t, mt.OK, "create move task: %d", mt.Err)
	assert.Equal(t, query(mt.Value).Type, coro.TaskReplicaMove)
	tasks, err = svc.FetchTasks(context.Background(), "kvc", nil, 0, 0)
	assert.NilError(t, err)
	assert.Equal(t, len(tasks), 1)
	_, err = svc.FetchTasks(context.Background(), "kvc", []TaskResult{{ID: tasks[0].GetId(), Err: wire.ErrTransferFail}}, 0, 0)
	assert.NilError(t, err)
	assert.Equal(t, query(mt.Value).Status, coro.TaskFailed)
	assert.DeepEqual(t, replicasOn("c2"), []string{kvSeg})
	// A move onto its own segment, a missing object, an unknown task.
	assert.DeepEqual(t, call(cc, coro.MethodCreateMoveTask, coro.CreateMoveTaskArgsCodec, coro.CreateMoveTaskArgs{Key: "c2",
		TenantID: tenant, Source: kvSeg, Target: kvSeg}, coro.ExpUUIDCodec), coro.Fail[coro.UUID](coro.CodeInvalidParams))
	assert.DeepEqual(t, call(cc, coro.MethodCreateCopyTask, coro.CreateCopyTaskArgsCodec, coro.CreateCopyTaskArgs{Key: "nope",
		TenantID: tenant, Targets: []string{mcSeg}}, coro.ExpUUIDCodec), coro.Fail[coro.UUID](coro.CodeObjectNotFound))
	assert.DeepEqual(t, call(cc, coro.MethodQueryTask, coro.UUIDCodec, coro.UUID{Hi: 1}, coro.ExpQueryTaskCodec),
		coro.Fail[coro.QueryTaskResponse](coro.CodeTaskNotFound))

	// BatchReplicaClear: c1's replica on mc's segment goes, c1 stays on
	// kvc's; with no segment, c3 goes whole; a missing key is skipped.
	// (Leased objects are skipped: the reads above leased c1 for 1 ms.)
	put("c3", mcSeg)
	clk.Advance(2 * time.Millisecond)
	cl := call(cc, coro.MethodBatchReplicaClear, coro.ReplicaClearArgsCodec, coro.ReplicaClearArgs{Keys: []string{"c1", "nope"},
		ClientID: cid, SegmentName: mcSeg}, coro.ExpStringsCodec)
	assert.DeepEqual(t, cl, coro.OK([]string{"c1"}))
	assert.DeepEqual(t, replicasOn("c1"), []string{kvSeg})
	clk.Advance(2 * time.Millisecond)
	cl = call(cc, coro.MethodBatchReplicaClear, coro.ReplicaClearArgsCodec, coro.ReplicaClearArgs{Keys: []string{"c3"}, ClientID: cid},
		coro.ExpStringsCodec)
	assert.DeepEqual(t, cl, coro.OK([]string{"c3"}))
	assert.DeepEqual(t, call(cc, coro.MethodExistKey, coro.KeyArgsCodec, coro.KeyArgs{Key: "c3", TenantID: tenant}, coro.ExpBoolCodec),
		coro.OK(false))
	// Another client's object is not cleared.
	none := call(cc, coro.MethodBatchReplicaClear, coro.ReplicaClearArgsCodec, coro.ReplicaClearArgs{Keys: []string{"c2"},
		ClientID: coro.UUID{Hi: 9}}, coro.ExpStringsCodec)
	assert.Assert(t, none.OK)
	assert.Equal(t, len(none.Value), 0)

	// Client-driven copy and move: NOT_SUPPORTED, logged.
	ck := coro.ClientKeyArgs{ClientID: cid, Key: "c1", TenantID: tenant}
	assert.DeepEqual(t, call(cc, coro.MethodCopyStart, coro.CopyStartArgsCodec, coro.CopyStartArgs{ClientID: cid, Key: "c1",
		TenantID: tenant, Source: kvSeg, Targets: []string{mcSeg}}, coro.ExpCopyStartCodec), coro.Fail[coro.CopyStartResponse](coro.CodeNotSupported))
	assert.DeepEqual(t, call(cc, coro.MethodDynamicReplicaCopyStart, coro.DynamicCopyStartArgsCodec, coro.DynamicCopyStartArgs{
		CopyStartArgs: coro.CopyStartArgs{ClientID: cid, Key: "c1"}, LeaseID: coro.UUID{Hi: 3}, Epoch: 2}, coro.ExpCopyStartCodec),
		coro.Fail[coro.CopyStartResponse](coro.CodeNotSupported))
	assert.DeepEqual(t, call(cc, coro.MethodMoveStart, coro.MoveStartArgsCodec, coro.MoveStartArgs{ClientID: cid, Key: "c1",
		TenantID: tenant, Source: kvSeg, Target: mcSeg}, coro.ExpMoveStartCodec), coro.Fail[coro.MoveStartResponse](coro.CodeNotSupported))
	for _, m := range []coro.Method{coro.MethodCopyEnd, coro.MethodCopyRevoke, coro.MethodMoveEnd, coro.MethodMoveRevoke} {
		assert.Equal(t, call(cc, m, coro.ClientKeyArgsCodec, ck, coro.ExpVoidCodec).Err, coro.CodeNotSupported, m.Name)
	}
	for _, m := range []coro.Method{coro.MethodDynamicReplicaCopyEnd, coro.MethodDynamicReplicaCopyRevoke} {
		assert.Equal(t, call(cc, m, coro.DynamicCopyEndArgsCodec, coro.DynamicCopyEndArgs{ClientKeyArgs: ck, Epoch: 1},
			coro.ExpVoidCodec).Err, coro.CodeNotSupported, m.Name)
	}
	assert.Assert(t, strings.Contains(logs.String(), "method=CopyStart"), logs.String())

	// SSD offload: as mooncake_master without --enable_offload.
	assert.DeepEqual(t, call(cc, coro.MethodMountLocalDiskSegment, coro.ClientFlagArgsCodec, coro.ClientFlagArgs{ClientID: cid, Enable: true},
		coro.ExpVoidCodec), coro.Fail[struct{}](coro.CodeUnableOffload))
	assert.DeepEqual(t, call(cc, coro.MethodUnmountLocalDiskSegment, coro.UUIDCodec, cid, coro.ExpVoidCodec),
		coro.Fail[struct{}](coro.CodeUnableOffload))
	assert.DeepEqual(t, call(cc, coro.MethodOffloadObjectHeartbeat, coro.ClientFlagArgsCodec, coro.ClientFlagArgs{ClientID: cid, Enable: true},
		coro.ExpOffloadTasksCodec), coro.Fail[[]coro.OffloadTaskItem](coro.CodeSegmentNotFound))
	assert.DeepEqual(t, call(cc, coro.MethodPollRemoveAll, coro.UUIDCodec, cid, coro.ExpBoolCodec), coro.Fail[bool](coro.CodeSegmentNotFound))
	assert.DeepEqual(t, call(cc, coro.MethodReportSsdCapacity, coro.ReportSsdCapacityArgsCodec, coro.ReportSsdCapacityArgs{ClientID: cid,
		TotalBytes: 1 << 30}, coro.ExpVoidCodec), coro.Fail[struct{}](coro.CodeSegmentNotFound))
	assert.DeepEqual(t, call(cc, coro.MethodNotifyOffloadSuccess, coro.NotifyOffloadSuccessArgsCodec, coro.NotifyOffloadSuccessArgs{
		ClientID: cid, Tasks: []coro.OffloadTaskItem{{TenantID: tenant, Key: "c1", Size: 4096}},
		Metadatas: []coro.StorageObjectMetadata{{BucketID: 1, DataSize: 4096, TransportEndpoint: mcSeg}}}, coro.ExpVoidCodec),
		coro.Fail[struct{}](coro.CodeSegmentNotFound))
	assert.DeepEqual(t, call(cc, coro.MethodPromotionObjectHeartbeat, coro.UUIDCodec, cid, coro.ExpOffloadTasksCodec),
		coro.Fail[[]coro.OffloadTaskItem](coro.CodeSegmentNotFound))
	assert.DeepEqual(t, call(cc, coro.MethodPromotionAllocStart, coro.PromotionAllocStartArgsCodec, coro.PromotionAllocStartArgs{
		ClientID: cid, Key: "c1", TenantID: tenant, Size: 4096}, coro.ExpPromotionAllocCodec),
		coro.Fail[coro.ReplicaDescriptor](coro.CodeReplicaNotFound))
	assert.DeepEqual(t, call(cc, coro.MethodNotifyPromotionSuccess, coro.ClientKeyArgsCodec, coro.ClientKeyArgs{ClientID: cid, Key: "nope",
		TenantID: tenant}, coro.ExpVoidCodec), coro.Fail[struct{}](coro.CodeObjectNotFound))
	assert.DeepEqual(t, call(cc, coro.MethodNotifyPromotionFailure, coro.ClientKeyArgsCodec, ck, coro.ExpVoidCodec),
		coro.Fail[struct{}](coro.CodeReplicaNotFound))
	assert.DeepEqual(t, call(cc, coro.MethodEvictDiskReplica, coro.EvictDiskReplicaArgsCodec, coro.EvictDiskReplicaArgs{ClientID: cid,
		Key: "c1", TenantID: tenant, ReplicaType: coro.ReplicaType(1)}, coro.ExpVoidCodec), coro.Fail[struct{}](coro.CodeReplicaNotFound))
	assert.DeepEqual(t, call(cc, coro.MethodBatchEvictDiskReplica, coro.BatchEvictDiskReplicaArgsCodec, coro.BatchEvictDiskReplicaArgs{
		ClientID: cid, Keys: []string{"c1", "nope"}, TenantID: tenant}, coro.BatchVoidCodec),
		[]coro.ExpVoid{coro.Fail[struct{}](coro.CodeReplicaNotFound), coro.Fail[struct{}](coro.CodeObjectNotFound)})

	// NVMe-oF segments: as mooncake_master built without them.
	nof := coro.NoFSegment{ID: coro.UUID{Hi: 0xc1}, Name: "nof0", Base: 0, Size: 1 << 30, TEEndpoint: mcSeg}
	assert.DeepEqual(t, call(cc, coro.MethodMountNoFSegment, coro.MountNoFSegmentArgsCodec, coro.MountNoFSegmentArgs{Segment: nof,
		ClientID: cid}, coro.ExpVoidCodec), coro.Fail[struct{}](coro.CodeUnavailableInCurrentMode))
	assert.DeepEqual(t, call(cc, coro.MethodReMountNoFSegment, coro.ReMountNoFSegmentArgsCodec, coro.ReMountNoFSegmentArgs{
		Segments: []coro.NoFSegment{nof}, ClientID: cid}, coro.ExpVoidCodec), coro.Fail[struct{}](coro.CodeUnavailableInCurrentMode))
	assert.DeepEqual(t, call(cc, coro.MethodUnmountNoFSegment, coro.UnmountSegmentArgsCodec, coro.UnmountSegmentArgs{SegmentID: nof.ID,
		ClientID: cid}, coro.ExpVoidCodec), coro.Fail[struct{}](coro.CodeUnavailableInCurrentMode))
	all := callNoArgs(cc, coro.MethodGetAllNoFSegments, coro.ExpNoFSegmentsCodec)
	assert.Assert(t, all.OK)
	assert.Equal(t, len(all.Value), 0)
	assert.DeepEqual(t, call(cc, coro.MethodGetNoFSegmentsByName, sp.String, "nof0", coro.ExpNoFOwnersCodec),
		coro.Fail[[]coro.NoFSegmentOwnerInfo](coro.CodeSegmentNotFound))
	assert.Assert(t, strings.Contains(logs.String(), "NVMe-oF segments are not supported"), logs.String())
}

// TestCoroRestArgsUndecodable: a body of the wrong type is "invalid rpc
// arg" for every new method, never a crash.
func TestCoroRestArgsUndecodable(t *testing.T) {
	srv, err := StartEmbedded(Config{})
	assert.NilError(t, err)
	defer srv.Close()
	cc := dialCoro(t, srv.Addr())
	for id := range restHandlers {
		m, ok := coro.MethodByID(id)
		assert.Assert(t, ok, "%#x", id)
		body := []byte{1, 2, 3, 4, 5}
		if m == coro.MethodGetAllNoFSegments {
			body = []byte{1}
		}
		resp := cc.raw(id, body)
		err := coro.ResponseError(resp)
		assert.Assert(t, err != nil, m.Name)
		assert.ErrorContains(t, err, "invalid rpc arg", m.Name)
	}
}
