package metadata_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine/descriptor"
	"github.com/kvferry/kvferry/engine/metadata"
	mdhttp "github.com/kvferry/kvferry/engine/metadata/http"
	"github.com/kvferry/kvferry/internal/testutil"
)

func TestMain(m *testing.M) { os.Exit(testutil.VerifyNoLeaks(m)) }

func TestKeys(t *testing.T) {
	for _, tc := range []struct {
		cluster, name, seg, rpc string
	}{
		{"", "node1", "mooncake/ram/node1", "mooncake/rpc_meta/node1"},
		{"", "10.0.0.1:15001", "mooncake/ram/10.0.0.1:15001", "mooncake/rpc_meta/10.0.0.1:15001"},
		{"c1", "node1", "mooncake/c1/ram/node1", "mooncake/c1/rpc_meta/node1"},
		{"c1/", "node1", "mooncake/c1/ram/node1", "mooncake/c1/rpc_meta/node1"},
		{"a/b", "n", "mooncake/a/b/ram/n", "mooncake/a/b/rpc_meta/n"},
		{"", "nvmeof/n1", "mooncake/nvmeof/n1", "mooncake/rpc_meta/nvmeof/n1"},
		{"c1", "nvmeof/n1", "mooncake/c1/nvmeof/n1", "mooncake/c1/rpc_meta/nvmeof/n1"},
	} {
		assert.Equal(t, metadata.SegmentKey(tc.cluster, tc.name), tc.seg)
		assert.Equal(t, metadata.RPCMetaKey(tc.cluster, tc.name), tc.rpc)
	}
}

// server is an in-process kvferry metadata server on a fixed address, so it
// can be stopped and started again where clients expect it.
type server struct {
	addr string
	cfg  mdhttp.ServerConfig
	srv  *mdhttp.Server
	hs   *httptest.Server
}

func startServer(t *testing.T, cfg mdhttp.ServerConfig) *server {
	t.Helper()
	s := &server{addr: "127.0.0.1:0", cfg: cfg}
	s.start(t)
	t.Cleanup(s.stop)
	return s
}

func (s *server) start(t *testing.T) {
	t.Helper()
	srv, err := mdhttp.NewServer(s.cfg)
	assert.NilError(t, err)
	var ln net.Listener
	deadline := time.Now().Add(5 * time.Second)
	for {
		ln, err = net.Listen("tcp", s.addr)
		if err == nil {
			break
		}
		assert.Assert(t, time.Now().Before(deadline), "listen %s: %v", s.addr, err)
		time.Sleep(20 * time.Millisecond)
	}
	hs := httptest.NewUnstartedServer(srv)
	hs.Listener.Close()
	hs.Listener = ln
	hs.Start()
	s.srv, s.hs, s.addr = srv, hs, ln.Addr().String()
}

func (s *server) stop() {
	if s.hs != nil {
		s.hs.CloseClientConnections()
		s.hs.Close()
		_ = s.srv.Close()
		s.hs = nil
	}
}

func (s *server) url() string { return "http://" + s.addr + "/metadata" }

func newBackend(t *testing.T, url string, cfg metadata.KVConfig) *metadata.KVBackend {
	t.Helper()
	cl, err := mdhttp.NewClient(mdhttp.Config{URL: url})
	assert.NilError(t, err)
	b, err := metadata.NewKVBackend(cl, cfg)
	assert.NilError(t, err)
	t.Cleanup(func() { b.Close() })
	return b
}

// rawKV reads the server directly.
func rawKV(t *testing.T, url string) *mdhttp.Client {
	t.Helper()
	c, err := mdhttp.NewClient(mdhttp.Config{URL: url})
	assert.NilError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

func testSegment(name string, bufs ...uint64) *descriptor.Segment {
	s := &descriptor.Segment{
		Name: name, Protocol: descriptor.ProtocolTCP, TCPDataPort: 15500,
		TCPProtoVersion: descriptor.TCPProtoV2, Timestamp: "2025-01-02 03:04:05.000006",
	}
	for i, b := range bufs {
		s.Buffers = append(s.Buffers, descriptor.Buffer{Name: name, Addr: 0x7f0000000000 + uint64(i)<<32, Length: b})
	}
	return s
}

var rpcA = descriptor.RPCMeta{IPOrHostName: "10.0.0.1", RPCPort: 15001}

// waitFor polls cond until it holds or timeout passes; it returns the time
// it took.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Since(start) > timeout {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		<-tick.C
	}
	return time.Since(start)
}

