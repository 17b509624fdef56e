//go:build killmatrix

package kill_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine/metadata/etcd/etcdtest"
	"github.com/kvferry/kvferry/internal/testutil"
)

// The drivers' engines run with these deadlines; a call may take up to
// its deadline plus margin (a loaded 2-core machine).
const (
	deadline = 5 * time.Second
	margin   = 5 * time.Second
)

var (
	root string // the repository
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
	wd, _ := os.Getwd()
	root = filepath.Clean(filepath.Join(wd, "..", ".."))
	full = os.Getenv("KVFERRY_KILL_FULL") != ""
	lib := filepath.Join(root, "build", "lib")
	bins.lib = filepath.Join(lib, "libkvferry.so.1")
	bins.plugin = filepath.Join(lib, "nixl", "libplugin_KVFERRY.so")
	bins.trtd = filepath.Join(lib, "trtllm")
	bins.master = filepath.Join(root, "build", "bin", "kvferry-master")
	bins.metadata = filepath.Join(root, "build", "bin", "kvferry-metadata")
	for _, f := range []string{bins.lib, bins.plugin, bins.master, bins.metadata} {
		if _, err := os.Stat(f); err != nil {
			fmt.Fprintf(os.Stderr, "tests/kill: %s missing: run make first\n", f)
			os.Exit(1)
		}
	}
	dir, err := os.MkdirTemp("", "kvferry-kill")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bins.dir = dir
	bins.c = filepath.Join(dir, "driver_c")
	bins.nixl = filepath.Join(dir, "driver_nixl")
	bins.trtllm = filepath.Join(dir, "driver_trtllm")
	builds := [][]string{
		{"gcc", "-O2", "-g", "-Wall", "-Wextra", "-Werror", "-std=gnu11", "-Iinclude", "-o", bins.c, "tests/kill/drivers/driver_c.c", "-ldl"},
		{"g++", "-std=c++20", "-O2", "-g", "-Wall", "-Wextra", "-Werror", "-Iplugin", "-Itests/nixl", "-o", bins.nixl, "tests/kill/drivers/driver_nixl.cpp", "-ldl"},
		{"g++", "-std=c++20", "-O2", "-g", "-Wall", "-Wextra", "-Werror", "-Iplugin", "-o", bins.trtllm, "tests/kill/drivers/driver_trtllm.cpp", "-ldl"},
	}
	if cc := os.Getenv("KVFERRY_KILL_CFLAGS"); cc != "" { // make asan
		for i := range builds {
			builds[i] = append(builds[i][:1], append(strings.Fields(cc), builds[i][1:]...)...)
		}
	}
	for _, b := range builds {
		cmd := exec.Command(b[0], b[1:]...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n%s", strings.Join(b, " "), err, out)
			os.Exit(1)
		}
	}
	rec = testutil.OpenResults(os.Getenv("KVFERRY_KILL_RESULTS"))
	code := m.Run()
	rec.Close()
	os.RemoveAll(dir)
	os.Exit(code)
}

// ---- processes speaking the drivers' JSON-line protocol ----

type proc struct {
	t       *testing.T
	name    string
	cmd     *exec.Cmd
	in      io.WriteCloser
	lines   chan string
	done    chan struct{}
	killed  bool
	info    string
	addr    uint64
	pid     int
	logMu   sync.Mutex
	logTail []string
}

