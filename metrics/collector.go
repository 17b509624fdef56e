package metrics

import (
	"sort"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

type linkSnap struct {
	completed, failed, canceled, bytes [2]uint64
	causes                             [NumCauses]uint64
	slices                             uint64
	inFlight                           uint64
}

type connSnap struct {
	open                                int64
	dials, dialErrors, redials, retries uint64
}

type serverSnap struct {
	requests, bytes [2]uint64
	refused         [NumRefusals]uint64
}

// engineSnap sums engines by label.
type engineSnap struct {
	links                      map[linkKey]*linkSnap
	hists                      map[string]*[NumSizeClasses]HistogramSnapshot
	conns                      map[linkKey]*connSnap
	servers                    map[string]*serverSnap
	failovers                  map[FailoverKey]uint64
	sent, received, nfailed    uint64
	regBytes, regRegions       map[string]uint64
	nics                       map[string]*NICGauge // by device
	ports                      map[portKey]*NICPort
	segments, batches, engines int
}

func newEngineSnap() *engineSnap {
	return &engineSnap{links: map[linkKey]*linkSnap{}, hists: map[string]*[NumSizeClasses]HistogramSnapshot{},
		conns: map[linkKey]*connSnap{}, servers: map[string]*serverSnap{}, failovers: map[FailoverKey]uint64{},
		regBytes: map[string]uint64{}, regRegions: map[string]uint64{}, nics: map[string]*NICGauge{},
		ports: map[portKey]*NICPort{}}
}

// portKey names a NIC port.
type portKey struct {
	device string
	port   int
}

// add sums e's counters into s; with live, also its gauges.
func (s *engineSnap) add(e *Engine, live bool) {
	e.mu.RLock()
	for k, l := range e.links {
		ls := s.links[k]
		if ls == nil {
			ls = new(linkSnap)
			s.links[k] = ls
		}
		var terminal uint64
		for i := range l.ops {
			c, f, x := l.ops[i].completed.Load(), l.ops[i].failed.Load(), l.ops[i].canceled.Load()
			ls.completed[i] += c
			ls.failed[i] += f
			ls.canceled[i] += x
			ls.bytes[i] += l.ops[i].bytes.Load()
			terminal += c + f + x
		}
		for i := range l.causes {
			ls.causes[i] += l.causes[i].Load()
		}
		ls.slices += l.slices.Load()
		if sub := l.submitted.Load(); live && sub > terminal {
			ls.inFlight += sub - terminal
		}
	}
	for name, h := range e.hists {
		hs := s.hists[name]
		if hs == nil {
			hs = new([NumSizeClasses]HistogramSnapshot)
			s.hists[name] = hs
		}
		for i := range h {
			x := h[i].Snapshot()
			hs[i].Add(&x)
		}
	}
	for k, c := range e.conns {
		cs := s.conns[k]
		if cs == nil {
			cs = new(connSnap)
			s.conns[k] = cs
		}
		if live {
			cs.open += c.Open.Load()
		}
		cs.dials += c.Dials.Load()
		cs.dialErrors += c.DialErrors.Load()
		cs.redials += c.Redials.Load()
		cs.retries += c.Retries.Load()
	}
	for name, v := range e.servers {
		ss := s.servers[name]
		if ss == nil {
			ss = new(serverSnap)
			s.servers[name] = ss
		}
		for i := range v.requests {
			ss.requests[i] += v.requests[i].Load()
			ss.bytes[i] += v.bytes[i].Load()
		}
		for i := range v.refused {
			ss.refused[i] += v.refused[i].Load()
		}
	}
	for k, v := range e.failovers {
		s.failovers[k] += v.Load()
	}
	e.mu.RUnlock()
	s.sent += e.NotifiesSent.Load()
	s.received += e.NotifiesReceived.Load()
	s.nfailed += e.NotifiesFailed.Load()
	if live {
		s.engines++
		if e.gauges != nil {
			var g Gauges
			e.gauges(&g)
			for k, v := range g.RegisteredBytes {
				s.regBytes[k] += v
			}
			for k, v := range g.RegisteredRegions {
				s.regRegions[k] += v
			}
			s.segments += g.Segments
			s.batches += g.Batches
			for _, n := range g.NICs {
				ns := s.nics[n.Device]
				if ns == nil {
					ns = &NICGauge{Device: n.Device}
					s.nics[n.Device] = ns
				}
				ns.Up = ns.Up || n.Up
				ns.InFlightBytes += n.InFlightBytes
				ns.BandwidthBytesPS += n.BandwidthBytesPS
				ns.Endpoints += n.Endpoints
				ns.GPURegions += n.GPURegions
			}
			for i := range g.NICPorts {
				p := &g.NICPorts[i]
				k := portKey{p.Device, p.Port}
				// One port, one set of kernel counters, read by each
				// engine a moment apart: the furthest reading, never
				// a sum over engines.
				if o := s.ports[k]; o == nil || p.XmitBytes+p.RcvBytes >= o.XmitBytes+o.RcvBytes {
					s.ports[k] = p
				}
			}
		}
	}
}

// merge adds o's counters (not its gauges) into s.
func (s *engineSnap) merge(o *engineSnap) {
	for k, l := range o.links {
		ls := s.links[k]
		if ls == nil {
			ls = new(linkSnap)
			s.links[k] = ls
		}
		for i := 0; i < 2; i++ {
			ls.completed[i] += l.completed[i]
			ls.failed[i] += l.failed[i]
			ls.canceled[i] += l.canceled[i]
			ls.bytes[i] += l.bytes[i]
		}
		for i := range l.causes {
			ls.causes[i] += l.causes[i]
		}
		ls.slices += l.slices
	}
	for name, h := range o.hists {
		hs := s.hists[name]
		if hs == nil {
			hs = new([NumSizeClasses]HistogramSnapshot)
			s.hists[name] = hs
		}
		for i := range h {
			hs[i].Add(&h[i])
		}
	}
	for k, c := range o.conns {
		cs := s.conns[k]
		if cs == nil {
			cs = new(connSnap)
			s.conns[k] = cs
		}
		cs.dials += c.dials
		cs.dialErrors += c.dialErrors
		cs.redials += c.redials
		cs.retries += c.retries
	}
	for k, v := range o.failovers {
		s.failovers[k] += v
	}
	for name, v := range o.servers {
		ss := s.servers[name]
		if ss == nil {
			ss = new(serverSnap)
			s.servers[name] = ss
		}
		for i := range v.requests {
			ss.requests[i] += v.requests[i]
			ss.bytes[i] += v.bytes[i]
		}
		for i := range v.refused {
			ss.refused[i] += v.refused[i]
		}
	}
	s.sent += o.sent
	s.received += o.received
	s.nfailed += o.nfailed
}

// hubT is the process's set of live engines and store clients plus the
// totals of those that went away.
type hubT struct {
	mu           sync.Mutex
	engines      map[*Engine]struct{}
	retired      *engineSnap
	stores       map[*StoreClient]struct{}
	retiredStore StoreCounters
	retiredPut   [NumSizeClasses]HistogramSnapshot
	retiredGet   [NumSizeClasses]HistogramSnapshot
}

var hub = &hubT{engines: map[*Engine]struct{}{}, retired: newEngineSnap(), stores: map[*StoreClient]struct{}{}}

func (h *hubT) add(e *Engine) {
	h.mu.Lock()
	h.engines[e] = struct{}{}
	h.mu.Unlock()
}

func (h *hubT) retire(e *Engine) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.engines[e]; !ok {
		return
	}
	delete(h.engines, e)
	h.retired.add(e, false)
}

