package abi

import (
	"bytes"
	"net"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"

	"github.com/kvferry/kvferry/internal/hostenv"
)

// registry is the library's private Prometheus registry (never the global
// one, which a host and etcd/grpc share).
var (
	registryOnce sync.Once
	registry     *prometheus.Registry
)

// Registry returns the private registry; other exports (the store) add
// their collectors to it.
func Registry() *prometheus.Registry {
	registryOnce.Do(func() {
		registry = prometheus.NewRegistry()
		registry.MustRegister(collectors.NewGoCollector(), engineCollector{})
	})
	return registry
}

var (
	descTasks = prometheus.NewDesc("kvferry_engine_tasks_total",
		"Transfer tasks that reached a terminal state, by state.", []string{"state"}, nil)
	descBytes = prometheus.NewDesc("kvferry_engine_transferred_bytes_total",
		"Bytes of completed transfer tasks.", nil, nil)
	descSlices = prometheus.NewDesc("kvferry_engine_slices_total",
		"Slices handed to each transport (shows which transport the selector picked).", []string{"transport"}, nil)
	descNotifies = prometheus.NewDesc("kvferry_engine_notifications_total",
		"Notifications by direction (sent, received, failed).", []string{"direction"}, nil)
	descBatches = prometheus.NewDesc("kvferry_engine_batches",
		"Allocated, not yet freed batches.", nil, nil)
	descRegistered = prometheus.NewDesc("kvferry_engine_registered_bytes",
		"Bytes of registered local memory.", nil, nil)
	descSegments = prometheus.NewDesc("kvferry_engine_open_segments",
		"Opened remote segments.", nil, nil)
	descEngines = prometheus.NewDesc("kvferry_engines",
		"Live transfer engines in this process.", nil, nil)
)

// engineCollector sums the Metrics snapshots of every live engine.
type engineCollector struct{}

func (engineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descTasks, descBytes, descSlices, descNotifies, descBatches, descRegistered, descSegments, descEngines} {
		ch <- d
	}
}

func (engineCollector) Collect(ch chan<- prometheus.Metric) {
	var completed, failed, canceled, bytes, sent, recv, nfail uint64
	var batches, segments int
	var registered uint64
	slices := map[string]uint64{}
	es := engines.all()
	for _, e := range es {
		m := e.Metrics()
		completed += m.TasksCompleted
		failed += m.TasksFailed
		canceled += m.TasksCanceled
		bytes += m.BytesCompleted
		sent += m.NotifiesSent
		recv += m.NotifiesReceived
		nfail += m.NotifiesFailed
		batches += m.BatchesLive
		segments += m.Segments
		registered += m.RegisteredBytes
		for k, v := range m.SlicesByTransport {
			slices[k] += v
		}
	}
	ch <- prometheus.MustNewConstMetric(descTasks, prometheus.CounterValue, float64(completed), "completed")
	ch <- prometheus.MustNewConstMetric(descTasks, prometheus.CounterValue, float64(failed), "failed")
	ch <- prometheus.MustNewConstMetric(descTasks, prometheus.CounterValue, float64(canceled), "canceled")
	ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(bytes))
	for k, v := range slices {
		ch <- prometheus.MustNewConstMetric(descSlices, prometheus.CounterValue, float64(v), k)
	}
	ch <- prometheus.MustNewConstMetric(descNotifies, prometheus.CounterValue, float64(sent), "sent")
	ch <- prometheus.MustNewConstMetric(descNotifies, prometheus.CounterValue, float64(recv), "received")
	ch <- prometheus.MustNewConstMetric(descNotifies, prometheus.CounterValue, float64(nfail), "failed")
	ch <- prometheus.MustNewConstMetric(descBatches, prometheus.GaugeValue, float64(batches))
	ch <- prometheus.MustNewConstMetric(descRegistered, prometheus.GaugeValue, float64(registered))
	ch <- prometheus.MustNewConstMetric(descSegments, prometheus.GaugeValue, float64(segments))
	ch <- prometheus.MustNewConstMetric(descEngines, prometheus.GaugeValue, float64(len(es)))
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

// startMetricsListener serves /metrics on KVFERRY_METRICS_ADDR when set;
// off by default so the library never opens ports unasked.
func startMetricsListener() {
	addr := hostenv.MetricsAddr()
	if addr == "" {
		return
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		logger.Warn("metrics listener failed", "addr", addr, "err", err)
		return
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(Registry(), promhttp.HandlerOpts{}))
	go func() { _ = http.Serve(ln, mux) }() // lives as long as the process
	logger.Info("metrics listener started", "addr", ln.Addr().String())
}
