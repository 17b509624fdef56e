package metrics

import (
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ListenAddr completes a metrics address: a bare port ("9400") or an
// address without host (":9400") binds loopback, so a listener opens on
// other interfaces only when its host is named.
func ListenAddr(addr string) string {
	addr = strings.TrimSpace(addr)
	if _, err := strconv.Atoi(addr); err == nil {
		return net.JoinHostPort("127.0.0.1", addr)
	}
	if host, port, err := net.SplitHostPort(addr); err == nil && host == "" {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return addr
}

// Handler returns the HTTP handler of reg: /metrics, plus /debug/pprof/
// when withPprof.
func Handler(reg *prometheus.Registry, withPprof bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	if withPprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// Serve listens on addr (completed by ListenAddr) and serves Handler(reg,
// withPprof) until the listener is closed; it returns the listener.
func Serve(addr string, reg *prometheus.Registry, withPprof bool) (net.Listener, error) {
	ln, err := net.Listen("tcp", ListenAddr(addr))
	if err != nil {
		return nil, fmt.Errorf("metrics listener %s: %w", addr, err)
	}
	srv := &http.Server{Handler: Handler(reg, withPprof), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return ln, nil
}