func (h *hubT) addStore(s *StoreClient) {
	h.mu.Lock()
	h.stores[s] = struct{}{}
	h.mu.Unlock()
}

func (h *hubT) retireStore(s *StoreClient) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.stores[s]; !ok {
		return
	}
	delete(h.stores, s)
	if s.counters != nil {
		h.retiredStore.add(s.counters())
	}
	for i := range s.PutDuration {
		p, g := s.PutDuration[i].Snapshot(), s.GetDuration[i].Snapshot()
		h.retiredPut[i].Add(&p)
		h.retiredGet[i].Add(&g)
	}
}

// processCollector exposes the hub.
type processCollector struct{}

// Collector returns the collector of this process's engines, transports
// and store clients (live ones and the totals of closed ones). Register it
// on a private registry, never on the global one.
func Collector() prometheus.Collector { return processCollector{} }

// NewRegistry returns a private registry with Collector and the Go
// runtime's and the process's collectors.
func NewRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(Collector(), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

func (processCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, s := range catalogue {
		if s.Component == CompEngine || s.Component == CompTransport || s.Component == CompStore {
			ch <- s.desc
		}
	}
}

func (processCollector) Collect(ch chan<- prometheus.Metric) {
	hub.mu.Lock()
	es := newEngineSnap()
	es.merge(hub.retired)
	live := make([]*Engine, 0, len(hub.engines))
	for e := range hub.engines {
		live = append(live, e)
	}
	sc := hub.retiredStore
	put, get := hub.retiredPut, hub.retiredGet
	stores := make([]*StoreClient, 0, len(hub.stores))
	for s := range hub.stores {
		stores = append(stores, s)
	}
	hub.mu.Unlock()
	// Gauge callbacks take engine locks: call them outside the hub's.
	for _, e := range live {
		es.add(e, true)
	}
	for _, s := range stores {
		if s.counters != nil {
			sc.add(s.counters())
		}
		for i := range s.PutDuration {
			p, g := s.PutDuration[i].Snapshot(), s.GetDuration[i].Snapshot()
			put[i].Add(&p)
			get[i].Add(&g)
		}
	}
	es.collect(ch)
	collectStore(ch, len(stores), &sc, &put, &get)
}

func sortedKeys[K comparable, V any](m map[K]V, less func(a, b K) bool) []K {
	ks := make([]K, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return less(ks[i], ks[j]) })
	return ks
}

