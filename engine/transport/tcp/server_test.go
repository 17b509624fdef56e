package tcp_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/engine/transport/tcp"
	"github.com/kvferry/kvferry/engine/transport/tcp/tcpwire"
	"github.com/kvferry/kvferry/internal/cmem"
)

// node is an engine with a TCP transport and one registered region.
type node struct {
	e   *engine.Engine
	t   *tcp.Transport
	mem *cmem.Map
}

func newNode(t *testing.T, tc tcp.Config, size uint64) *node {
	t.Helper()
	e, err := stack.New(context.Background(), stack.Config{
		Engine: engine.Config{LocalServerName: "127.0.0.1", Transports: []string{"tcp"}},
		TCP:    tc,
	})
	assert.NilError(t, err)
	t.Cleanup(func() { e.Close() })
	m, err := cmem.MapAnon(size)
	assert.NilError(t, err)
	// Unregistering first waits for copies still using the memory.
	t.Cleanup(func() { _ = e.UnregisterMemory(m.Addr()); m.Close() })
	assert.NilError(t, e.RegisterMemory(m.Addr(), size, "*", true))
	return &node{e: e, t: e.Transport("tcp").(*tcp.Transport), mem: m}
}

func (n *node) dataAddr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.t.Port())) }

// dialFrom connects from another loopback address, as a second host would.
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second}
	c, err := d.Dial("tcp", addr)
	assert.NilError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// closedSoon reports whether the server closes c within d.
func closedSoon(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return err == nil || !(errors.As(err, &ne) && ne.Timeout())
}

func header(op byte, addr, size uint64) []byte {
	var b [tcpwire.HeaderSize]byte
	tcpwire.Header{Size: size, Addr: addr, Write: op == 1, V2: true}.Encode(&b)
	return b[:]
}

// honestWrite checks that a peer can still move correct bytes into n.
func honestWrite(t *testing.T, n *node) {
	t.Helper()
	peer := newNode(t, tcp.Config{}, 1<<20)
	b := peer.mem.Bytes()
	for i := range b {
		b[i] = byte(i*7 + 3)
	}
	seg, err := peer.e.OpenSegment(context.Background(), n.e.SegmentName())
	assert.NilError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	assert.NilError(t, peer.e.Transfer(ctx, []engine.Request{{Op: engine.OpWrite, Source: peer.mem.Addr(), Target: seg,
		TargetOffset: uint64(n.mem.Addr()), Length: 1 << 20}}))
	assert.Assert(t, bytes.Equal(n.mem.Bytes()[:1<<20], b), "bytes differ")
}

func TestServerConnectionCaps(t *testing.T) {
	n := newNode(t, tcp.Config{MaxConnsPerIP: 4, MaxConns: 64}, 1<<20)
	var conns []net.Conn
	for range 10 {
		conns = append(conns, dialFrom(t, "127.0.0.2", n.dataAddr()))
	}
	var closed []int
	for i, c := range conns {
		if closedSoon(c, 300*time.Millisecond) {
			closed = append(closed, i)
		}
	}
	assert.DeepEqual(t, closed, []int{0, 1, 2, 3, 4, 5}) // connections over the per-IP cap displace the oldest silent ones
	assert.Assert(t, n.t.Stats().ConnsDisplaced >= 6)
	honestWrite(t, n)
}

