// Package servers runs kvferry's own servers as children of a test, on
// loopback: kvferry-master (the store master) and kvferry-metadata (the
// HTTP metadata server), each started from a built binary and returned
// once it listens.
package servers

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/kvferry/kvferry/tests/internal/proc"
)

// startTimeout bounds the wait for a server to listen.
const startTimeout = 30 * time.Second

// Master is a running kvferry-master.
type Master struct {
	*proc.Proc
	// Addr is its RPC address and Metrics its admin (metrics) address.
	Addr, Metrics string
}

// StartMaster starts the kvferry-master at bin on port (0: a free one) of
// 127.0.0.1, its admin server on a free port, with args after those
// flags and env added to the test's environment, stopped as cfg says, and
// waits until it serves both.
func StartMaster(t testing.TB, bin string, port int, env []string, cfg proc.Config, args ...string) *Master {
	t.Helper()
	if port == 0 {
		port = proc.FreePort(t)
	}
	all := append([]string{"--port=" + strconv.Itoa(port), "--rpc_address=127.0.0.1",
		"--metrics_host=127.0.0.1", "--metrics_port=0"}, args...)
	cmd := exec.Command(bin, all...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	p := proc.Start(t, "master:"+strconv.Itoa(port), cmd, cfg)
	got, err := p.Await(startTimeout, "listening on ", "metrics on ")
	if err != nil {
		t.Fatalf("kvferry-master did not start: %v\n%s", err, p.Tail())
	}
	p.Drain()
	return &Master{Proc: p, Addr: got[0], Metrics: got[1]}
}

// Get fetches path from the master's admin server: the status and the
// body, or 0 and the error's text.
func (m *Master) Get(path string) (int, string) {
	hc := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{Proxy: nil}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://" + m.Metrics + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Role is the master's HA role ("leader", "standby"), "" when it does not
// answer.
func (m *Master) Role() string {
	code, b := m.Get("/role")
	if code != http.StatusOK {
		return ""
	}
	return b
}

// Metadata is a running kvferry-metadata.
type Metadata struct {
	*proc.Proc
	// Addr is the address it listens on.
	Addr string
}

// Conn is the engines' connection string for the server.
func (m *Metadata) Conn() string { return "http://" + m.Addr + "/metadata" }

// StartMetadata starts the kvferry-metadata at bin on addr ("": a free
// port of 127.0.0.1), with args after -addr and -log-level warn, stopped
// as cfg says, and waits until it listens. A server given the address of one just killed
// may find the port still held: it is started again until the port is
// free, for up to startTimeout.
func StartMetadata(t testing.TB, bin, addr string, cfg proc.Config, args ...string) *Metadata {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	end := time.Now().Add(startTimeout)
	for {
		cmd := exec.Command(bin, append([]string{"-addr", addr, "-log-level", "warn"}, args...)...)
		p := proc.Start(t, "metadata", cmd, cfg)
		got, err := p.Await(time.Until(end), "listening on ")
		if err == nil {
			p.Drain()
			return &Metadata{Proc: p, Addr: got[0]}
		}
		p.Kill()
		if time.Now().After(end) {
			t.Fatalf("kvferry-metadata does not start on %s: %v\n%s", addr, err, p.Tail())
		}
		time.Sleep(200 * time.Millisecond)
	}
}