func engineEnv() []string {
	d := strconv.Itoa(int(deadline / time.Second))
	return []string{"MC_TRANSFER_TIMEOUT=" + d, "MC_TCP_STATUS_TIMEOUT_SEC=" + d, "MC_HANDSHAKE_CONNECT_TIMEOUT=" + d,
		"KVFERRY_LOG_LEVEL=" + envOr("KVFERRY_KILL_LOG", "warn"), "KVFERRY_METADATA_REPUBLISH_SEC=1",
		"PYTHONPATH=" + filepath.Join(root, "python"), "KVFERRY_LIB_DIR=" + filepath.Join(root, "build", "lib"),
		"LD_LIBRARY_PATH=" + bins.trtd, "TLLM_MOONCAKE_IP_ADDR=127.0.0.1", "PYTHONDONTWRITEBYTECODE=1"}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// startProc starts argv and, unless ready is false, waits for its first
// line (which must say "ok").
func startProc(t *testing.T, name string, argv []string, env []string, ready bool) *proc {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = root
	cmd.Env = append(append(os.Environ(), engineEnv()...), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &proc{t: t, name: name, cmd: cmd, lines: make(chan string, 64), done: make(chan struct{})}
	in, err := cmd.StdinPipe()
	assert.NilError(t, err)
	out, err := cmd.StdoutPipe()
	assert.NilError(t, err)
	errp, err := cmd.StderrPipe()
	assert.NilError(t, err)
	p.in = in
	assert.NilError(t, cmd.Start())
	p.pid = cmd.Process.Pid
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	go func() {
		sc := bufio.NewScanner(errp)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			p.logMu.Lock()
			p.logTail = append(p.logTail, sc.Text())
			if len(p.logTail) > 40 {
				p.logTail = p.logTail[1:]
			}
			p.logMu.Unlock()
		}
	}()
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			p.logMu.Lock()
			for _, l := range p.logTail {
				t.Logf("%s: %s", name, l)
			}
			p.logMu.Unlock()
		}
	})
	if ready {
		r := p.recv(90 * time.Second)
		assert.Assert(t, r["ok"] == true, "%s did not start: %v", name, r)
		p.info, _ = r["info"].(string)
		if a, ok := r["addr"].(float64); ok {
			p.addr = uint64(a)
		}
	}
	return p
}

func (p *proc) recv(timeout time.Duration) map[string]any {
	p.t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			p.t.Fatalf("%s exited", p.name)
		}
		var m map[string]any
		assert.NilError(p.t, json.Unmarshal([]byte(l), &m), "%s: %q", p.name, l)
		return m
	case <-time.After(timeout):
		p.t.Fatalf("%s did not answer within %s: a call blocked", p.name, timeout)
		return nil
	}
}

func (p *proc) send(format string, args ...any) {
	p.t.Helper()
	_, err := fmt.Fprintf(p.in, format+"\n", args...)
	assert.NilError(p.t, err, "%s: send", p.name)
}

func (p *proc) call(timeout time.Duration, format string, args ...any) map[string]any {
	p.t.Helper()
	p.send(format, args...)
	return p.recv(timeout)
}

// kill9 SIGKILLs the process and waits for it.
func (p *proc) kill9() {
	p.killed = true
	_ = p.cmd.Process.Kill()
	<-p.done
}

func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	if p.in != nil {
		_, _ = fmt.Fprintln(p.in, "quit")
		p.in.Close()
	}
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

type stats struct{ FDs, Goroutines int }

func (p *proc) stats() stats {
	p.t.Helper()
	r := p.call(20*time.Second, "stats")
	num := func(k string) int { v, _ := r[k].(float64); return int(v) }
	return stats{FDs: num("fds"), Goroutines: num("goroutines")}
}

