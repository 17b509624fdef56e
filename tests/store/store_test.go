//go:build storeproc

// Package store holds the multi-process store tests: a real kvferry-master
// (build/bin) and store clients in separate processes (this test binary
// re-executed as an agent), on 127.0.0.1. Run by tests/store/run.sh with
// -tags storeproc.
package store

import (
	"encoding/json"
	"fmt"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine/metadata/etcd/etcdtest"
	"github.com/kvferry/kvferry/tests/internal/proc"
	"github.com/kvferry/kvferry/tests/internal/servers"
	"github.com/kvferry/kvferry/tests/internal/suite"
)

func TestMain(m *testing.M) {
	if spec, ok := os.LookupEnv(agentEnv); ok {
		os.Exit(runAgent(spec))
	}
	os.Exit(m.Run())
}

// ---------------------------------------------------------------------------
// Processes

// startMaster runs kvferry-master on the given port (0: a free one).
func startMaster(t *testing.T, port int, args ...string) *servers.Master {
	t.Helper()
	return servers.StartMaster(t, filepath.Join(suite.BinDir(), "kvferry-master"), port, nil, proc.Config{}, args...)
}

// agent is a store client process: this test binary re-executed.
type agent struct {
	*proc.Proc
	t        *testing.T
	hostname string
}

func startAgent(t *testing.T, name string, cfg agentConfig) *agent {
	t.Helper()
	if cfg.PingMillis == 0 {
		cfg.PingMillis = 200
	}
	if cfg.RPCTimeoutSec == 0 {
		cfg.RPCTimeoutSec = 5
	}
	spec, err := json.Marshal(cfg)
	assert.NilError(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), agentEnv+"="+string(spec))
	p := proc.Start(t, name, cmd, proc.Config{})
	l := p.Line(60 * time.Second)
	if !strings.HasPrefix(l, "ready ") {
		t.Fatalf("%s: %s\n%s", name, l, p.Tail())
	}
	return &agent{Proc: p, t: t, hostname: strings.TrimPrefix(l, "ready ")}
}

// do runs one command and returns the reply line.
func (a *agent) do(format string, args ...any) string {
	a.t.Helper()
	a.Send(format, args...)
	return a.Line(60 * time.Second)
}

// must runs a command that must succeed.
func (a *agent) must(format string, args ...any) string {
	a.t.Helper()
	r := a.do(format, args...)
	if !strings.HasPrefix(r, "ok") {
		a.t.Fatalf("%s: %q: %s", a.Name, fmt.Sprintf(format, args...), r)
	}
	return r
}

