package rpc

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/kvferry/kvferry/engine/peerauth"
	"github.com/kvferry/kvferry/engine/tlsconf"
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
	d := net.Dialer{Timeout: cfg.ConnectTimeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, &CallError{Addr: addr, Type: t, Stage: "dial", Err: err}
	}
	defer c.Close()
	deadline := time.Now().Add(cfg.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = c.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	if cfg.Auth != nil {
		if err := peerauth.Client(c, cfg.Auth, peerauth.RoleRPC); err != nil {
			return nil, &CallError{Addr: addr, Type: t, Stage: "auth", Err: err}
		}
	}
	if cfg.TLS != nil {
		tc := tls.Client(c, tlsconf.ForAddr(cfg.TLS, addr))
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, &CallError{Addr: addr, Type: t, Stage: "auth", Err: fmt.Errorf("tls: %w", err)}
		}
		c = tc
	}
	if err := WriteFrame(c, t, body); err != nil {
		return nil, &CallError{Addr: addr, Type: t, Stage: "send", Err: err}
	}
	rt, reply, err := ReadFrame(c, cfg.MaxMessage)
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, &CallError{Addr: addr, Type: t, Stage: "receive", Err: err}
	}
	if rt != t {
		return nil, &CallError{Addr: addr, Type: t, Stage: "reply", Err: fmt.Errorf("%w: reply type %s", ErrFrame, rt)}
	}
	return reply, nil
}
