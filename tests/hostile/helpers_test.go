// Package hostile_test attacks real kvferry nodes over loopback: an engine
// (socket RPC, TCP data port, same-host socket), a store master and an
// HTTP metadata server, with and without a cluster key. For each attack
// it checks that the attack is refused, that memory and goroutines stay
// bounded (measured before, during and after), and that an honest peer's
// transfer running at the same time completes with correct bytes. Run
// with -v to print the attack table.
package hostile_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	mdhttp "github.com/kvferry/kvferry/engine/metadata/http"
	"github.com/kvferry/kvferry/engine/peerauth"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/engine/transport/tcp"
	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/store/master"
)

const (
	keyA = "aG9zdGlsZS1zdWl0ZS1rZXktYWxwaGEtMDEyMzQ1Njc4OQ=="
	keyB = "aG9zdGlsZS1zdWl0ZS1rZXktYnJhdm8tMDEyMzQ1Njc4OQ=="
)

// keyFile writes lines as a cluster key file (mode 0600).
func keyFile(t testing.TB, lines ...string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "cluster.key")
	var b bytes.Buffer
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
	assert.NilError(t, os.WriteFile(p, b.Bytes(), 0o600))
	return p
}

func mustKeys(t testing.TB, lines ...string) *peerauth.Keys {
	t.Helper()
	ks, err := peerauth.LoadKeyFile(keyFile(t, lines...))
	assert.NilError(t, err)
	return ks
}

// node is an engine with registered regions: work (honest transfers),
// canary (attackers try to overwrite it) and private (registered with
// remote_accessible = 0).
type node struct {
	e                      *engine.Engine
	work, canary, private  *cmem.Map
	canaryWant, privateVal []byte
}

const (
	workBytes   = 4 << 20
	canaryBytes = 1 << 20
)

func newNode(t testing.TB, key string, transports ...string) *node {
	t.Helper()
	return newNodeTCP(t, key, tcp.Config{}, transports...)
}

func newNodeTCP(t testing.TB, key string, tc tcp.Config, transports ...string) *node {
	t.Helper()
	if len(transports) == 0 {
		transports = []string{"tcp"}
	}
	ec := engine.Config{LocalServerName: "127.0.0.1", Transports: transports, TransferTimeout: 20 * time.Second,
		NotifyPeerBytes: 1 << 20}
	if key != "" {
		ec.AuthKeyFile = keyFile(t, key)
	}
	e, err := stack.New(context.Background(), stack.Config{Engine: ec, TCP: tc})
	assert.NilError(t, err)
	t.Cleanup(func() { e.Close() })
	n := &node{e: e}
	mk := func(size uint64, remote bool, seed uint64) (*cmem.Map, []byte) {
		m, err := cmem.MapAnon(size)
		assert.NilError(t, err)
		t.Cleanup(func() { m.Close() })
		fill(m.Bytes(), seed)
		assert.NilError(t, e.RegisterMemory(m.Addr(), size, "cpu:0", remote))
		return m, bytes.Clone(m.Bytes())
	}
	n.work, _ = mk(workBytes, true, 1)
	n.canary, n.canaryWant = mk(canaryBytes, true, 2)
	n.private, n.privateVal = mk(canaryBytes, false, 3)
	return n
}

func (n *node) dataAddr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.e.Transport("tcp").(*tcp.Transport).Port()))
}

func (n *node) rpcAddr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.e.RPCPort())) }

// intact reports whether the canary and private regions still hold what
// they were given.
func (n *node) intact() bool {
	return bytes.Equal(n.canary.Bytes(), n.canaryWant) && bytes.Equal(n.private.Bytes(), n.privateVal)
}

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed*7+1))
	for i := 0; i+8 <= len(b); i += 8 {
		v := r.Uint64()
		for k := range 8 {
			b[i+k] = byte(v >> (8 * k))
		}
	}
}

// honest moves bytes between a peer with the right key and the target in a
// loop (write a fresh pattern, read it back, compare) until stopped. The
// peer lives as long as the test; each attack runs one loop.
type honest struct {
	peer  *node
	seg   engine.SegmentID
	done  chan struct{}
	stopc chan struct{}
	ok    atomic.Int64
	err   atomic.Pointer[error]
}

const honestBytes = 1 << 20

func newHonest(t *testing.T, target *node, key string) *honest {
	t.Helper()
	h := &honest{peer: newNode(t, key)}
	var err error
	h.seg, err = h.peer.e.OpenSegment(context.Background(), target.e.SegmentName())
	assert.NilError(t, err)
	assert.NilError(t, h.once(target, 0), "warm-up")
	return h
}

func (h *honest) once(target *node, i uint64) error {
	src, back := h.peer.work.Bytes()[:honestBytes], h.peer.work.Bytes()[honestBytes:2*honestBytes]
	fill(src, 100+i)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := h.peer.e.Transfer(ctx, []engine.Request{{Op: engine.OpWrite, Source: h.peer.work.Addr(), Target: h.seg,
		TargetOffset: uint64(target.work.Addr()), Length: honestBytes}})
	if err == nil {
		err = h.peer.e.Transfer(ctx, []engine.Request{{Op: engine.OpRead, Source: h.peer.work.Addr() + honestBytes, Target: h.seg,
			TargetOffset: uint64(target.work.Addr()), Length: honestBytes}})
	}
	if err == nil && !bytes.Equal(src, back) {
		err = errors.New("honest transfer: bytes differ")
	}
	return err
}

