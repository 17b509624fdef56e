package coro_test

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/store/wire/coro"
	sp "github.com/kvferry/kvferry/store/wire/structpack"
)

// restCall is one call of a method of rest.go, with the answer's codec.
type restCall struct {
	m    coro.Method
	call func(ctx context.Context, c *coro.Client) (any, error)
}

func rc[A, R any](m coro.Method, ac sp.Codec[A], a A, rc sp.Codec[R]) restCall {
	return restCall{m: m, call: func(ctx context.Context, c *coro.Client) (any, error) {
		return coro.Invoke(ctx, c, m, ac, &a, rc)
	}}
}

// restCalls are one call of each method of rest.go, with arguments of the
// server's parameter types.
func restCalls() []restCall {
	cid := coro.UUID{Hi: 0x77, Lo: 0x78}
	ck := coro.ClientKeyArgs{ClientID: cid, Key: "rest-nope", TenantID: "default"}
	nof := coro.NoFSegment{ID: coro.UUID{Hi: 0x79}, Name: "nof0", Size: 1 << 20, TEEndpoint: "127.0.0.1:1"}
	return []restCall{
		rc(coro.MethodBatchReplicaClear, coro.ReplicaClearArgsCodec, coro.ReplicaClearArgs{Keys: []string{"rest-nope"}, ClientID: cid}, coro.ExpStringsCodec),
		rc(coro.MethodCreateCopyTask, coro.CreateCopyTaskArgsCodec, coro.CreateCopyTaskArgs{Key: "rest-nope", TenantID: "default", Targets: []string{"x"}}, coro.ExpUUIDCodec),
		rc(coro.MethodCreateMoveTask, coro.CreateMoveTaskArgsCodec, coro.CreateMoveTaskArgs{Key: "rest-nope", TenantID: "default", Source: "a", Target: "b"}, coro.ExpUUIDCodec),
		rc(coro.MethodQueryTask, coro.UUIDCodec, coro.UUID{Hi: 1}, coro.ExpQueryTaskCodec),
		rc(coro.MethodCopyStart, coro.CopyStartArgsCodec, coro.CopyStartArgs{ClientID: cid, Key: "rest-nope", TenantID: "default", Source: "a", Targets: []string{"b"}}, coro.ExpCopyStartCodec),
		rc(coro.MethodDynamicReplicaCopyStart, coro.DynamicCopyStartArgsCodec, coro.DynamicCopyStartArgs{CopyStartArgs: coro.CopyStartArgs{ClientID: cid, Key: "rest-nope", TenantID: "default", Source: "a", Targets: []string{"b"}}, LeaseID: coro.UUID{Hi: 2}, Epoch: 1}, coro.ExpCopyStartCodec),
		rc(coro.MethodCopyEnd, coro.ClientKeyArgsCodec, ck, coro.ExpVoidCodec),
		rc(coro.MethodCopyRevoke, coro.ClientKeyArgsCodec, ck, coro.ExpVoidCodec),
		rc(coro.MethodDynamicReplicaCopyEnd, coro.DynamicCopyEndArgsCodec, coro.DynamicCopyEndArgs{ClientKeyArgs: ck, LeaseID: coro.UUID{Hi: 2}, Epoch: 1}, coro.ExpVoidCodec),
		rc(coro.MethodDynamicReplicaCopyRevoke, coro.DynamicCopyEndArgsCodec, coro.DynamicCopyEndArgs{ClientKeyArgs: ck, LeaseID: coro.UUID{Hi: 2}, Epoch: 1}, coro.ExpVoidCodec),
		rc(coro.MethodMoveStart, coro.MoveStartArgsCodec, coro.MoveStartArgs{ClientID: cid, Key: "rest-nope", TenantID: "default", Source: "a", Target: "b"}, coro.ExpMoveStartCodec),
		rc(coro.MethodMoveEnd, coro.ClientKeyArgsCodec, ck, coro.ExpVoidCodec),
		rc(coro.MethodMoveRevoke, coro.ClientKeyArgsCodec, ck, coro.ExpVoidCodec),
		rc(coro.MethodMountLocalDiskSegment, coro.ClientFlagArgsCodec, coro.ClientFlagArgs{ClientID: cid, Enable: true}, coro.ExpVoidCodec),
		rc(coro.MethodUnmountLocalDiskSegment, coro.UUIDCodec, cid, coro.ExpVoidCodec),
		rc(coro.MethodOffloadObjectHeartbeat, coro.ClientFlagArgsCodec, coro.ClientFlagArgs{ClientID: cid, Enable: true}, coro.ExpOffloadTasksCodec),
		rc(coro.MethodPollRemoveAll, coro.UUIDCodec, cid, coro.ExpBoolCodec),
		rc(coro.MethodReportSsdCapacity, coro.ReportSsdCapacityArgsCodec, coro.ReportSsdCapacityArgs{ClientID: cid, TotalBytes: 1 << 30}, coro.ExpVoidCodec),
		rc(coro.MethodNotifyOffloadSuccess, coro.NotifyOffloadSuccessArgsCodec, coro.NotifyOffloadSuccessArgs{ClientID: cid,
			Tasks: []coro.OffloadTaskItem{{TenantID: "default", Key: "rest-nope", Size: 1}}, Metadatas: []coro.StorageObjectMetadata{{DataSize: 1}}}, coro.ExpVoidCodec),
		rc(coro.MethodPromotionObjectHeartbeat, coro.UUIDCodec, cid, coro.ExpOffloadTasksCodec),
		rc(coro.MethodPromotionAllocStart, coro.PromotionAllocStartArgsCodec, coro.PromotionAllocStartArgs{ClientID: cid, Key: "rest-nope", TenantID: "default", Size: 1}, coro.ExpPromotionAllocCodec),
		rc(coro.MethodNotifyPromotionSuccess, coro.ClientKeyArgsCodec, ck, coro.ExpVoidCodec),
		rc(coro.MethodNotifyPromotionFailure, coro.ClientKeyArgsCodec, ck, coro.ExpVoidCodec),
		rc(coro.MethodEvictDiskReplica, coro.EvictDiskReplicaArgsCodec, coro.EvictDiskReplicaArgs{ClientID: cid, Key: "rest-nope", TenantID: "default"}, coro.ExpVoidCodec),
		rc(coro.MethodBatchEvictDiskReplica, coro.BatchEvictDiskReplicaArgsCodec, coro.BatchEvictDiskReplicaArgs{ClientID: cid, Keys: []string{"rest-nope"}, TenantID: "default"}, coro.BatchVoidCodec),
		rc(coro.MethodMountNoFSegment, coro.MountNoFSegmentArgsCodec, coro.MountNoFSegmentArgs{Segment: nof, ClientID: cid}, coro.ExpVoidCodec),
		rc(coro.MethodReMountNoFSegment, coro.ReMountNoFSegmentArgsCodec, coro.ReMountNoFSegmentArgs{Segments: []coro.NoFSegment{nof}, ClientID: cid}, coro.ExpVoidCodec),
		rc(coro.MethodUnmountNoFSegment, coro.UnmountSegmentArgsCodec, coro.UnmountSegmentArgs{SegmentID: nof.ID, ClientID: cid}, coro.ExpVoidCodec),
		{m: coro.MethodGetAllNoFSegments, call: func(ctx context.Context, c *coro.Client) (any, error) {
			return coro.InvokeNoArgs(ctx, c, coro.MethodGetAllNoFSegments, coro.ExpNoFSegmentsCodec)
		}},
		rc(coro.MethodGetNoFSegmentsByName, sp.String, "nof0", coro.ExpNoFOwnersCodec),
	}
}

