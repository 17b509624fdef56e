package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"google.golang.org/grpc"
	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine/metadata/etcd/etcdtest"
	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/internal/testutil"
	"github.com/kvferry/kvferry/store/client"
	"github.com/kvferry/kvferry/store/embedded"
	"github.com/kvferry/kvferry/store/master"
	"github.com/kvferry/kvferry/store/wire"
)

func TestMain(m *testing.M) {
	os.Exit(testutil.VerifyNoLeaks(m))
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31) + seed
	}
	return b
}

func cbuf(t *testing.T, n uint64) *cmem.Map {
	t.Helper()
	m, err := cmem.MapAnon(n)
	assert.NilError(t, err)
	t.Cleanup(func() { m.Close() })
	return m
}

func startMaster(t *testing.T, cfg master.Config) *master.Server {
	t.Helper()
	if cfg.RPCAddr == "" {
		cfg.RPCAddr = "127.0.0.1:0"
	}
	srv, err := master.NewServer(cfg)
	assert.NilError(t, err)
	t.Cleanup(func() { srv.Close() })
	return srv
}

func newClient(t *testing.T, cfg client.Config) *client.Client {
	t.Helper()
	if cfg.LocalHostname == "" {
		cfg.LocalHostname = "127.0.0.1"
	}
	if cfg.PingInterval == 0 {
		cfg.PingInterval = 100 * time.Millisecond
	}
	c, err := embedded.NewClient(ctxT(t, 20*time.Second), cfg)
	assert.NilError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

func code(err error) wire.Code { return wire.CodeOf(err) }

// TestEmbeddedSingleClient: one process, embedded master, own segment (all
// replicas local, memcpy path).
func TestEmbeddedSingleClient(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	c := newClient(t, client.Config{GlobalSegmentSize: 64 << 20, MasterServerAddr: "embedded"})
	val := pattern(100000, 1)
	assert.NilError(t, c.Put(ctx, "k1", val, client.ReplicateConfig{}))
	got, err := c.Get(ctx, "k1")
	assert.NilError(t, err)
	assert.Assert(t, bytes.Equal(got, val))
	// Put on an existing key succeeds and leaves the value alone.
	assert.NilError(t, c.Put(ctx, "k1", pattern(10, 9), client.ReplicateConfig{}))
	got, err = c.Get(ctx, "k1")
	assert.NilError(t, err)
	assert.Equal(t, len(got), len(val))
	// Upsert overwrites.
	assert.NilError(t, c.Upsert(ctx, "k1", pattern(10, 9), client.ReplicateConfig{}))
	got, err = c.Get(ctx, "k1")
	assert.NilError(t, err)
	assert.Assert(t, bytes.Equal(got, pattern(10, 9)))

	ok, err := c.IsExist(ctx, "k1")
	assert.NilError(t, err)
	assert.Assert(t, ok)
	ok, err = c.IsExist(ctx, "nope")
	assert.NilError(t, err)
	assert.Assert(t, !ok)
	size, err := c.GetSize(ctx, "k1")
	assert.NilError(t, err)
	assert.Equal(t, size, uint64(10))
	_, err = c.Get(ctx, "nope")
	assert.Equal(t, code(err), wire.ErrObjectNotFound)
	_, err = c.GetSize(ctx, "nope")
	assert.Equal(t, code(err), wire.ErrObjectNotFound)

	// GetInto with a small buffer fails without writing.
	small := cbuf(t, 4096)
	_, err = c.GetInto(ctx, "k1", small.Addr(), 5)
	assert.Equal(t, code(err), wire.ErrInvalidParams)
	n, err := c.GetInto(ctx, "k1", small.Addr(), 4096)
	assert.NilError(t, err)
	assert.Equal(t, n, uint64(10))
	assert.Assert(t, bytes.Equal(small.Bytes()[:10], pattern(10, 9)))

	// Bad input.
	assert.Equal(t, code(c.Put(ctx, "", val, client.ReplicateConfig{})), wire.ErrInvalidParams)
	assert.Equal(t, code(c.Put(ctx, "z", nil, client.ReplicateConfig{})), wire.ErrInvalidParams)
	assert.Equal(t, code(c.PutFrom(ctx, "z", 0, 10, client.ReplicateConfig{})), wire.ErrInvalidParams)

	// Leases block remove; force does not wait.
	assert.Equal(t, code(c.Remove(ctx, "k1", false)), wire.ErrObjectHasLease)
	assert.NilError(t, c.Remove(ctx, "k1", true))
	assert.Equal(t, code(c.Remove(ctx, "k1", true)), wire.ErrObjectNotFound)

	for i := range 5 {
		assert.NilError(t, c.Put(ctx, fmt.Sprintf("re_%d", i), pattern(64, byte(i)), client.ReplicateConfig{}))
	}
	assert.NilError(t, c.Put(ctx, "other", pattern(64, 0), client.ReplicateConfig{}))
	cnt, err := c.RemoveByRegex(ctx, "^re_[0-3]$", false)
	assert.NilError(t, err)
	assert.Equal(t, cnt, int64(4))
	_, err = c.RemoveByRegex(ctx, "(", false)
	assert.Equal(t, code(err), wire.ErrInvalidParams)
	cnt, err = c.RemoveAll(ctx, false)
	assert.NilError(t, err)
	assert.Equal(t, cnt, int64(2))
	m := c.Metrics()
	assert.Assert(t, m.LocalCopies > 0)
	assert.Assert(t, m.Puts >= 8)
	assert.NilError(t, c.HealthCheck(ctx))
	assert.NilError(t, c.Close())
	assert.NilError(t, c.Close())
	assert.Assert(t, errors.Is(c.Put(ctx, "x", val, client.ReplicateConfig{}), client.ErrClosed))
	assert.Assert(t, errors.Is(c.HealthCheck(ctx), client.ErrClosed))
}

// TestRemoteClients: a holder and a pure client on one master, over mux
// (the default) and over gRPC; the pure client's bytes go to the holder
// through the transfer engine.
func TestRemoteClients(t *testing.T) {
	for _, rpc := range []string{client.MasterRPCAuto, client.MasterRPCGRPC} {
		t.Run(rpc, func(t *testing.T) { remoteClients(t, rpc) })
	}
}

func remoteClients(t *testing.T, rpc string) {
	ctx := ctxT(t, 60*time.Second)
	srv := startMaster(t, master.Config{})
	holder := newClient(t, client.Config{MasterServerAddr: srv.Addr(), GlobalSegmentSize: 128 << 20, MasterRPC: rpc})
	user := newClient(t, client.Config{MasterServerAddr: srv.Addr(), LocalBufferSize: 1 << 20, MasterRPC: rpc})
	want := client.MasterRPCMux
	if rpc == client.MasterRPCGRPC {
		want = client.MasterRPCGRPC
	}
	assert.Equal(t, client.MasterRPCForTest(user), want)

	// Larger than the user's staging buffer: staged in chunks.
	big := pattern(5<<20+123, 7)
	assert.NilError(t, user.Put(ctx, "big", big, client.ReplicateConfig{}))
	got, err := user.Get(ctx, "big")
	assert.NilError(t, err)
	assert.Assert(t, bytes.Equal(got, big))
	got, err = holder.Get(ctx, "big")
	assert.NilError(t, err)
	assert.Assert(t, bytes.Equal(got, big))

	// Zero-copy from registered memory, batch put and batch get.
	const n, sz = 8, 256 << 10
	src, dst := cbuf(t, n*sz), cbuf(t, n*sz)
	assert.NilError(t, user.RegisterBuffer(src.Addr(), src.Len()))
	assert.NilError(t, user.RegisterBuffer(dst.Addr(), dst.Len()))
	keys := make([]string, n)
	addrs := make([]uintptr, n)
	dsts := make([]uintptr, n)
	sizes := make([]uint64, n)
	for i := range n {
		keys[i] = fmt.Sprintf("b%d", i)
		addrs[i] = src.Addr() + uintptr(i*sz)
		dsts[i] = dst.Addr() + uintptr(i*sz)
		sizes[i] = sz
		copy(src.Bytes()[i*sz:(i+1)*sz], pattern(sz, byte(i)))
	}
	for i, e := range user.BatchPutFrom(ctx, keys, addrs, sizes, client.ReplicateConfig{}) {
		assert.NilError(t, e, "key %d", i)
	}
	keys2 := append(append([]string(nil), keys...), "missing")
	dsts2 := append(dsts, dst.Addr())
	sizes2 := append(append([]uint64(nil), sizes...), sz)
	got2, errs := user.BatchGetInto(ctx, keys2, dsts2, sizes2)
	for i := range n {
		assert.NilError(t, errs[i])
		assert.Equal(t, got2[i], uint64(sz))
	}
	assert.Equal(t, code(errs[n]), wire.ErrObjectNotFound)
	assert.Assert(t, bytes.Equal(src.Bytes(), dst.Bytes()))
	descs, err := user.ReplicaDescs(ctx, []string{"b0", "missing"})
	assert.NilError(t, err)
	assert.NilError(t, descs[0].Err)
	assert.Equal(t, descs[0].Size, uint64(sz))
	assert.Equal(t, descs[0].Replicas[0].SegmentName, holder.Hostname())
	assert.Equal(t, descs[0].Replicas[0].Status, "COMPLETE")
	assert.Equal(t, code(descs[1].Err), wire.ErrObjectNotFound)
	ex, err := user.BatchIsExist(ctx, keys2)
	assert.NilError(t, err)
	assert.Equal(t, ex[0], true)
	assert.Equal(t, ex[n], false)

	// Unregistered C memory goes through staging.
	plain := cbuf(t, 3<<20)
	copy(plain.Bytes(), pattern(3<<20, 3))
	assert.NilError(t, user.PutFrom(ctx, "plain", plain.Addr(), plain.Len(), client.ReplicateConfig{}))
	out := cbuf(t, 3<<20)
	nn, err := user.GetInto(ctx, "plain", out.Addr(), out.Len())
	assert.NilError(t, err)
	assert.Equal(t, nn, uint64(3<<20))
	assert.Assert(t, bytes.Equal(plain.Bytes(), out.Bytes()))
	_, err = user.GetInto(ctx, "plain", out.Addr(), 100)
	assert.Equal(t, code(err), wire.ErrInvalidParams)

	// The holder lent space; the pure client none.
	segs := srv.Service().Segments()
	assert.Equal(t, len(segs), 1)
	assert.Equal(t, segs[0].Name, holder.Hostname())
	assert.NilError(t, user.UnregisterBuffer(src.Addr()))
	assert.NilError(t, user.UnregisterBuffer(dst.Addr()))
}

// TestReplicaSurvivesHolderLoss: with replica_num 2 on three holders, an
// object stays readable when one holder's engine dies, before and after
// the master expires it.
func TestReplicaSurvivesHolderLoss(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	srv := startMaster(t, master.Config{ClientTTL: time.Second, MaintenanceInterval: 50 * time.Millisecond})
	var holders []*client.Client
	for range 3 {
		holders = append(holders, newClient(t, client.Config{MasterServerAddr: srv.Addr(), GlobalSegmentSize: 16 << 20}))
	}
	reader := newClient(t, client.Config{MasterServerAddr: srv.Addr()})
	val := pattern(1<<20, 5)
	for i := range 10 {
		assert.NilError(t, reader.Put(ctx, fmt.Sprint("r", i), val, client.ReplicateConfig{ReplicaNum: 2}))
	}
	// Kill the holder of the first replica of r0 (its engine stops serving
	// and its heartbeat stops), without telling the master.
	list, err := srv.Service().GetReplicaList("", "r0")
	assert.NilError(t, err)
	assert.Equal(t, len(list.Replicas), 2)
	var victim *client.Client
	for _, h := range holders {
		if h.Hostname() == list.Replicas[0].SegmentName {
			victim = h
		}
	}
	assert.Assert(t, victim != nil)
	assert.NilError(t, victim.Engine().Close())
	stopHeartbeat(victim)
	for i := range 10 {
		got, err := reader.Get(ctx, fmt.Sprint("r", i))
		assert.NilError(t, err, "r%d before expiry", i)
		assert.Assert(t, bytes.Equal(got, val))
	}
	// The master notices within its client TTL and drops the replicas.
	deadline := time.Now().Add(10 * time.Second)
	for srv.Service().Metrics().ExpiredClientsTotal == 0 {
		assert.Assert(t, time.Now().Before(deadline), "victim not expired")
		time.Sleep(20 * time.Millisecond)
	}
	list, err = srv.Service().GetReplicaList("", "r0")
	assert.NilError(t, err)
	assert.Equal(t, len(list.Replicas), 1)
	for i := range 10 {
		got, err := reader.Get(ctx, fmt.Sprint("r", i))
		assert.NilError(t, err, "r%d after expiry", i)
		assert.Assert(t, bytes.Equal(got, val))
	}
}

// stopHeartbeat makes a client fall silent as a killed process would: its
// heartbeat stops, so the master expires it after the client TTL.
func stopHeartbeat(c *client.Client) {
	client.StopHeartbeatForTest(c)
}

// TestMasterRestart: the master goes away and comes back empty on the same
// address; clients re-mount by themselves and work again (mux and gRPC).
func TestMasterRestart(t *testing.T) {
	for _, rpc := range []string{client.MasterRPCMux, client.MasterRPCGRPC} {
		t.Run(rpc, func(t *testing.T) { masterRestart(t, rpc) })
	}
}

func masterRestart(t *testing.T, rpc string) {
	ctx := ctxT(t, 60*time.Second)
	srv := startMaster(t, master.Config{})
	addr := srv.Addr()
	holder := newClient(t, client.Config{MasterServerAddr: addr, GlobalSegmentSize: 16 << 20, MasterRPC: rpc})
	user := newClient(t, client.Config{MasterServerAddr: addr, MasterRPC: rpc})
	assert.NilError(t, user.Put(ctx, "a", pattern(1000, 1), client.ReplicateConfig{}))
	assert.NilError(t, srv.Close())
	err := user.Put(ctx, "b", pattern(1000, 2), client.ReplicateConfig{})
	assert.Equal(t, code(err), wire.ErrRPCFail)
	assert.Assert(t, user.HealthCheck(ctx) != nil)

	srv2 := startMaster(t, master.Config{RPCAddr: addr})
	deadline := time.Now().Add(15 * time.Second)
	for len(srv2.Service().Segments()) == 0 {
		assert.Assert(t, time.Now().Before(deadline), "holder did not re-mount")
		time.Sleep(20 * time.Millisecond)
	}
	// The old objects are gone (the master keeps metadata in memory).
	_, err = user.Get(ctx, "a")
	assert.Equal(t, code(err), wire.ErrObjectNotFound)
	assert.NilError(t, user.Put(ctx, "b", pattern(1000, 2), client.ReplicateConfig{}))
	got, err := holder.Get(ctx, "b")
	assert.NilError(t, err)
	assert.Assert(t, bytes.Equal(got, pattern(1000, 2)))
	assert.Assert(t, holder.Metrics().Remounts >= 1)
	assert.NilError(t, user.HealthCheck(ctx))
}

// TestHAFollowLeader: clients given etcd:// find the leader, and follow a
// failover to the standby.
//
// The leader's lease has a long TTL: m1 must keep leading, under load too,
// until the test closes it (with a 2 s TTL, a loaded machine that held
// m1's or etcd's keep-alives back for 2 s handed the lead to m2 before the
// clients started: flaky under load). The failover itself does not wait
// for the TTL: a closing master revokes its lease, which deletes the
// leader key at once (were that revoke lost, the TTL still ends within the
// 20 s the test gives the failover).
func TestHAFollowLeader(t *testing.T) {
	etcd := etcdtest.Start(t)
	ctx := ctxT(t, 120*time.Second)
	mcfg := master.Config{EnableHA: true, EtcdEndpoints: []string{etcd.Endpoint()}, ClusterID: "ha_client",
		MasterViewLeaseTTL: 8 * time.Second}
	m1 := startMaster(t, mcfg)
	// The first election took more than 10 s once at load 40 (etcd and
	// the master starting under -race beside the stress runs).
	deadline := time.Now().Add(45 * time.Second)
	for m1.Role() != master.RoleLeader {
		assert.Assert(t, time.Now().Before(deadline), "m1 not leader")
		time.Sleep(20 * time.Millisecond)
	}
	m2 := startMaster(t, mcfg)
	addr := "etcd://" + etcd.Endpoint()
	holder := newClient(t, client.Config{MasterServerAddr: addr, ClusterID: "ha_client", GlobalSegmentSize: 16 << 20})
	user := newClient(t, client.Config{MasterServerAddr: addr, ClusterID: "ha_client"})
	assert.Equal(t, user.MasterAddr(), m1.Addr())
	assert.NilError(t, user.Put(ctx, "x", pattern(5000, 1), client.ReplicateConfig{}))

	assert.NilError(t, m1.Close())
	deadline = time.Now().Add(20 * time.Second)
	for {
		err := user.Put(ctx, "y", pattern(5000, 2), client.ReplicateConfig{})
		if err == nil {
			break
		}
		assert.Assert(t, time.Now().Before(deadline), "no put after failover: %v", err)
		time.Sleep(50 * time.Millisecond)
	}
	assert.Equal(t, user.MasterAddr(), m2.Addr())
	got, err := holder.Get(ctx, "y")
	assert.NilError(t, err)
	assert.Assert(t, bytes.Equal(got, pattern(5000, 2)))
	assert.Assert(t, user.Metrics().MasterSwitches >= 1)
}

// grpcOnlyMaster is a master that speaks only gRPC (as an older one would).
type grpcOnlyMaster struct {
	wire.UnimplementedMasterServer
}

func (grpcOnlyMaster) ReMountSegments(context.Context, *wire.ReMountSegmentsRequest) (*wire.ReMountSegmentsResponse, error) {
	return &wire.ReMountSegmentsResponse{}, nil
}

func (grpcOnlyMaster) Ping(context.Context, *wire.PingRequest) (*wire.PingResponse, error) {
	return &wire.PingResponse{Status: wire.ClientStatus_CLIENT_STATUS_OK}, nil
}

func (grpcOnlyMaster) ExistKey(context.Context, *wire.KeyRequest) (*wire.ExistKeyResponse, error) {
	return &wire.ExistKeyResponse{Exists: true}, nil
}

// TestFallbackToGRPC: with MasterRPC auto a master that does not speak mux
// is used over gRPC; with MasterRPC mux the client refuses to start.
func TestFallbackToGRPC(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	gs := grpc.NewServer()
	wire.RegisterMasterServer(gs, grpcOnlyMaster{})
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = gs.Serve(lis)
	}()
	defer func() {
		gs.Stop()
		<-served
	}()
	c := newClient(t, client.Config{MasterServerAddr: lis.Addr().String()})
	assert.Equal(t, client.MasterRPCForTest(c), client.MasterRPCGRPC)
	ok, err := c.IsExist(ctxT(t, 10*time.Second), "k")
	assert.NilError(t, err)
	assert.Assert(t, ok)
	assert.NilError(t, c.Close())

	_, err = embedded.NewClient(ctxT(t, 10*time.Second), client.Config{LocalHostname: "127.0.0.1",
		MasterServerAddr: lis.Addr().String(), MasterRPC: client.MasterRPCMux})
	assert.Assert(t, errors.Is(err, wire.ErrMuxRefused), "got %v", err)
	_, err = embedded.NewClient(ctxT(t, 10*time.Second), client.Config{MasterServerAddr: "x:1", MasterRPC: "http"})
	assert.ErrorContains(t, err, "MasterRPC")
}

