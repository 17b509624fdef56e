package master

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine/metadata/etcd/etcdtest"
	"github.com/kvferry/kvferry/internal/testutil"
	"github.com/kvferry/kvferry/store/ha"
	"github.com/kvferry/kvferry/store/wire"
)

func TestMain(m *testing.M) {
	os.Exit(testutil.VerifyNoLeaks(m))
}

func dial(t *testing.T, addr string) wire.MasterClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	assert.NilError(t, err)
	t.Cleanup(func() { conn.Close() })
	return wire.NewMasterClient(conn)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestServerRoundTrip drives a whole object lifecycle through gRPC and
// checks that store codes survive the wire.
// It runs over gRPC and over the in-process client, which must answer alike.
// TestServerRoundTrip runs the same calls over gRPC, over mux (the same
// port) and in process; the answers and errors are the same.
func TestServerRoundTrip(t *testing.T) {
	for _, via := range []string{"grpc", "mux", "inprocess"} {
		t.Run(via, func(t *testing.T) { roundTrip(t, via) })
	}
}

func roundTrip(t *testing.T, via string) {
	srv, err := StartEmbedded(Config{AllocationStrategy: StrategyFreeRatioFirst})
	assert.NilError(t, err)
	defer srv.Close()
	assert.Equal(t, srv.Role(), RoleLeader)
	var c wire.MasterClient
	switch via {
	case "grpc":
		c = dial(t, srv.Addr())
	case "mux":
		mc := wire.NewMuxClient(wire.MuxClientConfig{Addr: srv.Addr()})
		t.Cleanup(func() { mc.Close() })
		assert.NilError(t, mc.Connect(ctxT(t)))
		c = mc
	case "inprocess":
		c = srv.InProcessClient()
	}
	ctx := ctxT(t)

	ping, err := c.Ping(ctx, &wire.PingRequest{ClientId: "c1"})
	assert.NilError(t, err)
	assert.Equal(t, ping.GetStatus(), wire.ClientStatus_CLIENT_STATUS_NEED_REMOUNT)
	rm, err := c.ReMountSegments(ctx, &wire.ReMountSegmentsRequest{ClientId: "c1", Segments: []*wire.Segment{
		{Id: "s1", Name: "127.0.0.1:15000", Base: 0x7f0000000000, Size: 1 << 20, Protocol: "tcp"},
	}})
	assert.NilError(t, err)
	// The master offers put grants: at most an eighth of the segment.
	assert.Equal(t, rm.GetGrantBytes(), uint64(DefaultGrantBytes))
	assert.Equal(t, rm.GetGrantLeaseMs(), uint64(3000))
	ping, err = c.Ping(ctx, &wire.PingRequest{ClientId: "c1"})
	assert.NilError(t, err)
	assert.Equal(t, ping.GetStatus(), wire.ClientStatus_CLIENT_STATUS_OK)
	assert.Equal(t, ping.GetViewVersion(), srv.Service().ViewVersion())

	ps, err := c.PutStart(ctx, &wire.PutStartRequest{ClientId: "c1", Key: "k", Size: 4096,
		Config: &wire.ReplicateConfig{ReplicaNum: 1}})
	assert.NilError(t, err)
	assert.Equal(t, len(ps.GetReplicas()), 1)
	assert.Equal(t, ps.GetReplicas()[0].GetAddress(), uint64(0x7f0000000000))
	assert.Equal(t, ps.GetReplicas()[0].GetProtocol(), "tcp")

	_, err = c.GetReplicaList(ctx, &wire.KeyRequest{Key: "k"})
	assert.Assert(t, errors.Is(wire.FromStatus(err), wire.ErrReplicaIsNotReady), "got %v", err)
	_, err = c.PutEnd(ctx, &wire.PutEndRequest{ClientId: "c1", Key: "k"})
	assert.NilError(t, err)
	gl, err := c.GetReplicaList(ctx, &wire.KeyRequest{Key: "k"})
	assert.NilError(t, err)
	assert.Equal(t, gl.GetSize(), uint64(4096))
	assert.Equal(t, gl.GetLeaseTtlMs(), uint64(10000))
	assert.Equal(t, gl.GetReplicas()[0].GetStatus(), wire.ReplicaStatus_REPLICA_STATUS_COMPLETE)

	_, err = c.PutStart(ctx, &wire.PutStartRequest{ClientId: "c1", Key: "k", Size: 1})
	assert.Equal(t, wire.CodeOf(wire.FromStatus(err)), wire.ErrObjectAlreadyExists)
	_, err = c.Remove(ctx, &wire.RemoveRequest{Key: "k"})
	assert.Equal(t, wire.CodeOf(wire.FromStatus(err)), wire.ErrObjectHasLease)
	_, err = c.GetReplicaList(ctx, &wire.KeyRequest{Key: "nosuch"})
	assert.Equal(t, wire.CodeOf(wire.FromStatus(err)), wire.ErrObjectNotFound)

	bs, err := c.BatchPutStart(ctx, &wire.BatchPutStartRequest{ClientId: "c1", Keys: []string{"a", "k", "b"},
		Sizes: []uint64{10, 10, 1 << 30}})
	assert.NilError(t, err)
	assert.Equal(t, bs.GetResults()[0].GetCode(), int32(0))
	assert.Equal(t, bs.GetResults()[1].GetCode(), int32(wire.ErrObjectAlreadyExists))
	assert.Equal(t, bs.GetResults()[2].GetCode(), int32(wire.ErrNoAvailableHandle))
	be, err := c.BatchPutEnd(ctx, &wire.BatchPutEndRequest{ClientId: "c1", Keys: []string{"a", "b"}})
	assert.NilError(t, err)
	assert.DeepEqual(t, be.GetCodes(), []int32{0, int32(wire.ErrObjectNotFound)})
	ex, err := c.BatchExistKey(ctx, &wire.BatchKeyRequest{Keys: []string{"a", "b", "k"}})
	assert.NilError(t, err)
	assert.DeepEqual(t, ex.GetResults(), []int32{1, 0, 1})
	bg, err := c.BatchGetReplicaList(ctx, &wire.BatchKeyRequest{Keys: []string{"a", "zz"}})
	assert.NilError(t, err)
	assert.Equal(t, bg.GetResults()[0].GetSize(), uint64(10))
	assert.Equal(t, bg.GetResults()[1].GetCode(), int32(wire.ErrObjectNotFound))

	// A one-round-trip put: a grant, a commit inside it, one outside.
	ag, err := c.AcquireGrants(ctx, &wire.AcquireGrantsRequest{ClientId: "c1", Count: 1, MinBytes: 100})
	assert.NilError(t, err)
	assert.Equal(t, len(ag.GetGrants()), 1)
	g := ag.GetGrants()[0]
	assert.Equal(t, g.GetSize(), uint64(1<<20/8))
	assert.Equal(t, g.GetSegmentName(), "127.0.0.1:15000")
	_, err = c.PutCommit(ctx, &wire.PutCommitRequest{ClientId: "c1", Key: "g", Size: 100,
		Replicas: []*wire.GrantedReplica{{GrantId: g.GetId(), Address: g.GetAddress() + g.GetSize()}}})
	assert.Equal(t, wire.CodeOf(wire.FromStatus(err)), wire.ErrInvalidWrite)
	pc, err := c.PutCommit(ctx, &wire.PutCommitRequest{ClientId: "c1", Key: "g", Size: 100,
		Replicas: []*wire.GrantedReplica{{GrantId: g.GetId(), Address: g.GetAddress()}}})
	assert.NilError(t, err)
	assert.Equal(t, pc.GetGrantGeneration(), ag.GetGrantGeneration())
	gl, err = c.GetReplicaList(ctx, &wire.KeyRequest{Key: "g"})
	assert.NilError(t, err)
	assert.Equal(t, gl.GetReplicas()[0].GetAddress(), g.GetAddress())
	_, err = c.PutCommit(ctx, &wire.PutCommitRequest{ClientId: "c1", Key: "g", Size: 100,
		Replicas: []*wire.GrantedReplica{{GrantId: g.GetId(), Address: g.GetAddress() + 128}}})
	assert.Equal(t, wire.CodeOf(wire.FromStatus(err)), wire.ErrObjectAlreadyExists)
	_, err = c.ReturnGrants(ctx, &wire.ReturnGrantsRequest{ClientId: "c1", GrantIds: []uint64{g.GetId()}})
	assert.NilError(t, err)
	assert.Equal(t, srv.Service().Metrics().Grants, 0)
	_, err = c.Remove(ctx, &wire.RemoveRequest{Key: "g", Force: true})
	assert.NilError(t, err)

	keys, err := c.ListKeys(ctx, &wire.ListKeysRequest{})
	assert.NilError(t, err)
	assert.DeepEqual(t, keys.GetKeys(), []string{"a", "k"})
	segs, err := c.ListSegments(ctx, &wire.ListSegmentsRequest{})
	assert.NilError(t, err)
	assert.Equal(t, segs.GetSegments()[0].GetClientId(), "c1")

	// Mooncake's queries and a drain job, over each wire.
	rx, err := c.GetReplicaListByRegex(ctx, &wire.GetReplicaListByRegexRequest{Pattern: "^[ak]$"})
	assert.NilError(t, err)
	assert.Equal(t, len(rx.GetObjects()), 2)
	assert.Equal(t, rx.GetObjects()[0].GetKey(), "a")
	assert.Equal(t, rx.GetObjects()[1].GetReplicas()[0].GetAddress(), uint64(0x7f0000000000))
	assert.Equal(t, rx.GetLeaseTtlMs(), uint64(10000))
	_, err = c.GetReplicaListByRegex(ctx, &wire.GetReplicaListByRegexRequest{Pattern: "["})
	assert.Equal(t, wire.CodeOf(wire.FromStatus(err)), wire.ErrInvalidParams)
	ips, err := c.BatchQueryIp(ctx, &wire.BatchQueryIpRequest{ClientIds: []string{"nobody", "c1"}})
	assert.NilError(t, err)
	assert.Equal(t, len(ips.GetClients()), 1)
	assert.DeepEqual(t, ips.GetClients()[0].GetIps(), []string{"127.0.0.1"})
	cs, err := c.CalcCacheStats(ctx, &wire.CalcCacheStatsRequest{})
	assert.NilError(t, err)
	assert.Equal(t, cs.GetMemoryTotal(), uint64(2))
	assert.Assert(t, cs.GetMemoryHits() > 0)
	zero := uint32(0)
	_, err = c.CreateDrainJob(ctx, &wire.CreateDrainJobRequest{Segments: []string{"127.0.0.1:15000"}, MaxConcurrency: &zero})
	assert.Equal(t, wire.CodeOf(wire.FromStatus(err)), wire.ErrInvalidParams)
	_, err = c.CreateDrainJob(ctx, &wire.CreateDrainJobRequest{Segments: []string{"nowhere:1"}})
	assert.Equal(t, wire.CodeOf(wire.FromStatus(err)), wire.ErrSegmentNotFound)
	dj, err := c.CreateDrainJob(ctx, &wire.CreateDrainJobRequest{Segments: []string{"127.0.0.1:15000"}})
	assert.NilError(t, err)
	qj, err := c.QueryDrainJob(ctx, &wire.DrainJobIdRequest{JobId: dj.GetJobId()})
	assert.NilError(t, err)
	assert.Equal(t, qj.GetId(), dj.GetJobId())
	assert.DeepEqual(t, qj.GetSegments(), []string{"127.0.0.1:15000"})
	_, err = c.CancelDrainJob(ctx, &wire.DrainJobIdRequest{JobId: dj.GetJobId()})
	assert.NilError(t, err)
	qj, err = c.QueryDrainJob(ctx, &wire.DrainJobIdRequest{JobId: dj.GetJobId()})
	assert.NilError(t, err)
	assert.Equal(t, qj.GetStatus(), wire.JobStatus_JOB_STATUS_CANCELED)
	_, err = c.QueryDrainJob(ctx, &wire.DrainJobIdRequest{JobId: "123e4567-e89b-42d3-a456-426614174000"})
	assert.Equal(t, wire.CodeOf(wire.FromStatus(err)), wire.ErrJobNotFound)
	_, err = c.CancelDrainJob(ctx, &wire.DrainJobIdRequest{JobId: dj.GetJobId()})
	assert.Equal(t, wire.CodeOf(wire.FromStatus(err)), wire.ErrUnavailableInStatus)

	_, err = c.RemoveByRegex(ctx, &wire.RemoveByRegexRequest{Pattern: "("})
	assert.Equal(t, wire.CodeOf(wire.FromStatus(err)), wire.ErrInvalidParams)
	n, err := c.RemoveAll(ctx, &wire.RemoveAllRequest{Force: true})
	assert.NilError(t, err)
	assert.Equal(t, n.GetCount(), int64(2))
	_, err = c.UnmountSegment(ctx, &wire.UnmountSegmentRequest{ClientId: "c1", SegmentId: "s1"})
	assert.NilError(t, err)
	_, err = c.UnmountSegment(ctx, &wire.UnmountSegmentRequest{ClientId: "c1", SegmentId: "s1"})
	assert.Equal(t, wire.CodeOf(wire.FromStatus(err)), wire.ErrSegmentNotFound)

	assert.NilError(t, srv.Close())
	assert.NilError(t, srv.Close())
	_, err = c.Ping(ctx, &wire.PingRequest{ClientId: "c1"})
	want := wire.ErrRPCFail
	if via == "inprocess" {
		want = wire.ErrUnavailableInStatus
	}
	assert.Equal(t, wire.CodeOf(wire.FromStatus(err)), want)
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(url)
	assert.NilError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	assert.NilError(t, err)
	return resp.StatusCode, string(b)
}