func has(t *testing.T, c *mdhttp.Client, key string) bool {
	t.Helper()
	_, err := c.Get(context.Background(), key)
	return err == nil
}

func TestPublishFetch(t *testing.T) {
	s := startServer(t, mdhttp.ServerConfig{})
	ctx := context.Background()
	raw := rawKV(t, s.url())
	for _, cluster := range []string{"", "tenant-1"} {
		t.Run("cluster="+cluster, func(t *testing.T) {
			b := newBackend(t, s.url(), metadata.KVConfig{ClusterID: cluster})
			assert.Assert(t, !b.P2P())
			seg := testSegment("node-a", 4096, 1<<20)
			assert.NilError(t, b.Publish(ctx, seg, rpcA))

			v, err := raw.Get(ctx, metadata.SegmentKey(cluster, "node-a"))
			assert.NilError(t, err)
			got, err := descriptor.Unmarshal(v)
			assert.NilError(t, err)
			assert.DeepEqual(t, got.Buffers, seg.Buffers)
			v, err = raw.Get(ctx, metadata.RPCMetaKey(cluster, "node-a"))
			assert.NilError(t, err)
			assert.Equal(t, string(v), `{"ip_or_host_name":"10.0.0.1","rpc_port":15001}`)

			f, err := b.Fetch(ctx, "node-a")
			assert.NilError(t, err)
			assert.DeepEqual(t, f.Buffers, seg.Buffers)
			assert.Equal(t, f.TCPDataPort, 15500)
			ep, err := b.Endpoint(ctx, "node-a")
			assert.NilError(t, err)
			assert.Equal(t, ep, rpcA)

			// A new buffer: published again, readable at once.
			seg = testSegment("node-a", 4096, 1<<20, 8192)
			assert.NilError(t, b.Publish(ctx, seg, rpcA))
			f, err = b.Fetch(ctx, "node-a")
			assert.NilError(t, err)
			assert.Equal(t, len(f.Buffers), 3)

			_, err = b.Fetch(ctx, "absent")
			assert.Assert(t, errors.Is(err, metadata.ErrNotFound), "got %v", err)
			_, err = b.Endpoint(ctx, "absent")
			assert.Assert(t, errors.Is(err, metadata.ErrNotFound), "got %v", err)

			assert.NilError(t, b.Unpublish(ctx, "node-a"))
			assert.Assert(t, !has(t, raw, metadata.SegmentKey(cluster, "node-a")))
			assert.Assert(t, !has(t, raw, metadata.RPCMetaKey(cluster, "node-a")))
			assert.NilError(t, b.Unpublish(ctx, "node-a"))
			m := b.Metrics()
			assert.Equal(t, m.Publishes, uint64(2))
			assert.Equal(t, m.Fetches, uint64(3))
		})
	}
}

// TestClusterIsolation: two tenants on one server do not see each other.
func TestClusterIsolation(t *testing.T) {
	s := startServer(t, mdhttp.ServerConfig{})
	ctx := context.Background()
	a := newBackend(t, s.url(), metadata.KVConfig{ClusterID: "a"})
	b := newBackend(t, s.url(), metadata.KVConfig{ClusterID: "b"})
	assert.NilError(t, a.Publish(ctx, testSegment("n", 64), rpcA))
	_, err := b.Fetch(ctx, "n")
	assert.Assert(t, errors.Is(err, metadata.ErrNotFound), "got %v", err)
	// The same name in the other tenant with another endpoint is no conflict.
	assert.NilError(t, b.Publish(ctx, testSegment("n", 64), descriptor.RPCMeta{IPOrHostName: "10.9.9.9", RPCPort: 1}))
}

func TestNameWithSlash(t *testing.T) {
	s := startServer(t, mdhttp.ServerConfig{})
	ctx := context.Background()
	b := newBackend(t, s.url(), metadata.KVConfig{})
	raw := rawKV(t, s.url())
	assert.NilError(t, b.Publish(ctx, testSegment("nvmeof/n1", 64), rpcA))
	assert.Assert(t, has(t, raw, "mooncake/nvmeof/n1"))
	assert.Assert(t, has(t, raw, "mooncake/rpc_meta/nvmeof/n1"))
	_, err := b.Fetch(ctx, "nvmeof/n1")
	assert.NilError(t, err)
}

