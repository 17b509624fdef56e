package master

import (
	"errors"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine/peerauth"
	"github.com/kvferry/kvferry/store/wire"
	"github.com/kvferry/kvferry/store/wire/coro"
	sp "github.com/kvferry/kvferry/store/wire/structpack"
)

// coroConn is a test client speaking coro_rpc with the codec, as
// Mooncake's MasterClient does.
type coroConn struct {
	t   *testing.T
	c   net.Conn
	seq uint32
}

func dialCoro(t *testing.T, addr string) *coroConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	assert.NilError(t, err)
	t.Cleanup(func() { c.Close() })
	return &coroConn{t: t, c: c}
}

// raw sends one request body for function id and returns the answer.
func (cc *coroConn) raw(id uint32, body []byte) coro.Response {
	cc.t.Helper()
	cc.seq++
	_ = cc.c.SetDeadline(time.Now().Add(10 * time.Second))
	_, err := cc.c.Write(coro.AppendRequest(nil, cc.seq, id, body, nil))
	assert.NilError(cc.t, err)
	resp, err := coro.ReadResponse(cc.c, 0)
	assert.NilError(cc.t, err)
	assert.Equal(cc.t, resp.Header.Seq, cc.seq)
	return resp
}

// call sends a with ac to m and decodes the answer with rc.
func call[A, R any](cc *coroConn, m coro.Method, ac sp.Codec[A], a A, rc sp.Codec[R]) R {
	cc.t.Helper()
	resp := cc.raw(m.ID, sp.Marshal(ac, &a))
	assert.NilError(cc.t, coro.ResponseError(resp), m.Name)
	r, err := sp.Unmarshal(rc, resp.Body, sp.Limits{})
	assert.NilError(cc.t, err, m.Name)
	return r
}

func callNoArgs[R any](cc *coroConn, m coro.Method, rc sp.Codec[R]) R {
	cc.t.Helper()
	resp := cc.raw(m.ID, nil)
	assert.NilError(cc.t, coro.ResponseError(resp), m.Name)
	r, err := sp.Unmarshal(rc, resp.Body, sp.Limits{})
	assert.NilError(cc.t, err, m.Name)
	return r
}