// TestRestMethodsAgainstRealServer sends each method of rest.go, its
// arguments encoded by our codecs, to a real mooncake_master given with
// -coro.server: the master must take the arguments (coro_rpc checks their
// type hash; a mismatch is "invalid rpc arg") and its answer must decode
// with our codec (its type literal checked). It logs each answer; the
// names it passed are kept in testdata/mooncake-rest-verified.txt.
func TestRestMethodsAgainstRealServer(t *testing.T) {
	if *realServer == "" {
		t.Skip("runs only with -coro.server")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := coro.Dial(ctx, *realServer)
	assert.NilError(t, err)
	defer c.Close()
	for _, x := range restCalls() {
		got, err := x.call(ctx, c)
		assert.NilError(t, err, x.m.Name)
		t.Logf("verified %s: %+v", x.m.Name, got)
	}
}

// TestRestMethodsVerified: every method of rest.go was checked against
// the real master (the list TestRestMethodsAgainstRealServer's run gave),
// and the calls above cover them all.
func TestRestMethodsVerified(t *testing.T) {
	f, err := os.Open(filepath.Join("testdata", "mooncake-rest-verified.txt"))
	assert.NilError(t, err)
	defer f.Close()
	verified := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "#") {
			verified[l] = true
		}
	}
	assert.NilError(t, sc.Err())
	calls := restCalls()
	assert.Equal(t, len(calls), len(verified))
	for _, x := range calls {
		assert.Assert(t, verified[x.m.Name], "%s not verified against mooncake_master", x.m.Name)
		_, ok := coro.MethodByID(x.m.ID)
		assert.Assert(t, ok, x.m.Name)
	}
}
