package http_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	nethttp "net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine/metadata"
	mdhttp "github.com/kvferry/kvferry/engine/metadata/http"
	"github.com/kvferry/kvferry/internal/testutil"
)

func TestMain(m *testing.M) { os.Exit(testutil.VerifyNoLeaks(m)) }

// metadataServer is one running metadata server, in-process or a binary.
type metadataServer interface {
	URL() string // ".../metadata"
	// Restart stops the server (abruptly for a binary) and starts it again
	// on the same address with the same snapshot file.
	Restart(t *testing.T)
}

// inProcess runs mdhttp.Server on a real loopback listener.
type inProcess struct {
	cfg  mdhttp.ServerConfig
	addr string
	srv  *mdhttp.Server
	hs   *httptest.Server
}

func startInProcess(t *testing.T, cfg mdhttp.ServerConfig) *inProcess {
	t.Helper()
	p := &inProcess{cfg: cfg}
	p.start(t, "127.0.0.1:0")
	t.Cleanup(p.stop)
	return p
}

func (p *inProcess) start(t *testing.T, addr string) {
	t.Helper()
	srv, err := mdhttp.NewServer(p.cfg)
	assert.NilError(t, err)
	ln, err := listenRetry(addr)
	assert.NilError(t, err)
	hs := httptest.NewUnstartedServer(srv)
	hs.Listener.Close()
	hs.Listener = ln
	hs.Start()
	p.srv, p.hs, p.addr = srv, hs, ln.Addr().String()
}

func (p *inProcess) stop() {
	if p.hs != nil {
		p.hs.CloseClientConnections()
		p.hs.Close()
		_ = p.srv.Close()
		p.hs = nil
	}
}

func (p *inProcess) URL() string { return "http://" + p.addr + "/metadata" }

func (p *inProcess) Restart(t *testing.T) {
	t.Helper()
	p.stop()
	p.start(t, p.addr)
}

