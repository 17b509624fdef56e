//go:build killmatrix

package kill_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine/metadata/etcd/etcdtest"
	"github.com/kvferry/kvferry/internal/testutil"
	"github.com/kvferry/kvferry/tests/internal/proc"
	"github.com/kvferry/kvferry/tests/internal/servers"
	"github.com/kvferry/kvferry/tests/internal/suite"
)

// The drivers' engines run with these deadlines; a call may take up to
// its deadline plus margin (a loaded 2-core machine).
const (
	deadline = 5 * time.Second
	margin   = 5 * time.Second
)

var (
	bins struct {
		dir               string
		c, nixl, trtllm   string
		master, metadata  string
		lib, plugin, trtd string
	}
	full bool
	rec  *testutil.Results
)

func TestMain(m *testing.M) {
	full = os.Getenv("KVFERRY_KILL_FULL") != ""
	bins.lib = suite.Built("lib", "libkvferry.so.1")
	bins.plugin = suite.Built("lib", "nixl", "libplugin_KVFERRY.so")
	bins.trtd = suite.Built("lib", "trtllm")
	bins.master = suite.Built("bin", "kvferry-master")
	bins.metadata = suite.Built("bin", "kvferry-metadata")
	if err := suite.Missing(bins.lib, bins.plugin, bins.master, bins.metadata); err != nil {
		fmt.Fprintf(os.Stderr, "tests/kill: %v\n", err)
		os.Exit(1)
	}
	suite.Main(m, "kvferry-kill", func(dir string) (func(), error) {
		bins.dir = dir
		bins.c = filepath.Join(dir, "driver_c")
		bins.nixl = filepath.Join(dir, "driver_nixl")
		bins.trtllm = filepath.Join(dir, "driver_trtllm")
		for _, b := range [][]string{
			{"gcc", "-O2", "-g", "-Wall", "-Wextra", "-Werror", "-std=gnu11", "-Iinclude", "-Itests/c", "-o", bins.c, "tests/kill/drivers/driver_c.c", "-ldl"},
			{"g++", "-std=c++20", "-O2", "-g", "-Wall", "-Wextra", "-Werror", "-Iplugin", "-Itests/nixl", "-Itests/c", "-o", bins.nixl, "tests/kill/drivers/driver_nixl.cpp", "-ldl"},
			{"g++", "-std=c++20", "-O2", "-g", "-Wall", "-Wextra", "-Werror", "-Iplugin", "-Itests/c", "-o", bins.trtllm, "tests/kill/drivers/driver_trtllm.cpp", "-ldl"},
		} {
			if err := suite.Compile("KVFERRY_KILL_CFLAGS", b...); err != nil { // make asan sets the flags
				return nil, err
			}
		}
		rec = testutil.OpenResults(os.Getenv("KVFERRY_KILL_RESULTS"))
		return rec.Close, nil
	})
}

// ---- processes speaking the drivers' JSON-line protocol ----

// driver is one driver process (tests/kill/drivers).
type driver struct {
	*proc.Proc
	killed bool
	info   string
	addr   uint64
}

func engineEnv() []string {
	return append(suite.EngineEnv(deadline, suite.Env("KVFERRY_KILL_LOG", "warn")), "KVFERRY_METADATA_REPUBLISH_SEC=1",
		"PYTHONPATH="+filepath.Join(suite.Root(), "python"), "KVFERRY_LIB_DIR="+suite.Built("lib"),
		"LD_LIBRARY_PATH="+bins.trtd, "TLLM_MOONCAKE_IP_ADDR=127.0.0.1", "PYTHONDONTWRITEBYTECODE=1")
}

// startDriver starts argv and waits for its first line, which must say
// "ok".
func startDriver(t *testing.T, name string, argv []string, env []string) *driver {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = suite.Root()
	cmd.Env = append(append(os.Environ(), engineEnv()...), env...)
	p := &driver{Proc: proc.Start(t, name, cmd, proc.Config{Quit: "quit", Grace: 15 * time.Second})}
	r := p.Reply(90 * time.Second)
	assert.Assert(t, r["ok"] == true, "%s did not start: %v", name, r)
	p.info, _ = r["info"].(string)
	if a, ok := r["addr"].(float64); ok {
		p.addr = uint64(a)
	}
	return p
}

