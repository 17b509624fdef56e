package rpc

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvferry/kvferry/engine/peerauth"
	"github.com/kvferry/kvferry/internal/netguard"
	"github.com/kvferry/kvferry/internal/ratelog"
	"github.com/kvferry/kvferry/internal/spin"
)

// Handler answers one request. It returns the reply body (JSON) or an error;
// on error the connection is closed without a reply, as Mooncake does.
// Handlers may run concurrently.
type Handler func(ctx context.Context, t Type, body []byte, peer net.Addr) ([]byte, error)

// Server defaults.
const (
	// DefaultRecvTimeout bounds reading one request (Mooncake's server
	// waits 5 s).
	DefaultRecvTimeout = 5 * time.Second
	// DefaultMaxConcurrent bounds handlers running at once.
	DefaultMaxConcurrent = 64
	// DefaultMaxConnsPerIP bounds the connections one address holds open.
	// Honest peers hold one per request for a few milliseconds.
	DefaultMaxConnsPerIP = 32
)

// ServerConfig configures a Server. The zero value works.
type ServerConfig struct {
	// MaxMessage caps a request frame (default DefaultMaxMessage).
	MaxMessage uint64
	// RecvTimeout bounds reading a request and waiting for the client to
	// close after the reply (default DefaultRecvTimeout).
	RecvTimeout time.Duration
	// MaxConcurrent bounds handlers running at once (default
	// DefaultMaxConcurrent). Connections are read without a slot, so slow
	// senders never keep fast ones waiting.
	MaxConcurrent int
	// MaxConns caps open connections (default netguard.DefaultMaxConns);
	// MaxConnsPerIP caps those from one IP (default
	// DefaultMaxConnsPerIP). A connection at a cap displaces the oldest
	// that has not sent a whole request, else the one idle longest
	// (netguard.Limiter); it is closed at once only while every slot of
	// the cap serves a request.
	MaxConns, MaxConnsPerIP int
	// KeepAliveIdle is how long a keep-alive connection (a client that
	// sent KeepAlive) may wait for its next request (default
	// DefaultKeepAliveIdle).
	KeepAliveIdle time.Duration
	// SpinWait is how long a keep-alive connection polls for the next
	// request before it blocks (0: never).
	SpinWait time.Duration
	// Logger receives diagnostics; nil discards them. Refusals are logged
	// at Warn, at most one line per kind every few seconds.
	Logger *slog.Logger
	// Auth, when set, makes every connection prove it holds the cluster
	// key (peerauth, RoleRPC) before its request is read.
	Auth *peerauth.Keys
	// TLS, when set, serves every connection over TLS (after Auth).
	TLS *tls.Config
}

func (c ServerConfig) withDefaults() ServerConfig {
	if c.MaxMessage == 0 {
		c.MaxMessage = DefaultMaxMessage
	}
	if c.RecvTimeout == 0 {
		c.RecvTimeout = DefaultRecvTimeout
	}
	if c.MaxConcurrent == 0 {
		c.MaxConcurrent = DefaultMaxConcurrent
	}
	if c.MaxConns == 0 {
		c.MaxConns = netguard.DefaultMaxConns()
	}
	if c.MaxConnsPerIP == 0 {
		c.MaxConnsPerIP = DefaultMaxConnsPerIP
	}
	if c.KeepAliveIdle <= 0 {
		c.KeepAliveIdle = DefaultKeepAliveIdle
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// ServerStats counts what a Server refused.
type ServerStats struct {
	// ConnsRefused counts connections closed at accept for a cap (every
	// slot serving a request).
	ConnsRefused uint64
	// ConnsDisplaced counts connections closed to make room for a new one
	// at a cap: one that had not sent a whole request, or idle longest.
	ConnsDisplaced uint64
	// BadRequests counts connections closed for a malformed, oversized or
	// late request.
	BadRequests uint64
	// Served counts answered requests.
	Served uint64
}

// Server serves socket RPC on a listener. It is owned by the engine that
// starts it; Close stops it and waits for its goroutines.
type Server struct {
	cfg     ServerConfig
	ln      net.Listener
	handler Handler
	ctx     context.Context
	cancel  context.CancelFunc
	sem     chan struct{}
	conns   *netguard.Limiter
	guard   *peerauth.Guard
	wg      sync.WaitGroup
	once    sync.Once
	logs    ratelog.Every

	bad, served atomic.Uint64
}

// NewServer starts serving ln with h. The server owns ln.
func NewServer(ln net.Listener, h Handler, cfg ServerConfig) *Server {
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{cfg: cfg, ln: ln, handler: h, ctx: ctx, cancel: cancel, sem: make(chan struct{}, cfg.MaxConcurrent),
		conns: netguard.NewLimiter(cfg.MaxConns, cfg.MaxConnsPerIP).WithFrames(frameHeaderPeek, wholeFrame),
		guard: peerauth.NewGuard(cfg.Auth, peerauth.RoleRPC, min(cfg.RecvTimeout, peerauth.DefaultTimeout), cfg.Logger)}
	s.wg.Add(1)
	go s.runAccept()
	return s
}

// frameHeaderPeek is how much of a waiting request the connection limiter
// looks at (netguard.Limiter.WithFrames): a larger request that has sent
// this much counts as whole.
const frameHeaderPeek = 4096

// wholeFrame reports whether b begins with a whole request frame (its
// 8-byte length and that many bytes).
func wholeFrame(b []byte) bool {
	return len(b) >= 8 && binary.LittleEndian.Uint64(b) <= uint64(len(b)-8)
}

// Addr returns the listening address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Stats returns the server's counters.
func (s *Server) Stats() ServerStats {
	return ServerStats{ConnsRefused: s.conns.Refused(), ConnsDisplaced: s.conns.Displaced(), BadRequests: s.bad.Load(), Served: s.served.Load()}
}

// warn logs a refusal at Warn, at most once per kind and interval.
func (s *Server) warn(kind, msg string, args ...any) {
	if ok, n := s.logs.Allow(kind); ok {
		if n > 0 {
			args = append(args, "suppressed", n)
		}
		s.cfg.Logger.Warn(msg, args...)
	}
}

// runAccept accepts connections until Close; owned by Server.
func (s *Server) runAccept() {
	defer s.wg.Done()
	var backoff netguard.Backoff
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if s.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			d := backoff.Next()
			s.warn("accept", "rpc accept failed", "err", err, "retry_in", d)
			select {
			case <-time.After(d):
			case <-s.ctx.Done():
				return
			}
			continue
		}
		backoff.Reset()
		slot, err := s.conns.Admit(c.RemoteAddr(), c)
		if err != nil {
			s.warn("limit", "rpc connection refused", "peer", c.RemoteAddr().String(), "err", err)
			c.Close()
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer slot.Release()
			s.serve(c, slot)
		}()
	}
}