// eventually retries a command until it succeeds or the timeout passes.
func (a *agent) eventually(timeout time.Duration, format string, args ...any) string {
	a.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		r := a.do(format, args...)
		if strings.HasPrefix(r, "ok") {
			return r
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("%s: %q still failing after %v: %s", a.Name, fmt.Sprintf(format, args...), timeout, r)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func want(size, seed int) string {
	return fmt.Sprintf("ok %d %d", size, crc32.ChecksumIEEE(pattern(size, seed)))
}

func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > timeout {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start)
}

// ---------------------------------------------------------------------------
// Scenarios

// TestPutGetAndHolderKilled: a master and three client processes, each
// lending a segment. A put from one is read by another; an object with two
// replicas stays readable when one holder is SIGKILLed, and the master
// drops the dead client within its TTL.
func TestPutGetAndHolderKilled(t *testing.T) {
	m := startMaster(t, 0, "--client_ttl=2")
	cfg := agentConfig{Master: m.Addr, SegmentBytes: 64 << 20}
	a := startAgent(t, "a", cfg)
	b := startAgent(t, "b", cfg)
	c := startAgent(t, "c", cfg)

	// Put from a into b's segment, get from c.
	a.must("put k1 %d 1 1 prefer=%s", 3<<20, b.hostname)
	assert.Equal(t, c.must("get k1"), want(3<<20, 1))
	assert.Equal(t, a.must("exist k1"), "ok 1")
	assert.Equal(t, c.do("get nosuch")[:8], "err -704")

	// Two replicas on b and c; kill b.
	a.must("put k2 %d 2 2 prefer=%s,%s", 1<<20, b.hostname, c.hostname)
	_, segs := m.Get("/get_all_segments")
	assert.Assert(t, strings.Contains(segs, b.hostname), segs)
	b.Kill()
	assert.Equal(t, a.must("get k2"), want(1<<20, 2))
	took := waitUntil(t, 10*time.Second, "master to drop the killed client", func() bool {
		_, segs := m.Get("/get_all_segments")
		return !strings.Contains(segs, b.hostname)
	})
	t.Logf("master dropped the SIGKILLed holder after %v (client_ttl 2 s)", took)
	assert.Equal(t, a.must("get k2"), want(1<<20, 2))
	assert.Equal(t, c.must("get k2"), want(1<<20, 2))
	// k1 lived only on b.
	assert.Equal(t, c.do("get k1")[:8], "err -704")
	_, metrics := m.Get("/metrics")
	assert.Assert(t, strings.Contains(metrics, "kvferry_store_master_expired_clients_total 1"), metrics)
}

// TestEvictionSparesLeasedAndPinned: memory pressure on one small segment
// evicts old objects but never a leased or a hard-pinned one.
func TestEvictionSparesLeasedAndPinned(t *testing.T) {
	m := startMaster(t, 0, "--default_kv_lease_ttl=20000", "--eviction_high_watermark_ratio=0.9")
	holder := startAgent(t, "holder", agentConfig{Master: m.Addr, SegmentBytes: 16 << 20})
	w := startAgent(t, "writer", agentConfig{Master: m.Addr})
	const mb = 1 << 20
	w.must("put hard %d 1 1 hard", mb)
	w.must("put leased %d 2 1", mb)
	w.must("put old %d 3 1", mb)
	assert.Equal(t, w.must("get leased"), want(mb, 2)) // lease for 20 s
	// Write three times the capacity.
	for i := range 48 {
		w.must("put fill%d %d %d 1", i, mb, 100+i)
	}
	assert.Equal(t, holder.must("get hard"), want(mb, 1))
	assert.Equal(t, holder.must("get leased"), want(mb, 2))
	assert.Equal(t, w.do("exist old"), "ok 0")
	assert.Equal(t, w.must("get fill47"), want(mb, 147))
	_, metrics := m.Get("/metrics")
	assert.Assert(t, !strings.Contains(metrics, "kvferry_store_master_evicted_objects_total 0\n"), metrics)
}

// TestMasterKilledAndRestarted: the master is SIGKILLed and started again
// on the same port; the clients re-mount by themselves and work on.
func TestMasterKilledAndRestarted(t *testing.T) {
	port := proc.FreePort(t)
	m := startMaster(t, port)
	cfg := agentConfig{Master: m.Addr, SegmentBytes: 32 << 20}
	a := startAgent(t, "a", cfg)
	b := startAgent(t, "b", cfg)
	a.must("put before %d 1 1 prefer=%s", 1<<20, b.hostname)
	m.Kill()
	assert.Equal(t, a.do("put during 100 2 1")[:8], "err -900")
	start := time.Now()
	m2 := startMaster(t, port)
	waitUntil(t, 20*time.Second, "both clients to re-mount", func() bool {
		_, segs := m2.Get("/get_all_segments")
		return strings.Contains(segs, a.hostname) && strings.Contains(segs, b.hostname)
	})
	a.eventually(20*time.Second, "put after %d 3 1 prefer=%s", 2<<20, b.hostname)
	t.Logf("clients usable %v after the master restart", time.Since(start))
	assert.Equal(t, b.must("get after"), want(2<<20, 3))
	// The restarted master starts empty.
	assert.Equal(t, b.do("get before")[:8], "err -704")
}

// TestFailoverThroughEtcd: two masters elect a leader in a real etcd; the
// clients follow the leader when it is SIGKILLed.
func TestFailoverThroughEtcd(t *testing.T) {
	etcd := etcdtest.Start(t)
	ha := []string{"--enable_ha", "--etcd_endpoints=" + etcd.Endpoint(), "--cluster_id=storeproc"}
	m1 := startMaster(t, 0, ha...)
	waitUntil(t, 10*time.Second, "a leader", func() bool {
		_, role := m1.Get("/role")
		return role == "leader"
	})
	m2 := startMaster(t, 0, ha...)
	_, role := m2.Get("/role")
	assert.Equal(t, role, "standby")
	cfg := agentConfig{Master: "etcd://" + etcd.Endpoint(), ClusterID: "storeproc", SegmentBytes: 32 << 20}
	a := startAgent(t, "a", cfg)
	b := startAgent(t, "b", cfg)
	a.must("put x %d 1 1 prefer=%s", 1<<20, b.hostname)
	assert.Equal(t, b.must("get x"), want(1<<20, 1))

	m1.Kill()
	start := time.Now()
	waitUntil(t, 20*time.Second, "the standby to lead", func() bool {
		_, role := m2.Get("/role")
		return role == "leader"
	})
	elected := time.Since(start)
	a.eventually(30*time.Second, "put y %d 2 1 prefer=%s", 1<<20, b.hostname)
	t.Logf("standby elected %v after the leader was killed; clients working after %v", elected, time.Since(start))
	assert.Equal(t, b.eventually(10*time.Second, "get y"), want(1<<20, 2))
	waitUntil(t, 10*time.Second, "both clients on the new leader", func() bool {
		_, segs := m2.Get("/get_all_segments")
		return strings.Contains(segs, a.hostname) && strings.Contains(segs, b.hostname)
	})
}