func lessLink(a, b linkKey) bool {
	if a.transport != b.transport {
		return a.transport < b.transport
	}
	return a.peer < b.peer
}

func (s *engineSnap) collect(ch chan<- prometheus.Metric) {
	for _, k := range sortedKeys(s.links, lessLink) {
		l := s.links[k]
		for op, name := range OpNames {
			ch <- EngineTasks.Value(float64(l.completed[op]), k.transport, k.peer, name, "completed")
			ch <- EngineTasks.Value(float64(l.failed[op]), k.transport, k.peer, name, "failed")
			ch <- EngineTasks.Value(float64(l.canceled[op]), k.transport, k.peer, name, "canceled")
			ch <- EngineBytes.Value(float64(l.bytes[op]), k.transport, k.peer, name)
		}
		for c, name := range CauseNames {
			ch <- EngineErrors.Value(float64(l.causes[c]), k.transport, k.peer, name)
		}
		ch <- EngineSlices.Value(float64(l.slices), k.transport, k.peer)
		ch <- EngineInFlight.Value(float64(l.inFlight), k.transport, k.peer)
	}
	for _, name := range sortedKeys(s.hists, func(a, b string) bool { return a < b }) {
		h := s.hists[name]
		for c := range h {
			ch <- EngineTaskDuration.Hist(&h[c], name, SizeClassNames[c])
		}
	}
	if len(s.regBytes) == 0 {
		s.regBytes["host"], s.regRegions["host"] = 0, 0
	}
	for k, v := range s.regBytes {
		ch <- EngineRegisteredBytes.Value(float64(v), k)
		ch <- EngineRegisteredRegions.Value(float64(s.regRegions[k]), k)
	}
	for _, dev := range sortedKeys(s.nics, func(a, b string) bool { return a < b }) {
		n := s.nics[dev]
		up := 0.0
		if n.Up {
			up = 1
		}
		ch <- RDMANICUp.Value(up, dev)
		ch <- RDMANICInFlight.Value(n.InFlightBytes, dev)
		ch <- RDMANICBandwidth.Value(n.BandwidthBytesPS, dev)
		ch <- RDMANICEndpoints.Value(float64(n.Endpoints), dev)
		ch <- RDMANICGPURegions.Value(float64(n.GPURegions), dev)
	}
	for _, k := range sortedKeys(s.ports, func(a, b portKey) bool {
		if a.device != b.device {
			return a.device < b.device
		}
		return a.port < b.port
	}) {
		p, port := s.ports[k], strconv.Itoa(k.port)
		ch <- RDMAPortXmitBytes.Value(float64(p.XmitBytes), k.device, port)
		ch <- RDMAPortRcvBytes.Value(float64(p.RcvBytes), k.device, port)
		ch <- RDMAPortXmitPackets.Value(float64(p.XmitPackets), k.device, port)
		ch <- RDMAPortRcvPackets.Value(float64(p.RcvPackets), k.device, port)
		ch <- RDMAPortLinkDowned.Value(float64(p.LinkDowned), k.device, port)
		for _, name := range sortedKeys(p.Errors, func(a, b string) bool { return a < b }) {
			ch <- RDMAPortErrors.Value(float64(p.Errors[name]), k.device, port, name)
		}
		for _, name := range sortedKeys(p.HW, func(a, b string) bool { return a < b }) {
			ch <- RDMAPortHWCounters.Value(float64(p.HW[name]), k.device, port, name)
		}
	}
	ch <- EngineSegments.Value(float64(s.segments))
	ch <- EngineBatches.Value(float64(s.batches))
	ch <- Engines.Value(float64(s.engines))
	ch <- EngineNotifications.Value(float64(s.sent), "sent")
	ch <- EngineNotifications.Value(float64(s.received), "received")
	ch <- EngineNotifications.Value(float64(s.nfailed), "failed")

	for _, k := range sortedKeys(s.conns, lessLink) {
		c := s.conns[k]
		ch <- TransportConnections.Value(float64(max(c.open, 0)), k.transport, k.peer)
		ch <- TransportDials.Value(float64(c.dials-min(c.dialErrors, c.dials)), k.transport, k.peer, "ok")
		ch <- TransportDials.Value(float64(c.dialErrors), k.transport, k.peer, "error")
		ch <- TransportRedials.Value(float64(c.redials), k.transport, k.peer)
		ch <- TransportRetries.Value(float64(c.retries), k.transport, k.peer)
	}
	for _, k := range sortedKeys(s.failovers, func(a, b FailoverKey) bool {
		return a.From < b.From || a.From == b.From && (a.To < b.To || a.To == b.To && a.Cause < b.Cause)
	}) {
		ch <- EngineFailovers.Value(float64(s.failovers[k]), k.From, k.To, k.Cause)
	}
	for _, name := range sortedKeys(s.servers, func(a, b string) bool { return a < b }) {
		v := s.servers[name]
		for op, opn := range OpNames {
			ch <- TransportServedRequests.Value(float64(v.requests[op]), name, opn)
			ch <- TransportServedBytes.Value(float64(v.bytes[op]), name, opn)
		}
		for r, rn := range RefusalNames {
			ch <- TransportRefused.Value(float64(v.refused[r]), name, rn)
		}
	}
}

