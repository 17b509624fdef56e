//go:build multiprocess

package metadata_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine/metadata/etcd/etcdtest"
	mdhttp "github.com/kvferry/kvferry/engine/metadata/http"
)

// bins holds the binaries built by TestMain.
var bins struct{ peer, metadata string }

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kvferry-metadata-mp")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bins.peer = filepath.Join(dir, "peer")
	bins.metadata = filepath.Join(dir, "kvferry-metadata")
	for bin, pkg := range map[string]string{
		bins.peer:     "github.com/kvferry/kvferry/tests/metadata/peer",
		bins.metadata: "github.com/kvferry/kvferry/cmd/kvferry-metadata",
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		args := []string{"build", "-o", bin}
		if os.Getenv("KVFERRY_TEST_RACE") != "" { // race-detector builds of the engine processes
			args = append(args, "-race")
		}
		out, err := exec.CommandContext(ctx, "go", append(args, pkg)...).CombinedOutput()
		cancel()
		if err != nil {
			fmt.Fprintf(os.Stderr, "go build %s: %v\n%s", pkg, err, out)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// logWriter forwards a child's stderr to the test log.
type logWriter struct {
	t      testing.TB
	prefix string
}

func (w logWriter) Write(p []byte) (int, error) {
	for _, l := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		w.t.Log(w.prefix + l)
	}
	return len(p), nil
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
	cmd  *exec.Cmd
	done chan struct{}
	cl   *mdhttp.Client
	ttl  time.Duration
}

func startHTTP(t *testing.T, args ...string) *httpService {
	t.Helper()
	s := &httpService{t: t, args: args, addr: "127.0.0.1:0", ttl: 3 * time.Second}
	s.Start(t)
	t.Cleanup(s.Kill)
	return s
}

func (s *httpService) Conn() string       { return "http://" + s.addr + "/metadata" }
func (s *httpService) TTL() time.Duration { return s.ttl }

func (s *httpService) Start(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		cmd := exec.Command(bins.metadata, append([]string{"-addr", s.addr, "-ttl", s.ttl.String(), "-idle-timeout", "1s", "-log-level", "warn"}, s.args...)...)
		cmd.Stderr = logWriter{t, "metadata: "}
		out, err := cmd.StdoutPipe()
		assert.NilError(t, err)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		assert.NilError(t, cmd.Start())
		done := make(chan struct{})
		line := make(chan string, 1)
		go func() {
			sc := bufio.NewScanner(out)
			if sc.Scan() {
				line <- sc.Text()
			}
			_, _ = io.Copy(io.Discard, out)
		}()
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case l := <-line:
			addr, ok := strings.CutPrefix(l, "listening on ")
			assert.Assert(t, ok, "first line %q", l)
			s.cmd, s.done, s.addr = cmd, done, addr
			if s.cl == nil {
				s.cl, err = mdhttp.NewClient(mdhttp.Config{URL: s.Conn()})
				assert.NilError(t, err)
				t.Cleanup(func() { s.cl.Close() })
			}
			return
		case <-done:
			// The port of the previous run may still be held; retry.
			assert.Assert(t, time.Now().Before(deadline), "kvferry-metadata does not start on %s", s.addr)
			time.Sleep(100 * time.Millisecond)
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatal("kvferry-metadata did not start within 10 s")
		}
	}
}

func (s *httpService) Kill() {
	if s.cmd != nil {
		_ = s.cmd.Process.Kill()
		<-s.done
		s.cmd = nil
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

// ---- engine processes ----

// peer is one engine process (tests/metadata/peer).
type peer struct {
	t     *testing.T
	name  string
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
	done  chan struct{}
	info  map[string]any
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
	cmd := exec.Command(bins.peer, args...)
	cmd.Stderr = logWriter{t, name + ": "}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	assert.NilError(t, err)
	out, err := cmd.StdoutPipe()
	assert.NilError(t, err)
	assert.NilError(t, cmd.Start())
	p := &peer{t: t, name: name, cmd: cmd, in: in, lines: make(chan string, 16), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(p.Kill)
	first, err := p.next(30 * time.Second)
	if err != nil {
		return nil, err
	}
	if ok, _ := first["ok"].(bool); !ok {
		return nil, fmt.Errorf("%v", first["error"])
	}
	p.info = first
	return p, nil
}

func (p *peer) next(timeout time.Duration) (map[string]any, error) {
	select {
	case l, ok := <-p.lines:
		if !ok {
			return nil, fmt.Errorf("peer %s exited", p.name)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			return nil, fmt.Errorf("peer %s: bad reply %q", p.name, l)
		}
		return m, nil
	case <-time.After(timeout):
		return nil, fmt.Errorf("peer %s: no reply within %v", p.name, timeout)
	}
}

// try sends a command and returns the reply and its error text ("" = ok).
func (p *peer) try(format string, args ...any) (map[string]any, string) {
	p.t.Helper()
	cmd := fmt.Sprintf(format, args...)
	_, err := io.WriteString(p.in, cmd+"\n")
	assert.NilError(p.t, err, "peer %s: %s", p.name, cmd)
	r, err := p.next(60 * time.Second)
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

// Kill ends the process with SIGKILL.
func (p *peer) Kill() {
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Kill()
	}
	<-p.done
}

// Quit closes the engine cleanly.
func (p *peer) Quit() {
	_, _ = io.WriteString(p.in, "quit\n")
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		p.t.Errorf("peer %s did not quit", p.name)
		_ = p.cmd.Process.Kill()
		<-p.done
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