func TestServerAdminHTTP(t *testing.T) {
	srv, err := NewServer(Config{RPCAddr: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0"})
	assert.NilError(t, err)
	defer srv.Close()
	svc := srv.Service()
	assert.NilError(t, svc.MountSegment("c1", SegmentInfo{ID: "s1", Name: "host:1", Base: 4096, Size: 1 << 20}))
	_, err = svc.PutStart("c1", "", "key1", 100, ReplicateConfig{}, false)
	assert.NilError(t, err)
	assert.NilError(t, svc.PutEnd("c1", "", "key1"))

	base := "http://" + srv.MetricsAddr()
	code, body := httpGet(t, base+"/metrics")
	assert.Equal(t, code, 200)
	assert.Assert(t, strings.Contains(body, "kvferry_store_master_objects 1"), body)
	assert.Assert(t, strings.Contains(body, "kvferry_store_master_capacity_bytes 1.048576e+06"), body)
	assert.Assert(t, strings.Contains(body, "# HELP kvferry_store_master_put_ends_total"), body)
	code, body = httpGet(t, base+"/health")
	assert.Equal(t, code, 200)
	var health map[string]any
	assert.NilError(t, json.Unmarshal([]byte(body), &health))
	assert.Equal(t, health["role"], RoleLeader)
	assert.Equal(t, health["service_ready"], true)
	_, body = httpGet(t, base+"/get_all_segments")
	assert.Equal(t, body, "host:1\n")
	_, body = httpGet(t, base+"/get_all_keys")
	assert.Equal(t, body, "key1\n")
	code, body = httpGet(t, base+"/query_key?key=key1")
	assert.Equal(t, code, 200)
	assert.Assert(t, strings.Contains(body, `"buffer_address_":4096`), body)
	code, body = httpGet(t, base+"/query_key?key=nope")
	assert.Equal(t, code, 404)
	assert.Assert(t, strings.Contains(body, `"error_code":-704`), body)
	_, body = httpGet(t, base+"/role")
	assert.Equal(t, body, RoleLeader)
}

// waitFor polls cond every 20 ms until it holds or the timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHAFailover runs two masters against a real etcd: one leads and
// publishes its address at mooncake-store/<cluster>/master_view, the other
// refuses requests; when the leader stops, the standby takes over with an
// empty view and a higher version, and clients re-mount.
func TestHAFailover(t *testing.T) {
	etcd := etcdtest.Start(t)
	cfg := Config{
		RPCAddr:            "127.0.0.1:0",
		EnableHA:           true,
		EtcdEndpoints:      []string{etcd.Endpoint()},
		ClusterID:          "kvferry_test",
		MasterViewLeaseTTL: 2 * time.Second,
	}
	m1, err := NewServer(cfg)
	assert.NilError(t, err)
	defer m1.Close()
	waitFor(t, 10*time.Second, "m1 to lead", func() bool { return m1.Role() == RoleLeader })
	m2, err := NewServer(cfg)
	assert.NilError(t, err)
	defer m2.Close()

	cli, err := ha.Dial([]string{etcd.Endpoint()}, 5*time.Second)
	assert.NilError(t, err)
	defer cli.Close()
	ctx := ctxT(t)
	view, err := ha.Leader(ctx, cli, "kvferry_test")
	assert.NilError(t, err)
	assert.Equal(t, view.Address, m1.Addr())
	raw, err := cli.Get(ctx, "mooncake-store/kvferry_test/master_view")
	assert.NilError(t, err)
	assert.Equal(t, len(raw.Kvs), 1)
	assert.Assert(t, raw.Kvs[0].Lease != 0, "master view must be under a lease")

	c1, c2 := dial(t, m1.Addr()), dial(t, m2.Addr())
	_, err = c1.MountSegment(ctx, &wire.MountSegmentRequest{ClientId: "c", Segment: &wire.Segment{Id: "s", Name: "n", Base: 64, Size: 4096}})
	assert.NilError(t, err)
	_, err = c2.Ping(ctx, &wire.PingRequest{ClientId: "c"})
	assert.Equal(t, wire.CodeOf(wire.FromStatus(err)), wire.ErrUnavailableInStatus)
	mux2 := wire.NewMuxClient(wire.MuxClientConfig{Addr: m2.Addr()})
	defer mux2.Close()
	_, err = mux2.Ping(ctx, &wire.PingRequest{ClientId: "c"})
	assert.Equal(t, wire.CodeOf(err), wire.ErrUnavailableInStatus)
	assert.Equal(t, m2.Role(), RoleStandby)

	start := time.Now()
	assert.NilError(t, m1.Close())
	waitFor(t, 10*time.Second, "m2 to lead", func() bool { return m2.Role() == RoleLeader })
	t.Logf("failover after leader stop took %v", time.Since(start))
	view2, err := ha.Leader(ctx, cli, "kvferry_test")
	assert.NilError(t, err)
	assert.Equal(t, view2.Address, m2.Addr())
	assert.Assert(t, view2.Version > view.Version)
	ping, err := c2.Ping(ctx, &wire.PingRequest{ClientId: "c"})
	assert.NilError(t, err)
	assert.Equal(t, ping.GetStatus(), wire.ClientStatus_CLIENT_STATUS_NEED_REMOUNT)
	assert.Equal(t, ping.GetViewVersion(), view2.Version)
	ping, err = mux2.Ping(ctx, &wire.PingRequest{ClientId: "c"})
	assert.NilError(t, err)
	assert.Equal(t, ping.GetViewVersion(), view2.Version)
}

// TestServerCloseWithIdleConnections: connections that never finish their
// first bytes, idle mux connections and gRPC connections do not hold Close.
func TestServerCloseWithIdleConnections(t *testing.T) {
	srv, err := StartEmbedded(Config{})
	assert.NilError(t, err)
	silent, err := net.Dial("tcp", srv.Addr())
	assert.NilError(t, err)
	defer silent.Close()
	partial, err := net.Dial("tcp", srv.Addr())
	assert.NilError(t, err)
	defer partial.Close()
	_, err = partial.Write(wire.MuxHello[:3])
	assert.NilError(t, err)
	mux := wire.NewMuxClient(wire.MuxClientConfig{Addr: srv.Addr()})
	defer mux.Close()
	_, err = mux.Ping(ctxT(t), &wire.PingRequest{ClientId: "c"})
	assert.NilError(t, err)
	_, err = dial(t, srv.Addr()).Ping(ctxT(t), &wire.PingRequest{ClientId: "c"})
	assert.NilError(t, err)

	closed := make(chan struct{})
	go func() {
		srv.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for idle connections")
	}
	// The server closed them.
	_ = silent.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = silent.Read(make([]byte, 1))
	assert.Assert(t, err != nil)
	_, err = mux.Ping(ctxT(t), &wire.PingRequest{ClientId: "c"})
	assert.Equal(t, wire.CodeOf(err), wire.ErrRPCFail)
}

// TestHALeaseLoss checks that a leader whose etcd key disappears steps down
// and campaigns again.
func TestHALeaseLoss(t *testing.T) {
	etcd := etcdtest.Start(t)
	m, err := NewServer(Config{RPCAddr: "127.0.0.1:0", EnableHA: true, EtcdEndpoints: []string{etcd.Endpoint()},
		MasterViewLeaseTTL: time.Second})
	assert.NilError(t, err)
	defer m.Close()
	waitFor(t, 10*time.Second, "leader", func() bool { return m.Role() == RoleLeader })
	v1 := m.Leader().Version
	cli, err := ha.Dial([]string{etcd.Endpoint()}, 5*time.Second)
	assert.NilError(t, err)
	defer cli.Close()
	_, err = cli.Delete(ctxT(t), ha.MasterViewKey(""))
	assert.NilError(t, err)
	waitFor(t, 10*time.Second, "re-election", func() bool { return m.Role() == RoleLeader && m.Leader().Version > v1 })
}

// TestServerStartFence: a plain master may be a restarted one, so the
// segments of clients it answers NEED_REMOUNT (clients of the previous
// instance, whose grants may still be written into) serve nothing for the
// first grant lease; a fresh client's segment serves at once. An embedded
// master on a free port has no predecessor and does not fence.
func TestServerStartFence(t *testing.T) {
	srv, err := NewServer(Config{RPCAddr: "127.0.0.1:0", GrantLease: 300 * time.Millisecond})
	assert.NilError(t, err)
	defer srv.Close()
	svc := srv.Service()
	st, err := svc.Ping("old")
	assert.NilError(t, err)
	assert.Equal(t, st, wire.ClientStatus_CLIENT_STATUS_NEED_REMOUNT)
	assert.NilError(t, svc.ReMountSegments("old", []SegmentInfo{{ID: "s1", Name: "n1", Base: 4096, Size: 1 << 20}}))
	_, err = svc.PutStart("old", "", "k", 100, ReplicateConfig{}, false)
	assert.Equal(t, wire.CodeOf(err), wire.ErrUnavailableInStatus)
	_, _, err = svc.AcquireGrants("old", 1, 100, nil, nil)
	assert.Equal(t, wire.CodeOf(err), wire.ErrUnavailableInStatus)
	assert.NilError(t, svc.MountSegment("fresh", SegmentInfo{ID: "s2", Name: "n2", Base: 4096, Size: 1 << 20}))
	reps, err := svc.PutStart("old", "", "k", 100, ReplicateConfig{}, false)
	assert.NilError(t, err)
	assert.Equal(t, reps[0].SegmentName, "n2")
	start := time.Now()
	waitFor(t, 5*time.Second, "the start fence to end", func() bool {
		gs, _, err := svc.AcquireGrants("old", 1, 100, []string{"n2"}, nil)
		if err != nil {
			assert.Equal(t, wire.CodeOf(err), wire.ErrUnavailableInStatus)
			return false
		}
		assert.Equal(t, gs[0].SegmentName, "n1")
		return true
	})
	assert.Assert(t, time.Since(start) > 200*time.Millisecond)

	emb, err := StartEmbedded(Config{})
	assert.NilError(t, err)
	defer emb.Close()
	esvc := emb.Service()
	_, err = esvc.Ping("old")
	assert.NilError(t, err)
	assert.NilError(t, esvc.ReMountSegments("old", []SegmentInfo{{ID: "s1", Name: "n1", Base: 4096, Size: 1 << 20}}))
	_, err = esvc.PutStart("old", "", "k", 100, ReplicateConfig{}, false)
	assert.NilError(t, err)
}