func TestServerIdleAndHeaderTimeouts(t *testing.T) {
	n := newNode(t, tcp.Config{IdleTimeout: 300 * time.Millisecond, HeaderTimeout: 300 * time.Millisecond}, 1<<20)
	idle := dialFrom(t, "127.0.0.2", n.dataAddr())
	half := dialFrom(t, "127.0.0.2", n.dataAddr())
	_, err := half.Write(header(1, uint64(n.mem.Addr()), 16)[:10])
	assert.NilError(t, err)
	trickle := dialFrom(t, "127.0.0.2", n.dataAddr())
	go func() { // one header byte every 100 ms: never done within the timeout
		for _, b := range header(1, uint64(n.mem.Addr()), 16) {
			if _, err := trickle.Write([]byte{b}); err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	assert.Assert(t, closedSoon(idle, 10*time.Second), "idle connection closed")
	assert.Assert(t, closedSoon(half, 10*time.Second), "half header closed")
	assert.Assert(t, closedSoon(trickle, 10*time.Second), "trickled header closed")
	honestWrite(t, n)
}

// A peer that trickles a WRITE payload, or does not read a READ's, holds
// its pin only until the region is unregistered: UnregisterMemory returns
// promptly, not after the 60 s status timeout.
func TestUnregisterNotHeldByStalledPeer(t *testing.T) {
	const size = 64 << 20
	for _, tc := range []struct {
		name string
		send func(c net.Conn, addr uint64)
	}{
		{"trickled write", func(c net.Conn, addr uint64) {
			_, _ = c.Write(append(header(1, addr, size), make([]byte, 1000)...))
		}},
		{"stalled read", func(c net.Conn, addr uint64) {
			_, _ = c.Write(header(0, addr, size))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, tcp.Config{StatusTimeout: time.Minute}, size)
			c := dialFrom(t, "127.0.0.2", n.dataAddr())
			tc.send(c, uint64(n.mem.Addr()))
			time.Sleep(200 * time.Millisecond) // the server is now blocked holding the pin
			start := time.Now()
			assert.NilError(t, n.e.UnregisterMemory(n.mem.Addr()))
			assert.Assert(t, time.Since(start) < 20*time.Second, "took %v", time.Since(start))
			// The server let go of the connection (the client side may
			// still be draining what the kernel had buffered).
			waitServerConns(t, n, 0)
		})
	}
}

// waitServerConns waits until n's data port holds want connections.
func waitServerConns(t *testing.T, n *node, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for n.t.Stats().ServerConns != want {
		if time.Now().After(deadline) {
			t.Fatalf("data port holds %d connections, want %d", n.t.Stats().ServerConns, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPolledServerConnsCapped: the server runs at most MaxPolledConns of
// its connections outside the network poller (each holds a thread while it
// waits); the others are served through the poller and move the same
// bytes, 4 KiB and 1 MiB each way over every lane of three peers.
func TestPolledServerConnsCapped(t *testing.T) {
	srv := newNode(t, tcp.Config{MaxPolledConns: 2}, 4<<20)
	const size = 1 << 20
	for i := range 3 {
		p := newNode(t, tcp.Config{}, 4<<20)
		seg, err := p.e.OpenSegment(context.Background(), srv.e.SegmentName())
		assert.NilError(t, err)
		src := p.mem.Bytes()
		for j := range src[:2*size] {
			src[j] = byte(i*7 + j*13)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		// A batch of four 1 MiB requests uses every lane.
		var reqs []engine.Request
		for k := range 4 {
			reqs = append(reqs, engine.Request{Op: engine.OpWrite, Source: p.mem.Addr() + uintptr(k%2)*size, Target: seg,
				TargetOffset: uint64(srv.mem.Addr()) + uint64(k)*size, Length: size})
		}
		assert.NilError(t, p.e.Transfer(ctx, reqs))
		for k := range 4 {
			reqs[k].Op, reqs[k].Source = engine.OpRead, p.mem.Addr()+2*size+uintptr(k%2)*size
			reqs[k].Length = size
		}
		assert.NilError(t, p.e.Transfer(ctx, reqs[2:]))
		small := engine.Request{Op: engine.OpRead, Source: p.mem.Addr() + 2*size, Target: seg, TargetOffset: uint64(srv.mem.Addr()) + 4096, Length: 4096}
		assert.NilError(t, p.e.Transfer(ctx, []engine.Request{small}))
		cancel()
		assert.Assert(t, bytes.Equal(src[2*size:2*size+4096], src[4096:8192]), "peer %d: small read", i)
		assert.Assert(t, bytes.Equal(src[2*size+4096:3*size], src[4096:size]), "peer %d: read back", i)
		assert.Assert(t, bytes.Equal(src[3*size:4*size], src[size:2*size]), "peer %d: read back", i)
		st := srv.t.Stats()
		assert.Assert(t, st.ServerConnsPolled <= 2, "%d connections outside the poller, cap 2", st.ServerConnsPolled)
		t.Logf("peer %d: %d server connections, %d outside the poller", i, st.ServerConns, st.ServerConnsPolled)
	}
	st := srv.t.Stats()
	assert.Assert(t, st.ServerConns > 2 && st.ServerConnsPolled == 2, "%d server connections, %d outside the poller", st.ServerConns, st.ServerConnsPolled)
}
