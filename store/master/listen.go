package master

import (
	"bytes"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/kvferry/kvferry/engine/peerauth"
	"github.com/kvferry/kvferry/internal/netguard"
	"github.com/kvferry/kvferry/store/wire"
	"github.com/kvferry/kvferry/store/wire/coro"
)

// helloTimeout bounds how long a new connection may take to send its first
// bytes: the mux hello or the whole HTTP/2 client preface. A connection
// that sends neither in time (a Mooncake client, whose coro_rpc header
// neither protocol accepts, or anything else) is closed with a log line,
// so the peer fails at once instead of waiting for an answer that never
// comes.
const helloTimeout = time.Second

// http2Preface is the HTTP/2 client connection preface (RFC 9113 §3.4),
// the first bytes of every gRPC connection.
const http2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// wholeHello reports whether b begins with the mux hello or holds as many
// bytes as the HTTP/2 preface: what serveConn reads first, for the
// connection limiter (netguard.Limiter.WithFrames).
func wholeHello(b []byte) bool {
	return len(b) >= len(http2Preface) || bytes.HasPrefix(b, wire.MuxHello[:])
}

// runAccept accepts connections on the RPC port and starts serveConn for
// each. Owned by the Server; stops when Close closes the listener.
func (s *Server) runAccept() {
	defer s.wg.Done()
	var delay time.Duration
	for {
		conn, err := s.lis.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || s.ctx.Err() != nil {
				return
			}
			// Out of file descriptors and the like: retry after a pause,
			// as net/http and gRPC do.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.log.Warn("store master accept failed", "err", err, "retry_in", delay)
			select {
			case <-time.After(delay):
			case <-s.ctx.Done():
				return
			}
			continue
		}
		delay = 0
		slot, err := s.limit.Admit(conn.RemoteAddr(), conn)
		if err != nil {
			if ok, n := s.logs.Allow("limit"); ok {
				s.log.Warn("store master connection refused", "peer", conn.RemoteAddr().String(), "err", err, "suppressed", n)
			}
			conn.Close()
			continue
		}
		// Its slot counts as used from the hello or preface on and at every
		// reply (netguard.Conn): at a cap, a connection that sent neither
		// (or sits idle longest) is the one a new connection displaces.
		conn = netguard.NewConn(conn, slot)
		if !s.track(conn) {
			conn.Close()
			return
		}
		s.wg.Add(1)
		go s.serveConn(conn) // owned by s; stops when the peer or Close closes conn
	}
}

// serveConn reads the first bytes of conn within helloTimeout: the mux
// hello makes it a mux connection served here, the HTTP/2 preface hands it
// to the gRPC server with those bytes put back in front, and anything else
// (or nothing in time) closes it.
func (s *Server) serveConn(conn net.Conn) {
	defer s.wg.Done()
	slot := conn.(*netguard.Conn).Slot()
	if err := s.guard.Accept(conn); err != nil { // with a cluster key: prove it first
		s.untrack(conn)
		conn.Close()
		return
	}
	if s.cfg.TLS != nil {
		tc := tls.Server(conn, s.cfg.TLS)
		_ = conn.SetDeadline(time.Now().Add(helloTimeout + peerauth.DefaultTimeout))
		err := tc.Handshake()
		_ = conn.SetDeadline(time.Time{})
		if err != nil || !s.retrack(conn, tc) {
			if ok, n := s.logs.Allow("tls"); ok && err != nil {
				s.log.Warn("store master connection refused: TLS handshake", "peer", conn.RemoteAddr().String(), "err", err, "suppressed", n)
			}
			s.untrack(conn)
			conn.Close()
			return
		}
		conn = tc
	}
	var first [len(http2Preface)]byte
	_ = conn.SetReadDeadline(time.Now().Add(helloTimeout))
	n, err := io.ReadFull(conn, first[:len(wire.MuxHello)])
	if err == nil && string(first[:n]) == http2Preface[:n] {
		var m int
		m, err = io.ReadFull(conn, first[n:])
		n += m
	}
	_ = conn.SetReadDeadline(time.Time{})
	if n == len(wire.MuxHello) && first[0] == coro.Magic {
		// A Mooncake store client: its coro_rpc request header starts
		// with the magic byte, which neither the mux hello nor the
		// HTTP/2 preface does.
		s.serveCoro(conn, first[:n], slot)
		return
	}
	isMux := n == len(wire.MuxHello) && bytes.Equal(first[:n], wire.MuxHello[:])
	if !isMux && (err != nil || string(first[:n]) != http2Preface) {
		s.refuse(conn, first[:n], err)
		return
	}
	slot.Frame()
	if isMux {
		s.log.Debug("mux client connected", "peer", conn.RemoteAddr())
		err := wire.ServeMuxConnConfig(s.ctx, conn, &handlers{s: s}, s.muxConfig())
		s.untrack(conn)
		conn.Close()
		if err != nil && s.ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
			s.log.Debug("mux client connection ended", "peer", conn.RemoteAddr(), "err", err)
		}
		return
	}
	// gRPC: it reads the preface again from the saved bytes.
	s.untrack(conn)
	s.grpcLis.handoff(&prefixConn{Conn: conn, prefix: first[:n]})
}

