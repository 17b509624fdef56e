// Package etcdtest runs a real single-member etcd server for tests: the
// Debian etcd-server binary (/usr/bin/etcd, else etcd on PATH), on free
// 127.0.0.1 ports with a temporary data directory. Tests can kill it,
// restart it on the same ports (with or without its data) and read its log.
// The server is killed when the test ends.
package etcdtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/kvferry/kvferry/internal/etcddial"
	"github.com/kvferry/kvferry/internal/testutil"
)

// DefaultBinary is where Debian's etcd-server package installs etcd.
const DefaultBinary = "/usr/bin/etcd"

// startTimeout bounds waiting for a started etcd to report healthy.
const startTimeout = 20 * time.Second

// Binary returns the etcd binary to use: DefaultBinary, or else
// "etcd" found on PATH.
func Binary() string { return testutil.Binary(DefaultBinary, "etcd") }

// SkipIfAbsent skips t when the etcd binary does not exist; any other
// problem is left to fail the test.
func SkipIfAbsent(t testing.TB) { testutil.SkipIfAbsent(t, Binary(), "etcd-server") }

// Server is one etcd process (and its restarts).
type Server struct {
	t          testing.TB
	bin        string
	dir        string
	dataDir    string
	clientPort int
	peerPort   int

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd exits
	log  *bytes.Buffer
	runs int
}

// Start starts etcd and waits until it is healthy. It skips t when the
// binary is absent and fails it when etcd does not come up.
func Start(t testing.TB) *Server {
	t.Helper()
	SkipIfAbsent(t)
	dir := t.TempDir()
	s := &Server{t: t, bin: Binary(), dir: dir, dataDir: filepath.Join(dir, "data")}
	var err error
	for try := 0; try < 3; try++ { // a free port can be taken before etcd binds it
		s.clientPort, s.peerPort = freePort(t), freePort(t)
		if err = s.start(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("start etcd: %v\n%s", err, s.Log())
	}
	t.Cleanup(func() { s.Kill() })
	return s
}

// Endpoint returns the client endpoint "127.0.0.1:<port>".
func (s *Server) Endpoint() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.clientPort))
}

// DataDir returns the data directory.
func (s *Server) DataDir() string { return s.dataDir }

// Log returns what the etcd processes wrote so far.
func (s *Server) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.log == nil {
		return ""
	}
	return s.log.String()
}

func (s *Server) start() error {
	s.mu.Lock()
	if s.cmd != nil {
		s.mu.Unlock()
		return errors.New("etcd already running")
	}
	s.runs++
	name := "kvferry-test"
	client := "http://" + s.Endpoint()
	peer := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(s.peerPort))
	cmd := exec.Command(s.bin,
		"--name", name,
		"--data-dir", s.dataDir,
		"--listen-client-urls", client,
		"--advertise-client-urls", client,
		"--listen-peer-urls", peer,
		"--initial-advertise-peer-urls", peer,
		"--initial-cluster", name+"="+peer,
		"--initial-cluster-state", "new",
		"--heartbeat-interval", "50",
		"--election-timeout", "500",
		"--logger", "zap",
		"--log-level", "warn",
	)
	if s.log == nil {
		s.log = &bytes.Buffer{}
	}
	w := &lockedWriter{mu: &s.mu, b: s.log}
	fmt.Fprintf(s.log, "--- etcd run %d (client %s) ---\n", s.runs, client)
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		return fmt.Errorf("exec %s: %w", s.bin, err)
	}
	done := make(chan struct{})
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	go func() { _ = cmd.Wait(); close(done) }()
	if err := s.waitHealthy(done); err != nil {
		s.Kill()
		return err
	}
	return nil
}

func (s *Server) waitHealthy(done <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	url := "http://" + s.Endpoint() + "/health"
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{Proxy: nil}}
	defer hc.CloseIdleConnections()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := hc.Do(req); err == nil {
			var b [256]byte
			n, _ := resp.Body.Read(b[:])
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && bytes.Contains(b[:n], []byte(`"true"`)) {
				return nil
			}
		}
		select {
		case <-done:
			return errors.New("etcd exited during start")
		case <-ctx.Done():
			return fmt.Errorf("etcd not healthy within %v", startTimeout)
		case <-tick.C:
		}
	}
}

// Kill stops etcd with SIGKILL and waits for it; a stopped server is left
// alone.
func (s *Server) Kill() { s.stop(syscall.SIGKILL) }

// Stop stops etcd with SIGTERM and waits for it (SIGKILL after 10 s).
func (s *Server) Stop() { s.stop(syscall.SIGTERM) }

func (s *Server) stop(sig syscall.Signal) {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd, s.done = nil, nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// Restart starts etcd again on the same ports; with wipe its data directory
// is removed first (a new, empty cluster). The server must be stopped.
func (s *Server) Restart(wipe bool) {
	s.t.Helper()
	if wipe {
		if err := os.RemoveAll(s.dataDir); err != nil {
			s.t.Fatalf("wipe etcd data: %v", err)
		}
	}
	if err := s.start(); err != nil {
		s.t.Fatalf("restart etcd: %v\n%s", err, s.Log())
	}
}

// Running reports whether the etcd process is up.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// Client returns an etcd client of endpoints (the server's Endpoint), made
// as kvferry makes its own (etcddial: reconnecting within about two seconds
// of etcd coming back), closed when the test ends. It waits up to
// startTimeout for the first connection (a busy machine).
func Client(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: startTimeout,
		DialOptions: etcddial.Options(5 * time.Second), Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd client %v: %v", endpoints, err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
