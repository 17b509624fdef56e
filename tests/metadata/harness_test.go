//go:build multiprocess

package metadata_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine/metadata/etcd/etcdtest"
	mdhttp "github.com/kvferry/kvferry/engine/metadata/http"
	"github.com/kvferry/kvferry/engine/metadata/redis/redistest"
	"github.com/kvferry/kvferry/tests/internal/proc"
	"github.com/kvferry/kvferry/tests/internal/servers"
	"github.com/kvferry/kvferry/tests/internal/suite"
)

// bins holds the binaries built by TestMain.
var bins struct{ peer, metadata string }

func TestMain(m *testing.M) {
	suite.Main(m, "kvferry-metadata-mp", func(dir string) (func(), error) {
		bins.peer = filepath.Join(dir, "peer")
		bins.metadata = filepath.Join(dir, "kvferry-metadata")
		for bin, pkg := range map[string]string{
			bins.peer:     "github.com/kvferry/kvferry/tests/metadata/peer",
			bins.metadata: "github.com/kvferry/kvferry/cmd/kvferry-metadata",
		} {
			if err := suite.GoBuild(bin, pkg); err != nil {
				return nil, err
			}
		}
		return nil, nil
	})
}

// ---- metadata services ----

// service is a metadata service the engines use.
type service interface {
	// Conn is the engines' connection string.
	Conn() string
	// Kill stops the service abruptly.
	Kill()
	// Start starts it again where it was (after Kill).
	Start(t *testing.T)
	// Has reports whether key is stored (false while the service is down).
	Has(t *testing.T, key string) bool
	// TTL is how long a dead engine's entries may outlive it.
	TTL() time.Duration
}

// httpService runs the kvferry-metadata binary.
type httpService struct {
	t    *testing.T
	args []string
	addr string
	srv  *servers.Metadata
	cl   *mdhttp.Client
	ttl  time.Duration
}

func startHTTP(t *testing.T, args ...string) *httpService {
	t.Helper()
	s := &httpService{t: t, args: args, ttl: 3 * time.Second}
	s.Start(t)
	t.Cleanup(s.Kill)
	return s
}

func (s *httpService) Conn() string       { return "http://" + s.addr + "/metadata" }
func (s *httpService) TTL() time.Duration { return s.ttl }

func (s *httpService) Start(t *testing.T) {
	t.Helper()
	s.srv = servers.StartMetadata(t, bins.metadata, s.addr, proc.Config{LogStderr: true},
		append([]string{"-ttl", s.ttl.String(), "-idle-timeout", "1s"}, s.args...)...)
	s.addr = s.srv.Addr
	if s.cl == nil {
		cl, err := mdhttp.NewClient(mdhttp.Config{URL: s.Conn()})
		assert.NilError(t, err)
		s.cl = cl
		t.Cleanup(func() { s.cl.Close() })
	}
}

func (s *httpService) Kill() {
	if s.srv != nil {
		s.srv.Kill()
		s.srv = nil
	}
}

func (s *httpService) Has(t *testing.T, key string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := s.cl.Get(ctx, key)
	return err == nil
}

// etcdService runs a real etcd.
type etcdService struct {
	srv  *etcdtest.Server
	wipe bool
	cli  *clientv3.Client
}

func startEtcd(t *testing.T, wipeOnRestart bool) *etcdService {
	t.Helper()
	s := &etcdService{srv: etcdtest.Start(t), wipe: wipeOnRestart}
	s.cli = etcdtest.Client(t, s.srv.Endpoint())
	return s
}

func (s *etcdService) Conn() string       { return "etcd://" + s.srv.Endpoint() }
func (s *etcdService) TTL() time.Duration { return 2 * time.Second }
func (s *etcdService) Kill()              { s.srv.Kill() }
func (s *etcdService) Start(t *testing.T) { s.srv.Restart(s.wipe) }

func (s *etcdService) Has(t *testing.T, key string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := s.cli.Get(ctx, key)
	return err == nil && len(resp.Kvs) > 0
}

// redisService runs a real redis-server (no persistence: a restart
// starts empty), with requirepass when password is set.
type redisService struct {
	srv *redistest.Server
	cli *goredis.Client
}

func startRedis(t *testing.T, password string) *redisService {
	t.Helper()
	s := &redisService{srv: redistest.Start(t, redistest.Options{Password: password})}
	s.cli = goredis.NewClient(&goredis.Options{Addr: s.srv.Addr(), Password: password, Protocol: 2, DisableIdentity: true,
		DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
	t.Cleanup(func() { s.cli.Close() })
	return s
}

func (s *redisService) Conn() string       { return s.srv.URL() }
func (s *redisService) TTL() time.Duration { return 2 * time.Second }
func (s *redisService) Kill()              { s.srv.Kill() }
func (s *redisService) Start(t *testing.T) { s.srv.Restart() }

func (s *redisService) Has(t *testing.T, key string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	n, err := s.cli.Exists(ctx, key).Result()
	return err == nil && n == 1
}

// Flush removes every key (FLUSHALL), as an operator or a failover to an
// empty replica does.
func (s *redisService) Flush(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	assert.NilError(t, s.cli.FlushAll(ctx).Err())
}

// ---- engine processes ----

// peer is one engine process (tests/metadata/peer).
type peer struct {
	*proc.Proc
	t    *testing.T
	name string
	info map[string]any
}

// startPeer starts an engine named name on svc and waits for it.
func startPeer(t *testing.T, svc service, name string, extra ...string) *peer {
	t.Helper()
	p, err := tryPeer(t, svc, name, extra...)
	assert.NilError(t, err)
	return p
}

// tryPeer is startPeer that returns the engine's start-up error.
func tryPeer(t *testing.T, svc service, name string, extra ...string) (*peer, error) {
	t.Helper()
	args := append([]string{"-metadata", svc.Conn(), "-name", name, "-log-level", "warn"}, extra...)
	p := &peer{Proc: proc.Start(t, "peer "+name, exec.Command(bins.peer, args...), proc.Config{LogStderr: true}), t: t, name: name}
	first, err := p.TryReply(30 * time.Second)
	if err != nil {
		return nil, err
	}
	if ok, _ := first["ok"].(bool); !ok {
		return nil, fmt.Errorf("%v", first["error"])
	}
	p.info = first
	return p, nil
}

// try sends a command and returns the reply and its error text ("" = ok).
func (p *peer) try(format string, args ...any) (map[string]any, string) {
	p.t.Helper()
	cmd := fmt.Sprintf(format, args...)
	r, err := p.TryCall(60*time.Second, "%s", cmd)
	assert.NilError(p.t, err, "peer %s: %s", p.name, cmd)
	if ok, _ := r["ok"].(bool); ok {
		return r, ""
	}
	e, _ := r["error"].(string)
	return r, e
}

// do sends a command that must succeed.
func (p *peer) do(format string, args ...any) map[string]any {
	p.t.Helper()
	r, e := p.try(format, args...)
	assert.Assert(p.t, e == "", "peer %s: %s: %s", p.name, fmt.Sprintf(format, args...), e)
	return r
}

func (p *peer) u64(r map[string]any, k string) uint64 {
	p.t.Helper()
	v, ok := r[k].(float64)
	assert.Assert(p.t, ok, "reply %v has no %s", r, k)
	return uint64(v)
}

// Quit closes the engine cleanly.
func (p *peer) Quit() {
	if !p.Proc.Quit("quit", 20*time.Second) {
		p.t.Errorf("peer %s did not quit", p.name)
	}
}

// waitFor polls cond until it holds; it returns how long that took.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Since(start) > timeout {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		<-tick.C
	}
	return time.Since(start)
}
