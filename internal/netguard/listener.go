package netguard

import (
	"errors"
	"log/slog"
	"net"
	"syscall"
	"time"

	"github.com/kvferry/kvferry/internal/ratelog"
)

// Listener wraps a net.Listener for servers that run their own accept
// loop (net/http, gRPC): a connection at a cap of the Limiter displaces
// one that holds a slot without using it (Limiter), one that finds every
// slot serving is closed at once and Accept goes on to the next, accept
// errors are paced by a Backoff, and a returned connection (a *Conn) gives
// its slot back when closed.
type Listener struct {
	net.Listener
	limit   *Limiter
	log     *slog.Logger
	what    string
	logs    ratelog.Every
	backoff Backoff
}

// Listen wraps ln with l's caps; refusals are logged to log (nil: not at
// all) as "<what> connection refused".
func Listen(ln net.Listener, l *Limiter, log *slog.Logger, what string) *Listener {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Listener{Listener: ln, limit: l, log: log, what: what}
}

// Accept returns the next connection within the caps.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil, err
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return nil, err
			}
			d := l.backoff.Next()
			if ok, n := l.logs.Allow("accept"); ok {
				l.log.Warn(l.what+" accept failed", "err", err, "retry_in", d, "suppressed", n)
			}
			time.Sleep(d)
			continue
		}
		l.backoff.Reset()
		slot, err := l.limit.Admit(c.RemoteAddr(), c)
		if err != nil {
			if ok, n := l.logs.Allow("limit"); ok {
				l.log.Warn(l.what+" connection refused", "peer", c.RemoteAddr().String(), "err", err, "suppressed", n)
			}
			c.Close()
			continue
		}
		return NewConn(c, slot), nil
	}
}

// Conn is an admitted connection of a request-reply protocol (HTTP, the
// store master's mux and gRPC): every write completes a frame for its slot
// (Slot.Frame), since a server writes only once it has read a whole
// request (or, for HTTP/2, the preface), and Close releases the slot. A
// peer that sends part of a request and stalls is never answered, so its
// slot is the first to be displaced.
type Conn struct {
	net.Conn
	slot *Slot
}

// NewConn returns c, admitted under slot, as a Conn.
func NewConn(c net.Conn, slot *Slot) *Conn { return &Conn{Conn: c, slot: slot} }

// Write writes b and marks the slot's connection as active.
func (c *Conn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if n > 0 {
		c.slot.Frame()
	}
	return n, err
}

// Close closes the connection and releases its slot.
func (c *Conn) Close() error {
	err := c.Conn.Close()
	c.slot.Release()
	return err
}

// Slot returns the connection's slot.
func (c *Conn) Slot() *Slot { return c.slot }

// Unwrap returns the accepted connection.
func (c *Conn) Unwrap() net.Conn { return c.Conn }

// SyscallConn returns the socket's raw form where the accepted connection
// has one, so that servers may poll it (spin.Reading).
func (c *Conn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errNoRawConn
	}
	return sc.SyscallConn()
}

// CloseWrite shuts down the writing side where the accepted connection can
// (and does nothing where it cannot).
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// errNoRawConn: the accepted connection has no socket to poll.
var errNoRawConn = errors.New("netguard: connection has no raw socket")
