// Package redistest runs a real redis-server for tests: the Debian redis
// binary (/usr/bin/redis-server, else redis-server on PATH) on a free
// 127.0.0.1 port, without persistence (a restart starts empty, as a Redis
// without a snapshot does), optionally with requirepass. Tests can kill it,
// restart it on the same port and read its log. The server is killed when
// the test ends.
package redistest

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvferry/kvferry/engine/tlsconf"
	"github.com/kvferry/kvferry/internal/testutil"
)

// DefaultBinary is where Debian's redis-server package installs the server.
const DefaultBinary = "/usr/bin/redis-server"

// startTimeout bounds waiting for a started redis-server to answer PING.
const startTimeout = 20 * time.Second

// Binary returns the redis-server binary to use: DefaultBinary, or else
// "redis-server" found on PATH.
func Binary() string { return testutil.Binary(DefaultBinary, "redis-server") }

// SkipIfAbsent skips t when the redis-server binary does not exist; any other
// problem is left to fail the test.
func SkipIfAbsent(t testing.TB) { testutil.SkipIfAbsent(t, Binary(), "redis-server") }

// Options configures Start. The zero value works.
type Options struct {
	// Password, when set, is the server's requirepass (the "default"
	// user's password).
	Password string
	// TLS, when it names files, adds a TLS port (TLSAddr) with the
	// certificate and key, requiring client certificates the CA signed.
	TLS tlsconf.Files
	// Args are extra redis-server arguments ("--maxmemory", "1mb", ...).
	Args []string
}

// Server is one redis-server process (and its restarts).
type Server struct {
	t       testing.TB
	bin     string
	dir     string
	opts    Options
	port    int
	tlsPort int

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd exits
	log  *bytes.Buffer
	runs int
}

// Start starts redis-server and waits until it answers. It skips t when
// the binary is absent and fails it when the server does not come up.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	SkipIfAbsent(t)
	s := &Server{t: t, bin: Binary(), dir: t.TempDir(), opts: opts}
	var err error
	for try := 0; try < 3; try++ { // a free port can be taken before redis binds it
		s.port = freePort(t)
		if s.opts.TLS.Enabled() {
			s.tlsPort = freePort(t)
		}
		if err = s.start(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("start redis-server: %v\n%s", err, s.Log())
	}
	t.Cleanup(s.Kill)
	return s
}

// Addr returns "127.0.0.1:<port>".
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// TLSAddr returns "127.0.0.1:<TLS port>" ("" without Options.TLS).
func (s *Server) TLSAddr() string {
	if s.tlsPort == 0 {
		return ""
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.tlsPort))
}

// URL returns the server's connection string, "redis://[:password@]addr".
func (s *Server) URL() string {
	if s.opts.Password != "" {
		return "redis://:" + s.opts.Password + "@" + s.Addr()
	}
	return "redis://" + s.Addr()
}

// Log returns what the redis-server processes wrote so far.
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
		return errors.New("redis-server already running")
	}
	s.runs++
	args := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--protected-mode", "no",
		"--loglevel", "warning",
	}
	if s.opts.Password != "" {
		args = append(args, "--requirepass", s.opts.Password)
	}
	if f := s.opts.TLS; f.Enabled() {
		args = append(args, "--tls-port", strconv.Itoa(s.tlsPort), "--tls-cert-file", f.Cert, "--tls-key-file", f.Key,
			"--tls-ca-cert-file", f.CA, "--tls-auth-clients", "yes")
	}
	args = append(args, s.opts.Args...)
	cmd := exec.Command(s.bin, args...)
	if s.log == nil {
		s.log = &bytes.Buffer{}
	}
	w := &lockedWriter{mu: &s.mu, b: s.log}
	fmt.Fprintf(s.log, "--- redis-server run %d (port %d) ---\n", s.runs, s.port)
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
	if err := s.waitReady(done); err != nil {
		s.Kill()
		return err
	}
	return nil
}

// waitReady polls with a raw PING until the server answers (+PONG, or
// -NOAUTH from a server with requirepass).
func (s *Server) waitReady(done <-chan struct{}) error {
	end := time.Now().Add(startTimeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if ping(s.Addr()) {
			return nil
		}
		select {
		case <-done:
			return errors.New("redis-server exited during start")
		case <-tick.C:
		}
		if time.Now().After(end) {
			return fmt.Errorf("redis-server not answering within %v", startTimeout)
		}
	}
}

func ping(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && (strings.HasPrefix(line, "+PONG") || strings.HasPrefix(line, "-NOAUTH"))
}

// Kill stops redis-server with SIGKILL and waits for it; a stopped server
// is left alone.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd, s.done = nil, nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		s.t.Errorf("redis-server pid %d did not exit within 10 s of SIGKILL", cmd.Process.Pid)
	}
}

// Restart starts redis-server again on the same port, empty (no
// persistence). The server must be stopped. A port still held by the
// killed process is retried until startTimeout.
func (s *Server) Restart() {
	s.t.Helper()
	end := time.Now().Add(startTimeout)
	for {
		err := s.start()
		if err == nil {
			return
		}
		if time.Now().After(end) {
			s.t.Fatalf("restart redis-server: %v\n%s", err, s.Log())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Running reports whether the redis-server process is up.
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

// PKI writes a CA and a certificate it signs for 127.0.0.1 (server and
// client use) into a temporary directory and returns the files, for
// Options.TLS and for the client's control-plane TLS.
func PKI(t testing.TB) tlsconf.Files {
	t.Helper()
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("test pki: %v", err)
		}
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(err)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kvferry redis test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	must(err)
	ca, err := x509.ParseCertificate(caDER)
	must(err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kvferry redis test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	must(err)
	kb, err := x509.MarshalECPrivateKey(key)
	must(err)
	f := tlsconf.Files{Cert: filepath.Join(dir, "node.pem"), Key: filepath.Join(dir, "node.key"), CA: filepath.Join(dir, "ca.pem")}
	write := func(p, typ string, b []byte) {
		must(os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600))
	}
	write(f.Cert, "CERTIFICATE", der)
	write(f.Key, "EC PRIVATE KEY", kb)
	write(f.CA, "CERTIFICATE", caDER)
	return f
}
