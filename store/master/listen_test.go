package master

import (
	"bytes"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/internal/netguard"
	"github.com/kvferry/kvferry/internal/spin"
	"github.com/kvferry/kvferry/internal/testutil"
	"github.com/kvferry/kvferry/store/wire"
)

// lockedBuffer is a bytes.Buffer for a logger shared by goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestServerRefusesForeignProtocols: a connection that sends neither the mux
// hello nor the HTTP/2 preface within helloTimeout (a Mooncake coro_rpc
// client, HTTP/1, a partial preface, silence) is closed with a log line;
// mux and gRPC clients on the same port are served as before.
func TestServerRefusesForeignProtocols(t *testing.T) {
	var logs lockedBuffer
	srv, err := StartEmbedded(Config{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	assert.NilError(t, err)
	defer srv.Close()

	t.Run("refused", func(t *testing.T) { refuseCases(t, srv.Addr()) })
	// One line per refused connection (the first at Warn, the rest of the
	// same second at Debug), with the peer and the bytes it sent.
	out := logs.String()
	assert.Equal(t, strings.Count(out, "store master closed a connection"), 5, out)
	assert.Assert(t, strings.Contains(out, "level=WARN msg=\"store master closed a connection\""), out)
	assert.Assert(t, strings.Contains(out, "first_bytes=15010000"), out)
	assert.Assert(t, strings.Contains(out, "no mux hello or HTTP/2 preface within 1s"), out)

	// A port probe (connect, close) is not refused loudly.
	probe, err := net.Dial("tcp", srv.Addr())
	assert.NilError(t, err)
	probe.Close()

	// Both protocols still work on the port.
	mux := wire.NewMuxClient(wire.MuxClientConfig{Addr: srv.Addr()})
	defer mux.Close()
	_, err = mux.Ping(ctxT(t), &wire.PingRequest{ClientId: "c"})
	assert.NilError(t, err)
	_, err = dial(t, srv.Addr()).Ping(ctxT(t), &wire.PingRequest{ClientId: "c"})
	assert.NilError(t, err)
	assert.Equal(t, strings.Count(logs.String(), "store master closed a connection"), 5)
}

// refuseCases sends what foreign clients send, in parallel, and checks that
// the master closes each connection.
func refuseCases(t *testing.T, addr string) {
	for _, tc := range []struct {
		name string
		send []byte
	}{
		// A coro_rpc request header (magic 0x15, version, serialize type,
		// message type, sequence, function id, length, ...).
		{"mooncake coro_rpc", []byte{0x15, 0x01, 0x00, 0x00, 0x01, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef, 0x10, 0, 0, 0, 0, 0, 0, 0}},
		{"http/1", []byte("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")},
		{"partial http/2 preface", []byte("PRI * HTTP/2.0\r\n")},
		{"partial mux hello", wire.MuxHello[:5]},
		{"silence", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			conn, err := net.Dial("tcp", addr)
			assert.NilError(t, err)
			defer conn.Close()
			if len(tc.send) > 0 {
				_, err = conn.Write(tc.send)
				assert.NilError(t, err)
			}
			// Closed by the master well before this deadline (the old
			// hand-off to gRPC waited for its 2-minute handshake timeout).
			_ = conn.SetReadDeadline(time.Now().Add(8 * time.Second))
			n, err := conn.Read(make([]byte, 64))
			assert.Equal(t, n, 0)
			var ne net.Error
			assert.Assert(t, err != nil && !(errors.As(err, &ne) && ne.Timeout()), "read: %v", err)
		})
	}
}

// TestLimitedConnPolls: the slot-counting wrapper of accepted connections
// keeps the socket's raw form, so the mux server can poll for requests
// (without it the master never spun, whatever its spin budget).
func TestLimitedConnPolls(t *testing.T) {
	c, s := testutil.TCPPair(t)
	lim := netguard.NewLimiter(4, 4)
	slot, err := lim.Admit(s.RemoteAddr(), s)
	assert.NilError(t, err)
	lc := netguard.NewConn(s, slot)
	assert.Assert(t, spin.NewReader(lc) != nil)
	_, err = c.Write([]byte("x"))
	assert.NilError(t, err)
	var b [1]byte
	n, rerr, ok := spin.NewReader(lc).Read(b[:], 5*time.Second, false)
	assert.Assert(t, ok)
	assert.NilError(t, rerr)
	assert.Equal(t, string(b[:n]), "x")
	assert.NilError(t, lc.Close())
	assert.Equal(t, lim.Open(), 0)

	a, b2 := net.Pipe() // no socket: no raw form, an error rather than a panic
	defer a.Close()
	_, err = netguard.NewConn(b2, slot).SyscallConn()
	assert.Assert(t, err != nil)
}

// TestSlowlorisSameAddress: 100 connections from 127.0.0.1 that send 4
// bytes of the mux hello and stall, reconnecting when cut, beside a master
// holding 16 per address; mux and gRPC clients from the same address are
// still served (issue 35).
func TestSlowlorisSameAddress(t *testing.T) {
	srv, err := StartEmbedded(Config{MaxConnsPerIP: 16})
	assert.NilError(t, err)
	defer srv.Close()
	attack := testutil.StartSlowloris(srv.Addr(), 100, wire.MuxHello[:4])
	defer attack.Stop()
	deadline := time.Now().Add(30 * time.Second)
	for attack.Dials() < 100 {
		assert.Assert(t, time.Now().Before(deadline), "attack did not build up: %d connections", attack.Dials())
		time.Sleep(10 * time.Millisecond)
	}
	for i := range 3 {
		mux := wire.NewMuxClient(wire.MuxClientConfig{Addr: srv.Addr()})
		_, err := mux.Ping(ctxT(t), &wire.PingRequest{ClientId: "c"})
		mux.Close()
		assert.NilError(t, err, "mux %d", i)
		_, err = dial(t, srv.Addr()).Ping(ctxT(t), &wire.PingRequest{ClientId: "c"})
		assert.NilError(t, err, "grpc %d", i)
	}
	assert.Assert(t, srv.limit.Displaced() > 0)
}