// serve answers the requests of c. Each request read whole counts for
// slot from then until its reply is written (netguard.Slot.Begin): a
// connection that never completes a frame, or sits idle longest, is the
// one a new connection displaces at a cap.
func (s *Server) serve(c net.Conn, slot *netguard.Slot) {
	defer c.Close()
	stop := context.AfterFunc(s.ctx, func() { c.Close() })
	defer stop()
	peer := c.RemoteAddr()
	if err := s.guard.Accept(c); err != nil {
		return
	}
	_ = c.SetDeadline(time.Now().Add(s.cfg.RecvTimeout))
	if s.cfg.TLS != nil {
		tc := tls.Server(c, s.cfg.TLS)
		if err := tc.Handshake(); err != nil {
			s.bad.Add(1)
			s.warn("tls", "rpc connection refused: TLS handshake", "peer", peer.String(), "err", err)
			return
		}
		c = tc
	}
	var r io.Reader = c
	for first := true; ; first = false {
		t, body, err := ReadFrame(r, s.cfg.MaxMessage)
		if err != nil {
			if !first && (errors.Is(err, io.EOF) || isTimeout(err) || errors.Is(err, net.ErrClosed)) {
				return // a kept connection closed by its client, or idle too long
			}
			if s.ctx.Err() == nil {
				s.bad.Add(1)
				if errors.Is(err, ErrFrame) || isTimeout(err) {
					s.warn("request", "rpc request refused", "peer", peer.String(), "err", err)
				} else {
					s.cfg.Logger.Debug("rpc read request failed", "peer", peer.String(), "err", err)
				}
			}
			return
		}
		if !slot.Begin() {
			return // displaced meanwhile
		}
		select {
		case s.sem <- struct{}{}:
		case <-s.ctx.Done():
			slot.End()
			return
		}
		reply, err := s.safeHandle(t.Base(), body, peer)
		<-s.sem
		if err != nil {
			slot.End()
			s.cfg.Logger.Debug("rpc request refused", "peer", peer.String(), "op", t.String(), "err", err)
			return
		}
		s.served.Add(1)
		err = WriteFrame(c, t, reply)
		slot.End()
		if err != nil {
			s.cfg.Logger.Debug("rpc write reply failed", "peer", peer.String(), "err", err)
			return
		}
		if t.Base() == t {
			break // Mooncake's one request per connection
		}
		// Keep-alive: the next request, polled for a moment first.
		_ = c.SetDeadline(time.Now().Add(s.cfg.KeepAliveIdle))
		if first {
			r = spin.ReadingShared(c, s.cfg.SpinWait, true)
		}
	}
	if tc, ok := c.(interface{ CloseWrite() error }); ok { // TCP or TLS
		_ = tc.CloseWrite()
		// Wait for the client to close its side, bounded by the deadline.
		var b [1]byte
		_, _ = c.Read(b[:])
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func (s *Server) safeHandle(t Type, body []byte, peer net.Addr) (reply []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("rpc handler panic: %v", r)
		}
	}()
	return s.handler(s.ctx, t, body, peer)
}

// Close stops accepting, aborts requests in progress and waits for them.
// A second Close is harmless.
func (s *Server) Close() error {
	var err error
	s.once.Do(func() {
		s.cancel()
		err = s.ln.Close()
		s.wg.Wait()
	})
	return err
}
