package open_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine/descriptor"
	"github.com/kvferry/kvferry/engine/metadata"
	"github.com/kvferry/kvferry/engine/metadata/etcd"
	"github.com/kvferry/kvferry/engine/metadata/etcd/etcdtest"
	mdhttp "github.com/kvferry/kvferry/engine/metadata/http"
	"github.com/kvferry/kvferry/engine/metadata/open"
	"github.com/kvferry/kvferry/engine/metadata/redis"
	"github.com/kvferry/kvferry/engine/metadata/redis/redistest"
	"github.com/kvferry/kvferry/engine/tlsconf"
	"github.com/kvferry/kvferry/internal/testutil"
)

func TestMain(m *testing.M) { os.Exit(testutil.VerifyNoLeaks(m)) }

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want open.Conn
	}{
		{"P2PHANDSHAKE", open.Conn{Kind: open.KindP2P}},
		{" P2PHANDSHAKE ", open.Conn{Kind: open.KindP2P}},
		{"http://10.0.0.1:8080/metadata", open.Conn{Kind: open.KindHTTP, URL: "http://10.0.0.1:8080/metadata"}},
		{"https://meta.example/metadata", open.Conn{Kind: open.KindHTTP, URL: "https://meta.example/metadata"}},
		{"http://[::1]:8080/metadata", open.Conn{Kind: open.KindHTTP, URL: "http://[::1]:8080/metadata"}},
		{"etcd://10.0.0.1:2379", open.Conn{Kind: open.KindEtcd, Endpoints: []string{"10.0.0.1:2379"}}},
		{"etcd://a:1,b:2", open.Conn{Kind: open.KindEtcd, Endpoints: []string{"a:1", "b:2"}}},
		{"10.0.0.1:2379", open.Conn{Kind: open.KindEtcd, Endpoints: []string{"10.0.0.1:2379"}}},
		{"a:1,b:2", open.Conn{Kind: open.KindEtcd, Endpoints: []string{"a:1", "b:2"}}},
	} {
		got, err := open.Parse(tc.in)
		assert.NilError(t, err, tc.in)
		assert.DeepEqual(t, got, tc.want)
	}
}

func TestParseMalformed(t *testing.T) {
	for _, in := range []string{
		"", "   ", "p2phandshake", "P2P", "P2PHANDSHAKE:1", "localhost", "localhost:", ":2379",
		"etcd://", "etcd://host", "etcd://h:0", "etcd://h:65536", "ETCD://h:1", "HTTP://h:1/m",
		"http://", "http:///metadata", "http://h:99999/metadata", "http://h:1/m#x",
		"REDIS://h:6379", "redis://h:1/x", "ftp://h:1", "://h:1", "h:1,,x", "h:1/path",
	} {
		_, err := open.Parse(in)
		assert.Assert(t, errors.Is(err, open.ErrBadConn), "%q: %v", in, err)
		_, err = open.Open(context.Background(), in, open.Options{})
		assert.Assert(t, errors.Is(err, open.ErrBadConn), "open %q: %v", in, err)
	}
}

func TestRemote(t *testing.T) {
	for _, tc := range []struct {
		in     string
		remote bool
	}{
		{"P2PHANDSHAKE", false},
		{"http://127.0.0.1:8080/metadata", false},
		{"http://localhost:8080/metadata", false},
		{"http://[::1]:8080/metadata", false},
		{"http://10.0.0.1:8080/metadata", true},
		{"http://meta.example:8080/metadata", true},
		{"etcd://127.0.0.1:1,127.0.0.2:2", false},
		{"etcd://127.0.0.1:1,10.0.0.2:2", true},
	} {
		c, err := open.Parse(tc.in)
		assert.NilError(t, err)
		assert.Equal(t, c.Remote(), tc.remote, tc.in)
	}
}

func TestOpenP2P(t *testing.T) {
	b, err := open.Open(context.Background(), metadata.P2PHandshake, open.Options{})
	assert.NilError(t, err)
	defer b.Close()
	assert.Assert(t, b.P2P())
}

