package http

import (
	nethttp "net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kvferry/kvferry/metrics"
)

// Observed serves the metadata protocol through next and /metrics from a
// private registry: requests by method and status code, their latency,
// and the number of keys held (kvferry_metadata_*).
type Observed struct {
	next nethttp.Handler
	keys func() int
	prom nethttp.Handler
	reg  *prometheus.Registry

	mu    sync.Mutex
	codes map[[2]string]*atomic.Uint64 // (method, code)
	lat   map[string]*metrics.Histogram
}

// Instrument wraps next (a metadata Server) with its metrics; keys reports
// how many keys it holds.
func Instrument(next nethttp.Handler, keys func() int) *Observed {
	o := &Observed{next: next, keys: keys, codes: map[[2]string]*atomic.Uint64{}, lat: map[string]*metrics.Histogram{}}
	o.reg = prometheus.NewRegistry()
	o.reg.MustRegister(o, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	o.prom = promhttp.HandlerFor(o.reg, promhttp.HandlerOpts{})
	return o
}

type codeWriter struct {
	nethttp.ResponseWriter
	code int
}

func (w *codeWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

// Registry returns the private registry behind /metrics.
func (o *Observed) Registry() *prometheus.Registry { return o.reg }

// ServeHTTP serves /metrics and hands everything else to the server.
func (o *Observed) ServeHTTP(w nethttp.ResponseWriter, r *nethttp.Request) {
	if r.URL.Path == "/metrics" {
		o.prom.ServeHTTP(w, r)
		return
	}
	t0 := time.Now()
	cw := &codeWriter{ResponseWriter: w, code: nethttp.StatusOK}
	o.next.ServeHTTP(cw, r)
	method := r.Method
	switch method {
	case nethttp.MethodGet, nethttp.MethodPut, nethttp.MethodDelete, nethttp.MethodHead:
	default:
		method = "other"
	}
	k := [2]string{method, strconv.Itoa(cw.code)}
	o.mu.Lock()
	c := o.codes[k]
	if c == nil {
		c = new(atomic.Uint64)
		o.codes[k] = c
	}
	h := o.lat[method]
	if h == nil {
		h = new(metrics.Histogram)
		o.lat[method] = h
	}
	o.mu.Unlock()
	c.Add(1)
	h.Observe(time.Since(t0))
}

// Describe implements prometheus.Collector.
func (o *Observed) Describe(ch chan<- *prometheus.Desc) {
	ch <- metrics.MetadataRequests.Desc()
	ch <- metrics.MetadataRequestDuration.Desc()
	ch <- metrics.MetadataKeys.Desc()
}

// Collect implements prometheus.Collector.
func (o *Observed) Collect(ch chan<- prometheus.Metric) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for k, c := range o.codes {
		ch <- metrics.MetadataRequests.Value(float64(c.Load()), k[0], k[1])
	}
	for m, h := range o.lat {
		s := h.Snapshot()
		ch <- metrics.MetadataRequestDuration.Hist(&s, m)
	}
	ch <- metrics.MetadataKeys.Value(float64(o.keys()))
}
