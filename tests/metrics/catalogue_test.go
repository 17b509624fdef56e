// Package metrics_test checks the metrics catalogue against a running
// deployment in one process: two transfer engines over TCP with the HTTP
// metadata server, two over RDMA (the fake verbs provider), a store master
// and two store clients. Every metric of
// the catalogue must be exported, and every one not listed in stillZero
// must move.
package metrics_test

import (
	"context"
	"fmt"
	"io"
	"net"
	nethttp "net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/descriptor"
	mdhttp "github.com/kvferry/kvferry/engine/metadata/http"
	"github.com/kvferry/kvferry/engine/metadata/open"
	"github.com/kvferry/kvferry/engine/peerauth"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/engine/transport/rdma"
	"github.com/kvferry/kvferry/engine/transport/tcp/tcpwire"
	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/internal/testutil"
	"github.com/kvferry/kvferry/metrics"
	"github.com/kvferry/kvferry/store/client"
	"github.com/kvferry/kvferry/store/master"
	"github.com/kvferry/kvferry/tests/rdma/fakeverbs"
)

func TestMain(m *testing.M) {
	// The RDMA engines use the fake verbs provider (a test fixture), set
	// up before the binding loads it.
	lib, err := fakeverbs.Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	dir, err := os.MkdirTemp("", "metrics-fakeverbs-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fakeverbs.Setenv(lib, dir, "fake_mlx5_0")
	code := testutil.VerifyNoLeaks(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

// stillZero are the metrics this scenario cannot move, with the reason;
// they must still be exported.
var stillZero = map[string]string{
	"kvferry_store_master_disk_hits_total":               "needs a read served from a disk replica (store/client tier tests)",
	"kvferry_store_master_disk_tier_objects":             "the tier's writers offload after the put returns (store/client TestSSDTier)",
	"kvferry_store_master_disk_tier_offload_queue":       "the tier's writers offload after the put returns (store/client TestSSDSlowDirectory)",
	"kvferry_store_master_disk_tier_used_bytes":          "the tier's writers offload after the put returns (store/client TestSSDTier)",
	"kvferry_store_master_drain_jobs":                    "needs a drain job (store/client TestDrainJob runs one)",
	"kvferry_store_master_drain_moved_bytes_total":       "needs a drain job (store/client TestDrainJob runs one)",
	"kvferry_store_master_drain_moved_total":             "needs a drain job (store/client TestDrainJob runs one)",
	"kvferry_store_client_remounts_total":                "needs a master restart",
	"kvferry_store_client_master_switches_total":         "needs an HA leader change",
	"kvferry_store_client_ping_failures_total":           "needs an unreachable master",
	"kvferry_store_client_disk_reads_total":              "needs a disk tier (store/client TestSSDReadBack)",
	"kvferry_store_client_remote_disk_reads_total":       "needs another client's disk tier (store/client TestDiskServeLeasedMemory)",
	"kvferry_store_client_disk_served_total":             "needs another client's disk tier (store/client TestDiskServeLeasedMemory)",
	"kvferry_store_client_disk_serve_busy_total":         "needs a full serve buffer (store/client TestDiskServeBounded)",
	"kvferry_store_client_grant_fallbacks_total":         "needs a refused PutCommit",
	"kvferry_store_master_expired_clients_total":         "needs a client that stops pinging",
	"kvferry_store_master_zombie_puts_total":             "needs an abandoned put",
	"kvferry_store_master_put_revokes_total":             "needs a put whose transfer fails",
	"kvferry_store_master_put_commit_failures_total":     "needs a refused PutCommit",
	"kvferry_store_master_grants_taken_back_total":       "needs grants outstanding when their segment goes (eviction pressure has them returned first)",
	"kvferry_store_master_fenced_bytes":                  "needs taken-back grants still fenced",
	"kvferry_store_master_discarded_bytes":               "needs a removed object still leased",
	"kvferry_store_master_processing_objects":            "a gauge: zero between puts",
	"kvferry_store_master_pinned_objects":                "needs a pinned put",
	"kvferry_store_master_disk_capacity_bytes":           "needs a disk tier (SSD offload; store/client TestSSDTier runs one)",
	"kvferry_store_master_disk_objects":                  "needs a disk tier (SSD offload; store/client TestSSDTier runs one)",
	"kvferry_store_master_offload_queue":                 "a gauge: zero once the offloads are done",
	"kvferry_store_master_offload_waits_total":           "needs a disk tier whose writers fall behind (store/client TestSSDSlowDirectory)",
	"kvferry_store_master_evict_skipped_for_files_total": "needs a disk tier whose writers fall behind (store/client TestSSDSlowDirectory)",
	"kvferry_store_master_disk_used_bytes":               "needs a disk tier (SSD offload; store/client TestSSDTier runs one)",
	"kvferry_store_master_offloaded_bytes_total":         "needs a disk tier (SSD offload; store/client TestSSDTier runs one)",
	"kvferry_store_master_offloads_total":                "needs a disk tier (SSD offload; store/client TestSSDTier runs one)",
	"kvferry_store_master_promotions_total":              "needs a disk tier (SSD offload; store/client TestSSDTier runs one)",
	"kvferry_store_master_task_failures_total":           "needs a disk tier (SSD offload; store/client TestSSDTier runs one)",
	"kvferry_store_master_tasks_total":                   "needs a disk tier (SSD offload; store/client TestSSDTier runs one)",
	"kvferry_store_master_tenant_quota_bytes":            "needs a tenant quota (store/master TestTenantQuota sets one)",
	"kvferry_store_master_tenant_quota_objects":          "needs a tenant quota (store/master TestTenantQuota sets one)",
	"kvferry_store_master_tenant_quota_refused_total":    "needs a put past a tenant quota (store/master TestTenantQuota)",
	"kvferry_engine_tasks_in_flight":                     "a gauge: zero once transfers end",
	"kvferry_rdma_nic_inflight_bytes":                    "a gauge: zero once transfers end",
	"kvferry_rdma_nic_gpu_regions":                       "needs GPU memory (engine/transport/rdma TestGPUDirect registers some)",
	"kvferry_engine_batches":                             "a gauge: zero once batches are freed",
	"kvferry_transport_connections":                      "read at the end, after the engines closed",
	"kvferry_store_clients":                              "read at the end, after the clients closed",
	"kvferry_engines":                                    "read at the end, after the engines closed",
	"kvferry_engine_open_segments":                       "read at the end, after the engines closed",
	"kvferry_engine_registered_regions":                  "read at the end, after the engines closed",
	"kvferry_engine_registered_bytes":                    "read at the end, after the engines closed",
}

// whileNICCounters are exported only while a live engine has a NIC whose
// sysfs port counters can be read: the RDMA engines with a sysfs tree,
// closed before the later readings (the store clients' engines use the
// fake NIC through this host's /sys, which has no counters for it).
var whileNICCounters = map[string]bool{
	"kvferry_rdma_port_xmit_bytes_total": true, "kvferry_rdma_port_rcv_bytes_total": true,
	"kvferry_rdma_port_xmit_packets_total": true, "kvferry_rdma_port_rcv_packets_total": true,
	"kvferry_rdma_port_link_downed_total": true, "kvferry_rdma_port_errors_total": true,
	"kvferry_rdma_port_hw_counters_total": true,
}

func TestCatalogueExportedAndMoving(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// Metadata server (kvferry-metadata's handler) on loopback.
	md, err := mdhttp.NewServer(mdhttp.ServerConfig{})
	assert.NilError(t, err)
	defer md.Close()
	mdObs := mdhttp.Instrument(md, md.Len)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	hs := &nethttp.Server{Handler: mdObs, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()
	mdConn := "http://" + ln.Addr().String() + "/metadata"
	// A second metadata server holding both cluster keys of the auth
	// scenario below (a key rollover's two keys).
	lnK, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	hsK := &nethttp.Server{Handler: md, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		_ = hsK.Serve(peerauth.Listen(lnK, peerauth.NewGuard(keys(t, keyAlpha+"\n"+keyBravo), peerauth.RoleMetadata, 0, nil)))
	}()
	defer hsK.Close()
	mdConnK := "http://" + lnK.Addr().String() + "/metadata"

	newEngine := func(name string, key ...string) *engine.Engine {
		var cfg stack.Config
		cfg.Engine.MetadataConn = mdConn
		if len(key) > 0 {
			cfg.Engine.Auth = keys(t, key[0])
			cfg.Engine.MetadataConn = mdConnK
		}
		cfg.Engine.LocalServerName = name
		cfg.Engine.BindAddress = "127.0.0.1"
		cfg.Engine.Transports = []string{"tcp"}
		cfg.Engine.ForceTransport = "tcp"
		cfg.Engine.TransferTimeout = 10 * time.Second
		e, err := stack.New(ctx, cfg)
		assert.NilError(t, err)
		return e
	}
	a, b, c := newEngine("node-a"), newEngine("node-b"), newEngine("node-c")
	bufA := mapped(t, 4<<20)
	assert.NilError(t, a.RegisterMemory(bufA.Addr(), bufA.Len(), "cpu:0", true))
	bufC := mapped(t, 64<<10)
	assert.NilError(t, c.RegisterMemory(bufC.Addr(), bufC.Len(), "cpu:0", true))
	r1, r2 := mapped(t, 1<<20), mapped(t, 1<<20)
	assert.NilError(t, b.RegisterMemory(r1.Addr(), r1.Len(), "cpu:0", true))
	assert.NilError(t, b.RegisterMemory(r2.Addr(), r2.Len(), "cpu:0", true))
	segB, err := a.OpenSegment(ctx, "node-b")
	assert.NilError(t, err)
	segC, err := a.OpenSegment(ctx, "node-c")
	assert.NilError(t, err)
	// a knows c's buffer before c goes away (c publishes in the background).
	for a.CheckRange(ctx, segC, uint64(bufC.Addr()), 8) != nil {
		assert.NilError(t, ctx.Err(), "node-c's buffer never showed")
		time.Sleep(10 * time.Millisecond)
	}

	// Completed writes and reads of two size classes.
	assert.NilError(t, a.Transfer(ctx, []engine.Request{
		{Op: engine.OpWrite, Source: bufA.Addr(), Target: segB, TargetOffset: uint64(r1.Addr()), Length: 64 << 10},
		{Op: engine.OpRead, Source: bufA.Addr() + 1<<20, Target: segB, TargetOffset: uint64(r2.Addr()), Length: 4 << 10},
	}))
	// A notification.
	assert.NilError(t, a.Notify(ctx, segB, engine.Notification{Name: "node-a", Msg: "hello"}))
	// A range outside every buffer of b: refused before it leaves.
	err = a.Transfer(ctx, []engine.Request{{Op: engine.OpWrite, Source: bufA.Addr(), Target: segB, TargetOffset: 16, Length: 8}})
	assert.ErrorContains(t, err, "not registered")
	// b unregisters r1 while a still has it cached: b's server refuses
	// the request (and drops the connection).
	assert.NilError(t, b.UnregisterMemory(r1.Addr()))
	err = a.Transfer(ctx, []engine.Request{{Op: engine.OpWrite, Source: bufA.Addr(), Target: segB, TargetOffset: uint64(r1.Addr()), Length: 4096}})
	assert.ErrorContains(t, err, "rejected")
	// "node-f" is b behind a proxy that drops its first connection after
	// the first request arrived: the requests in flight are retried on a
	// new connection.
	segF := proxied(t, ctx, a, b, mdConn, "node-f")
	var reqs []engine.Request
	for i := range 8 {
		off := uint64(i) * 4096
		reqs = append(reqs, engine.Request{Op: engine.OpWrite, Source: bufA.Addr() + uintptr(off), Target: segF, TargetOffset: uint64(r2.Addr()) + off, Length: 4096})
	}
	assert.NilError(t, a.Transfer(ctx, reqs))
	// Two engines over RDMA (fake NICs): the NIC gauges, read while the
	// moving average of the bandwidth still shows the transfer, and the
	// port counters the kernel would keep (a sysfs tree of the fake NIC).
	nicSys := fstest.MapFS{}
	for name, v := range map[string]string{"port_xmit_data": "256", "port_rcv_data": "512", "port_xmit_packets": "3",
		"port_rcv_packets": "4", "link_downed": "1", "symbol_error": "2", "port_rcv_errors": "0"} {
		nicSys["class/infiniband/fake_mlx5_0/ports/1/counters/"+name] = &fstest.MapFile{Data: []byte(v + "\n")}
	}
	nicSys["class/infiniband/fake_mlx5_0/ports/1/hw_counters/out_of_buffer"] = &fstest.MapFile{Data: []byte("6\n")}
	newRDMAEngine := func(name string) *engine.Engine {
		var cfg stack.Config
		cfg.Engine.MetadataConn = mdConn
		cfg.Engine.LocalServerName = name
		cfg.Engine.BindAddress = "127.0.0.1"
		cfg.Engine.Transports = []string{rdma.Name, "tcp"}
		cfg.Engine.TransferTimeout = 10 * time.Second
		cfg.RDMA = rdma.Config{Library: os.Getenv("KVFERRY_IBVERBS_LIB"), SysFS: nicSys}
		e, err := stack.New(ctx, cfg)
		assert.NilError(t, err)
		return e
	}
	ra, rb := newRDMAEngine("node-r1"), newRDMAEngine("node-r2")
	bufR1, bufR2 := mapped(t, 1<<20), mapped(t, 1<<20)
	assert.NilError(t, ra.RegisterMemory(bufR1.Addr(), bufR1.Len(), "cpu:0", true))
	assert.NilError(t, rb.RegisterMemory(bufR2.Addr(), bufR2.Len(), "cpu:0", true))
	segR, err := ra.OpenSegment(ctx, "node-r2")
	assert.NilError(t, err)
	for ra.CheckRange(ctx, segR, uint64(bufR2.Addr()), 8) != nil {
		assert.NilError(t, ctx.Err(), "node-r2's buffer never showed")
		time.Sleep(10 * time.Millisecond)
	}
	assert.NilError(t, ra.Transfer(ctx, []engine.Request{{Op: engine.OpWrite, Source: bufR1.Addr(), Target: segR, TargetOffset: uint64(bufR2.Addr()), Length: 1 << 20}}))
	// The moving average takes a sample at most every 10 ms: read it after
	// one window has passed since the transfer.
	time.Sleep(20 * time.Millisecond)
	proc := metrics.NewRegistry()
	early := []samples{gatherAll(t, proc)}
	assert.Assert(t, early[0].value("kvferry_rdma_nic_bandwidth_bytes_per_second", "device", "fake_mlx5_0") > 0)
	assert.Assert(t, early[0].value("kvferry_rdma_nic_up", "device", "fake_mlx5_0") == 1)
	assert.Assert(t, early[0].value("kvferry_rdma_nic_endpoints", "device", "fake_mlx5_0") >= 2, "one endpoint on each engine")
	assert.Equal(t, early[0].value("kvferry_rdma_port_xmit_bytes_total", "device", "fake_mlx5_0"), 1024.0) // 4-byte words
	assert.Equal(t, early[0].value("kvferry_rdma_port_rcv_bytes_total", "port", "1"), 2048.0)              // once, not per engine
	assert.Equal(t, early[0].value("kvferry_rdma_port_errors_total", "counter", "symbol_error"), 2.0)
	assert.Equal(t, early[0].value("kvferry_rdma_port_hw_counters_total", "counter", "out_of_buffer"), 6.0)
	// The NIC's work requests fail (transport retry counter exceeded, as
	// a dead link gives): the transfer fails over to TCP within the
	// request. (A port-down event instead lets the selector pick TCP
	// before any slice is posted, which moves nothing: whether the event
	// or the first slice comes first is a race, so it is not used here.)
	fv, err := fakeverbs.Open(os.Getenv("KVFERRY_IBVERBS_LIB"))
	assert.NilError(t, err)
	const wcRetryExcErr = 12 // IBV_WC_RETRY_EXC_ERR
	assert.NilError(t, fv.FailNext("fake_mlx5_0", 1<<20, wcRetryExcErr))
	assert.NilError(t, ra.Transfer(ctx, []engine.Request{{Op: engine.OpWrite, Source: bufR1.Addr(), Target: segR, TargetOffset: uint64(bufR2.Addr()), Length: 64 << 10}}))
	assert.Assert(t, len(ra.Metrics().Failovers) > 0, "no failover with every work request failing")
	assert.NilError(t, fv.FailNext("fake_mlx5_0", 0, 0))
	assert.NilError(t, ra.Close())
	assert.NilError(t, rb.Close())

	// A peer that went away.
	assert.NilError(t, c.Close())
	err = a.Transfer(ctx, []engine.Request{{Op: engine.OpWrite, Source: bufA.Addr(), Target: segC, TargetOffset: uint64(bufC.Addr()), Length: 8}})
	assert.ErrorContains(t, err, "refused")

	// Cluster keys that differ: the data connection is refused on both
	// sides as an authentication failure.
	k := newEngine("node-k", keyAlpha)
	x := newEngine("node-x", keyBravo)
	bufK := mapped(t, 64<<10)
	assert.NilError(t, k.RegisterMemory(bufK.Addr(), bufK.Len(), "cpu:0", true))
	assert.NilError(t, x.RegisterMemory(bufA.Addr(), 64<<10, "cpu:0", true))
	segK, err := x.OpenSegment(ctx, "node-k")
	assert.NilError(t, err)
	for x.CheckRange(ctx, segK, uint64(bufK.Addr()), 8) != nil {
		assert.NilError(t, ctx.Err(), "node-k's buffer never showed")
		time.Sleep(10 * time.Millisecond)
	}
	err = x.Transfer(ctx, []engine.Request{{Op: engine.OpWrite, Source: bufA.Addr(), Target: segK, TargetOffset: uint64(bufK.Addr()), Length: 8}})
	assert.ErrorIs(t, err, engine.ErrUnauthenticated)
	assert.NilError(t, k.Close())
	assert.NilError(t, x.Close())

	// Store: a master, a holder lending 4 MiB and a pure client.
	srv, err := master.NewServer(master.Config{RPCAddr: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0",
		TenantQuotas: map[string]master.Quota{"q": {Objects: 1, Bytes: 1 << 20}}})
	assert.NilError(t, err)
	defer srv.Close()
	holder := newStoreClient(t, ctx, srv.Addr(), 4<<20)
	user := newStoreClient(t, ctx, srv.Addr(), 0)
	val := make([]byte, 256<<10)
	for i := range 24 { // 6 MiB into 4 MiB: eviction
		assert.NilError(t, user.Put(ctx, fmt.Sprintf("k%d", i), val, client.ReplicateConfig{}))
		if i < 4 { // grants held, before eviction pressure has them returned
			early = append(early, gatherAll(t, proc, srv.Registry(), mdObs.Registry()))
		}
	}
	assert.NilError(t, holder.Put(ctx, "own", val[:4096], client.ReplicateConfig{}))
	_, err = holder.Get(ctx, "own")
	assert.NilError(t, err)
	_, err = user.Get(ctx, "k23")
	assert.NilError(t, err)
	_, err = user.Get(ctx, "absent")
	assert.Assert(t, err != nil)
	ok, err := user.IsExist(ctx, "k23")
	assert.NilError(t, err)
	assert.Assert(t, ok)
	assert.NilError(t, user.Remove(ctx, "k23", true))
	assert.Assert(t, user.Put(ctx, "huge", make([]byte, 8<<20), client.ReplicateConfig{}) != nil)
	// A tenant with a quota of one object.
	quota := newStoreClient(t, ctx, srv.Addr(), 0, func(c *client.Config) { c.TenantID = "q" })
	assert.NilError(t, quota.Put(ctx, "one", val[:4096], client.ReplicateConfig{}))
	assert.Assert(t, quota.Put(ctx, "two", val[:4096], client.ReplicateConfig{}) != nil)
	// A client without put grants: PutStart and PutEnd.
	plain := newStoreClient(t, ctx, srv.Addr(), 0, func(c *client.Config) { c.NoPutGrants = true })
	assert.NilError(t, plain.Put(ctx, "plain", val[:8192], client.ReplicateConfig{}))
	assert.NilError(t, plain.Close())
	// A client with a disk tier: the master exports its tier's gauges
	// (capacity, use, files, writers' queue) per tier.
	disk := newStoreClient(t, ctx, srv.Addr(), 0, func(c *client.Config) { c.SSDOffloadPath = t.TempDir() })
	assert.NilError(t, disk.Put(ctx, "ondisk", val[:4096], client.ReplicateConfig{}))

	mid := gatherAll(t, proc, srv.Registry(), mdObs.Registry())

	// The holder leaves first: the master takes back the user's grants in
	// its segment.
	assert.NilError(t, holder.Close())
	assert.NilError(t, user.Close())
	assert.NilError(t, a.Close())
	assert.NilError(t, b.Close())
	end := gatherAll(t, proc, srv.Registry(), mdObs.Registry())

	var missing, still []string
	for _, s := range metrics.Catalogue() {
		movedEarly, okEarly := false, false
		for _, e := range early {
			m, ok := e.moved(s.Name)
			movedEarly = movedEarly || m
			okEarly = okEarly || ok
		}
		movedMid, okMid := mid.moved(s.Name)
		movedEnd, okEnd := end.moved(s.Name)
		if !okMid && !okEnd && !(whileNICCounters[s.Name] && okEarly) {
			missing = append(missing, s.Name)
			continue
		}
		moved := movedEarly || movedMid || movedEnd
		if _, zero := stillZero[s.Name]; !zero && !moved {
			still = append(still, s.Name)
		}
	}
	sort.Strings(missing)
	sort.Strings(still)
	assert.Assert(t, len(missing) == 0, "not exported: %s", strings.Join(missing, ", "))
	assert.Assert(t, len(still) == 0, "did not move: %s (make this scenario move a new metric, or list it in stillZero with the reason)",
		strings.Join(still, ", "))

	// Per-label checks of what the scenario caused.
	assert.Assert(t, end.value("kvferry_engine_errors_total", "cause", "refused_range") >= 2)
	assert.Assert(t, end.value("kvferry_engine_errors_total", "cause", "peer_gone") >= 1)
	assert.Assert(t, end.value("kvferry_transport_refused_total", "cause", "range") >= 1)
	assert.Assert(t, end.value("kvferry_engine_errors_total", "cause", "auth") >= 1)
	assert.Assert(t, end.value("kvferry_transport_refused_total", "cause", "auth") >= 1)
	assert.Assert(t, end.value("kvferry_transport_redials_total", "peer", "node-f") >= 1)
	assert.Assert(t, end.value("kvferry_transport_slice_retries_total", "peer", "node-f") >= 1)
	assert.Assert(t, end.value("kvferry_engine_transferred_bytes_total", "peer", "node-b") >= 64<<10+4<<10)
	assert.Assert(t, mid.value("kvferry_store_master_segment_capacity_bytes", "", "") == 4<<20)
	assert.Assert(t, mid.value("kvferry_store_master_leader", "", "") == 1)
}

// proxied publishes segment name: b's descriptor with its data port
// behind a proxy whose first connection closes once the first request
// header arrived; later connections are forwarded to b.
func proxied(t *testing.T, ctx context.Context, a, b *engine.Engine, mdConn, name string) engine.SegmentID {
	t.Helper()
	bd := b.LocalDescriptor()
	target := net.JoinHostPort("127.0.0.1", strconv.Itoa(bd.TCPDataPort))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		first := true
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if first {
				// The first request header ends the connection; an
				// identity hello before it is passed to b and answered.
				first = false
				var hdr [tcpwire.HelloSize]byte
				_, _ = io.ReadFull(c, hdr[:tcpwire.HeaderSize])
				if tcpwire.IsHello(hdr[:]) {
					if up, err := net.Dial("tcp", target); err == nil {
						var r [tcpwire.HelloReplySize]byte
						if _, err := io.ReadFull(c, hdr[tcpwire.HeaderSize:]); err == nil {
							_, _ = up.Write(hdr[:])
							if _, err := io.ReadFull(up, r[:]); err == nil {
								_, _ = c.Write(r[:])
							}
						}
						_, _ = io.ReadFull(c, hdr[:tcpwire.HeaderSize])
						up.Close()
					}
				}
				c.Close()
				continue
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
	desc := *bd
	desc.Name = name
	desc.TCPDataPort = ln.Addr().(*net.TCPAddr).Port
	mb, err := stack.OpenMetadata(ctx, mdConn, engine.Config{}, open.Options{})
	assert.NilError(t, err)
	defer mb.Close()
	assert.NilError(t, mb.Publish(ctx, &desc, descriptor.RPCMeta{IPOrHostName: "127.0.0.1", RPCPort: b.RPCPort()}))
	id, err := a.OpenSegment(ctx, name)
	assert.NilError(t, err)
	return id
}

// Cluster keys of the auth scenario.
const (
	keyAlpha = "metrics-test-cluster-key-alpha-0123456789"
	keyBravo = "metrics-test-cluster-key-bravo-0123456789"
)

func keys(t *testing.T, text string) *peerauth.Keys {
	t.Helper()
	ks, err := peerauth.ParseKeys([]byte(text))
	assert.NilError(t, err)
	return ks
}

func newStoreClient(t *testing.T, ctx context.Context, masterAddr string, segment uint64, opts ...func(*client.Config)) *client.Client {
	t.Helper()
	cfg := client.Config{LocalHostname: "127.0.0.1", MasterServerAddr: masterAddr,
		GlobalSegmentSize: segment, LocalBufferSize: 16 << 20, PingInterval: 100 * time.Millisecond}
	for _, o := range opts {
		o(&cfg)
	}
	c, err := client.New(ctx, cfg)
	assert.NilError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

func mapped(t *testing.T, n uint64) *cmem.Map {
	t.Helper()
	m, err := cmem.MapAnon(n)
	assert.NilError(t, err)
	t.Cleanup(func() { m.Close() })
	return m
}

// samples are gathered metric families by name.
type samples map[string]*dto.MetricFamily

// moved reports whether name was exported and whether any of its samples
// is non-zero (a histogram: has an observation).
func (s samples) moved(name string) (moved, ok bool) {
	mf := s[name]
	if mf == nil {
		return false, false
	}
	for _, m := range mf.GetMetric() {
		switch {
		case m.GetCounter() != nil:
			moved = moved || m.GetCounter().GetValue() > 0
		case m.GetGauge() != nil:
			moved = moved || m.GetGauge().GetValue() > 0
		case m.GetHistogram() != nil:
			moved = moved || m.GetHistogram().GetSampleCount() > 0
		}
	}
	return moved, true
}

func gatherAll(t *testing.T, regs ...*prometheus.Registry) samples {
	t.Helper()
	out := samples{}
	for _, r := range regs {
		mfs, err := r.Gather()
		assert.NilError(t, err)
		for _, mf := range mfs {
			out[mf.GetName()] = mf
		}
	}
	return out
}

// value sums the samples of name whose label key equals val (all samples
// when key is empty).
func (s samples) value(name, key, val string) float64 {
	mf := s[name]
	if mf == nil {
		return -1
	}
	sum := 0.0
	for _, m := range mf.GetMetric() {
		if key != "" {
			match := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == key && lp.GetValue() == val {
					match = true
				}
			}
			if !match {
				continue
			}
		}
		sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	return sum
}