// roundTrip publishes through one backend and reads through another.
func roundTrip(t *testing.T, conn string, opts open.Options) {
	t.Helper()
	ctx := context.Background()
	a, err := open.Open(ctx, conn, opts)
	assert.NilError(t, err)
	defer a.Close()
	b, err := open.Open(ctx, conn, opts)
	assert.NilError(t, err)
	defer b.Close()
	assert.Assert(t, !a.P2P())
	seg := &descriptor.Segment{Name: "node-a", Protocol: "tcp", TCPDataPort: 1234, TCPProtoVersion: 2,
		Buffers: []descriptor.Buffer{{Name: "node-a", Addr: 0x1000, Length: 64}}}
	rpc := descriptor.RPCMeta{IPOrHostName: "127.0.0.1", RPCPort: 15001}
	assert.NilError(t, a.Publish(ctx, seg, rpc))
	got, err := b.Fetch(ctx, "node-a")
	assert.NilError(t, err)
	assert.DeepEqual(t, got.Buffers, seg.Buffers)
	ep, err := b.Endpoint(ctx, "node-a")
	assert.NilError(t, err)
	assert.Equal(t, ep, rpc)
	assert.NilError(t, a.Unpublish(ctx, "node-a"))
	_, err = b.Fetch(ctx, "node-a")
	assert.Assert(t, errors.Is(err, metadata.ErrNotFound), "got %v", err)
}

func TestOpenHTTP(t *testing.T) {
	srv, err := mdhttp.NewServer(mdhttp.ServerConfig{})
	assert.NilError(t, err)
	defer srv.Close()
	hs := httptest.NewServer(srv)
	defer hs.Close()
	roundTrip(t, hs.URL+"/metadata", open.Options{KV: metadata.KVConfig{ClusterID: "t1"}})
}

func TestOpenEtcd(t *testing.T) {
	e := etcdtest.Start(t)
	opts := open.Options{Etcd: etcd.Config{LeaseTTL: 3 * time.Second}}
	t.Run("scheme", func(t *testing.T) { roundTrip(t, "etcd://"+e.Endpoint(), opts) })
	t.Run("bare", func(t *testing.T) { roundTrip(t, e.Endpoint(), opts) })
}

// TestOpenUnreachable: a dead service fails Open quickly and clearly.
func TestOpenUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	for _, conn := range []string{"http://" + addr + "/metadata", "etcd://" + addr, addr, "redis://:pw@" + addr} {
		start := time.Now()
		_, err := open.Open(context.Background(), conn, open.Options{Etcd: etcd.Config{DialTimeout: time.Second},
			Redis: redis.Config{DialTimeout: time.Second}})
		took := time.Since(start)
		assert.Assert(t, errors.Is(err, metadata.ErrUnavailable), "%s: %v", conn, err)
		assert.ErrorContains(t, err, addr)
		assert.Assert(t, took < 3*time.Second, "%s took %v", conn, took)
		assert.Assert(t, !strings.Contains(err.Error(), ":pw@"), "password shown: %v", err)
		t.Logf("%s: failed in %v: %v", conn, took.Round(time.Millisecond), err)
	}
}

func TestOpenRedis(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	opts := open.Options{Redis: redis.Config{KeyTTL: 3 * time.Second}}
	t.Run("plain", func(t *testing.T) { roundTrip(t, srv.URL(), opts) })
	t.Run("db", func(t *testing.T) { roundTrip(t, srv.URL()+"/2", opts) })
	t.Run("cluster", func(t *testing.T) {
		roundTrip(t, srv.URL(), open.Options{KV: metadata.KVConfig{ClusterID: "c1"}, Redis: opts.Redis})
	})
	_, err := open.Open(context.Background(), "rediss://"+srv.Addr(), open.Options{Redis: redis.Config{DialTimeout: time.Second}})
	assert.Assert(t, errors.Is(err, metadata.ErrUnavailable), "TLS to a plain Redis: %v", err)
}

