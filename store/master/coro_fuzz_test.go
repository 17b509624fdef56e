package master

import (
	"bytes"
	"testing"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/store/wire/coro"
	sp "github.com/kvferry/kvferry/store/wire/structpack"
)

func check[T any](c sp.Codec[T]) func([]byte) error {
	return func(b []byte) error { _, err := sp.Unmarshal(c, b, sp.Limits{}); return err }
}

// coroAnswers decode each method's answer body.
var coroAnswers = map[string]func([]byte) error{
	"ServiceReady": check(coro.ExpStringCodec), "Ping": check(coro.ExpPingCodec),
	"MountSegment": check(coro.ExpVoidCodec), "ReMountSegment": check(coro.ExpVoidCodec),
	"UnmountSegment": check(coro.ExpVoidCodec), "GracefulUnmountSegment": check(coro.ExpVoidCodec),
	"ExistKey": check(coro.ExpBoolCodec), "BatchExistKey": check(coro.BatchBoolCodec),
	"GetReplicaList": check(coro.ExpReplicaListCodec), "BatchGetReplicaList": check(coro.BatchReplicaListCodec),
	"PutStart": check(coro.ExpDescriptorsCodec), "UpsertStart": check(coro.ExpDescriptorsCodec),
	"BatchPutStart": check(coro.BatchDescriptorsCodec), "BatchUpsertStart": check(coro.BatchDescriptorsCodec),
	"PutEnd": check(coro.ExpVoidCodec), "UpsertEnd": check(coro.ExpVoidCodec),
	"PutRevoke": check(coro.ExpVoidCodec), "UpsertRevoke": check(coro.ExpVoidCodec),
	"BatchPutEnd": check(coro.BatchVoidCodec), "BatchUpsertEnd": check(coro.BatchVoidCodec),
	"BatchPutRevoke": check(coro.BatchVoidCodec), "BatchUpsertRevoke": check(coro.BatchVoidCodec),
	"Remove": check(coro.ExpVoidCodec), "RemoveByRegex": check(coro.ExpInt64Codec),
	"RemoveAll": check(sp.Int64), "BatchRemove": check(coro.BatchVoidCodec),
	"GetReplicaListByRegex": check(coro.ExpRegexReplicasCodec), "GetFsdir": check(coro.ExpStringCodec), "GetStorageConfig": check(coro.ExpStorageConfigCodec),
	"FetchTasks": check(coro.ExpTasksCodec), "MarkTaskToComplete": check(coro.ExpVoidCodec),
	"QuerySegmentStatus": check(coro.ExpSegmentStatusCodec), "QuerySegmentStatusById": check(coro.ExpSegmentStatusCodec),
	"BatchQueryIp":      check(coro.ExpClientIPsCodec),
	"BatchReplicaClear": check(coro.ExpStringsCodec), "CreateCopyTask": check(coro.ExpUUIDCodec),
	"CreateMoveTask": check(coro.ExpUUIDCodec), "QueryTask": check(coro.ExpQueryTaskCodec),
	"CopyStart": check(coro.ExpCopyStartCodec), "DynamicReplicaCopyStart": check(coro.ExpCopyStartCodec),
	"CopyEnd": check(coro.ExpVoidCodec), "CopyRevoke": check(coro.ExpVoidCodec),
	"DynamicReplicaCopyEnd": check(coro.ExpVoidCodec), "DynamicReplicaCopyRevoke": check(coro.ExpVoidCodec),
	"MoveStart": check(coro.ExpMoveStartCodec), "MoveEnd": check(coro.ExpVoidCodec), "MoveRevoke": check(coro.ExpVoidCodec),
	"MountLocalDiskSegment": check(coro.ExpVoidCodec), "UnmountLocalDiskSegment": check(coro.ExpVoidCodec),
	"OffloadObjectHeartbeat": check(coro.ExpOffloadTasksCodec), "PollRemoveAll": check(coro.ExpBoolCodec),
	"ReportSsdCapacity": check(coro.ExpVoidCodec), "NotifyOffloadSuccess": check(coro.ExpVoidCodec),
	"PromotionObjectHeartbeat": check(coro.ExpOffloadTasksCodec), "PromotionAllocStart": check(coro.ExpPromotionAllocCodec),
	"NotifyPromotionSuccess": check(coro.ExpVoidCodec), "NotifyPromotionFailure": check(coro.ExpVoidCodec),
	"EvictDiskReplica": check(coro.ExpVoidCodec), "BatchEvictDiskReplica": check(coro.BatchVoidCodec),
	"MountNoFSegment": check(coro.ExpVoidCodec), "ReMountNoFSegment": check(coro.ExpVoidCodec),
	"UnmountNoFSegment": check(coro.ExpVoidCodec), "GetAllNoFSegments": check(coro.ExpNoFSegmentsCodec),
	"GetNoFSegmentsByName": check(coro.ExpNoFOwnersCodec),
}

// TestCoroAnswersCoverMethods: the fuzzer can check every method's answer
// (a method missing here would make it call a nil decoder).
func TestCoroAnswersCoverMethods(t *testing.T) {
	for _, m := range coro.Methods {
		_, ok := coroAnswers[m.Name]
		assert.Assert(t, ok, m.Name)
		_, ok = coroHandlers[m.ID]
		assert.Assert(t, ok, "no handler for %s", m.Name)
	}
}