// settle waits (bounded) until p's fds and goroutines are back near base.
func (p *proc) settle(base stats, bound time.Duration) stats {
	p.t.Helper()
	start := time.Now()
	for {
		s := p.stats()
		if s.FDs <= base.FDs+3 && s.Goroutines <= base.Goroutines+6 {
			return s
		}
		if time.Since(start) > bound {
			p.t.Fatalf("%s leaks after the kill: %+v, baseline %+v", p.name, s, base)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// ---- services ----

// metadataServer is kvferry-metadata (Mooncake's HTTP metadata protocol).
type metadataServer struct {
	t    *testing.T
	addr string
	p    *proc
}

func startMetadata(t *testing.T, addr string) *metadataServer {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		p := startProc(t, "metadata", []string{bins.metadata, "-addr", addr, "-log-level", "warn"}, nil, false)
		select {
		case l, ok := <-p.lines:
			if a, found := strings.CutPrefix(l, "listening on "); ok && found {
				return &metadataServer{t: t, addr: a, p: p}
			}
		case <-time.After(20 * time.Second):
		}
		p.kill9()
		assert.Assert(t, time.Now().Before(deadline), "kvferry-metadata does not start on %s", addr)
		time.Sleep(200 * time.Millisecond)
	}
}

func (m *metadataServer) conn() string { return "http://" + m.addr + "/metadata" }

// etcdCluster is three real etcd members on loopback.
type etcdCluster struct {
	t       *testing.T
	clients []string
	procs   []*exec.Cmd
	done    []chan struct{}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func startEtcdCluster(t *testing.T) *etcdCluster {
	t.Helper()
	etcdtest.SkipIfAbsent(t)
	c := &etcdCluster{t: t}
	var peers, initial []string
	for i := 0; i < 3; i++ {
		c.clients = append(c.clients, fmt.Sprintf("127.0.0.1:%d", freePort(t)))
		peers = append(peers, fmt.Sprintf("http://127.0.0.1:%d", freePort(t)))
		initial = append(initial, fmt.Sprintf("m%d=%s", i, peers[i]))
	}
	dir := t.TempDir()
	for i := 0; i < 3; i++ {
		cmd := exec.Command(etcdtest.Binary(), "--name", fmt.Sprintf("m%d", i), "--data-dir", filepath.Join(dir, fmt.Sprint(i)),
			"--listen-client-urls", "http://"+c.clients[i], "--advertise-client-urls", "http://"+c.clients[i],
			"--listen-peer-urls", peers[i], "--initial-advertise-peer-urls", peers[i],
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", "kvferry-kill", "--unsafe-no-fsync", "--log-level", "error")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		assert.NilError(t, cmd.Start())
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		c.procs = append(c.procs, cmd)
		c.done = append(c.done, done)
	}
	t.Cleanup(func() {
		for i, p := range c.procs {
			_ = p.Process.Kill()
			<-c.done[i]
		}
	})
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
	for i := 0; i < 3; i++ {
		select {
		case <-c.done[i]:
			continue // killed
		default:
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
func (c *etcdCluster) kill(i int) {
	_ = c.procs[i].Process.Kill()
	<-c.done[i]
}

// master is kvferry-master.
type master struct {
	p       *proc
	addr    string
	metrics string
}

func startMaster(t *testing.T, args ...string) *master {
	t.Helper()
	port := freePort(t)
	all := append([]string{bins.master, "--port=" + strconv.Itoa(port), "--rpc_address=127.0.0.1",
		"--metrics_host=127.0.0.1", "--metrics_port=0", "--client_ttl=3"}, args...)
	p := startProc(t, "master:"+strconv.Itoa(port), all, nil, false)
	m := &master{p: p}
	end := time.Now().Add(30 * time.Second)
	for m.addr == "" || m.metrics == "" {
		select {
		case l, ok := <-p.lines:
			assert.Assert(t, ok, "master exited")
			if a, found := strings.CutPrefix(l, "listening on "); found {
				m.addr = a
			}
			if a, found := strings.CutPrefix(l, "metrics on "); found {
				m.metrics = a
			}
		case <-time.After(time.Until(end)):
			t.Fatal("master did not start")
		}
	}
	go func() { // drain
		for range p.lines {
		}
	}()
	return m
}

func (m *master) role() string {
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil}}
	resp, err := hc.Get("http://" + m.metrics + "/role")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// ---- results ----

type result struct {
	Entry   string  `json:"entry"`
	Victim  string  `json:"victim"`
	Outcome string  `json:"outcome"`
	KillMS  float64 `json:"kill_ms"`
	Recover float64 `json:"recovery_ms"`
}
