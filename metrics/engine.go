package metrics

import (
	"sync"
	"sync/atomic"
	"time"
)

// Cause is why a transfer request did not complete (the cause label of
// kvferry_engine_errors_total).
type Cause uint8

// Causes.
const (
	CauseOther Cause = iota
	CauseTimeout
	CauseRefusedRange
	CausePeerGone
	CauseCanceled
	CauseAuth
	CauseInvalid
	CauseClosed
	// NumCauses is the number of causes.
	NumCauses
)

// CauseNames are the cause label values.
var CauseNames = [NumCauses]string{"other", "timeout", "refused_range", "peer_gone", "canceled", "auth", "invalid", "closed"}

// Refusal is why the serving side refused a peer (the cause label of
// kvferry_transport_refused_total).
type Refusal uint8

// Refusals.
const (
	RefusedRange Refusal = iota
	RefusedAuth
	RefusedMalformed
	// RefusedLimit: a connection cap (per peer address or in total).
	RefusedLimit
	// RefusedStale: a data connection that expected another incarnation
	// of the segment (the initiator's descriptor predates a restart).
	RefusedStale
	// NumRefusals is the number of refusal causes.
	NumRefusals
)

// RefusalNames are the refusal label values.
var RefusalNames = [NumRefusals]string{"range", "auth", "malformed", "limit", "stale"}

// Ops: the op label, indexed by the engine's opcode (0 read, 1 write).
var OpNames = [2]string{"read", "write"}

// linkKey names a (transport, peer label) pair.
type linkKey struct{ transport, peer string }

// opCounters are a link's counters of one direction.
type opCounters struct {
	completed, failed, canceled, bytes atomic.Uint64
	_                                  [32]byte // keep the directions on their own cache lines
}

// Link counts the transfer requests of one engine over one transport to
// one peer label. Its methods are the hot path: atomic adds only.
type Link struct {
	transport, peer string
	hist            *SizedHistograms
	submitted       atomic.Uint64
	slices          atomic.Uint64
	ops             [2]opCounters
	causes          [NumCauses]atomic.Uint64
}

// Submitted counts n requests handed to the link (they are in flight
// until Completed or Failed).
func (l *Link) Submitted(n int) { l.submitted.Add(uint64(n)) }

// Sliced counts n slices handed to the transport.
func (l *Link) Sliced(n int) { l.slices.Add(uint64(n)) }

// Completed records a completed request of n bytes that took d.
func (l *Link) Completed(op uint8, n uint64, d time.Duration) {
	c := &l.ops[op&1]
	c.completed.Add(1)
	c.bytes.Add(n)
	l.hist.Observe(n, d)
}

// Failed records a request that did not complete; cause CauseCanceled
// counts it as canceled, any other as failed.
func (l *Link) Failed(op uint8, cause Cause, n uint64, d time.Duration) {
	c := &l.ops[op&1]
	if cause == CauseCanceled {
		c.canceled.Add(1)
	} else {
		c.failed.Add(1)
	}
	if cause >= NumCauses {
		cause = CauseOther
	}
	l.causes[cause].Add(1)
	l.hist.Observe(n, d)
}

// Conn counts one engine's data connections over one transport to one
// peer label. Transports (tcp, rdma, ...) update it directly.
type Conn struct {
	// Open is the number of open connections (a gauge: Add(1) on
	// connect, Add(-1) on close).
	Open atomic.Int64
	// Dials and DialErrors count connection attempts and failed ones.
	Dials, DialErrors atomic.Uint64
	// Redials counts connections made after an earlier one to the peer
	// was lost or retired.
	Redials atomic.Uint64
	// Retries counts slices resubmitted after a connection failure.
	Retries atomic.Uint64
}

// Server counts the serving side of one transport.
type Server struct {
	requests, bytes [2]atomic.Uint64
	refused         [NumRefusals]atomic.Uint64
}

// Served counts one request of n bytes served for op (0 read, 1 write).
func (s *Server) Served(op uint8, n uint64) {
	s.requests[op&1].Add(1)
	s.bytes[op&1].Add(n)
}

// Refused counts one refusal.
func (s *Server) Refused(r Refusal) {
	if r < NumRefusals {
		s.refused[r].Add(1)
	}
}

// Gauges are an engine's point-in-time values, read at scrape time.
type Gauges struct {
	// RegisteredBytes and RegisteredRegions by memory kind.
	RegisteredBytes, RegisteredRegions map[string]uint64
	Segments, Batches                  int
	// NICs are the engine's RDMA NICs.
	NICs []NICGauge
	// NICPorts are the counters of those NICs' ports, as the kernel
	// keeps them (read from sysfs at scrape time).
	NICPorts []NICPort
}

// NICPort is one RDMA NIC port's counters as the kernel keeps them: the
// port's whole traffic, the same for every engine of the host that uses
// the port (the collector reports each port once, never summed).
type NICPort struct {
	Device string
	Port   int
	// XmitBytes, RcvBytes (port_xmit_data, port_rcv_data, in bytes),
	// XmitPackets, RcvPackets and LinkDowned.
	XmitBytes, RcvBytes, XmitPackets, RcvPackets, LinkDowned uint64
	// Errors (the port's error counters) and HW (the driver's
	// hw_counters), by sysfs file name.
	Errors, HW map[string]uint64
}