// kill9 SIGKILLs the driver and waits for it.
func (p *driver) kill9() {
	p.killed = true
	p.Kill()
}

type stats struct{ FDs, Goroutines int }

func (p *driver) stats() stats {
	r := p.Call(20*time.Second, "stats")
	num := func(k string) int { v, _ := r[k].(float64); return int(v) }
	return stats{FDs: num("fds"), Goroutines: num("goroutines")}
}

// settle waits (bounded) until p's fds and goroutines are back near base.
func (p *driver) settle(t *testing.T, base stats, bound time.Duration) stats {
	t.Helper()
	start := time.Now()
	for {
		s := p.stats()
		if s.FDs <= base.FDs+3 && s.Goroutines <= base.Goroutines+6 {
			return s
		}
		if time.Since(start) > bound {
			t.Fatalf("%s leaks after the kill: %+v, baseline %+v", p.Name, s, base)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// ---- services ----

// startMetadata starts kvferry-metadata (Mooncake's HTTP metadata
// protocol) on addr ("": a free port).
func startMetadata(t *testing.T, addr string) *servers.Metadata {
	t.Helper()
	return servers.StartMetadata(t, bins.metadata, addr, proc.Config{})
}

// etcdCluster is three real etcd members on loopback.
type etcdCluster struct {
	t       *testing.T
	clients []string
	members []*proc.Proc
}

func startEtcdCluster(t *testing.T) *etcdCluster {
	t.Helper()
	etcdtest.SkipIfAbsent(t)
	c := &etcdCluster{t: t}
	var peers, initial []string
	for i := 0; i < 3; i++ {
		c.clients = append(c.clients, fmt.Sprintf("127.0.0.1:%d", proc.FreePort(t)))
		peers = append(peers, fmt.Sprintf("http://127.0.0.1:%d", proc.FreePort(t)))
		initial = append(initial, fmt.Sprintf("m%d=%s", i, peers[i]))
	}
	dir := t.TempDir()
	for i := 0; i < 3; i++ {
		cmd := exec.Command(etcdtest.Binary(), "--name", fmt.Sprintf("m%d", i), "--data-dir", filepath.Join(dir, fmt.Sprint(i)),
			"--listen-client-urls", "http://"+c.clients[i], "--advertise-client-urls", "http://"+c.clients[i],
			"--listen-peer-urls", peers[i], "--initial-advertise-peer-urls", peers[i],
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", "kvferry-kill", "--unsafe-no-fsync", "--log-level", "error")
		m := proc.Start(t, fmt.Sprintf("etcd m%d", i), cmd, proc.Config{})
		m.Drain()
		c.members = append(c.members, m)
	}
	c.waitHealthy(30 * time.Second)
	return c
}

// waitHealthy waits until every live member reports a healthy cluster (a
// leader that commits): after a member's death the others elect a new
// leader, which takes seconds on a loaded machine, and until then every
// write times out ("request timed out, possibly due to previous leader
// failure").
func (c *etcdCluster) waitHealthy(bound time.Duration) {
	t := c.t
	t.Helper()
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{Proxy: nil}}
	end := time.Now().Add(bound)
	for i, m := range c.members {
		if m.Exited() {
			continue // killed
		}
		for {
			resp, err := hc.Get("http://" + c.clients[i] + "/health")
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if strings.Contains(string(b), `"true"`) {
					break
				}
			}
			assert.Assert(t, time.Now().Before(end), "etcd cluster not healthy within %s", bound)
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// kill SIGKILLs member i.
func (c *etcdCluster) kill(i int) { c.members[i].Kill() }

// startMaster starts kvferry-master with a 3 s client TTL and args.
func startMaster(t *testing.T, args ...string) *servers.Master {
	t.Helper()
	return servers.StartMaster(t, bins.master, 0, engineEnv(), proc.Config{}, append([]string{"--client_ttl=3"}, args...)...)
}

// ---- results ----

type result struct {
	Entry   string  `json:"entry"`
	Victim  string  `json:"victim"`
	Outcome string  `json:"outcome"`
	KillMS  float64 `json:"kill_ms"`
	Recover float64 `json:"recovery_ms"`
}