// TestConflict: a name taken by another engine (different rpc_meta) is
// refused by a Mooncake-master style server with ErrConflict.
func TestConflict(t *testing.T) {
	s := startServer(t, mdhttp.ServerConfig{})
	ctx := context.Background()
	a := newBackend(t, s.url(), metadata.KVConfig{})
	b := newBackend(t, s.url(), metadata.KVConfig{})
	assert.NilError(t, a.Publish(ctx, testSegment("n", 64), rpcA))
	err := b.Publish(ctx, testSegment("n", 64), descriptor.RPCMeta{IPOrHostName: "10.0.0.2", RPCPort: 15001})
	assert.Assert(t, errors.Is(err, metadata.ErrConflict), "got %v", err)
	// The same engine publishing again is fine.
	assert.NilError(t, a.Publish(ctx, testSegment("n", 64, 128), rpcA))
}

// TestRepublishAfterRestart: a server without snapshot restarts empty; the
// backend writes its entries again within the re-publish interval.
func TestRepublishAfterRestart(t *testing.T) {
	s := startServer(t, mdhttp.ServerConfig{})
	ctx := context.Background()
	b := newBackend(t, s.url(), metadata.KVConfig{RepublishInterval: 300 * time.Millisecond})
	assert.NilError(t, b.Publish(ctx, testSegment("n", 64), rpcA))
	s.stop()
	s.start(t)
	raw := rawKV(t, s.url())
	took := waitFor(t, 5*time.Second, "entries back", func() bool {
		return has(t, raw, metadata.SegmentKey("", "n")) && has(t, raw, metadata.RPCMetaKey("", "n"))
	})
	t.Logf("entries back %v after the restart", took)
	f, err := b.Fetch(ctx, "n")
	assert.NilError(t, err)
	assert.Equal(t, len(f.Buffers), 1)
}

// TestReconnect: while the server is down, Publish fails with
// ErrUnavailable (and is undone); once the server is back the backend
// notices and publishes what it had, long before the (1 min) re-publish
// interval.
func TestReconnect(t *testing.T) {
	s := startServer(t, mdhttp.ServerConfig{})
	ctx := context.Background()
	b := newBackend(t, s.url(), metadata.KVConfig{RepublishInterval: time.Minute, RetryInterval: 100 * time.Millisecond})
	assert.NilError(t, b.Publish(ctx, testSegment("old", 64), rpcA))
	s.stop()
	start := time.Now()
	err := b.Publish(ctx, testSegment("n", 64), descriptor.RPCMeta{IPOrHostName: "10.0.0.3", RPCPort: 2})
	assert.Assert(t, errors.Is(err, metadata.ErrUnavailable), "got %v", err)
	err = b.Publish(ctx, testSegment("old", 64, 128), rpcA) // a new buffer, refused
	assert.Assert(t, errors.Is(err, metadata.ErrUnavailable), "got %v", err)
	assert.Assert(t, time.Since(start) < 4*time.Second)
	assert.Assert(t, b.Metrics().Unreachable)
	_, err = b.Fetch(ctx, "old")
	assert.Assert(t, errors.Is(err, metadata.ErrUnavailable), "got %v", err)

	s.start(t) // empty: no snapshot
	raw := rawKV(t, s.url())
	took := waitFor(t, 10*time.Second, "entries published after reconnect", func() bool {
		return has(t, raw, metadata.SegmentKey("", "old"))
	})
	t.Logf("entries published %v after the server came back", took)
	assert.Assert(t, !has(t, raw, metadata.SegmentKey("", "n")), "a failed first Publish was re-published")
	f, err := b.Fetch(ctx, "old")
	assert.NilError(t, err)
	assert.Equal(t, len(f.Buffers), 1, "a failed Publish was re-published")
	waitFor(t, 5*time.Second, "backend sees the service again", func() bool { return !b.Metrics().Unreachable })
}