// FuzzCoroCall runs arbitrary calls through the coro_rpc service of one
// master: the first byte picks the method, the rest is its body. Every
// answer is one well-formed response frame echoing the sequence number,
// and a successful one decodes as the method's answer type.
func FuzzCoroCall(f *testing.F) {
	cid := coro.UUID{Hi: 1, Lo: 2}
	idx := func(m coro.Method) byte {
		for i, x := range coro.Methods {
			if x == m {
				return byte(i)
			}
		}
		panic("unknown method " + m.Name)
	}
	seed := func(m coro.Method, body []byte) { f.Add(append([]byte{idx(m)}, body...)) }
	seed(coro.MethodServiceReady, nil)
	seed(coro.MethodMountSegment, sp.Marshal(coro.MountSegmentArgsCodec, &coro.MountSegmentArgs{
		Segment: coro.Segment{ID: coro.UUID{Hi: 3}, Name: "n", Base: 1 << 32, Size: 1 << 20, TEEndpoint: "127.0.0.1:1", Protocol: "tcp"}, ClientID: cid}))
	seed(coro.MethodPutStart, sp.Marshal(coro.PutStartArgsCodec, &coro.PutStartArgs{ClientID: cid, Key: "k", SliceLength: 100,
		Config: coro.ReplicateConfig{ReplicaNum: 1}, TenantID: "default"}))
	seed(coro.MethodPutEnd, sp.Marshal(coro.PutEndArgsCodec, &coro.PutEndArgs{ClientID: cid, Meta: coro.ObjectMeta{Key: "k"}, TenantID: "default"}))
	seed(coro.MethodGetReplicaList, sp.Marshal(coro.KeyArgsCodec, &coro.KeyArgs{Key: "k", TenantID: "default"}))
	seed(coro.MethodBatchPutStart, sp.Marshal(coro.BatchPutStartArgsCodec, &coro.BatchPutStartArgs{ClientID: cid, Keys: []string{"a", "b"},
		SliceLengths: []uint64{1, 2}, TenantID: "default"}))
	seed(coro.MethodRemoveByRegex, sp.Marshal(coro.RemoveArgsCodec, &coro.RemoveArgs{Key: "(", Force: true}))
	seed(coro.MethodPing, sp.Marshal(coro.UUIDCodec, &cid))
	seed(coro.MethodGracefulUnmountSegment, sp.Marshal(coro.GracefulUnmountSegmentArgsCodec, &coro.GracefulUnmountSegmentArgs{
		SegmentID: coro.UUID{Hi: 3}, ClientID: cid, GracePeriodMs: 1}))

	seed(coro.MethodBatchReplicaClear, sp.Marshal(coro.ReplicaClearArgsCodec, &coro.ReplicaClearArgs{Keys: []string{"k"}, ClientID: cid}))
	seed(coro.MethodCreateCopyTask, sp.Marshal(coro.CreateCopyTaskArgsCodec, &coro.CreateCopyTaskArgs{Key: "k", TenantID: "default",
		Targets: []string{"127.0.0.1:1"}}))
	seed(coro.MethodCreateMoveTask, sp.Marshal(coro.CreateMoveTaskArgsCodec, &coro.CreateMoveTaskArgs{Key: "k", TenantID: "default",
		Source: "127.0.0.1:1", Target: "127.0.0.1:2"}))
	seed(coro.MethodQueryTask, sp.Marshal(coro.UUIDCodec, &cid))
	seed(coro.MethodNotifyOffloadSuccess, sp.Marshal(coro.NotifyOffloadSuccessArgsCodec, &coro.NotifyOffloadSuccessArgs{ClientID: cid,
		Tasks: []coro.OffloadTaskItem{{Key: "k", Size: 1}}, Metadatas: []coro.StorageObjectMetadata{{DataSize: 1}}}))
	seed(coro.MethodBatchEvictDiskReplica, sp.Marshal(coro.BatchEvictDiskReplicaArgsCodec, &coro.BatchEvictDiskReplicaArgs{ClientID: cid,
		Keys: []string{"k"}, TenantID: "default"}))
	seed(coro.MethodReMountNoFSegment, sp.Marshal(coro.ReMountNoFSegmentArgsCodec, &coro.ReMountNoFSegmentArgs{
		Segments: []coro.NoFSegment{{ID: coro.UUID{Hi: 4}, Name: "n"}}, ClientID: cid}))

	srv, err := StartEmbedded(Config{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { srv.Close() })
	h := &coroServer{s: srv, lim: sp.Limits{MaxElements: 1 << 12}, maxKey: 256, maxBatch: 64}
	var seq uint32
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return
		}
		m := coro.Methods[int(b[0])%len(coro.Methods)]
		if m == coro.MethodGracefulUnmountSegment {
			return // waits for drains (bounded, but not for a fuzzer)
		}
		seq++
		out := h.call(nil, coro.Request{Header: coro.ReqHeader{Magic: coro.Magic, Seq: seq, FuncID: m.ID}, Body: b[1:]})
		resp, err := coro.ReadResponse(bytes.NewReader(out), 0)
		assert.NilError(t, err)
		assert.Equal(t, resp.Header.Seq, seq)
		assert.Equal(t, int(resp.Header.Length), len(out)-coro.RespHeaderBytes)
		if resp.Header.ErrCode != 0 {
			return
		}
		assert.NilError(t, coroAnswers[m.Name](resp.Body), m.Name)
	})
}