// TestCoroRPCMethods drives kvferry-master's coro_rpc service through
// every modelled method, as a Mooncake store client would, and checks that
// a kvferry (mux) client on the same port sees the same objects.
func TestCoroRPCMethods(t *testing.T) {
	srv, err := StartEmbedded(Config{})
	assert.NilError(t, err)
	defer srv.Close()
	cc := dialCoro(t, srv.Addr())

	cid := coro.UUID{Hi: 0x1111, Lo: 0x2222}
	segID := coro.UUID{Hi: 0x3333, Lo: 0x4444}
	const base, size = 0x7f0000000000, 64 << 20
	endpoint := "127.0.0.1:12345"
	tenant := wire.DefaultTenant

	ver := callNoArgs(cc, coro.MethodServiceReady, coro.ExpStringCodec)
	assert.DeepEqual(t, ver, coro.OK(coro.StoreVersion))

	// kvferry_master_info, the kvferry-only function store clients probe
	// with (mooncake_master answers it "function not registered").
	info := callNoArgs(cc, coro.MethodKvferryMasterInfo, coro.MasterInfoCodec)
	assert.Equal(t, info.Protocol, coro.MasterInfoProtocol)
	assert.Assert(t, slices.Contains(info.Features, "mux"), "features %v", info.Features)

	assert.DeepEqual(t, call(cc, coro.MethodMountSegment, coro.MountSegmentArgsCodec, coro.MountSegmentArgs{
		Segment:  coro.Segment{ID: segID, Name: endpoint, Base: base, Size: size, TEEndpoint: endpoint, Protocol: "tcp"},
		ClientID: cid}, coro.ExpVoidCodec), coro.OK(struct{}{}))

	ping := call(cc, coro.MethodPing, coro.UUIDCodec, cid, coro.ExpPingCodec)
	assert.Assert(t, ping.OK)
	assert.Equal(t, ping.Value.ClientStatus, coro.ClientOK)

	// MasterClient's heartbeat fetches tasks: kvferry-master has none to
	// give, and a completion report names a task it never assigned.
	tasks := call(cc, coro.MethodFetchTasks, coro.FetchTasksArgsCodec, coro.FetchTasksArgs{ClientID: cid, BatchSize: 8}, coro.ExpTasksCodec)
	assert.Assert(t, tasks.OK)
	assert.Equal(t, len(tasks.Value), 0)
	done := call(cc, coro.MethodMarkTaskToComplete, coro.MarkTaskToCompleteArgsCodec, coro.MarkTaskToCompleteArgs{ClientID: cid,
		Request: coro.TaskCompleteRequest{ID: coro.UUID{Hi: 9, Lo: 9}, Status: coro.TaskSuccess, Message: "done"}}, coro.ExpVoidCodec)
	assert.DeepEqual(t, done, coro.Fail[struct{}](coro.CodeTaskNotFound))

	// BatchQueryIp: the mounted client's host, an unknown client left out.
	assert.DeepEqual(t, call(cc, coro.MethodBatchQueryIP, coro.UUIDsCodec, []coro.UUID{cid, {Hi: 5}}, coro.ExpClientIPsCodec),
		coro.OK([]sp.KV[coro.UUID, []string]{{Key: cid, Value: []string{"127.0.0.1"}}}))

	// Segment status, by TE name and by id, as the drain tooling asks.
	assert.DeepEqual(t, call(cc, coro.MethodQuerySegmentStatus, sp.String, endpoint, coro.ExpSegmentStatusCodec),
		coro.OK(coro.SegmentStatus(SegmentOK)))
	assert.DeepEqual(t, call(cc, coro.MethodQuerySegmentStatusByID, coro.UUIDCodec, segID, coro.ExpSegmentStatusCodec),
		coro.OK(coro.SegmentStatus(SegmentOK)))
	assert.DeepEqual(t, call(cc, coro.MethodQuerySegmentStatus, sp.String, "nope:1", coro.ExpSegmentStatusCodec),
		coro.Fail[coro.SegmentStatus](coro.CodeSegmentNotFound))
	assert.DeepEqual(t, call(cc, coro.MethodQuerySegmentStatusByID, coro.UUIDCodec, coro.UUID{Hi: 7}, coro.ExpSegmentStatusCodec),
		coro.Fail[coro.SegmentStatus](coro.CodeSegmentNotFound))

	exist := func(key string) coro.ExpBool {
		return call(cc, coro.MethodExistKey, coro.KeyArgsCodec, coro.KeyArgs{Key: key, TenantID: tenant}, coro.ExpBoolCodec)
	}
	assert.DeepEqual(t, exist("k1"), coro.OK(false))

	// Put k1: one memory replica inside the mounted segment, then commit.
	start := call(cc, coro.MethodPutStart, coro.PutStartArgsCodec, coro.PutStartArgs{ClientID: cid, Key: "k1",
		SliceLength: 1024, Config: coro.ReplicateConfig{ReplicaNum: 1}, TenantID: tenant}, coro.ExpDescriptorsCodec)
	assert.Assert(t, start.OK, "put start: %d", start.Err)
	assert.Equal(t, len(start.Value), 1)
	d := start.Value[0]
	assert.Equal(t, d.Kind, coro.KindMemory)
	assert.Equal(t, d.Buffer.Size, uint64(1024))
	assert.Equal(t, d.Buffer.TransportEndpoint, endpoint)
	assert.Assert(t, d.Buffer.BufferAddress >= base && d.Buffer.BufferAddress+1024 <= base+size)
	assert.DeepEqual(t, call(cc, coro.MethodPutEnd, coro.PutEndArgsCodec, coro.PutEndArgs{ClientID: cid,
		Meta: coro.ObjectMeta{Key: "k1"}, ReplicaType: coro.ReplicaAll, TenantID: tenant}, coro.ExpVoidCodec), coro.OK(struct{}{}))
	assert.DeepEqual(t, exist("k1"), coro.OK(true))

	grl := call(cc, coro.MethodGetReplicaList, coro.KeyArgsCodec, coro.KeyArgs{Key: "k1", TenantID: tenant}, coro.ExpReplicaListCodec)
	assert.Assert(t, grl.OK)
	assert.Equal(t, len(grl.Value.Replicas), 1)
	assert.Equal(t, grl.Value.Replicas[0].Status, coro.StatusComplete)
	assert.Equal(t, grl.Value.Replicas[0].Buffer.BufferAddress, d.Buffer.BufferAddress)
	assert.Assert(t, grl.Value.LeaseTTLMs > 0)

	// A kvferry client on the same port sees the object a Mooncake client put.
	mux := wire.NewMuxClient(wire.MuxClientConfig{Addr: srv.Addr()})
	defer mux.Close()
	kl, err := mux.GetReplicaList(ctxT(t), &wire.KeyRequest{Key: "k1"})
	assert.NilError(t, err)
	assert.Equal(t, len(kl.GetReplicas()), 1)
	assert.Equal(t, kl.GetReplicas()[0].GetAddress(), d.Buffer.BufferAddress)
	assert.Equal(t, kl.GetReplicas()[0].GetSegmentName(), endpoint)

	// Objects are immutable: a second put of k1 fails OBJECT_ALREADY_EXISTS.
	again := call(cc, coro.MethodPutStart, coro.PutStartArgsCodec, coro.PutStartArgs{ClientID: cid, Key: "k1",
		SliceLength: 1024, Config: coro.ReplicateConfig{ReplicaNum: 1}, TenantID: tenant}, coro.ExpDescriptorsCodec)
	assert.DeepEqual(t, again, coro.Fail[[]coro.ReplicaDescriptor](coro.CodeObjectAlreadyExists))

	// Batch put of k2, k3.
	bs := call(cc, coro.MethodBatchPutStart, coro.BatchPutStartArgsCodec, coro.BatchPutStartArgs{ClientID: cid,
		Keys: []string{"k2", "k3"}, SliceLengths: []uint64{100, 200}, Config: coro.ReplicateConfig{ReplicaNum: 1}, TenantID: tenant},
		coro.BatchDescriptorsCodec)
	assert.Equal(t, len(bs), 2)
	assert.Assert(t, bs[0].OK && bs[1].OK)
	assert.Equal(t, bs[1].Value[0].Buffer.Size, uint64(200))
	be := call(cc, coro.MethodBatchPutEnd, coro.BatchPutEndArgsCodec, coro.BatchPutEndArgs{ClientID: cid,
		Metas: []coro.ObjectMeta{{Key: "k2"}, {Key: "k3"}}, ReplicaType: coro.ReplicaAll, TenantID: tenant}, coro.BatchVoidCodec)
	assert.DeepEqual(t, be, []coro.ExpVoid{coro.OK(struct{}{}), coro.OK(struct{}{})})
	bx := call(cc, coro.MethodBatchExistKey, coro.KeysArgsCodec, coro.KeysArgs{Keys: []string{"k2", "k3", "nope"}, TenantID: tenant},
		coro.BatchBoolCodec)
	assert.DeepEqual(t, bx, []coro.ExpBool{coro.OK(true), coro.OK(true), coro.OK(false)})
	bg := call(cc, coro.MethodBatchGetReplicaList, coro.KeysArgsCodec, coro.KeysArgs{Keys: []string{"k2", "nope"}, TenantID: tenant},
		coro.BatchReplicaListCodec)
	assert.Assert(t, bg[0].OK)
	assert.DeepEqual(t, bg[1], coro.Fail[coro.GetReplicaListResponse](coro.CodeObjectNotFound))

	// A revoked put leaves nothing behind.
	rs := call(cc, coro.MethodPutStart, coro.PutStartArgsCodec, coro.PutStartArgs{ClientID: cid, Key: "k4",
		SliceLength: 10, Config: coro.ReplicateConfig{ReplicaNum: 1}, TenantID: tenant}, coro.ExpDescriptorsCodec)
	assert.Assert(t, rs.OK)
	assert.DeepEqual(t, call(cc, coro.MethodPutRevoke, coro.PutRevokeArgsCodec, coro.PutRevokeArgs{ClientID: cid, Key: "k4",
		ReplicaType: coro.ReplicaAll, TenantID: tenant}, coro.ExpVoidCodec), coro.OK(struct{}{}))
	assert.DeepEqual(t, exist("k4"), coro.OK(false))

	// Removes: k1 is leased (GetReplicaList above), so only force removes it.
	rm := func(key string, force bool) coro.ExpVoid {
		return call(cc, coro.MethodRemove, coro.RemoveArgsCodec, coro.RemoveArgs{Key: key, Force: force, TenantID: tenant}, coro.ExpVoidCodec)
	}
	assert.DeepEqual(t, rm("k1", false), coro.Fail[struct{}](coro.CodeObjectHasLease))
	assert.DeepEqual(t, rm("k1", true), coro.OK(struct{}{}))
	assert.DeepEqual(t, rm("k1", true), coro.Fail[struct{}](coro.CodeObjectNotFound))
	rx := call(cc, coro.MethodGetReplicaListByRegex, coro.KeyArgsCodec, coro.KeyArgs{Key: "^k[23]$", TenantID: tenant}, coro.ExpRegexReplicasCodec)
	assert.Assert(t, rx.OK)
	assert.Equal(t, len(rx.Value), 2)
	for _, e := range rx.Value {
		assert.Assert(t, e.Key == "k2" || e.Key == "k3", e.Key)
		assert.Equal(t, len(e.Value), 1)
	}
	n := call(cc, coro.MethodRemoveByRegex, coro.RemoveArgsCodec, coro.RemoveArgs{Key: "^k[23]$", Force: true, TenantID: tenant}, coro.ExpInt64Codec)
	assert.DeepEqual(t, n, coro.OK(int64(2)))
	assert.DeepEqual(t, exist("k2"), coro.OK(false))

	// Upsert k5 twice: the second replaces the first.
	for range 2 {
		us := call(cc, coro.MethodUpsertStart, coro.PutStartArgsCodec, coro.PutStartArgs{ClientID: cid, Key: "k5",
			SliceLength: 64, Config: coro.ReplicateConfig{ReplicaNum: 1}, TenantID: tenant}, coro.ExpDescriptorsCodec)
		assert.Assert(t, us.OK, "upsert start: %d", us.Err)
		assert.DeepEqual(t, call(cc, coro.MethodUpsertEnd, coro.PutEndArgsCodec, coro.PutEndArgs{ClientID: cid,
			Meta: coro.ObjectMeta{Key: "k5"}, ReplicaType: coro.ReplicaAll, TenantID: tenant}, coro.ExpVoidCodec), coro.OK(struct{}{}))
	}
	br := call(cc, coro.MethodBatchRemove, coro.BatchRemoveArgsCodec, coro.BatchRemoveArgs{Keys: []string{"k5", "nope"}, Force: true, TenantID: tenant},
		coro.BatchVoidCodec)
	assert.DeepEqual(t, br, []coro.ExpVoid{coro.OK(struct{}{}), coro.Fail[struct{}](coro.CodeObjectNotFound)})

	// RemoveAll answers a bare count.
	for _, k := range []string{"a", "b"} {
		assert.Assert(t, call(cc, coro.MethodPutStart, coro.PutStartArgsCodec, coro.PutStartArgs{ClientID: cid, Key: k,
			SliceLength: 8, Config: coro.ReplicateConfig{ReplicaNum: 1}, TenantID: tenant}, coro.ExpDescriptorsCodec).OK)
		assert.Assert(t, call(cc, coro.MethodPutEnd, coro.PutEndArgsCodec, coro.PutEndArgs{ClientID: cid,
			Meta: coro.ObjectMeta{Key: k}, ReplicaType: coro.ReplicaAll, TenantID: tenant}, coro.ExpVoidCodec).OK)
	}
	assert.Equal(t, call(cc, coro.MethodRemoveAll, coro.RemoveAllArgsCodec, coro.RemoveAllArgs{Force: true, TenantID: tenant}, sp.Int64), int64(2))

	assert.DeepEqual(t, callNoArgs(cc, coro.MethodGetFsdir, coro.ExpStringCodec), coro.OK(""))
	sc := callNoArgs(cc, coro.MethodGetStorageConfig, coro.ExpStorageConfigCodec)
	assert.Assert(t, sc.OK)

	// Re-mount, then unmount the segment.
	assert.DeepEqual(t, call(cc, coro.MethodReMountSegment, coro.ReMountSegmentArgsCodec, coro.ReMountSegmentArgs{
		Segments: []coro.Segment{{ID: segID, Name: endpoint, Base: base, Size: size, TEEndpoint: endpoint, Protocol: "tcp"}},
		ClientID: cid}, coro.ExpVoidCodec), coro.OK(struct{}{}))
	assert.DeepEqual(t, call(cc, coro.MethodUnmountSegment, coro.UnmountSegmentArgsCodec, coro.UnmountSegmentArgs{
		SegmentID: segID, ClientID: cid}, coro.ExpVoidCodec), coro.OK(struct{}{}))
	segs, err := mux.ListSegments(ctxT(t), &wire.ListSegmentsRequest{})
	assert.NilError(t, err)
	assert.Equal(t, len(segs.GetSegments()), 0)
}