// TestCloseRemovesEntries: Close deletes what the backend published, and
// every later call fails with ErrClosed. It checks results, not speed:
// with the client's default 3 s per request a loaded machine failed a
// Publish or one of Close's deletes (flaky under load), so every request
// here has a generous deadline, and a key counts as gone only on the
// server's "not found", never on a failed read.
func TestCloseRemovesEntries(t *testing.T) {
	s := startServer(t, mdhttp.ServerConfig{})
	ctx := context.Background()
	const patient = 30 * time.Second
	raw, err := mdhttp.NewClient(mdhttp.Config{URL: s.url(), Timeout: patient, ConnectTimeout: patient})
	assert.NilError(t, err)
	defer raw.Close()
	gone := func(key string) bool {
		t.Helper()
		_, err := raw.Get(ctx, key)
		if errors.Is(err, metadata.ErrNotFound) {
			return true
		}
		assert.NilError(t, err, "read %q", key)
		return false
	}
	cl, err := mdhttp.NewClient(mdhttp.Config{URL: s.url(), Timeout: patient, ConnectTimeout: patient})
	assert.NilError(t, err)
	b, err := metadata.NewKVBackend(cl, metadata.KVConfig{OpTimeout: patient})
	assert.NilError(t, err)
	assert.NilError(t, b.Publish(ctx, testSegment("n", 64), rpcA))
	assert.Assert(t, !gone(metadata.SegmentKey("", "n")))
	assert.NilError(t, b.Close())
	assert.NilError(t, b.Close())
	assert.Assert(t, gone(metadata.SegmentKey("", "n")))
	assert.Assert(t, gone(metadata.RPCMetaKey("", "n")))
	assert.Assert(t, errors.Is(b.Publish(ctx, testSegment("n", 64), rpcA), metadata.ErrClosed))
	_, err = b.Fetch(ctx, "n")
	assert.Assert(t, errors.Is(err, metadata.ErrClosed))
	_, err = b.Endpoint(ctx, "n")
	assert.Assert(t, errors.Is(err, metadata.ErrClosed))
	assert.Assert(t, errors.Is(b.Unpublish(ctx, "n"), metadata.ErrClosed))
}

// TestMalformed: garbage stored by someone else is rejected, never used.
func TestMalformed(t *testing.T) {
	s := startServer(t, mdhttp.ServerConfig{})
	ctx := context.Background()
	raw := rawKV(t, s.url())
	b := newBackend(t, s.url(), metadata.KVConfig{})
	for _, v := range []string{
		`not json`, `{}`, `{"name":"x"}`, `[1,2]`, `{"name":"x","protocol":"tcp","buffers":[{"name":"x","addr":0,"length":1}]}`,
		`{"name":"x","protocol":"tcp","buffers":[{"name":"x","addr":18446744073709551615,"length":2}]}`,
		`{"name":"x","protocol":"tcp","buffers":[{"name":"x","addr":-1,"length":2}]}`,
		`{"name":"x","protocol":7}`,
	} {
		assert.NilError(t, raw.Put(ctx, metadata.SegmentKey("", "x"), []byte(v)))
		seg, err := b.Fetch(ctx, "x")
		assert.Assert(t, seg == nil && errors.Is(err, descriptor.ErrMalformed), "%s: %v", v, err)
	}
	for _, v := range []string{`{}`, `{"ip_or_host_name":"h"}`, `{"ip_or_host_name":"h","rpc_port":70000}`, `x`} {
		_ = raw.Delete(ctx, metadata.RPCMetaKey("", "x"))
		assert.NilError(t, raw.Put(ctx, metadata.RPCMetaKey("", "x"), []byte(v)))
		_, err := b.Endpoint(ctx, "x")
		assert.Assert(t, errors.Is(err, descriptor.ErrMalformed), "%s: %v", v, err)
	}
}

func TestBadInput(t *testing.T) {
	s := startServer(t, mdhttp.ServerConfig{})
	ctx := context.Background()
	b := newBackend(t, s.url(), metadata.KVConfig{})
	assert.Assert(t, b.Publish(ctx, nil, rpcA) != nil)
	assert.Assert(t, b.Publish(ctx, testSegment("", 64), rpcA) != nil)
	assert.Assert(t, b.Publish(ctx, testSegment("n", 64), descriptor.RPCMeta{IPOrHostName: "h"}) != nil)
	assert.Assert(t, b.Publish(ctx, testSegment("n", 64), descriptor.RPCMeta{RPCPort: 1}) != nil)
	_, err := b.Fetch(ctx, "")
	assert.Assert(t, err != nil)
	_, err = metadata.NewKVBackend(nil, metadata.KVConfig{})
	assert.Assert(t, err != nil)
	for _, c := range []metadata.KVConfig{
		{RepublishInterval: -1}, {RetryInterval: -1}, {OpTimeout: -1}, {ClusterID: "a\nb"}, {ClusterID: "/a"}, {ClusterID: "a//b"},
	} {
		assert.Assert(t, c.Validate() != nil, "%+v", c)
	}
}