func collectStore(ch chan<- prometheus.Metric, live int, c *StoreCounters, put, get *[NumSizeClasses]HistogramSnapshot) {
	ch <- StoreClients.Value(float64(live))
	for _, x := range []struct {
		s *Spec
		v uint64
	}{
		{StorePuts, c.Puts}, {StorePutBytes, c.PutBytes}, {StorePutErrors, c.PutErrors},
		{StoreGets, c.Gets}, {StoreGetBytes, c.GetBytes}, {StoreGetErrors, c.GetErrors}, {StoreGetMisses, c.GetMisses},
		{StoreLocalCopies, c.LocalCopies}, {StoreRemounts, c.Remounts}, {StoreMasterSwitches, c.MasterSwitches},
		{StorePingFailures, c.PingFailures}, {StoreGrantPuts, c.GrantPuts}, {StoreGrantFallbacks, c.GrantFallbacks},
		{StoreGrantAcquires, c.GrantAcquires}, {StoreGrantReturns, c.GrantReturns},
		{StoreDiskReads, c.DiskReads}, {StoreRemoteDiskReads, c.RemoteDiskReads},
		{StoreDiskServed, c.DiskServed}, {StoreDiskServeBusy, c.DiskServeBusy},
	} {
		ch <- x.s.Value(float64(x.v))
	}
	for i := range put {
		ch <- StorePutDuration.Hist(&put[i], SizeClassNames[i])
		ch <- StoreGetDuration.Hist(&get[i], SizeClassNames[i])
	}
}
