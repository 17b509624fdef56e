package rpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Handler answers one request. It returns the reply body (JSON) or an error;
// on error the connection is closed without a reply, as Mooncake does.
// Handlers may run concurrently.
type Handler func(ctx context.Context, t Type, body []byte, peer net.Addr) ([]byte, error)

// ServerConfig configures a Server. The zero value works.
type ServerConfig struct {
	// MaxMessage caps a request frame (default DefaultMaxMessage).
	MaxMessage uint64
	// RecvTimeout bounds reading a request and waiting for the client to
	// close after the reply (default 5 s, as Mooncake's server).
	RecvTimeout time.Duration
	// MaxConcurrent bounds requests served at once (default 64); further
	// connections wait in the listen backlog.
	MaxConcurrent int
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
}

func (c ServerConfig) withDefaults() ServerConfig {
	if c.MaxMessage == 0 {
		c.MaxMessage = DefaultMaxMessage
	}
	if c.RecvTimeout == 0 {
		c.RecvTimeout = 5 * time.Second
	}
	if c.MaxConcurrent == 0 {
		c.MaxConcurrent = 64
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
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
	wg      sync.WaitGroup
	once    sync.Once
}

// NewServer starts serving ln with h. The server owns ln.
func NewServer(ln net.Listener, h Handler, cfg ServerConfig) *Server {
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{cfg: cfg, ln: ln, handler: h, ctx: ctx, cancel: cancel, sem: make(chan struct{}, cfg.MaxConcurrent)}
	s.wg.Add(1)
	go s.runAccept()
	return s
}

// Addr returns the listening address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// runAccept accepts connections until Close; owned by Server.
func (s *Server) runAccept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if s.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			s.cfg.Logger.Warn("rpc accept failed", "err", err)
			select {
			case <-time.After(10 * time.Millisecond):
			case <-s.ctx.Done():
				return
			}
			continue
		}
		select {
		case s.sem <- struct{}{}:
		case <-s.ctx.Done():
			c.Close()
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() { <-s.sem }()
			s.serve(c)
		}()
	}
}

func (s *Server) serve(c net.Conn) {
	defer c.Close()
	stop := context.AfterFunc(s.ctx, func() { c.Close() })
	defer stop()
	_ = c.SetDeadline(time.Now().Add(s.cfg.RecvTimeout))
	t, body, err := ReadFrame(c, s.cfg.MaxMessage)
	if err != nil {
		s.cfg.Logger.Debug("rpc read request failed", "peer", c.RemoteAddr().String(), "err", err)
		return
	}
	reply, err := s.safeHandle(t, body, c.RemoteAddr())
	if err != nil {
		s.cfg.Logger.Debug("rpc request refused", "peer", c.RemoteAddr().String(), "op", t.String(), "err", err)
		return
	}
	if err := WriteFrame(c, t, reply); err != nil {
		s.cfg.Logger.Debug("rpc write reply failed", "peer", c.RemoteAddr().String(), "err", err)
		return
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
		// Wait for the client to close its side, bounded by the deadline.
		var b [1]byte
		_, _ = c.Read(b[:])
	}
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
