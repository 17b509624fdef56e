package netguard

import (
	"errors"
	"log/slog"
	"net"
	"time"

	"github.com/kvferry/kvferry/internal/ratelog"
)

// Listener wraps a net.Listener for servers that run their own accept
// loop (net/http, gRPC): connections over the Limiter's caps are closed
// at once and Accept goes on to the next, accept errors are paced by a
// Backoff, and a returned connection gives its slot back when closed.
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
		release, err := l.limit.Acquire(c.RemoteAddr())
		if err != nil {
			if ok, n := l.logs.Allow("limit"); ok {
				l.log.Warn(l.what+" connection refused", "peer", c.RemoteAddr().String(), "err", err, "suppressed", n)
			}
			c.Close()
			continue
		}
		return &limitedConn{Conn: c, release: release}, nil
	}
}

// limitedConn releases its slot when closed.
type limitedConn struct {
	net.Conn
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}

// Unwrap returns the accepted connection.
func (c *limitedConn) Unwrap() net.Conn { return c.Conn }
