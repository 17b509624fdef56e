package http

import (
	"log/slog"
	"net"
	nethttp "net/http"
	"time"

	"github.com/kvferry/kvferry/internal/netguard"
)

// Bounds of the HTTP servers kvferry runs (metadata, admin): deadlines on
// every read, a header size cap, and connection caps.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultWriteTimeout      = 30 * time.Second
	DefaultIdleTimeout       = 120 * time.Second
	DefaultMaxHeaderBytes    = 64 << 10
	// DefaultMaxConnsPerIP caps the connections one address holds open.
	DefaultMaxConnsPerIP = 64
)

// HTTPServer returns an http.Server for h with deadlines on the header,
// the whole request, the reply and idle keep-alive connections, and a cap
// on header bytes (bodies are capped by the handler). idle 0 means
// DefaultIdleTimeout.
func HTTPServer(h nethttp.Handler, idle time.Duration, log *slog.Logger) *nethttp.Server {
	if idle <= 0 {
		idle = DefaultIdleTimeout
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &nethttp.Server{
		Handler:           h,
		ReadHeaderTimeout: DefaultReadHeaderTimeout,
		ReadTimeout:       DefaultReadTimeout,
		WriteTimeout:      DefaultWriteTimeout,
		IdleTimeout:       idle,
		MaxHeaderBytes:    DefaultMaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
}

// GuardListener caps ln's connections in total (netguard.DefaultMaxConns)
// and per client IP (DefaultMaxConnsPerIP). A connection at a cap
// displaces the oldest one that has not sent a whole request header and
// been answered, else the one idle longest (netguard.Limiter); only when
// every slot serves a request is it closed at accept and logged
// (rate-limited) as "<what> connection refused".
func GuardListener(ln net.Listener, what string, log *slog.Logger) net.Listener {
	lim := netguard.NewLimiter(netguard.DefaultMaxConns(), DefaultMaxConnsPerIP).WithFrames(4096, netguard.HTTPHeaderComplete)
	return netguard.Listen(ln, lim, log, what)
}