// TestOpenRediss: rediss:// runs TLS with the control-plane TLS settings
// (CA and client certificate: a Redis with tls-auth-clients); without a
// client certificate the handshake is refused.
func TestOpenRediss(t *testing.T) {
	files := redistest.PKI(t)
	srv := redistest.Start(t, redistest.Options{TLS: files, Password: "tls-pw"})
	pair, err := tlsconf.Load(files)
	assert.NilError(t, err)
	conn := "rediss://:tls-pw@" + srv.TLSAddr()
	roundTrip(t, conn, open.Options{TLS: pair.ClientConfig()})

	noCert := pair.ClientConfig().Clone()
	noCert.Certificates = nil
	_, err = open.Open(context.Background(), conn, open.Options{TLS: noCert, Redis: redis.Config{DialTimeout: 2 * time.Second}})
	// Redis answers with an alert ("certificate required": a refusal, not
	// an outage) or, when it closes first, with a reset.
	assert.Assert(t, err != nil, "TLS without a client certificate accepted")
	if strings.Contains(err.Error(), "remote error") {
		assert.ErrorContains(t, err, "TLS handshake refused")
		assert.Assert(t, !errors.Is(err, metadata.ErrUnavailable), "%v", err)
	}
	t.Logf("without a client certificate: %v", err)
	// Plain redis:// to the TLS port gets no answer it understands.
	_, err = open.Open(context.Background(), "redis://:tls-pw@"+srv.TLSAddr(), open.Options{Redis: redis.Config{DialTimeout: time.Second}})
	assert.Assert(t, err != nil)
}

// TestOpenRedisPassword: the URL's password, else MC_REDIS_PASSWORD's
// (Options.Redis), authenticates; a wrong one is refused clearly.
func TestOpenRedisPassword(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Password: "pa55"})
	t.Run("url", func(t *testing.T) { roundTrip(t, "redis://:pa55@"+srv.Addr(), open.Options{}) })
	t.Run("env", func(t *testing.T) {
		roundTrip(t, "redis://"+srv.Addr(), open.Options{Redis: redis.Config{Password: "pa55"}})
	})
	t.Run("url wins", func(t *testing.T) {
		roundTrip(t, "redis://:pa55@"+srv.Addr(), open.Options{Redis: redis.Config{Password: "other"}})
	})
	for _, conn := range []string{"redis://:wrong@" + srv.Addr(), "redis://" + srv.Addr()} {
		_, err := open.Open(context.Background(), conn, open.Options{})
		assert.ErrorContains(t, err, "refused")
		assert.Assert(t, !errors.Is(err, metadata.ErrUnavailable), "%v", err)
		assert.Assert(t, !errors.Is(err, open.ErrBadConn), "%v", err)
		assert.Assert(t, !strings.Contains(err.Error(), "wrong"), "password shown: %v", err)
	}
}

// TestRedisMooncakeInterop: what a kvferry engine publishes is what
// Mooncake reads (GET of mooncake/ram/<name> and mooncake/rpc_meta/<name>,
// JSON), and what Mooncake writes (SET of the JSON with jsoncpp's
// trailing newline, no expiry) is what kvferry fetches.
func TestRedisMooncakeInterop(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	raw := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), Protocol: 2, DisableIdentity: true, DialTimeout: 2 * time.Second})
	defer raw.Close()
	b, err := open.Open(ctx, srv.URL(), open.Options{})
	assert.NilError(t, err)
	defer b.Close()

	seg := &descriptor.Segment{Name: "kvf-node", Protocol: "tcp", TCPDataPort: 1234, TCPProtoVersion: 2,
		Buffers: []descriptor.Buffer{{Name: "kvf-node", Addr: 0x1000, Length: 64}}}
	assert.NilError(t, b.Publish(ctx, seg, descriptor.RPCMeta{IPOrHostName: "127.0.0.1", RPCPort: 15001}))
	v, err := raw.Get(ctx, "mooncake/rpc_meta/kvf-node").Bytes()
	assert.NilError(t, err)
	m, err := descriptor.UnmarshalRPCMeta(v)
	assert.NilError(t, err)
	assert.Equal(t, m, descriptor.RPCMeta{IPOrHostName: "127.0.0.1", RPCPort: 15001})
	v, err = raw.Get(ctx, "mooncake/ram/kvf-node").Bytes()
	assert.NilError(t, err)
	got, err := descriptor.Unmarshal(v)
	assert.NilError(t, err)
	assert.DeepEqual(t, got.Buffers, seg.Buffers)

	mc, err := os.ReadFile("../testdata/mooncake_tcp_segment.json")
	assert.NilError(t, err)
	want, err := descriptor.Unmarshal(mc)
	assert.NilError(t, err)
	assert.NilError(t, raw.Set(ctx, "mooncake/ram/"+want.Name, string(mc)+"\n", 0).Err())
	assert.NilError(t, raw.Set(ctx, "mooncake/rpc_meta/"+want.Name, "{\"ip_or_host_name\":\"10.1.2.3\",\"rpc_port\":12001}\n", 0).Err())
	fetched, err := b.Fetch(ctx, want.Name)
	assert.NilError(t, err)
	assert.DeepEqual(t, fetched, want)
	ep, err := b.Endpoint(ctx, want.Name)
	assert.NilError(t, err)
	assert.Equal(t, ep, descriptor.RPCMeta{IPOrHostName: "10.1.2.3", RPCPort: 12001})
}