// refuse closes a connection that did not start with the mux hello or the
// HTTP/2 preface in time, and says so: at Warn, at most once a second (the
// others at Debug, counted in the next Warn line), so a port scan cannot
// flood the log. A peer that connected and left without a byte (a port
// probe) is logged at Debug only.
func (s *Server) refuse(conn net.Conn, got []byte, err error) {
	defer conn.Close() // after the log line: whoever sees the close finds it
	s.untrack(conn)
	peer := conn.RemoteAddr().String()
	if len(got) == 0 && errors.Is(err, io.EOF) {
		s.log.Debug("store master connection closed before its first byte", "peer", peer)
		return
	}
	reason := "speaks neither kvferry's mux protocol, HTTP/2 nor coro_rpc"
	if err != nil {
		reason = "no mux hello or HTTP/2 preface within " + helloTimeout.String()
	}
	now := time.Now()
	s.refused.Lock()
	s.refused.n++
	warn := now.Sub(s.refused.last) >= time.Second
	suppressed := s.refused.n - 1
	if warn {
		s.refused.last, s.refused.n = now, 0
	}
	s.refused.Unlock()
	attrs := []any{"peer", peer, "reason", reason, "first_bytes", hex.EncodeToString(got)}
	if !warn {
		s.log.Debug("store master closed a connection", attrs...)
		return
	}
	if suppressed > 0 {
		attrs = append(attrs, "refused_since_last_warning", suppressed)
	}
	s.log.Warn("store master closed a connection", attrs...)
}

// track records an accepted connection; false once the server is closing.
func (s *Server) track(conn net.Conn) bool {
	s.conns.Lock()
	defer s.conns.Unlock()
	if s.conns.closed {
		return false
	}
	s.conns.m[conn] = struct{}{}
	return true
}

// retrack replaces old by c in the tracked connections (a TLS connection
// over old); false once the server is closing.
func (s *Server) retrack(old, c net.Conn) bool {
	s.conns.Lock()
	defer s.conns.Unlock()
	delete(s.conns.m, old)
	if s.conns.closed {
		return false
	}
	s.conns.m[c] = struct{}{}
	return true
}

func (s *Server) untrack(conn net.Conn) {
	s.conns.Lock()
	delete(s.conns.m, conn)
	s.conns.Unlock()
}

// closeConns closes every tracked connection; with refuse it refuses new
// ones too (Close). A leader that steps down closes its mux connections
// without refusing: their clients learn at once that the master which
// granted their put grants no longer leads (they stop writing into them),
// and redial to hear ErrNotLeader.
func (s *Server) closeConns(refuse bool) {
	s.conns.Lock()
	s.conns.closed = s.conns.closed || refuse
	conns := make([]net.Conn, 0, len(s.conns.m))
	for c := range s.conns.m {
		conns = append(conns, c)
	}
	s.conns.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// connListener is the listener the gRPC server serves: it yields the
// connections serveConn hands over.
type connListener struct {
	addr net.Addr
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newConnListener(addr net.Addr) *connListener {
	return &connListener{addr: addr, ch: make(chan net.Conn), done: make(chan struct{})}
}

// Accept returns the next handed-over connection.
func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops Accept; a second Close is harmless.
func (l *connListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr returns the RPC port's address.
func (l *connListener) Addr() net.Addr { return l.addr }

// handoff gives conn to Accept, or closes it once the listener is closed.
func (l *connListener) handoff(conn net.Conn) {
	select {
	case l.ch <- conn:
	case <-l.done:
		conn.Close()
	}
}

// prefixConn is a connection whose first bytes were already read: Read
// returns them first.
type prefixConn struct {
	net.Conn
	prefix []byte
}

// Read returns the saved bytes, then reads the connection.
func (c *prefixConn) Read(b []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(b, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}
