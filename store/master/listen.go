package master

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/kvferry/kvferry/store/wire"
)

// helloTimeout bounds how long a new connection may take to send its first
// bytes (the mux hello or the HTTP/2 preface).
const helloTimeout = 10 * time.Second

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
		if !s.track(conn) {
			conn.Close()
			return
		}
		s.wg.Add(1)
		go s.serveConn(conn) // owned by s; stops when the peer or Close closes conn
	}
}

// serveConn reads the first bytes of conn: the mux hello makes it a mux
// connection served here, anything else goes to the gRPC server with those
// bytes put back in front.
func (s *Server) serveConn(conn net.Conn) {
	defer s.wg.Done()
	var first [len(wire.MuxHello)]byte
	_ = conn.SetReadDeadline(time.Now().Add(helloTimeout))
	n, err := io.ReadFull(conn, first[:])
	_ = conn.SetReadDeadline(time.Time{})
	if err != nil && n == 0 {
		s.untrack(conn)
		conn.Close()
		return
	}
	if err == nil && first == wire.MuxHello {
		s.log.Debug("mux client connected", "peer", conn.RemoteAddr())
		err := wire.ServeMuxConn(s.ctx, conn, &handlers{s: s})
		s.untrack(conn)
		conn.Close()
		if err != nil && s.ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
			s.log.Debug("mux client connection ended", "peer", conn.RemoteAddr(), "err", err)
		}
		return
	}
	// gRPC (or something else that gRPC will refuse). Short reads hand on
	// what arrived; gRPC sees the same bytes it would have read itself.
	s.untrack(conn)
	s.grpcLis.handoff(&prefixConn{Conn: conn, prefix: first[:n]})
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
