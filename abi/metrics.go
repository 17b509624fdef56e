package abi

import (
	"bytes"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/kvferry/kvferry/internal/hostenv"
	"github.com/kvferry/kvferry/metrics"
)

// registry is the library's private Prometheus registry (never the global
// one, which a host and etcd/grpc share): the process's engines,
// transports and store clients (metrics.Collector) and the Go runtime.
var (
	registryOnce sync.Once
	registry     *prometheus.Registry
)

// Registry returns the private registry.
func Registry() *prometheus.Registry {
	registryOnce.Do(func() {
		if n := hostenv.MetricsMaxPeers(); n > 0 {
			metrics.SetPeerCap(n)
		}
		registry = metrics.NewRegistry()
	})
	return registry
}

// metricsText returns the text exposition of the private registry.
func metricsText() ([]byte, error) {
	mfs, err := Registry().Gather()
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), nil
}

// startMetricsListener serves /metrics (and /debug/pprof/ with
// KVFERRY_METRICS_PPROF=1) on KVFERRY_METRICS_ADDR when set; off by
// default so the library never opens ports unasked, and on loopback unless
// the address names another host.
func startMetricsListener() {
	addr := hostenv.MetricsAddr()
	if addr == "" {
		return
	}
	ln, err := metrics.Serve(addr, Registry(), hostenv.MetricsPprof())
	if err != nil {
		logger.Warn("metrics listener failed", "addr", addr, "err", err)
		return
	}
	logger.Info("metrics listener started", "addr", ln.Addr().String(), "pprof", hostenv.MetricsPprof())
}