// remoteOpsSize is the value size of BenchmarkRemoteOps and
// TestStoreAllocs4K.
const remoteOpsSize = 4096

// remoteOpsPair starts a master server (mux), a holder client lending 64
// MiB and a user client lending nothing, with remoteOpsSize bytes of
// registered memory: the shape of BenchmarkRemoteOps and
// TestStoreAllocs4K. Everything closes when tb ends.
func remoteOpsPair(tb testing.TB, userConfig ...func(*client.Config)) (*client.Client, *cmem.Map) {
	srv, err := master.NewServer(master.Config{RPCAddr: "127.0.0.1:0"})
	assert.NilError(tb, err)
	tb.Cleanup(func() { srv.Close() })
	mk := func(seg uint64, with ...func(*client.Config)) *client.Client {
		cfg := client.Config{LocalHostname: "127.0.0.1", MasterServerAddr: srv.Addr(), GlobalSegmentSize: seg}
		for _, f := range with {
			f(&cfg)
		}
		c, err := embedded.NewClient(context.Background(), cfg)
		assert.NilError(tb, err)
		tb.Cleanup(func() { c.Close() })
		return c
	}
	mk(64 << 20) // the holder
	user := mk(0, userConfig...)
	buf, err := cmem.MapAnon(remoteOpsSize)
	assert.NilError(tb, err)
	tb.Cleanup(func() { buf.Close() })
	assert.NilError(tb, user.RegisterBuffer(buf.Addr(), remoteOpsSize))
	return user, buf
}

// BenchmarkRemoteOps measures one put and one get of 4 KiB from registered
// memory through a master server (mux) and a holder in this process
// (same-process transport): the per-operation cost of the client and the
// master round trips, with allocations.
func BenchmarkRemoteOps(b *testing.B) {
	ctx := context.Background()
	user, buf := remoteOpsPair(b)
	const sz = remoteOpsSize
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprint("k", i)
	}
	b.Run("put", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			k := keys[i%len(keys)]
			if i%len(keys) == 0 && i > 0 {
				_, _ = user.RemoveAll(ctx, true)
			}
			if err := user.PutFrom(ctx, k, buf.Addr(), sz, client.ReplicateConfig{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, k := range keys {
		_ = user.PutFrom(ctx, k, buf.Addr(), sz, client.ReplicateConfig{})
	}
	b.Run("get", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, err := user.GetInto(ctx, keys[i%len(keys)], buf.Addr(), sz); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("exist", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, err := user.IsExist(ctx, keys[i%len(keys)]); err != nil {
				b.Fatal(err)
			}
		}
	})
}