// listenRetry listens on addr, retrying briefly while a previous owner of
// the port is going away.
func listenRetry(addr string) (net.Listener, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		ln, err := net.Listen("tcp", addr)
		if err == nil || time.Now().After(deadline) {
			return ln, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// binary runs the built cmd/kvferry-metadata.
type binary struct {
	bin  string
	args []string
	addr string
	cmd  *exec.Cmd
	done chan struct{}
}

var builtBinary string

// buildBinary builds cmd/kvferry-metadata once per test run.
func buildBinary(t *testing.T) string {
	t.Helper()
	if builtBinary != "" {
		return builtBinary
	}
	if testing.Short() {
		t.Skip("building kvferry-metadata skipped in -short mode")
	}
	dir, err := os.MkdirTemp("", "kvferry-metadata-bin")
	assert.NilError(t, err)
	bin := filepath.Join(dir, "kvferry-metadata")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/kvferry/kvferry/cmd/kvferry-metadata").CombinedOutput()
	assert.NilError(t, err, "go build: %s", out)
	builtBinary = bin
	return bin
}

func startBinary(t *testing.T, args ...string) *binary {
	t.Helper()
	b := &binary{bin: buildBinary(t), args: args}
	b.start(t, "127.0.0.1:0")
	t.Cleanup(b.kill)
	return b
}

func (b *binary) start(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := b.try(addr)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("start kvferry-metadata: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // the old process's port may linger
	}
}

func (b *binary) try(addr string) error {
	cmd := exec.Command(b.bin, append([]string{"-addr", addr}, b.args...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	line := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			select {
			case line <- s.Text():
			default:
			}
		}
	}()
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case l := <-line:
		a, ok := strings.CutPrefix(l, "listening on ")
		if !ok {
			_ = cmd.Process.Kill()
			<-done
			return fmt.Errorf("unexpected first line %q", l)
		}
		b.cmd, b.done, b.addr = cmd, done, a
		return nil
	case <-done:
		return errors.New("exited before listening")
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		return errors.New("no listening line within 10 s")
	}
}

func (b *binary) kill() {
	if b.cmd != nil {
		_ = b.cmd.Process.Kill()
		<-b.done
		b.cmd = nil
	}
}

func (b *binary) URL() string { return "http://" + b.addr + "/metadata" }

// Restart kills the process with SIGKILL (no chance to flush) and starts
// it again on the same address.
func (b *binary) Restart(t *testing.T) {
	t.Helper()
	b.kill()
	b.start(t, b.addr)
}

// servers runs body against the in-process server and the built binary,
// both with a snapshot file.
func servers(t *testing.T, body func(t *testing.T, s metadataServer)) {
	t.Run("inprocess", func(t *testing.T) {
		body(t, startInProcess(t, mdhttp.ServerConfig{SnapshotPath: filepath.Join(t.TempDir(), "snap.json")}))
	})
	t.Run("binary", func(t *testing.T) {
		body(t, startBinary(t, "-snapshot", filepath.Join(t.TempDir(), "snap.json"), "-log-level", "warn"))
	})
}

// raw sends one request without our client, so the wire behaviour is
// checked independently of it.
func raw(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := nethttp.NewRequest(method, url, rd)
	assert.NilError(t, err)
	hc := &nethttp.Client{Timeout: 5 * time.Second, Transport: &nethttp.Transport{Proxy: nil}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	assert.NilError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	assert.NilError(t, err)
	return resp.StatusCode, string(b)
}

// TestProtocol checks the REST protocol of specs/mooncake.md §3.4 with
// Mooncake-master semantics, step by step.
func TestProtocol(t *testing.T) {
	servers(t, func(t *testing.T, s metadataServer) {
		u := s.URL()
		base := strings.TrimSuffix(u, "/metadata")
		k := func(key string) string { return u + "?key=" + mdhttp.EscapeKey(key) }
		steps := []struct {
			method, url, body string
			code              int
			reply             string
		}{
			{"GET", base + "/health", "", 200, "OK"},
			{"GET", k("mooncake/ram/a"), "", 404, "metadata not found"},
			{"GET", u, "", 400, "metadata key is required"},
			{"PUT", u + "?key=", `{}`, 400, "metadata key is required"},
			{"PUT", k("mooncake/ram/a"), `{"name":"a"}`, 200, "metadata updated"},
			{"GET", k("mooncake/ram/a"), "", 200, `{"name":"a"}`},
			{"PUT", k("mooncake/ram/a"), `{"name":"a","v":2}`, 200, "metadata updated"},
			{"GET", k("mooncake/ram/a"), "", 200, `{"name":"a","v":2}`},
			{"PUT", k("mooncake/rpc_meta/a"), `{"ip_or_host_name":"10.0.0.1","rpc_port":15001}`, 200, "metadata updated"},
			{"PUT", k("mooncake/rpc_meta/a"), `{"ip_or_host_name":"10.0.0.1","rpc_port":15001}`, 200, "metadata unchanged"},
			{"PUT", k("mooncake/rpc_meta/a"), `{"ip_or_host_name":"10.0.0.9","rpc_port":15001}`, 400, "Duplicate rpc_meta key not allowed"},
			{"GET", k("mooncake/rpc_meta/a"), "", 200, `{"ip_or_host_name":"10.0.0.1","rpc_port":15001}`},
			// curl-style and Go-style escaping of the same key agree.
			{"GET", u + "?key=mooncake/ram/a", "", 200, `{"name":"a","v":2}`},
			{"PUT", k("mooncake/c 1/ram/x:1?&="), `1`, 200, "metadata updated"},
			{"GET", u + "?key=mooncake%2Fc+1%2Fram%2Fx%3A1%3F%26%3D", "", 200, `1`},
			{"DELETE", k("mooncake/ram/a"), "", 200, "metadata deleted"},
			{"DELETE", k("mooncake/ram/a"), "", 404, "metadata not found"},
			{"GET", k("mooncake/ram/a"), "", 404, "metadata not found"},
			{"POST", k("mooncake/ram/a"), "x", 405, "method not allowed"},
			{"GET", base + "/other?key=a", "", 404, "no such path"},
		}
		for i, st := range steps {
			code, reply := raw(t, st.method, st.url, st.body)
			assert.Equal(t, code, st.code, "step %d: %s %s", i, st.method, st.url)
			assert.Equal(t, reply, st.reply, "step %d: %s %s", i, st.method, st.url)
		}
	})
}

// TestRestartKeepsEntries restarts the server (SIGKILL for the binary) and
// expects every acknowledged entry back from the snapshot.
func TestRestartKeepsEntries(t *testing.T) {
	servers(t, func(t *testing.T, s metadataServer) {
		c, err := mdhttp.NewClient(mdhttp.Config{URL: s.URL()})
		assert.NilError(t, err)
		defer c.Close()
		ctx := context.Background()
		for i := range 20 {
			assert.NilError(t, c.Put(ctx, fmt.Sprintf("mooncake/ram/n%d", i), []byte(fmt.Sprintf(`{"i":%d}`, i))))
		}
		assert.NilError(t, c.Delete(ctx, "mooncake/ram/n7"))
		s.Restart(t)
		for i := range 20 {
			v, err := c.Get(ctx, fmt.Sprintf("mooncake/ram/n%d", i))
			if i == 7 {
				assert.Assert(t, errors.Is(err, metadata.ErrNotFound), "got %v", err)
				continue
			}
			assert.NilError(t, err)
			assert.Equal(t, string(v), fmt.Sprintf(`{"i":%d}`, i))
		}
	})
}

func TestServerWithoutSnapshotForgets(t *testing.T) {
	s := startInProcess(t, mdhttp.ServerConfig{})
	code, _ := raw(t, "PUT", s.URL()+"?key=k", "v")
	assert.Equal(t, code, 200)
	s.Restart(t)
	code, _ = raw(t, "GET", s.URL()+"?key=k", "")
	assert.Equal(t, code, 404)
}

func TestSnapshotFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "snap.json")

	t.Run("corrupt", func(t *testing.T) {
		assert.NilError(t, os.WriteFile(path, []byte(`{"format":"kvferry-metadata-snapshot/1","entries":`), 0o600))
		_, err := mdhttp.NewServer(mdhttp.ServerConfig{SnapshotPath: path})
		assert.ErrorContains(t, err, "load metadata snapshot")
	})
	t.Run("foreign", func(t *testing.T) {
		assert.NilError(t, os.WriteFile(path, []byte(`{"format":"other","entries":{}}`), 0o600))
		_, err := mdhttp.NewServer(mdhttp.ServerConfig{SnapshotPath: path})
		assert.ErrorContains(t, err, "unknown format")
	})
	t.Run("atomic", func(t *testing.T) {
		assert.NilError(t, os.Remove(path))
		s := startInProcess(t, mdhttp.ServerConfig{SnapshotPath: path})
		for i := range 50 {
			code, _ := raw(t, "PUT", fmt.Sprintf("%s?key=k%d", s.URL(), i), strings.Repeat("x", i))
			assert.Equal(t, code, 200)
		}
		ents, err := os.ReadDir(dir)
		assert.NilError(t, err)
		for _, e := range ents {
			assert.Assert(t, e.Name() == "snap.json" || e.Name() == "snap.json.log", "temporary file left: %s", e.Name())
		}
	})
	t.Run("unwritable", func(t *testing.T) {
		s := startInProcess(t, mdhttp.ServerConfig{SnapshotPath: filepath.Join(dir, "missing-dir", "snap.json")})
		code, reply := raw(t, "PUT", s.URL()+"?key=k", "v")
		assert.Equal(t, code, 500)
		assert.Equal(t, reply, "snapshot write failed")
	})
}

