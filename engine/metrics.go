package engine

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kvferry/kvferry/metrics"
)

// Metrics is a snapshot of an engine's counters.
type Metrics struct {
	// TasksCompleted, TasksFailed and TasksCanceled count terminal tasks.
	TasksCompleted, TasksFailed, TasksCanceled uint64
	// BytesCompleted sums the length of completed tasks.
	BytesCompleted uint64
	// TaskNanos sums the submit-to-terminal time of terminal tasks.
	TaskNanos uint64
	// SlicesByTransport counts slices handed to each transport.
	SlicesByTransport map[string]uint64
	// NotifiesSent, NotifiesReceived and NotifiesFailed count notifications.
	NotifiesSent, NotifiesReceived, NotifiesFailed uint64
	// BatchesLive is the number of allocated, not yet freed batches.
	BatchesLive int
	// RegisteredBytes sums the length of registered regions.
	RegisteredBytes uint64
	// Segments is the number of opened remote segments.
	Segments int
	// Failovers counts slices moved to another transport after a path
	// failure (failover.go), by transport failed, transport taking over
	// and cause.
	Failovers map[metrics.FailoverKey]uint64
}

// engineMetrics connects an engine to its metrics.Engine: the per-request
// counters of each (transport, peer) link, the notification counters,
// and the gauges read at scrape time.
type engineMetrics struct {
	set *metrics.Engine
	// off: Config.NoRequestMetrics; requests are not counted.
	off bool
	// The notification counters, shared with set.
	notifiesSent, notifiesReceived, notifiesFailed *atomic.Uint64
}

func (m *engineMetrics) init(e *Engine) {
	m.set = metrics.NewEngine(e.gauges)
	m.off = e.cfg.NoRequestMetrics
	m.notifiesSent, m.notifiesReceived, m.notifiesFailed = &m.set.NotifiesSent, &m.set.NotifiesReceived, &m.set.NotifiesFailed
}

// link returns the counters of requests over transport t to p, nil when
// request metrics are off.
func (m *engineMetrics) link(t Transport, p *Peer) *metrics.Link {
	if m.off {
		return nil
	}
	return m.set.Link(t.Name(), p.Name)
}

// MetricSet returns the engine's metrics; transports take their
// connection and serving-side counters from it (Conn, Server).
func (e *Engine) MetricSet() *metrics.Engine { return e.metrics.set }

// gauges fills the engine's scrape-time values.
func (e *Engine) gauges(g *metrics.Gauges) {
	g.RegisteredBytes = map[string]uint64{}
	g.RegisteredRegions = map[string]uint64{}
	for _, r := range e.reg.regions() {
		k := r.Kind.String()
		g.RegisteredBytes[k] += r.Length
		g.RegisteredRegions[k]++
	}
	for _, n := range e.NICStats() {
		g.NICs = append(g.NICs, metrics.NICGauge{Device: n.Device, Up: n.Active, InFlightBytes: float64(n.InflightBytes),
			BandwidthBytesPS: n.EWMABandwidthBps / 8, Endpoints: n.Endpoints, GPURegions: n.GPURegions})
	}
	for _, c := range e.NICCounters() {
		if c.Err != "" {
			continue
		}
		g.NICPorts = append(g.NICPorts, metrics.NICPort{Device: c.Device, Port: c.Port, XmitBytes: c.XmitBytes,
			RcvBytes: c.RcvBytes, XmitPackets: c.XmitPackets, RcvPackets: c.RcvPackets, LinkDowned: c.LinkDowned,
			Errors: c.Errors, HW: c.HW})
	}
	e.batches.RLock()
	g.Batches = len(e.batches.m)
	e.batches.RUnlock()
	e.segments.RLock()
	for _, p := range e.segments.byID[1:] {
		if p != nil {
			g.Segments++
		}
	}
	e.segments.RUnlock()
}

// record counts the terminal task t (state st) on its link.
func (t *task) record(st TaskState) {
	l := t.link
	if l == nil {
		return
	}
	d := time.Since(t.start)
	if st == StateCompleted {
		l.Completed(uint8(t.op), t.length, d)
		return
	}
	var err error
	if p := t.err.Load(); p != nil {
		err = *p
	}
	c := CauseOf(err)
	if st == StateCanceled {
		c = metrics.CauseCanceled
	}
	l.Failed(uint8(t.op), c, t.length, d)
}

// CauseOf classifies why a request failed (the cause label of
// kvferry_engine_errors_total).
func CauseOf(err error) metrics.Cause {
	var op *net.OpError
	switch {
	case err == nil:
		return metrics.CauseOther
	case errors.Is(err, ErrCanceled), errors.Is(err, context.Canceled):
		return metrics.CauseCanceled
	case errors.Is(err, ErrUnauthenticated):
		return metrics.CauseAuth
	case errors.Is(err, ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return metrics.CauseTimeout
	case errors.Is(err, ErrRejected), errors.Is(err, ErrAddressNotRegistered):
		return metrics.CauseRefusedRange
	case errors.Is(err, ErrPeerGone), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.EHOSTUNREACH), errors.As(err, &op):
		return metrics.CausePeerGone
	case errors.Is(err, ErrClosed):
		return metrics.CauseClosed
	case errors.Is(err, ErrInvalidArgument), errors.Is(err, ErrNotSupportedTransport):
		return metrics.CauseInvalid
	}
	return metrics.CauseOther
}

// Metrics returns a snapshot of the engine's counters (request counters
// stay zero with Config.NoRequestMetrics).
func (e *Engine) Metrics() Metrics {
	tot := e.metrics.set.Totals()
	m := Metrics{
		TasksCompleted:    tot.Completed,
		TasksFailed:       tot.Failed,
		TasksCanceled:     tot.Canceled,
		BytesCompleted:    tot.Bytes,
		TaskNanos:         tot.TaskNanos,
		NotifiesSent:      e.metrics.notifiesSent.Load(),
		NotifiesReceived:  e.metrics.notifiesReceived.Load(),
		NotifiesFailed:    e.metrics.notifiesFailed.Load(),
		SlicesByTransport: map[string]uint64{},
		Failovers:         e.metrics.set.Failovers(),
	}
	e.transports.RLock()
	for _, in := range e.transports.list {
		m.SlicesByTransport[in.t.Name()] = in.slices.Load()
	}
	e.transports.RUnlock()
	var g metrics.Gauges
	e.gauges(&g)
	m.BatchesLive = g.Batches
	m.Segments = g.Segments
	for _, v := range g.RegisteredBytes {
		m.RegisteredBytes += v
	}
	return m
}