// start runs the loop until stop.
func (h *honest) start(target *node) {
	h.done, h.stopc = make(chan struct{}), make(chan struct{})
	h.ok.Store(0)
	h.err.Store(nil)
	go func() {
		defer close(h.done)
		for i := uint64(1); ; i++ {
			select {
			case <-h.stopc:
				return
			default:
			}
			if err := h.once(target, i); err != nil {
				h.err.Store(&err)
				return
			}
			h.ok.Add(1)
		}
	}()
}

// stop ends the loop once at least one more transfer completed, and
// returns how many did.
func (h *honest) stop(t *testing.T) int64 {
	t.Helper()
	start := h.ok.Load()
	deadline := time.Now().Add(60 * time.Second)
	for h.ok.Load() == start && h.err.Load() == nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	close(h.stopc)
	<-h.done
	if p := h.err.Load(); p != nil {
		t.Fatalf("honest transfer during the attack: %v", *p)
	}
	assert.Assert(t, h.ok.Load() > start, "no honest transfer completed")
	return h.ok.Load()
}

// usage samples goroutines and heap while an attack runs.
type usage struct {
	g0, gPeak, g1 int
	h0, hPeak, h1 uint64
	stopc, done   chan struct{}
	mu            sync.Mutex
}

func heapInuse(gc bool) uint64 {
	if gc {
		runtime.GC()
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

func startUsage() *usage {
	u := &usage{g0: runtime.NumGoroutine(), h0: heapInuse(true), stopc: make(chan struct{}), done: make(chan struct{})}
	u.gPeak, u.hPeak = u.g0, u.h0
	go func() {
		defer close(u.done)
		tk := time.NewTicker(20 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-u.stopc:
				return
			case <-tk.C:
			}
			g, h := runtime.NumGoroutine(), heapInuse(false)
			u.mu.Lock()
			u.gPeak, u.hPeak = max(u.gPeak, g), max(u.hPeak, h)
			u.mu.Unlock()
		}
	}()
	return u
}

// finish waits for goroutines to settle back near the start and checks the
// bounds: peakHeap is the most the attack may have added at its height.
func (u *usage) finish(t *testing.T, peakHeap uint64, peakGoroutines int) {
	t.Helper()
	close(u.stopc)
	<-u.done
	deadline := time.Now().Add(20 * time.Second)
	for {
		u.g1 = runtime.NumGoroutine()
		if u.g1 <= u.g0+8 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	u.h1 = heapInuse(true)
	assert.Assert(t, u.g1 <= u.g0+8, "goroutines %d before, %d after", u.g0, u.g1)
	assert.Assert(t, u.h1 <= u.h0+32<<20, "heap %d MiB before, %d MiB after", u.h0>>20, u.h1>>20)
	assert.Assert(t, u.hPeak <= u.h0+peakHeap, "heap peaked at %d MiB from %d MiB", u.hPeak>>20, u.h0>>20)
	assert.Assert(t, u.gPeak <= u.g0+peakGoroutines, "goroutines peaked at %d from %d", u.gPeak, u.g0)
}

func (u *usage) String() string {
	return fmt.Sprintf("goroutines %d/%d/%d, heap %d/%d/%d MiB (before/peak/after)", u.g0, u.gPeak, u.g1, u.h0>>20, u.hPeak>>20, u.h1>>20)
}

// dialFrom connects to addr from the loopback address src (a second host).
func dialFrom(src, addr string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	return d.Dial("tcp", addr)
}

// closedWithin reports whether the peer closes c within d (after
// draining what it sends).
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 4096)
	for {
		_, err := c.Read(buf)
		if err != nil {
			var ne net.Error
			return !(errors.As(err, &ne) && ne.Timeout())
		}
	}
}

// startMaster runs a store master on loopback, with the key file when key
// is not empty.
func startMaster(t testing.TB, key string) *master.Server {
	t.Helper()
	cfg := master.Config{RPCAddr: "127.0.0.1:0"}
	if key != "" {
		cfg.AuthKeyFile = keyFile(t, key)
	}
	srv, err := master.NewServer(cfg)
	assert.NilError(t, err)
	t.Cleanup(func() { srv.Close() })
	return srv
}

// startMetadata runs an HTTP metadata server on loopback, authenticated
// with key when it is not empty; it returns its connection string.
func startMetadata(t testing.TB, key string, cfg mdhttp.ServerConfig) string {
	t.Helper()
	srv, err := mdhttp.NewServer(cfg)
	assert.NilError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	l := mdhttp.GuardListener(ln, "metadata", nil)
	if key != "" {
		l = peerauth.Listen(l, peerauth.NewGuard(mustKeys(t, key), peerauth.RoleMetadata, 0, nil))
	}
	hs := mdhttp.HTTPServer(srv, 0, nil)
	go func() { _ = hs.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
		_ = srv.Close()
	})
	return "http://" + ln.Addr().String() + "/metadata"
}

// httpClient talks to a metadata server, authenticated with ks (nil: not).
func httpClient(ks *peerauth.Keys) *http.Client {
	return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		DialContext: peerauth.Dialer(&net.Dialer{Timeout: 5 * time.Second}, ks, peerauth.RoleMetadata)}}
}