// NICGauge is one RDMA NIC's scrape-time figures.
type NICGauge struct {
	Device                          string
	Up                              bool
	InFlightBytes, BandwidthBytesPS float64
	Endpoints, GPURegions           int
}

// Engine holds the metrics of one transfer engine. The engine creates it
// with NewEngine, its transports take their Conn and Server from it, and
// Close folds its counters into the process totals, so that counters
// never go backwards when an engine goes away.
type Engine struct {
	gauges func(*Gauges)

	mu      sync.RWMutex
	byName  map[linkKey]*Link // by (transport, segment name): a cache in front of links
	links   map[linkKey]*Link // by (transport, peer label)
	hists   map[string]*SizedHistograms
	conns   map[linkKey]*Conn
	servers map[string]*Server
	// failovers count slices moved between transports, by (from, to, cause).
	failovers map[FailoverKey]*atomic.Uint64

	// NotifiesSent, NotifiesReceived and NotifiesFailed count notifications.
	NotifiesSent, NotifiesReceived, NotifiesFailed atomic.Uint64
}

// NewEngine returns the metrics of a new engine and adds them to the
// process's collector. gauges, if not nil, fills the engine's gauges at
// scrape time.
func NewEngine(gauges func(*Gauges)) *Engine {
	e := &Engine{gauges: gauges,
		byName: make(map[linkKey]*Link), links: make(map[linkKey]*Link), hists: make(map[string]*SizedHistograms),
		conns: make(map[linkKey]*Conn), servers: make(map[string]*Server), failovers: make(map[FailoverKey]*atomic.Uint64)}
	hub.add(e)
	return e
}

// Link returns the link for requests over transport to the segment called
// peer (created on first use; peers beyond the label cap share one).
func (e *Engine) Link(transport, peer string) *Link {
	k := linkKey{transport, peer}
	e.mu.RLock()
	l := e.byName[k]
	e.mu.RUnlock()
	if l != nil {
		return l
	}
	lk := linkKey{transport, PeerLabel(peer)}
	e.mu.Lock()
	defer e.mu.Unlock()
	if l = e.links[lk]; l == nil {
		h := e.hists[transport]
		if h == nil {
			h = new(SizedHistograms)
			e.hists[transport] = h
		}
		l = &Link{transport: transport, peer: lk.peer, hist: h}
		e.links[lk] = l
	}
	e.byName[k] = l
	return l
}

// Conn returns the connection counters for transport to the segment
// called peer.
func (e *Engine) Conn(transport, peer string) *Conn {
	return lookup(e, e.conns, linkKey{transport, PeerLabel(peer)})
}

// FailoverKey labels kvferry_engine_failovers_total: the transport a slice
// failed on, the one it moved to, and why.
type FailoverKey struct{ From, To, Cause string }

// Failover returns the counter of slices moved from transport from to
// transport to for cause (created on first use).
func (e *Engine) Failover(from, to, cause string) *atomic.Uint64 {
	return lookup(e, e.failovers, FailoverKey{from, to, cause})
}

// Failovers returns the engine's failover counters.
func (e *Engine) Failovers() map[FailoverKey]uint64 {
	e.mu.RLock()
	defer e.mu.RUnlock()
	out := make(map[FailoverKey]uint64, len(e.failovers))
	for k, v := range e.failovers {
		out[k] = v.Load()
	}
	return out
}

// Server returns the serving-side counters of transport.
func (e *Engine) Server(transport string) *Server { return lookup(e, e.servers, transport) }

// lookup returns m[k] (guarded by e.mu), creating it on first use.
func lookup[K comparable, V any](e *Engine, m map[K]*V, k K) *V {
	e.mu.RLock()
	v := m[k]
	e.mu.RUnlock()
	if v != nil {
		return v
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if v = m[k]; v == nil {
		v = new(V)
		m[k] = v
	}
	return v
}

// Close removes the engine from the collector, keeping its counters in the
// process totals. A second Close is harmless.
func (e *Engine) Close() { hub.retire(e) }

// LinkTotals are the summed counters of an engine's links.
type LinkTotals struct {
	Completed, Failed, Canceled, Bytes uint64
	TaskNanos                          uint64
	SlicesByTransport                  map[string]uint64
}

// Totals sums the engine's link counters (Engine.Metrics uses it).
func (e *Engine) Totals() LinkTotals {
	t := LinkTotals{SlicesByTransport: map[string]uint64{}}
	e.mu.RLock()
	defer e.mu.RUnlock()
	for _, l := range e.links {
		for i := range l.ops {
			t.Completed += l.ops[i].completed.Load()
			t.Failed += l.ops[i].failed.Load()
			t.Canceled += l.ops[i].canceled.Load()
			t.Bytes += l.ops[i].bytes.Load()
		}
		t.SlicesByTransport[l.transport] += l.slices.Load()
	}
	for _, h := range e.hists {
		for i := range h {
			t.TaskNanos += h[i].sumNanos.Load()
		}
	}
	return t
}
