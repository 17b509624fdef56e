package peerauth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvferry/kvferry/internal/ratelog"
)

// DefaultTimeout bounds a handshake: a peer that has not proved itself by
// then is cut, so unauthenticated connections cannot sit on a port.
const DefaultTimeout = 3 * time.Second

// refusals and accepts count refused and authenticated connections per
// role, process-wide (metrics, and the proof that nothing is per request).
var refusals, accepts [roleEnd]atomic.Uint64

// Refusals returns the connections refused for role in this process.
func Refusals(r Role) uint64 {
	if r >= roleEnd {
		return 0
	}
	return refusals[r].Load()
}

// Accepts returns the connections authenticated for role in this process.
func Accepts(r Role) uint64 {
	if r >= roleEnd {
		return 0
	}
	return accepts[r].Load()
}

// Guard authenticates the connections a listener accepts. A nil *Guard
// accepts every connection untouched (authentication off).
type Guard struct {
	keys    *Keys
	role    Role
	timeout time.Duration
	log     *slog.Logger
	refused atomic.Uint64
	logs    ratelog.Every
}

// NewGuard returns a guard for role, or nil when ks is nil. timeout 0
// means DefaultTimeout; log nil discards.
func NewGuard(ks *Keys, role Role, timeout time.Duration, log *slog.Logger) *Guard {
	if ks == nil {
		return nil
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Guard{keys: ks, role: role, timeout: timeout, log: log}
}

// Refused counts the connections this guard refused.
func (g *Guard) Refused() uint64 {
	if g == nil {
		return 0
	}
	return g.refused.Load()
}

// Accept authenticates c within the guard's timeout and clears c's
// deadline. On an error the refusal is counted and logged (Warn, with the
// peer's address, rate-limited) and the caller must close c.
func (g *Guard) Accept(c net.Conn) error {
	if g == nil {
		return nil
	}
	_ = c.SetDeadline(time.Now().Add(g.timeout))
	err := Server(c, g.keys, g.role)
	if err == nil {
		err = c.SetDeadline(time.Time{})
		if err == nil {
			accepts[g.role].Add(1)
			return nil
		}
	}
	g.refused.Add(1)
	refusals[g.role].Add(1)
	kind := "refused"
	if errors.Is(err, ErrNoHandshake) {
		kind = "nohandshake"
	}
	if ok, n := g.logs.Allow(kind); ok {
		g.log.Warn("connection refused: peer not authenticated", "role", g.role.String(), "peer", c.RemoteAddr().String(),
			"err", err, "suppressed", n)
	}
	return err
}

// Handshake runs the client side on c, bounded by timeout (0:
// DefaultTimeout) and ctx's deadline, and clears c's deadline after. With
// ks nil it does nothing.
func Handshake(ctx context.Context, c net.Conn, ks *Keys, role Role, timeout time.Duration) error {
	if ks == nil {
		return nil
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	d := time.Now().Add(timeout)
	if cd, ok := ctx.Deadline(); ok && cd.Before(d) {
		d = cd
	}
	_ = c.SetDeadline(d)
	if err := Client(c, ks, role); err != nil {
		return fmt.Errorf("%s handshake with %s: %w", role, c.RemoteAddr(), err)
	}
	return c.SetDeadline(time.Time{})
}

// Dialer returns a DialContext function (for http.Transport, gRPC) that
// dials with d and authenticates for role; with ks nil it only dials.
func Dialer(d *net.Dialer, ks *Keys, role Role) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if err := Handshake(ctx, c, ks, role, 0); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}
}

// maxPending bounds the handshakes a Listener runs at once.
const maxPending = 256

// Listener authenticates the connections of a listener whose accept loop
// is someone else's (net/http): Accept returns only connections that
// passed the guard. Handshakes run concurrently, each bounded by the
// guard's timeout, at most maxPending at once (more are closed).
type Listener struct {
	net.Listener
	g       *Guard
	ready   chan net.Conn
	done    chan struct{}
	pending chan struct{}
	err     atomic.Pointer[error]
	wg      sync.WaitGroup
	once    sync.Once
}

// Listen wraps ln with g; with g nil it returns ln itself.
func Listen(ln net.Listener, g *Guard) net.Listener {
	if g == nil {
		return ln
	}
	l := &Listener{Listener: ln, g: g, ready: make(chan net.Conn), done: make(chan struct{}), pending: make(chan struct{}, maxPending)}
	l.wg.Add(1)
	go l.runAccept()
	return l
}

// runAccept accepts and authenticates until Close; owned by the Listener.
func (l *Listener) runAccept() {
	defer l.wg.Done()
	delay := time.Duration(0)
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			select {
			case <-l.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				l.err.Store(&err)
				l.once.Do(func() { close(l.done) })
				return
			}
			// Out of descriptors and the like: pause, longer each time.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			select {
			case <-time.After(delay):
			case <-l.done:
				return
			}
			continue
		}
		delay = 0
		select {
		case l.pending <- struct{}{}:
		default:
			c.Close() // too many handshakes at once
			continue
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			defer func() { <-l.pending }()
			if err := l.g.Accept(c); err != nil {
				c.Close()
				return
			}
			select {
			case l.ready <- c:
			case <-l.done:
				c.Close()
			}
		}()
	}
}

// Accept returns the next authenticated connection.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ready:
		return c, nil
	case <-l.done:
		if p := l.err.Load(); p != nil {
			return nil, *p
		}
		return nil, net.ErrClosed
	}
}

// Close stops accepting; connections still in their handshake are closed.
func (l *Listener) Close() error {
	err := l.Listener.Close()
	l.once.Do(func() { close(l.done) })
	return err
}

// OpenListenWarning is the line logged when a listener binds every
// interface without a cluster key.
const OpenListenWarning = "listening on all interfaces without authentication: any host that reaches this port can use it; " +
	"set a cluster key (KVFERRY_AUTH_KEY_FILE) or bind to one address"

// WarnIfOpen logs OpenListenWarning for what (a listener's name) when ks
// is nil and addr ("host:port" or a host) names every interface.
func WarnIfOpen(log *slog.Logger, what, addr string, ks *Keys) {
	if ks != nil || log == nil {
		return
	}
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return
	}
	log.Warn(OpenListenWarning, "listener", what, "addr", addr)
}