func TestOpenBadOptions(t *testing.T) {
	_, err := open.Open(context.Background(), "http://127.0.0.1:1/metadata", open.Options{KV: metadata.KVConfig{OpTimeout: -1}})
	assert.Assert(t, err != nil && !errors.Is(err, metadata.ErrUnavailable), "%v", err)
}

func TestWarning(t *testing.T) {
	for _, tc := range []struct {
		conn, host string
		warn       bool
	}{
		{"P2PHANDSHAKE", "127.0.0.1", false},
		{"http://127.0.0.1:8080/metadata", "127.0.0.1", false},
		{"http://10.0.0.1:8080/metadata", "127.0.0.1", true},
		{"http://10.0.0.1:8080/metadata", "::1", true},
		{"http://10.0.0.1:8080/metadata", "169.254.3.4", true},
		{"http://10.0.0.1:8080/metadata", "fe80::1", true},
		{"http://10.0.0.1:8080/metadata", "0.0.0.0", true},
		{"http://10.0.0.1:8080/metadata", "localhost", true},
		{"http://10.0.0.1:8080/metadata", "10.0.0.2", false},
		{"http://10.0.0.1:8080/metadata", "node7.example", false},
		{"etcd://10.0.0.1:2379", "127.0.0.1", true},
		{"127.0.0.1:2379", "127.0.0.1", false},
		{"redis://:pw@10.0.0.1:6379", "127.0.0.1", true},
		{"redis://127.0.0.1:6379/1", "127.0.0.1", false},
	} {
		c, err := open.Parse(tc.conn)
		assert.NilError(t, err)
		w := open.Warning(c, open.Advertised{Segment: "s", Host: tc.host, RPCPort: 1})
		assert.Equal(t, w != "", tc.warn, "%s %s: %q", tc.conn, tc.host, w)
	}
}

func TestLogStart(t *testing.T) {
	var buf strings.Builder
	log := slog.New(slog.NewTextHandler(&buf, nil))
	open.LogStart(log, "http://10.0.0.1:8080/metadata", open.Advertised{Segment: "node-a", Host: "127.0.0.1", RPCPort: 15001})
	out := buf.String()
	assert.Assert(t, strings.Contains(out, "engine advertises") && strings.Contains(out, "host=127.0.0.1"), out)
	assert.Assert(t, strings.Contains(out, "level=WARN"), out)
	buf.Reset()
	open.LogStart(log, "http://10.0.0.1:8080/metadata", open.Advertised{Segment: "node-a", Host: "10.0.0.2", RPCPort: 15001})
	assert.Assert(t, !strings.Contains(buf.String(), "level=WARN"), buf.String())
	buf.Reset()
	open.LogStart(log, "redis://:hunter2@10.0.0.1:6379", open.Advertised{Segment: "node-a", Host: "10.0.0.2", RPCPort: 15001})
	open.LogStart(log, "redis://:hunter2@10.0.0.1:0", open.Advertised{Segment: "node-a", Host: "10.0.0.2", RPCPort: 15001})
	assert.Assert(t, strings.Contains(buf.String(), "metadata_kind=redis") && !strings.Contains(buf.String(), "hunter2"), buf.String())
	open.LogStart(nil, "x", open.Advertised{})
}