// TestUnreachable: every call against a dead service fails with
// ErrUnavailable within Mooncake's 3 s request timeout.
func TestUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	url := "http://" + ln.Addr().String() + "/metadata"
	ln.Close()
	b := newBackend(t, url, metadata.KVConfig{})
	ctx := context.Background()
	start := time.Now()
	_, err = b.Fetch(ctx, "n")
	assert.Assert(t, errors.Is(err, metadata.ErrUnavailable), "got %v", err)
	_, err = b.Endpoint(ctx, "n")
	assert.Assert(t, errors.Is(err, metadata.ErrUnavailable), "got %v", err)
	err = b.Publish(ctx, testSegment("n", 64), rpcA)
	assert.Assert(t, errors.Is(err, metadata.ErrUnavailable), "got %v", err)
	assert.Assert(t, time.Since(start) < mdhttp.DefaultTimeout)
}

// TestMooncakeGolden: descriptors and rpc_meta exactly as Mooncake writes
// them (jsoncpp, keys sorted, etcd form with a trailing newline) decode
// through the backend, and our encoding uses the same field names.
func TestMooncakeGolden(t *testing.T) {
	s := startServer(t, mdhttp.ServerConfig{})
	ctx := context.Background()
	raw := rawKV(t, s.url())
	b := newBackend(t, s.url(), metadata.KVConfig{})
	read := func(name string) []byte {
		v, err := os.ReadFile(filepath.Join("testdata", name))
		assert.NilError(t, err)
		return v
	}

	tcp := read("mooncake_tcp_segment.json")
	assert.NilError(t, raw.Put(ctx, "mooncake/ram/node-a", tcp))
	assert.NilError(t, raw.Put(ctx, "mooncake/rpc_meta/node-a", read("mooncake_rpc_meta.json")))
	seg, err := b.Fetch(ctx, "node-a")
	assert.NilError(t, err)
	assert.Equal(t, seg.Name, "node-a")
	assert.Equal(t, seg.Protocol, "tcp")
	assert.Equal(t, seg.TCPDataPort, 15432)
	assert.Equal(t, seg.TCPProtoVersion, 2)
	assert.DeepEqual(t, seg.Buffers, []descriptor.Buffer{
		{Name: "node-a", Addr: 139830112444416, Length: 1073741824},
		{Name: "node-a", Addr: 139829038702592, Length: 67108864},
	})
	ep, err := b.Endpoint(ctx, "node-a")
	assert.NilError(t, err)
	assert.Equal(t, ep, descriptor.RPCMeta{IPOrHostName: "10.1.2.3", RPCPort: 15123})

	v1 := read("mooncake_tcp_segment_v1_empty.json")
	assert.NilError(t, raw.Put(ctx, "mooncake/ram/node-b", v1))
	seg, err = b.Fetch(ctx, "node-b")
	assert.NilError(t, err)
	assert.Equal(t, seg.TCPProtoVersion, 1, "absent tcp_proto_version means 1")
	assert.Equal(t, len(seg.Buffers), 0)

	rdma := read("mooncake_rdma_segment.json")
	assert.NilError(t, raw.Put(ctx, "mooncake/ram/node-c", rdma))
	seg, err = b.Fetch(ctx, "node-c")
	assert.NilError(t, err)
	assert.Equal(t, seg.Protocol, "rdma")
	assert.Equal(t, len(seg.Devices), 2)
	assert.DeepEqual(t, seg.Buffers[0].RKey, []uint64{21, 22})

	// Field names: ours (without kvferry_ extensions) equal Mooncake's.
	ours, err := descriptor.Marshal(testSegment("node-a", 4096))
	assert.NilError(t, err)
	assert.DeepEqual(t, fieldNames(t, ours), fieldNames(t, tcp))
	ourRPC, err := descriptor.MarshalRPCMeta(rpcA)
	assert.NilError(t, err)
	assert.DeepEqual(t, fieldNames(t, ourRPC), fieldNames(t, read("mooncake_rpc_meta.json")))
}

// fieldNames lists the top-level keys and the keys of the first buffer,
// leaving out kvferry_ extensions.
func fieldNames(t *testing.T, data []byte) []string {
	t.Helper()
	var m map[string]json.RawMessage
	assert.NilError(t, json.Unmarshal(data, &m))
	var names []string
	for k, v := range m {
		if len(k) > 8 && k[:8] == "kvferry_" {
			continue
		}
		names = append(names, k)
		if k == "buffers" {
			var bufs []map[string]json.RawMessage
			assert.NilError(t, json.Unmarshal(v, &bufs))
			if len(bufs) > 0 {
				for bk := range bufs[0] {
					names = append(names, "buffers."+bk)
				}
			}
		}
	}
	slices.Sort(names)
	return names
}