func TestServerTTL(t *testing.T) {
	s := startInProcess(t, mdhttp.ServerConfig{TTL: 300 * time.Millisecond})
	code, _ := raw(t, "PUT", s.URL()+"?key=mooncake/rpc_meta/a", "1")
	assert.Equal(t, code, 200)
	code, _ = raw(t, "PUT", s.URL()+"?key=mooncake/ram/b", "2")
	assert.Equal(t, code, 200)
	// Keep b alive by re-publishing it with the same body; a expires.
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, _ = raw(t, "PUT", s.URL()+"?key=mooncake/ram/b", "2")
		assert.Equal(t, code, 200)
		if c, _ := raw(t, "GET", s.URL()+"?key=mooncake/rpc_meta/a", ""); c == 404 {
			break
		}
		assert.Assert(t, time.Now().Before(deadline), "entry did not expire")
		time.Sleep(50 * time.Millisecond)
	}
	code, _ = raw(t, "GET", s.URL()+"?key=mooncake/ram/b", "")
	assert.Equal(t, code, 200)
	// After expiry a different rpc_meta body is accepted again.
	code, _ = raw(t, "PUT", s.URL()+"?key=mooncake/rpc_meta/a", "3")
	assert.Equal(t, code, 200)
}

func TestServerConfigValidate(t *testing.T) {
	for _, c := range []mdhttp.ServerConfig{
		{Path: "metadata"},
		{Path: "/health"},
		{TTL: -1},
		{MaxValueBytes: -1},
	} {
		_, err := mdhttp.NewServer(c)
		assert.Assert(t, err != nil, "%+v", c)
	}
}

func TestServerMaxValue(t *testing.T) {
	s := startInProcess(t, mdhttp.ServerConfig{MaxValueBytes: 10})
	code, _ := raw(t, "PUT", s.URL()+"?key=k", "0123456789A")
	assert.Equal(t, code, 413)
	code, _ = raw(t, "PUT", s.URL()+"?key=k", "0123456789")
	assert.Equal(t, code, 200)
}

// Keys, entries and total bytes are capped; a refused PUT changes nothing.
func TestServerStorageCaps(t *testing.T) {
	s := startInProcess(t, mdhttp.ServerConfig{MaxKeyBytes: 16, MaxEntries: 3, MaxTotalBytes: 1000})
	code, _ := raw(t, "PUT", s.URL()+"?key="+strings.Repeat("k", 17), "v")
	assert.Equal(t, code, 413)
	code, _ = raw(t, "GET", s.URL()+"?key="+strings.Repeat("k", 17), "")
	assert.Equal(t, code, 413)
	for i := range 3 {
		code, _ = raw(t, "PUT", fmt.Sprintf("%s?key=k%d", s.URL(), i), "v")
		assert.Equal(t, code, 200)
	}
	code, reply := raw(t, "PUT", s.URL()+"?key=k3", "v")
	assert.Equal(t, code, 507, reply)
	code, _ = raw(t, "PUT", s.URL()+"?key=k0", strings.Repeat("x", 700))
	assert.Equal(t, code, 200, "replacing a value within the total")
	code, _ = raw(t, "PUT", s.URL()+"?key=k1", strings.Repeat("x", 300))
	assert.Equal(t, code, 507, "over the total")
	code, body := raw(t, "GET", s.URL()+"?key=k1", "")
	assert.Equal(t, code, 200)
	assert.Equal(t, body, "v")
	code, _ = raw(t, "DELETE", s.URL()+"?key=k0", "")
	assert.Equal(t, code, 200)
	code, _ = raw(t, "PUT", s.URL()+"?key=k1", strings.Repeat("x", 300))
	assert.Equal(t, code, 200, "space freed by the delete")
}