// TestCoroRPCErrors: an unknown function id and undecodable arguments are
// answered with coro_rpc errors on a connection that stays usable; a key
// over the master's limit is a store error; a malformed header closes the
// connection.
func TestCoroRPCErrors(t *testing.T) {
	srv, err := StartEmbedded(Config{MaxKeyBytes: 16})
	assert.NilError(t, err)
	defer srv.Close()
	cc := dialCoro(t, srv.Addr())

	var re *coro.RPCError
	resp := cc.raw(0xdeadbeef, nil)
	assert.Assert(t, errors.As(coro.ResponseError(resp), &re))
	assert.Equal(t, re.Code, coro.ErrcFunctionNotRegistered)

	resp = cc.raw(coro.MethodExistKey.ID, []byte{1, 2, 3, 4, 5})
	assert.Assert(t, errors.As(coro.ResponseError(resp), &re))
	assert.Equal(t, re.Code, coro.ErrcInvalidRPCArguments)

	resp = cc.raw(coro.MethodServiceReady.ID, []byte{1})
	assert.Assert(t, errors.As(coro.ResponseError(resp), &re))
	assert.Equal(t, re.Code, coro.ErrcInvalidRPCArguments)

	long := call(cc, coro.MethodExistKey, coro.KeyArgsCodec, coro.KeyArgs{Key: "0123456789abcdefg", TenantID: "default"}, coro.ExpBoolCodec)
	assert.DeepEqual(t, long, coro.Fail[bool](coro.CodeInvalidParams))

	// Still usable.
	assert.DeepEqual(t, callNoArgs(cc, coro.MethodServiceReady, coro.ExpStringCodec), coro.OK(coro.StoreVersion))

	// A header with another magic after the first request ends the
	// connection.
	bad := coro.AppendRequest(nil, 1, coro.MethodServiceReady.ID, nil, nil)
	bad[0] = 0x16
	_, err = cc.c.Write(bad)
	assert.NilError(t, err)
	_ = cc.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := cc.c.Read(make([]byte, 16))
	assert.Equal(t, n, 0)
	var ne net.Error
	assert.Assert(t, err != nil && !(errors.As(err, &ne) && ne.Timeout()), "read: %v", err)
}

// TestCoroRPCNeedsClusterKey: with a cluster key, a coro_rpc client (which
// cannot prove it) is refused before its first request is read, with a
// log line.
func TestCoroRPCNeedsClusterKey(t *testing.T) {
	ks, err := peerauth.ParseKeys([]byte("coro-test-cluster-key-0123456789abcdef"))
	assert.NilError(t, err)
	var logs lockedBuffer
	srv, err := StartEmbedded(Config{Auth: ks, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	assert.NilError(t, err)
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Addr())
	assert.NilError(t, err)
	defer c.Close()
	_, err = c.Write(coro.AppendRequest(nil, 1, coro.MethodServiceReady.ID, nil, nil))
	assert.NilError(t, err)
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err = coro.ReadResponse(c, 0)
	assert.Assert(t, err != nil)
	var ne net.Error
	assert.Assert(t, !(errors.As(err, &ne) && ne.Timeout()), "read: %v", err)
	assert.Assert(t, strings.Contains(logs.String(), "connection refused: peer not authenticated"), logs.String())
}
