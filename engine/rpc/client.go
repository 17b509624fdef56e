package rpc

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/kvferry/kvferry/engine/peerauth"
	"github.com/kvferry/kvferry/engine/tlsconf"
	"github.com/kvferry/kvferry/internal/spin"
)

// ClientConfig bounds a Call. The zero value works.
type ClientConfig struct {
	// ConnectTimeout bounds the dial (MC_HANDSHAKE_CONNECT_TIMEOUT, default 5 s).
	ConnectTimeout time.Duration
	// Timeout bounds the whole exchange after connecting (default 60 s,
	// Mooncake's client receive timeout).
	Timeout time.Duration
	// MaxMessage caps the reply frame (default DefaultMaxMessage).
	MaxMessage uint64
	// Auth, when set, authenticates the connection (peerauth, RoleRPC)
	// before the request is sent.
	Auth *peerauth.Keys
	// TLS, when set, runs the call over TLS (after Auth); the server name
	// is the host of the address called unless TLS names one.
	TLS *tls.Config
	// SpinWait is how long the reply is polled for before the read blocks
	// (0: never; without TLS only). The poll does not yield: callers may
	// be C threads.
	SpinWait time.Duration
}

func (c ClientConfig) withDefaults() ClientConfig {
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = 5 * time.Second
	}
	if c.Timeout == 0 {
		c.Timeout = 60 * time.Second
	}
	if c.MaxMessage == 0 {
		c.MaxMessage = DefaultMaxMessage
	}
	return c
}

// CallError describes a failed Call: which peer, which request, which stage.
type CallError struct {
	Addr  string
	Type  Type
	Stage string // "dial", "auth", "send", "receive" or "reply"
	Err   error
}

func (e *CallError) Error() string {
	return fmt.Sprintf("rpc %s to %s: %s: %v", e.Type, e.Addr, e.Stage, e.Err)
}

// Unwrap returns the cause.
func (e *CallError) Unwrap() error { return e.Err }

// Call sends one request to addr ("host:port") and returns the reply body.
// The reply must carry the request's type.
func Call(ctx context.Context, addr string, t Type, body []byte, cfg ClientConfig) ([]byte, error) {
	cfg = cfg.withDefaults()
	c, err := dial(ctx, addr, t, cfg)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	reply, _, err := exchange(ctx, c, addr, t, body, cfg)
	return reply, err
}

// dial connects to addr and authenticates the connection as cfg asks.
func dial(ctx context.Context, addr string, t Type, cfg ClientConfig) (net.Conn, error) {
	d := net.Dialer{Timeout: cfg.ConnectTimeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, &CallError{Addr: addr, Type: t, Stage: "dial", Err: err}
	}
	if cfg.Auth == nil && cfg.TLS == nil {
		return c, nil
	}
	_ = c.SetDeadline(callDeadline(ctx, cfg))
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	if cfg.Auth != nil {
		if err := peerauth.Client(c, cfg.Auth, peerauth.RoleRPC); err != nil {
			c.Close()
			return nil, &CallError{Addr: addr, Type: t, Stage: "auth", Err: err}
		}
	}
	if cfg.TLS != nil {
		tc := tls.Client(c, tlsconf.ForAddr(cfg.TLS, addr))
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, &CallError{Addr: addr, Type: t, Stage: "auth", Err: fmt.Errorf("tls: %w", err)}
		}
		c = tc
	}
	return c, nil
}

// exchange sends one request on c and reads its reply, bounded by ctx and
// cfg.Timeout; answered reports whether any reply byte came (a reused
// connection that fails before one may be retried on a fresh one). It
// leaves c's deadline set; a cancellation closes c.
func exchange(ctx context.Context, c net.Conn, addr string, t Type, body []byte, cfg ClientConfig) (reply []byte, answered bool, err error) {
	_ = c.SetDeadline(callDeadline(ctx, cfg))
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	if err := WriteFrame(c, t, body); err != nil {
		return nil, false, &CallError{Addr: addr, Type: t, Stage: "send", Err: err}
	}
	r := &counting{r: spin.ReadingShared(c, cfg.SpinWait, false)}
	rt, reply, err := ReadFrame(r, cfg.MaxMessage)
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, r.n > 0, &CallError{Addr: addr, Type: t, Stage: "receive", Err: err}
	}
	if rt != t {
		return nil, true, &CallError{Addr: addr, Type: t, Stage: "reply", Err: fmt.Errorf("%w: reply type %s", ErrFrame, rt)}
	}
	return reply, true, nil
}

// callDeadline is when a call must be over: cfg.Timeout from now, or ctx's
// deadline if sooner.
func callDeadline(ctx context.Context, cfg ClientConfig) time.Time {
	deadline := time.Now().Add(cfg.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	return deadline
}

// counting counts the bytes read through it.
type counting struct {
	r io.Reader
	n int
}

func (c *counting) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += n
	return n, err
}
