package engine

import (
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvferry/kvferry/engine/descriptor"
	"github.com/kvferry/kvferry/engine/metadata"
	"github.com/kvferry/kvferry/engine/notifywire"
	"github.com/kvferry/kvferry/engine/rpc"
	"github.com/kvferry/kvferry/internal/netguard"
	"github.com/kvferry/kvferry/internal/ratelog"
	"github.com/kvferry/kvferry/internal/spin"
	"github.com/kvferry/kvferry/metrics"
)

// Notification is an opaque (sender name, message) pair.
type Notification struct {
	Name string
	Msg  string
}

// Buffer is one range to register.
type Buffer struct {
	Addr   uintptr
	Length uint64
}

// Request is one transfer (Mooncake's transfer_request).
type Request struct {
	Op OpCode
	// Source is the local address.
	Source uintptr
	// Target is the segment to read from or write to.
	Target SegmentID
	// TargetOffset is the absolute address in the target's registered memory.
	TargetOffset uint64
	// Length is the size in bytes; zero completes at once.
	Length uint64
	// Pieces, when set, is the local side in order instead of Source:
	// the request gathers them into (writes) or scatters them from
	// (reads) the Length bytes at TargetOffset. Their total must be
	// Length, and they must be of one memory kind. The engine may read
	// them until the request completes: keep them unchanged until then
	// (as the memory they name).
	Pieces []Piece
}

type installed struct {
	t      Transport
	prio   int
	slices *atomic.Uint64
}

// Engine is a transfer engine. See the package comment.
type Engine struct {
	cfg     Config
	log     *slog.Logger
	meta    metadata.Backend
	name    string // segment name
	host    string // advertised host/IP
	bindIP  string
	rpcSrv  *rpc.Server
	rpcPool *rpc.Pool // kept connections to keep-alive peers (notifications)
	rpcPort int
	hostID  *descriptor.Host
	// incarnation tells this engine from any other instance under the
	// same segment name (descriptor.Segment.Incarnation).
	incarnation string
	reg         registry
	metrics     engineMetrics
	ctx         context.Context
	cancel      context.CancelFunc
	wg          sync.WaitGroup
	closed      atomic.Bool
	out         outboxes   // notifications on their way out (outbox.go)
	pub         publishing // descriptor building and publication (publish.go)

	transports struct {
		sync.RWMutex
		list []installed // best first
	}
	segments struct {
		sync.RWMutex
		byName map[string]*Peer
		byID   []*Peer // index = SegmentID; byID[0] is the local segment
	}
	batches struct {
		sync.RWMutex
		m map[BatchID]*batch
	}
	// waiters is the free list of idle waiters: a parked wait for a batch
	// takes one and returns it, so that parking allocates nothing
	// (batch.waitIdle). A free list, not a sync.Pool, so that it stays
	// allocation-free under the race detector too; capped at maxFreeWaiters.
	waiters struct {
		sync.Mutex
		free []*idleWaiter
	}
	nextBatch atomic.Uint64
	inbox     struct {
		sync.Mutex
		q      []Notification
		budget notifyBudget  // bytes of q
		wake   chan struct{} // closed by the next deliver; made by WaitNotifications
		// sources hold the notifications that came the direct way
		// (directnotify.go); parked counts the threads sleeping for one.
		sources []NotifySource
		parked  int
	}
	lastErr atomic.Pointer[string]
	hooks   rpcHooks // transports' RPC handlers (hooks.go)
	// failoverLogs rate-limits the failover and health lines per peer
	// and transport (failover.go).
	failoverLogs ratelog.Every
	// regMu serializes registrations with the installation of transports
	// that register memory themselves (MemoryRegistrar).
	regMu       sync.Mutex
	installArgs struct {
		sync.Mutex
		m map[string][]string
	}
}

// New creates and starts an engine: it binds the RPC port, names the
// segment, installs cfg.Transports and publishes the (empty) descriptor.
func New(ctx context.Context, cfg Config) (*Engine, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.LoadSecurity(); err != nil {
		return nil, err
	}
	inc, err := descriptor.NewIncarnation(crand.Reader)
	if err != nil {
		return nil, fmt.Errorf("start engine: %w", err)
	}
	e := &Engine{cfg: cfg, log: cfg.Logger, meta: cfg.Metadata, hostID: localHost(), incarnation: inc, rpcPool: rpc.NewPool()}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	e.segments.byName = make(map[string]*Peer)
	e.batches.m = make(map[BatchID]*batch)
	e.metrics.init(e)
	e.pub.kick = make(chan struct{}, 1)
	e.pub.stop = make(chan struct{})
	e.pub.done = make(chan struct{})

	host := cfg.LocalServerName
	if e.meta.P2P() {
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		host = strings.Trim(host, "[]")
	} else {
		host = cfg.BindAddress
		if host == "" {
			host = FirstNonLoopbackIPv4()
		}
	}
	e.host = host
	e.bindIP = cfg.BindAddress
	if e.bindIP == "" && net.ParseIP(host) != nil {
		e.bindIP = host
	}
	if cfg.ListenIP != "" {
		e.bindIP = cfg.ListenIP
	}
	warnOpenListeners(e.log, e.bindIP, cfg.Auth)
	ln, port, err := ListenRandomPort(e.bindIP, cfg.MinRPCPort, cfg.MaxRPCPort)
	if err != nil {
		e.cancel()
		return nil, fmt.Errorf("start engine: rpc listener: %w", err)
	}
	e.rpcPort = port
	if e.meta.P2P() {
		e.name = descriptor.P2PName(host, port)
	} else {
		e.name = strings.TrimPrefix(cfg.LocalServerName, "/")
	}
	local := &Peer{ID: LocalSegment, Name: e.name, Endpoint: descriptor.RPCMeta{IPOrHostName: host, RPCPort: port}}
	e.segments.byID = []*Peer{local}
	e.segments.byName[e.name] = local
	e.rpcSrv = rpc.NewServer(ln, e.handleRPC, rpc.ServerConfig{MaxMessage: cfg.HandshakeMaxLength, Logger: e.log, Auth: cfg.Auth,
		TLS: cfg.TLS.ServerConfig(), SpinWait: e.SpinBudget()})
	go e.runPublisher() // before anything that may fail into Close, which stops it

	for _, name := range cfg.Transports {
		// Published once below, with every transport.
		if _, _, err := e.install(name); err != nil {
			e.Close()
			return nil, fmt.Errorf("start engine: %w", err)
		}
	}
	if err := e.publish(ctx); err != nil {
		e.Close()
		return nil, fmt.Errorf("start engine: %w", err)
	}
	e.log.Info("engine started", "segment", e.name, "rpc_port", port, "config", cfg.String())
	return e, nil
}

// FirstNonLoopbackIPv4 returns the first IPv4 address of an up interface
// that is not loopback, or "127.0.0.1" when there is none.
func FirstNonLoopbackIPv4() string {
	ifs, err := net.Interfaces()
	if err != nil {
		return "127.0.0.1"
	}
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 || ifc.Flags&net.FlagRunning == 0 {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				if ip4 := ipn.IP.To4(); ip4 != nil && !ip4.IsLinkLocalUnicast() {
					return ip4.String()
				}
			}
		}
	}
	return "127.0.0.1"
}

// ListenRandomPort listens on TCP at bindIP (all interfaces when empty) on a
// random free port in [minPort, maxPort], as Mooncake picks RPC and data
// ports; it tries up to 500 ports.
func ListenRandomPort(bindIP string, minPort, maxPort int) (net.Listener, int, error) {
	var lastErr error
	for range 500 {
		port := minPort + rand.IntN(maxPort-minPort+1)
		ln, err := net.Listen("tcp", net.JoinHostPort(bindIP, strconv.Itoa(port)))
		if err == nil {
			return ln, port, nil
		}
		lastErr = err
	}
	return nil, 0, fmt.Errorf("no free port in %d-%d on %q: %w", minPort, maxPort, bindIP, lastErr)
}

// SegmentName returns the local segment's name ("<ip>:<port>" in P2P mode).
func (e *Engine) SegmentName() string { return e.name }

// RPCPort returns the RPC (handshake) port.
func (e *Engine) RPCPort() int { return e.rpcPort }

// Host returns the advertised host (IP) of this engine.
func (e *Engine) Host() string { return e.host }

// BindIP returns the IP listeners bind to ("" = all interfaces).
func (e *Engine) BindIP() string { return e.bindIP }

// Config returns the effective configuration.
func (e *Engine) Config() Config { return e.cfg }

// Logger returns the engine's logger.
func (e *Engine) Logger() *slog.Logger { return e.log }

// Context is cancelled when the engine closes; transports derive from it.
func (e *Engine) Context() context.Context { return e.ctx }

// Incarnation returns the engine's incarnation: random, drawn at start,
// published in the descriptor (descriptor.Segment.Incarnation).
func (e *Engine) Incarnation() string { return e.incarnation }

// HostIdentity returns this process's host identity.
func (e *Engine) HostIdentity() *descriptor.Host { return e.hostID }

// LastError returns the text of the last error recorded by the C ABI.
func (e *Engine) LastError() string {
	if p := e.lastErr.Load(); p != nil {
		return *p
	}
	return ""
}

// RecordError keeps err's text as the last error (used by the C ABI).
func (e *Engine) RecordError(err error) {
	if err == nil {
		return
	}
	s := err.Error()
	e.lastErr.Store(&s)
}

// transportPriority orders transports, best first (DESIGN.md decision 3):
// same process, then same host (cma for host memory, nvlink for device
// memory other processes may map, shm staging for the rest and where the
// kernel refuses cross-memory access), then the network.
var transportPriority = map[string]int{
	"local": 100, "cma": 85, "nvlink": 82, "shm": 80, "rdma": 60, "efa": 60, "tcp": 10,
}

// TransportNames lists the names of the transports the engine knows how to
// rank (not all are built into every process), sorted.
func TransportNames() []string {
	names := make([]string, 0, len(transportPriority))
	for n := range transportPriority {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// InstallTransport installs the transport called name (or returns the one
// already installed) and republishes the descriptor when it was new.
func (e *Engine) InstallTransport(name string) (Transport, error) {
	t, added, err := e.install(name)
	if err != nil || !added {
		return t, err
	}
	return t, e.publish(e.ctx)
}

// InstallTransports installs each named transport not installed yet and
// republishes the descriptor once. errs[i] is the error of names[i]: its
// installation's, or the publication's when names[i] was new.
func (e *Engine) InstallTransports(names ...string) []error {
	errs := make([]error, len(names))
	var added []int
	for i, name := range names {
		_, isNew, err := e.install(name)
		errs[i] = err
		if isNew {
			added = append(added, i)
		}
	}
	if len(added) > 0 {
		if err := e.publish(e.ctx); err != nil {
			for _, i := range added {
				errs[i] = err
			}
		}
	}
	return errs
}

// install installs the transport called name without publishing; added
// reports whether it was not installed before.
func (e *Engine) install(name string) (t Transport, added bool, err error) {
	if e.closed.Load() {
		return nil, false, ErrClosed
	}
	if t := e.Transport(name); t != nil {
		return t, false, nil
	}
	if e.cfg.NewTransport == nil {
		return nil, false, fmt.Errorf("install transport %q: no transport factory: %w", name, ErrNotSupported)
	}
	e.regMu.Lock()
	defer e.regMu.Unlock()
	t, err = e.cfg.NewTransport(name, e)
	if err != nil {
		return nil, false, fmt.Errorf("install transport %q: %w", name, err)
	}
	e.transports.Lock()
	for _, in := range e.transports.list {
		if in.t.Name() == name { // lost a race with another installer
			e.transports.Unlock()
			t.Close()
			return in.t, false, nil
		}
	}
	e.transports.list = append(e.transports.list, installed{t: t, prio: transportPriority[name], slices: new(atomic.Uint64)})
	sort.SliceStable(e.transports.list, func(i, j int) bool { return e.transports.list[i].prio > e.transports.list[j].prio })
	e.transports.Unlock()
	e.log.Info("transport installed", "transport", name, "segment", e.name)
	return t, true, nil
}

// Transport returns the installed transport called name, or nil.
func (e *Engine) Transport(name string) Transport {
	e.transports.RLock()
	defer e.transports.RUnlock()
	for _, in := range e.transports.list {
		if in.t.Name() == name {
			return in.t
		}
	}
	return nil
}

// Transports lists installed transport names, best first.
func (e *Engine) Transports() []string {
	e.transports.RLock()
	defer e.transports.RUnlock()
	names := make([]string, len(e.transports.list))
	for i, in := range e.transports.list {
		names[i] = in.t.Name()
	}
	return names
}

// choose picks the transport for requests to p between the memory ends
// describes: the best one that reaches p and carries them (see
// MemoryCarrier).
func (e *Engine) choose(p *Peer, ends Ends) (Transport, *atomic.Uint64) {
	t, ctr, _, _ := e.chooseMeasured(p, ends, false)
	return t, ctr
}

// chooseMeasured is choose, which for measured ends (see Alternative) may
// pick the alternative route instead; the probe (nil otherwise) measures
// the submission on the route taken. With claim set, it may return a
// transport being probed for p (failover.go): health is then set, and the
// caller sends it exactly one slice (Engine.probeOnly) or releases the
// claim (peerHealth.probeDone). Without claim such a transport is skipped.
func (e *Engine) chooseMeasured(p *Peer, ends Ends, claim bool) (t Transport, ctr *atomic.Uint64, pp *pathProbe, health bool) {
	e.transports.RLock()
	defer e.transports.RUnlock()
	force := e.cfg.ForceTransport
	// skip: some transport is down for p (failover.go); those are passed
	// over unless every one that reaches p is.
	skip := p.health.watch.Load() != 0 && e.failoverOn()
again:
	for i, in := range e.transports.list {
		if force != "" && in.t.Name() != force {
			continue
		}
		if !carries(in.t, p, ends) || !in.t.Reaches(p) {
			continue
		}
		if skip {
			down, probe := p.health.check(e, p, in.t.Name(), time.Now(), claim)
			if down {
				continue
			}
			if probe {
				return in.t, in.slices, nil, true // the probe: not measured
			}
		}
		if force != "" || !ends.measured() {
			return in.t, in.slices, nil, false
		}
		for _, alt := range e.transports.list[i+1:] {
			a, ok := alt.t.(Alternative)
			if !ok || !a.AlternativeTo(in.t.Name(), ends) || !carries(alt.t, p, ends) || !alt.t.Reaches(p) {
				continue
			}
			if skip {
				down, probe := p.health.check(e, p, alt.t.Name(), time.Now(), claim)
				if down {
					continue
				}
				if probe {
					return alt.t, alt.slices, nil, true
				}
			}
			switch e.cfg.PathChoice {
			case in.t.Name():
				return in.t, in.slices, nil, false
			case alt.t.Name():
				return alt.t, alt.slices, nil, false
			}
			pp := p.pathFor(ends, in.t.Name(), alt.t.Name(), e.log).pick(time.Now())
			if pp.route == 1 {
				return alt.t, alt.slices, pp, false
			}
			return in.t, in.slices, pp, false
		}
		return in.t, in.slices, nil, false
	}
	if skip {
		skip = false // every transport that reaches p is down: the best anyway
		goto again
	}
	return nil, nil, nil, false
}

// ChooseTransport returns the name of the transport that requests to
// segment id would use now, or "" when none reaches it.
func (e *Engine) ChooseTransport(id SegmentID) string {
	p := e.peer(id)
	if p == nil {
		return ""
	}
	if t, _ := e.choose(p, Ends{}); t != nil {
		return t.Name()
	}
	return ""
}

// ---- memory registration ----

// RegisterMemory registers [addr, addr+length); the descriptor that peers
// fetch shows it at once, the metadata backend within the publish delay.
func (e *Engine) RegisterMemory(addr uintptr, length uint64, location string, remoteAccessible bool) error {
	return e.register([]*Region{{Addr: addr, Length: length, Location: location, RemoteAccessible: remoteAccessible}})
}

// RegisterMemoryBatch registers several ranges with one publication; it is
// all or nothing.
func (e *Engine) RegisterMemoryBatch(bufs []Buffer, location string) error {
	rs := make([]*Region, len(bufs))
	for i, b := range bufs {
		rs[i] = &Region{Addr: b.Addr, Length: b.Length, Location: location, RemoteAccessible: true}
	}
	return e.register(rs)
}

func (e *Engine) register(rs []*Region) error {
	if e.closed.Load() {
		return ErrClosed
	}
	if len(rs) == 0 {
		return nil
	}
	if err := e.classify(rs); err != nil {
		return err
	}
	e.regMu.Lock()
	defer e.regMu.Unlock()
	if err := e.reg.add(rs); err != nil {
		return err
	}
	addrs := make([]uintptr, len(rs))
	for i, r := range rs {
		addrs[i] = r.Addr
	}
	if err := e.registerWithTransports(rs); err != nil {
		_, _ = e.reg.remove(addrs)
		return fmt.Errorf("register %#x+%d: %w", rs[0].Addr, rs[0].Length, err)
	}
	// Published in the background, within PublishDelay (publish.go); a
	// peer's Metadata request gets the current descriptor at once.
	e.changed()
	return nil
}

// UnregisterMemory unregisters the region starting exactly at addr. It
// returns once no transfer touches the region any more (bounded by the
// transfer timeout), so the caller may free the memory afterwards.
func (e *Engine) UnregisterMemory(addr uintptr) error {
	return e.UnregisterMemoryBatch([]uintptr{addr})
}

// UnregisterMemoryBatch unregisters several regions (all or nothing).
func (e *Engine) UnregisterMemoryBatch(addrs []uintptr) error {
	if len(addrs) == 0 {
		return nil
	}
	gone, err := e.reg.remove(addrs)
	if err != nil {
		return err
	}
	e.changed()
	drained := waitDrained(gone, e.cfg.TransferTimeout+5*time.Second)
	for _, r := range e.registrars() {
		r.UnregisterRegions(gone)
	}
	if !drained {
		return fmt.Errorf("unregister: transfers still use the memory after %s: %w", e.cfg.TransferTimeout, ErrTimeout)
	}
	return nil
}

// Pin pins the registered region containing [addr, addr+length) so it
// cannot be unregistered until Release; it returns nil when the range is
// not inside one registered region. Transports use it to check and hold
// every address a peer asks for.
func (e *Engine) Pin(addr, length uint64) *Region {
	if length == 0 {
		return nil
	}
	return e.reg.pin(addr, length)
}

// Registered reports whether [addr, addr+length) lies in one registered region.
func (e *Engine) Registered(addr, length uint64) bool {
	return length != 0 && e.reg.find(addr, length) != nil
}

// RegionOf returns the registered region containing [addr, addr+length),
// or nil.
func (e *Engine) RegionOf(addr, length uint64) *Region {
	if length == 0 {
		return nil
	}
	return e.reg.find(addr, length)
}

// Regions returns the registered regions, sorted by address.
func (e *Engine) Regions() []*Region { return e.reg.regions() }

// ---- descriptor ----

// LocalDescriptor returns the current descriptor (rebuilt after a change;
// the metadata backend may still hold the previous one for up to the
// publish delay).
func (e *Engine) LocalDescriptor() *descriptor.Segment { return e.current().seg }

func (e *Engine) buildDescriptor() *descriptor.Segment {
	seg := &descriptor.Segment{
		Name:            e.name,
		TCPProtoVersion: descriptor.TCPProtoV2,
		Timestamp:       descriptor.TimestampNow(time.Now()),
		Host:            e.hostID,
		Incarnation:     e.incarnation,
		Features:        []string{descriptor.FeatureNotifyBytes, descriptor.FeatureMetadataRPC, descriptor.FeatureRPCKeepAlive},
	}
	regions := e.reg.regions()
	seg.Buffers = make([]descriptor.Buffer, 0, len(regions))
	for _, r := range regions {
		if !e.RemoteServable(r) {
			continue // with a cluster key, never offered to peers
		}
		seg.Buffers = append(seg.Buffers, e.describeBuffer(r))
	}
	e.transports.RLock()
	for _, in := range e.transports.list {
		seg.Transports = append(seg.Transports, in.t.Name())
		in.t.Describe(seg)
	}
	e.transports.RUnlock()
	if seg.Protocol == "" {
		seg.Protocol = descriptor.ProtocolTCP
	}
	return seg
}

// Publish rebuilds the local descriptor and publishes it (transports call it
// when what they describe changes).
func (e *Engine) Publish(ctx context.Context) error { return e.publish(ctx) }

// ---- segments ----

// OpenSegment returns the id of the segment called name, fetching its
// descriptor on first use. A leading '/' is ignored; the own name maps to
// LocalSegment.
func (e *Engine) OpenSegment(ctx context.Context, name string) (SegmentID, error) {
	if e.closed.Load() {
		return -1, ErrClosed
	}
	name = strings.TrimPrefix(name, "/")
	if name == "" {
		return -1, fmt.Errorf("open segment: empty name: %w", ErrInvalidArgument)
	}
	e.segments.RLock()
	p := e.segments.byName[name]
	e.segments.RUnlock()
	if p != nil {
		return p.ID, nil
	}
	desc, ep, err := e.fetch(ctx, name)
	if err != nil {
		return -1, err
	}
	e.segments.Lock()
	defer e.segments.Unlock()
	if p := e.segments.byName[name]; p != nil {
		return p.ID, nil
	}
	if len(e.segments.byID) >= 1<<31-1 {
		return -1, fmt.Errorf("open segment %q: too many segments: %w", name, ErrInvalidArgument)
	}
	p = &Peer{ID: SegmentID(len(e.segments.byID)), Name: name, Endpoint: ep}
	p.setDescriptor(desc)
	e.segments.byID = append(e.segments.byID, p)
	e.segments.byName[name] = p
	e.log.Debug("segment opened", "segment", name, "id", p.ID, "buffers", len(desc.Buffers))
	return p.ID, nil
}

// OpenSegmentNoCache refreshes the cached descriptor of name (if cached)
// and returns its id.
func (e *Engine) OpenSegmentNoCache(ctx context.Context, name string) (SegmentID, error) {
	name = strings.TrimPrefix(name, "/")
	e.segments.RLock()
	p := e.segments.byName[name]
	e.segments.RUnlock()
	if p != nil && !p.Local() {
		if err := e.refresh(ctx, p); err != nil {
			return -1, err
		}
		return p.ID, nil
	}
	return e.OpenSegment(ctx, name)
}

func (e *Engine) fetch(ctx context.Context, name string) (*descriptor.Segment, descriptor.RPCMeta, error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.MetadataTimeout)
	defer cancel()
	ep, err := e.meta.Endpoint(ctx, name)
	if err != nil {
		return nil, descriptor.RPCMeta{}, fmt.Errorf("open segment %q: endpoint: %w: %w", name, ErrMetadata, err)
	}
	desc, err := e.meta.Fetch(ctx, name)
	if err != nil {
		return nil, descriptor.RPCMeta{}, fmt.Errorf("open segment %q: %w: %w", name, ErrMetadata, err)
	}
	return desc, ep, nil
}

// refresh re-fetches p's descriptor and endpoint. When the endpoint
// changed (the peer restarted under the same name), a new Peer with the
// same id replaces p in the segment tables, so later requests and
// notifications reach the new RPC port; holders of p still see the new
// descriptor (and so its new data port).
func (e *Engine) refresh(ctx context.Context, p *Peer) error {
	desc, ep, err := e.fetch(ctx, p.Name)
	if err != nil {
		return err
	}
	p.setDescriptor(desc)
	if ep == p.Endpoint {
		return nil
	}
	np := &Peer{ID: p.ID, Name: p.Name, Endpoint: ep}
	np.setDescriptor(desc)
	e.segments.Lock()
	if int(p.ID) < len(e.segments.byID) && e.segments.byID[p.ID] == p {
		e.segments.byID[p.ID] = np
		e.segments.byName[p.Name] = np
	}
	e.segments.Unlock()
	e.log.Info("segment endpoint changed", "segment", p.Name, "old", p.Endpoint.Addr(), "new", ep.Addr())
	return nil
}

// CloseSegment does nothing, as in Mooncake: descriptors stay cached.
func (e *Engine) CloseSegment(id SegmentID) error {
	if e.peer(id) == nil {
		return fmt.Errorf("close segment %d: %w", id, ErrUnknownSegment)
	}
	return nil
}

// RemoveSegment drops the cached segment called name; its id becomes
// unknown. Notifications queued for it are delivered first (waiting at most
// the metadata timeout; those still queued then fail, visibly to their
// senders). The local segment cannot be removed.
func (e *Engine) RemoveSegment(name string) error {
	name = strings.TrimPrefix(name, "/")
	if name == "" {
		return fmt.Errorf("remove segment: empty name: %w", ErrInvalidArgument)
	}
	// Notifications queued for the segment go out (or fail visibly)
	// before it is forgotten.
	e.flushOutbox(name, e.cfg.MetadataTimeout)
	e.segments.Lock()
	defer e.segments.Unlock()
	p := e.segments.byName[name]
	if p == nil || p.Local() {
		return nil
	}
	delete(e.segments.byName, name)
	e.segments.byID[p.ID] = nil
	return nil
}

// SyncSegmentCache re-fetches every cached remote descriptor. Segments that
// cannot be fetched keep their old descriptor; the first error is returned.
func (e *Engine) SyncSegmentCache(ctx context.Context) error {
	e.segments.RLock()
	peers := make([]*Peer, 0, len(e.segments.byID))
	for _, p := range e.segments.byID[1:] {
		if p != nil {
			peers = append(peers, p)
		}
	}
	e.segments.RUnlock()
	// A few workers: the refreshes (one round trip each) overlap instead of
	// adding up. TensorRT-LLM's stock Mooncake wrapper calls this after
	// every transfer, with every peer it ever loaded cached
	// (specs/tensorrt-llm.md §3).
	var (
		first error
		mu    sync.Mutex
		next  atomic.Int64
		wg    sync.WaitGroup
	)
	work := func() {
		for {
			i := int(next.Add(1) - 1)
			if i >= len(peers) {
				return
			}
			if err := e.refresh(ctx, peers[i]); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}
	}
	for range min(len(peers), syncWorkers) - 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			work()
		}()
	}
	work()
	wg.Wait()
	return first
}

// syncWorkers bounds the concurrent refreshes of SyncSegmentCache.
const syncWorkers = 8

// SegmentDescriptor returns the cached descriptor of segment id.
func (e *Engine) SegmentDescriptor(id SegmentID) (*descriptor.Segment, error) {
	p := e.peer(id)
	if p == nil {
		return nil, fmt.Errorf("segment %d: %w", id, ErrUnknownSegment)
	}
	return p.Descriptor(), nil
}

// CheckRange reports whether [addr, addr+length) lies in one buffer of
// segment id, refreshing the cached descriptor once if not.
func (e *Engine) CheckRange(ctx context.Context, id SegmentID, addr, length uint64) error {
	p := e.peer(id)
	if p == nil {
		return fmt.Errorf("check range on segment %d: %w", id, ErrUnknownSegment)
	}
	return e.checkRemote(ctx, p, addr, length)
}

func (e *Engine) checkRemote(ctx context.Context, p *Peer, addr, length uint64) error {
	if p.Local() {
		if e.Registered(addr, length) {
			return nil
		}
		return fmt.Errorf("local range %#x+%d: %w", addr, length, ErrAddressNotRegistered)
	}
	if p.Contains(addr, length) {
		return nil
	}
	// The peer may have registered it since we cached its descriptor.
	err := e.refresh(ctx, p)
	if err == nil && p.Contains(addr, length) {
		return nil
	}
	// A metadata service lags the owner by up to its publish delay (and
	// may be down): ask the owner itself when it answers Metadata requests.
	if !e.meta.P2P() && p.Descriptor().Has(descriptor.FeatureMetadataRPC) {
		if lerr := e.refreshLive(ctx, p); lerr == nil && p.Contains(addr, length) {
			return nil
		} else if err == nil {
			err = lerr
		}
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("range %#x+%d on segment %q: %w", addr, length, p.Name, ErrAddressNotRegistered)
}

// refreshLive fetches p's current descriptor from p's RPC port.
func (e *Engine) refreshLive(ctx context.Context, p *Peer) error {
	if q := e.peer(p.ID); q != nil && q.Name == p.Name {
		p = q // refresh may have replaced it (new endpoint)
	}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.MetadataTimeout)
	defer cancel()
	reply, err := rpc.Call(ctx, p.Endpoint.Addr(), rpc.TypeMetadata, []byte("{}"), e.RPCClientConfig())
	if err != nil {
		return fmt.Errorf("fetch descriptor of segment %q from its owner: %w: %w", p.Name, ErrMetadata, err)
	}
	seg, err := descriptor.Unmarshal(reply)
	if err != nil {
		return fmt.Errorf("fetch descriptor of segment %q from its owner: %w: %w", p.Name, ErrMetadata, err)
	}
	if seg.Name != p.Name {
		return fmt.Errorf("fetch descriptor of segment %q from its owner: it answers as %q: %w", p.Name, seg.Name, ErrMetadata)
	}
	p.setDescriptor(seg)
	return nil
}

// checkRemoteOnce is checkRemote with at most one descriptor refresh per
// peer per submit, so a batch of misses against an unreachable metadata
// service waits one timeout, not one per request.
func (e *Engine) checkRemoteOnce(p *Peer, addr, length uint64, refreshed *[]*Peer) error {
	if p.Local() {
		return e.checkRemote(e.ctx, p, addr, length)
	}
	if p.Contains(addr, length) {
		return nil
	}
	for _, r := range *refreshed {
		if r == p {
			return fmt.Errorf("range %#x+%d on segment %q: %w", addr, length, p.Name, ErrAddressNotRegistered)
		}
	}
	*refreshed = append(*refreshed, p)
	return e.checkRemote(e.ctx, p, addr, length)
}

func (e *Engine) peer(id SegmentID) *Peer {
	e.segments.RLock()
	defer e.segments.RUnlock()
	if id < 0 || int(id) >= len(e.segments.byID) {
		return nil
	}
	return e.segments.byID[id]
}

// Peer returns the opened segment id, or nil.
func (e *Engine) Peer(id SegmentID) *Peer { return e.peer(id) }

// ---- notifications ----

func (e *Engine) handleRPC(ctx context.Context, t rpc.Type, body []byte, peer net.Addr) ([]byte, error) {
	if h := e.hooks.getFirst(t); h != nil {
		reply, err := h(ctx, body, peer)
		if !errors.Is(err, ErrRPCDeclined) {
			return reply, err
		}
	}
	if h := e.hooks.get(t); h != nil {
		return h(ctx, body, peer)
	}
	switch t {
	case rpc.TypeMetadata:
		return e.current().marshaled()
	case rpc.TypeNotify:
		name, msg, err := notifywire.Decode(body)
		if err != nil {
			return nil, fmt.Errorf("notify from %s: %w: %w", peer, err, ErrInvalidArgument)
		}
		if !e.deliver(Notification{Name: name, Msg: msg}, netguard.IP(peer)) {
			// An empty notify_msg tells the sender we refused it.
			return []byte(`{"name":"","notify_msg":""}` + "\n"), nil
		}
		return []byte(`{"name":"","notify_msg":"success"}` + "\n"), nil
	case rpc.TypeProbe:
		return []byte(`{"status":"success"}` + "\n"), nil
	case rpc.TypeStore:
		// No store client of this engine serves requests: an empty reply
		// says so (store/client diskwire.go).
		return []byte{}, nil
	case rpc.TypeConnection, rpc.TypeLegacy:
		// RDMA queue-pair handshake while no transport handles it: refuse
		// politely (non-empty reply_msg).
		return []byte(`{"reply_msg":"kvferry: rdma transport not installed on this engine"}` + "\n"), nil
	}
	return nil, fmt.Errorf("rpc from %s: unknown type %s", peer, t)
}

// deliver queues n, received from the address peer ("" for this engine),
// unless that would pass a cap on count or bytes (in total or from peer).
// What came the direct way before it is queued first.
func (e *Engine) deliver(n Notification, peer string) bool {
	e.inbox.Lock()
	defer e.inbox.Unlock()
	e.drainSourcesLocked()
	if !e.admitLocked(n, peer) {
		return false
	}
	e.wakeLocked()
	return true
}

// admitLocked queues n from peer unless that would pass a cap.
func (e *Engine) admitLocked(n Notification, peer string) bool {
	why := "notifications in total"
	if len(e.inbox.q) < e.cfg.NotifyQueueLimit {
		why = e.inbox.budget.admit(&e.cfg, peer, len(n.Name)+len(n.Msg))
	}
	if why != "" {
		if ok, held := e.inbox.budget.logs.Allow(why); ok {
			e.log.Warn("notification refused: the application has not drained the queue", "peer", peer,
				"cap", why, "suppressed", held)
		}
		return false
	}
	e.inbox.q = append(e.inbox.q, n)
	e.metrics.notifiesReceived.Add(1)
	return true
}

// wakeLocked wakes WaitNotifications when something is queued.
func (e *Engine) wakeLocked() {
	if e.inbox.wake != nil && len(e.inbox.q) > 0 {
		close(e.inbox.wake)
		e.inbox.wake = nil
	}
}

// Notifications drains and returns the received notifications, oldest first.
func (e *Engine) Notifications() []Notification {
	e.inbox.Lock()
	defer e.inbox.Unlock()
	e.drainSourcesLocked()
	q := e.inbox.q
	e.inbox.q = nil
	e.inbox.budget.reset()
	return q
}

// WaitNotifications is Notifications, except that when none has arrived it
// waits for the next one, until ctx is done or the engine closes (then it
// returns nil). Callers that would otherwise spin on Notifications (several
// TensorRT-LLM threads do, specs/tensorrt-llm.md §4.2) block here instead,
// and a notification still wakes them at once. Before it parks it polls
// for up to SpinBudget, letting other goroutines run in between (see
// WaitNotificationsLocked).
func (e *Engine) WaitNotifications(ctx context.Context) []Notification {
	return e.waitNotifications(ctx, true)
}

// WaitNotificationsLocked is WaitNotifications for a goroutine locked to
// its thread, as every C thread calling in through cgo is: its poll
// before parking does not yield (see WaitLocked).
func (e *Engine) WaitNotificationsLocked(ctx context.Context) []Notification {
	return e.waitNotifications(ctx, false)
}

func (e *Engine) waitNotifications(ctx context.Context, yield bool) []Notification {
	spin.UntilShared(e.SpinBudget(), yield, e.notified)
	for {
		e.inbox.Lock()
		e.drainSourcesLocked()
		if len(e.inbox.q) == 0 && len(e.inbox.sources) > 0 {
			// Announce the sleep, then look once more: a sender either sees
			// the announcement (and wakes us) or published before this look.
			e.parkLocked(true)
			e.drainSourcesLocked()
			if len(e.inbox.q) > 0 {
				e.parkLocked(false)
			}
		}
		if q := e.inbox.q; len(q) > 0 {
			e.inbox.q = nil
			e.inbox.budget.reset()
			e.inbox.Unlock()
			return q
		}
		parked := len(e.inbox.sources) > 0
		if e.inbox.wake == nil {
			e.inbox.wake = make(chan struct{})
		}
		wake := e.inbox.wake
		e.inbox.Unlock()
		var done bool
		select {
		case <-wake:
		case <-ctx.Done():
			done = true
		case <-e.ctx.Done():
			done = true
		}
		if parked {
			e.inbox.Lock()
			e.parkLocked(false)
			e.inbox.Unlock()
		}
		if done {
			return nil
		}
	}
}

// Notify sends n to segment target and waits until the peer accepted it
// (LocalSegment delivers to this engine's own queue). It is ordered with
// the segment's batch notifications queued before it.
func (e *Engine) Notify(ctx context.Context, target SegmentID, n Notification) error {
	if e.closed.Load() {
		return ErrClosed
	}
	p := e.peer(target)
	if p == nil {
		return fmt.Errorf("notify segment %d: %w", target, ErrUnknownSegment)
	}
	if p.Local() {
		return e.notifyPeer(ctx, p, n)
	}
	if e.notifyDirect(p, n) {
		return nil
	}
	return e.sendNotify(ctx, p, n)
}

// notifyPeer hands n to p now: one notify RPC, or the own queue for the
// local segment.
func (e *Engine) notifyPeer(ctx context.Context, p *Peer, n Notification) error {
	if p.Local() {
		if !e.deliver(n, "") {
			e.metrics.notifiesFailed.Add(1)
			return fmt.Errorf("notify self: queue full: %w", ErrTooManyRequests)
		}
		e.metrics.notifiesSent.Add(1)
		return nil
	}
	d := p.Descriptor()
	body, err := notifywire.Encode(n.Name, n.Msg, d != nil && d.Has(descriptor.FeatureNotifyBytes))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.MetadataTimeout)
	defer cancel()
	reply, err := e.callRPC(ctx, p, rpc.TypeNotify, body)
	if err != nil {
		e.metrics.notifiesFailed.Add(1)
		return fmt.Errorf("notify segment %q: %w", p.Name, err)
	}
	var r struct {
		Msg string `json:"notify_msg"`
	}
	if err := json.Unmarshal(reply, &r); err != nil || r.Msg == "" {
		e.metrics.notifiesFailed.Add(1)
		return fmt.Errorf("notify segment %q: refused by peer: %w", p.Name, ErrMetadata)
	}
	e.metrics.notifiesSent.Add(1)
	return nil
}

// Probe asks the segment called name whether it is alive.
func (e *Engine) Probe(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.MetadataTimeout)
	defer cancel()
	ep, err := e.meta.Endpoint(ctx, strings.TrimPrefix(name, "/"))
	if err != nil {
		return fmt.Errorf("probe %q: %w: %w", name, ErrMetadata, err)
	}
	reply, err := rpc.Call(ctx, ep.Addr(), rpc.TypeProbe, []byte("{}"), e.RPCClientConfig())
	if err != nil {
		return fmt.Errorf("probe %q: %w", name, err)
	}
	var r struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(reply, &r); err != nil || r.Status != "success" {
		return fmt.Errorf("probe %q: bad reply: %w", name, ErrMetadata)
	}
	return nil
}

// ---- batches ----

// AllocateBatch creates a batch that can hold capacity requests in total.
func (e *Engine) AllocateBatch(capacity int) (BatchID, error) {
	if e.closed.Load() {
		return 0, ErrClosed
	}
	if capacity < 0 {
		return 0, fmt.Errorf("allocate batch of %d: %w", capacity, ErrInvalidArgument)
	}
	b := &batch{capacity: capacity, e: e}
	b.mu.tasks = b.one.tasks[:0:1]
	b.mu.pollers = b.one.pollers[:0:1]
	b.mu.waiters = b.one.waiters[:0:1]
	b.id = BatchID(e.nextBatch.Add(1))
	e.batches.Lock()
	e.batches.m[b.id] = b
	e.batches.Unlock()
	return b.id, nil
}

func (e *Engine) batch(id BatchID) (*batch, error) {
	e.batches.RLock()
	b := e.batches.m[id]
	e.batches.RUnlock()
	if b == nil {
		return nil, fmt.Errorf("batch %d: %w", id, ErrUnknownBatch)
	}
	return b, nil
}

// Submit appends reqs to batch id and starts them. On ErrTooManyRequests,
// ErrInvalidArgument or ErrNotSupportedTransport nothing is added. Other
// errors (a source or target outside registered memory) are per task: the
// tasks exist and end FAILED, and the first such error is returned.
func (e *Engine) Submit(id BatchID, reqs []Request) error {
	return e.submit(id, reqs, nil)
}

// SubmitWithNotify is Submit plus a notification to reqs[0].Target, sent
// as soon as every task of the batch has completed (none sent when one
// fails or the batch is canceled). Until the peer has accepted it the
// batch's completed tasks report StatePending and the batch StateWaiting;
// if it cannot be delivered, they report StateFailed with the reason. So a
// batch reported completed means its notification has left. A later call
// on the same batch replaces the pending notification.
func (e *Engine) SubmitWithNotify(id BatchID, reqs []Request, n Notification) error {
	if len(reqs) == 0 {
		return fmt.Errorf("submit with notify: no requests: %w", ErrInvalidArgument)
	}
	return e.submit(id, reqs, &n)
}

type group struct {
	t      Transport
	p      *Peer
	ctr    *atomic.Uint64
	link   *metrics.Link
	tasks  int
	slices []*Slice
	gather bool // t takes slices with pieces (Gatherer)
	// probe: t is being probed for p, this group's claim (failover.go):
	// its first slice goes to t, the others to the next transport.
	probe bool
	ends  Ends // the memory ends t was chosen for (probe only)
}

func (e *Engine) submit(id BatchID, reqs []Request, n *Notification) error {
	if e.closed.Load() {
		return ErrClosed
	}
	b, err := e.batch(id)
	if err != nil {
		return err
	}
	if b.canceled.Load() {
		return fmt.Errorf("submit to batch %d: %w", id, ErrCanceled)
	}
	// Validate everything before adding anything.
	var tasks []task
	var groups []group
	one := len(reqs) == 1 && b.oneUsed.CompareAndSwap(false, true)
	if one {
		tasks, groups = b.one.task[:], b.one.group[:0]
	} else {
		tasks = make([]task, len(reqs))
	}
	var routes []route // transports chosen for (peer, memory kinds)
	if one {
		routes = b.one.route[:0]
	}
	var probes []*pathProbe // by request: measuring the route taken (nil: none)
	gidx := make([]int, len(reqs))
	probing := false // some group probes its transport (failover.go)
	defer func() {
		if !probing {
			return
		}
		// A probe claim not handed out (an error return, no slice) is
		// released; the submission below clears probe once it is.
		for j := range groups {
			if g := &groups[j]; g.probe {
				g.p.health.probeDone(g.t.Name())
			}
		}
	}()
	var split []bool // by request: pieces never gathered in one slice (nil: none)
	localGPU := e.HasDeviceMemory()
	var refreshed []*Peer // peers re-fetched during this submit (at most once each)
	for i, r := range reqs {
		if r.Op != OpRead && r.Op != OpWrite {
			return fmt.Errorf("submit: request %d: opcode %d: %w", i, r.Op, ErrInvalidArgument)
		}
		p := e.peer(r.Target)
		if p == nil {
			return fmt.Errorf("submit: request %d: segment %d: %w", i, r.Target, ErrInvalidArgument)
		}
		var ends Ends
		if r.Pieces != nil {
			if err := checkPieces(i, &reqs[i]); err != nil {
				return err
			}
			if localGPU {
				if ends.Local, err = e.piecesKind(i, &reqs[i]); err != nil {
					return err
				}
				if ends.Local == MemoryDevice { // each piece a slice: transports stage device memory by slice
					if split == nil {
						split = make([]bool, len(reqs))
					}
					split[i] = true
				}
			}
		} else if localGPU {
			ends.Local = e.localKind(uint64(r.Source), r.Length)
		}
		if !p.Local() && !p.Contains(r.TargetOffset, r.Length) {
			// The target may have been registered since the descriptor was
			// cached: its kind (device memory or not) picks the transport,
			// so refresh first (once per peer per submit; a range still
			// missing fails in the range check below).
			_ = e.checkRemoteOnce(p, r.TargetOffset, r.Length, &refreshed)
		}
		if p.Local() {
			if localGPU {
				ends.Remote = e.localKind(r.TargetOffset, r.Length)
			}
		} else if p.hasGPU() {
			ends.Remote, ends.RemoteShare = p.remoteKind(r.TargetOffset, r.Length)
		}
		if localGPU || ends.Remote == MemoryDevice {
			ends = measuredEnds(ends, r.Op, r.Length)
		}
		gi, ri := -1, -1
		for k, rt := range routes {
			if rt.p == p && rt.ends == ends {
				gi, ri = rt.g, k
				break
			}
		}
		if gi < 0 {
			t, ctr, probe, health := e.chooseMeasured(p, ends, true)
			probing = probing || health
			if t == nil {
				return fmt.Errorf("submit: request %d: no transport reaches segment %q for %s to %s memory (it offers %q, forced %q): %w",
					i, p.Name, ends.Local, ends.Remote, p.Descriptor().Protocol, e.cfg.ForceTransport, ErrNotSupportedTransport)
			}
			if e.log.Enabled(e.ctx, slog.LevelDebug) {
				e.log.Debug("transport chosen", "batch", id, "segment", p.Name, "transport", t.Name(), "local", ends.Local, "remote", ends.Remote, "forced", e.cfg.ForceTransport)
			}
			for j := range groups {
				if groups[j].p == p && groups[j].t == t && !groups[j].probe && !health { // a probe's group is its own
					gi = j
					break
				}
			}
			if gi < 0 {
				groups = append(groups, group{t: t, p: p, ctr: ctr, link: e.metrics.link(t, p), probe: health, ends: ends})
				gi = len(groups) - 1
			}
			routes = append(routes, route{p: p, ends: ends, g: gi, probe: probe})
			ri = len(routes) - 1
		}
		if routes[ri].probe != nil {
			if probes == nil {
				probes = make([]*pathProbe, len(reqs))
			}
			probes[i] = routes[ri].probe
		}
		gidx[i] = gi
		groups[gi].tasks++
		tasks[i].peer, tasks[i].ends = p, ends
	}
	b.mu.Lock()
	if b.mu.freed {
		b.mu.Unlock()
		return fmt.Errorf("submit to batch %d: %w", id, ErrUnknownBatch)
	}
	if len(b.mu.tasks)+len(reqs) > b.capacity {
		b.mu.Unlock()
		return fmt.Errorf("submit %d requests to batch %d holding %d of %d: %w", len(reqs), id, len(b.mu.tasks), b.capacity, ErrTooManyRequests)
	}
	now := time.Now()
	for i := range tasks {
		tasks[i].batch = b
		tasks[i].length = reqs[i].Length
		tasks[i].start = now
		tasks[i].op = reqs[i].Op
		tasks[i].link = groups[gidx[i]].link
		b.mu.tasks = append(b.mu.tasks, &tasks[i])
	}
	for i := range groups {
		if l := groups[i].link; l != nil {
			l.Submitted(groups[i].tasks)
		}
	}
	b.remaining.Add(int64(len(reqs)))
	if n != nil {
		b.mu.notify = &pendingNotify{peer: groups[gidx[0]].p, msg: *n}
	}
	b.mu.Unlock()

	// Count slices so that they come from one allocation.
	total, npieces := 0, 0
	for i := range reqs {
		g := &groups[gidx[i]]
		if reqs[i].Pieces == nil {
			total += sliceCount(reqs[i].Length, g.t.SliceSize())
			continue
		}
		g.gather = gathers(g.t)
		n, p := pieceSlices(&reqs[i], g.t.SliceSize(), g.gather && (split == nil || !split[i]))
		total += n
		npieces += p
	}
	var slices []Slice
	if one && total == 1 {
		slices = b.one.slice[:]
		groups[gidx[0]].slices = b.one.slices[:0]
	} else {
		slices = make([]Slice, total)
	}
	var arena []Piece
	if npieces > 0 {
		arena = make([]Piece, npieces)
	}
	next := 0
	var firstErr error
	for i, r := range reqs {
		tk := &tasks[i]
		g := &groups[gidx[i]]
		if r.Length == 0 {
			tk.finish()
			continue
		}
		if (r.Pieces == nil && uint64(r.Source)+r.Length < uint64(r.Source)) || r.TargetOffset+r.Length < r.TargetOffset {
			tk.setErr(fmt.Errorf("request %d wraps around the address space: %w", i, ErrInvalidArgument))
			tk.finish()
			firstErr = cmpErr(firstErr, ErrInvalidArgument)
			continue
		}
		if r.Pieces != nil {
			gather := g.gather && (split == nil || !split[i])
			if err := e.slicePieces(i, &reqs[i], tk, g, gather, localGPU, now, &refreshed, slices, &next, &arena); err != nil {
				firstErr = cmpErr(firstErr, err)
			} else if probes != nil && probes[i] != nil {
				tk.probe = probes[i]
				tk.probe.bytes += r.Length
				tk.probe.remaining.Add(1)
			}
			continue
		}
		if !e.cfg.AllowUnregisteredSource {
			pin := e.reg.pin(uint64(r.Source), r.Length)
			if pin == nil {
				tk.setErr(fmt.Errorf("request %d: source %#x+%d: %w", i, r.Source, r.Length, ErrAddressNotRegistered))
				tk.finish()
				firstErr = cmpErr(firstErr, ErrAddressNotRegistered)
				continue
			}
			tk.pin = pin
		}
		region := tk.pin
		if region == nil && localGPU {
			region = e.reg.find(uint64(r.Source), r.Length)
		}
		if err := e.checkRemoteOnce(g.p, r.TargetOffset, r.Length, &refreshed); err != nil {
			tk.setErr(&TransferError{Op: r.Op, Peer: g.p.Name, Transport: g.t.Name(), Addr: r.TargetOffset, Length: r.Length, Err: err})
			tk.finish()
			firstErr = cmpErr(firstErr, err)
			continue
		}
		ss := g.t.SliceSize()
		cnt := sliceCount(r.Length, ss)
		tk.pending.Store(int32(cnt))
		if probes != nil && probes[i] != nil {
			tk.probe = probes[i]
			tk.probe.bytes += r.Length
			tk.probe.remaining.Add(1)
		}
		var off uint64
		for k := 0; k < cnt; k++ {
			l := r.Length - off
			if k < cnt-1 {
				l = ss
			}
			s := &slices[next]
			next++
			*s = Slice{Op: r.Op, Local: r.Source + uintptr(off), Remote: r.TargetOffset + off, Length: l, Posted: now, task: tk, region: region, via: g.t}
			g.slices = append(g.slices, s)
			off += l
		}
	}
	for _, rt := range routes {
		if rt.probe != nil && rt.probe.remaining.Load() == 0 {
			rt.probe.abandon() // none of its requests was handed out
		}
	}
	for i := range groups {
		g := &groups[i]
		if len(g.slices) == 0 {
			continue
		}
		if g.probe {
			g.probe = false // handed out now: its result decides
			if rest, next, ctr := e.probeOnly(g.p, g.ends, g.t, g.slices); next != nil {
				g.slices = g.slices[:1]
				ctr.Add(uint64(len(rest)))
				if l := e.metrics.link(next, g.p); l != nil {
					l.Sliced(len(rest))
				}
				next.Submit(g.p, rest)
			}
		}
		g.ctr.Add(uint64(len(g.slices)))
		if g.link != nil {
			g.link.Sliced(len(g.slices))
		}
		g.t.Submit(g.p, g.slices)
	}
	return firstErr
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// sliceCount returns how many slices a request of length n makes with slice
// size ss: full slices, with a tail of up to ss/4 merged into the last one
// (Mooncake's fragment rule, specs/mooncake.md §2.5).
func sliceCount(n, ss uint64) int {
	if n == 0 {
		return 0
	}
	if ss == 0 || n <= ss+ss/4 {
		return 1
	}
	cnt := n / ss
	if rem := n % ss; rem > ss/4 {
		cnt++
	}
	return int(cnt)
}

// TaskStatus reports task i of batch id and, if it is terminal, marks it
// observed (which may send the batch's pending notification).
func (e *Engine) TaskStatus(id BatchID, i int) (TaskStatus, error) {
	b, err := e.batch(id)
	if err != nil {
		return TaskStatus{}, err
	}
	t := b.taskAt(i)
	if t == nil {
		return TaskStatus{}, fmt.Errorf("batch %d has no task %d: %w", id, i, ErrInvalidArgument)
	}
	b.poll()
	return b.observe(t), nil
}

// BatchStatus aggregates batch id; terminal tasks become observed.
func (e *Engine) BatchStatus(id BatchID) (BatchStatus, error) {
	b, err := e.batch(id)
	if err != nil {
		return BatchStatus{}, err
	}
	b.poll()
	return b.aggregate(), nil
}

// Wait blocks until every task of batch id is terminal or ctx is done
// (ctx without deadline: the configured transfer timeout applies). It
// returns the aggregate status; ErrTimeout when the deadline passed first.
// Before it parks it polls for up to SpinBudget, letting other goroutines
// run in between (see WaitLocked), and blocks in the kernel for answers a
// transport offered it to block for (WaitPoller: then it does not spin).
func (e *Engine) Wait(ctx context.Context, id BatchID) (BatchStatus, error) {
	return e.wait(ctx, id, true)
}

// WaitLocked is Wait for a goroutine locked to its thread, as every C
// thread calling in through cgo is: its poll before parking does not
// yield, since a locked goroutine that yields hands its thread's P away
// and back (two thread wake-ups), and it does not park in the Go
// scheduler either: its thread sleeps in the kernel until the goroutine
// that completes the batch wakes it (a futex; issue 38), or until ctx's
// deadline (a cancellation of ctx without one is noticed within 10 ms).
func (e *Engine) WaitLocked(ctx context.Context, id BatchID) (BatchStatus, error) {
	return e.wait(ctx, id, false)
}

func (e *Engine) wait(ctx context.Context, id BatchID, yield bool) (BatchStatus, error) {
	b, err := e.batch(id)
	if err != nil {
		return BatchStatus{}, err
	}
	// An answer offered to block for is far (a large payload): no spin. A
	// locked waiter's poll offers its thread's CPU between polls
	// (sched_yield, which keeps the P), as a getTransferStatus loop does:
	// on a small VM a poll that holds its CPU keeps the reader that
	// completes the batch from running (issue 38).
	// (Direct calls, not a function value: through one, the method value
	// b.settled escapes and every wait allocates.)
	if !b.waitOffered.Load() && (yield && spin.Until(e.SpinBudget(), yield, b.settled) ||
		!yield && spin.UntilShared(e.SpinBudget(), yield, b.settled)) {
		return b.aggregate(), nil
	}
	if b.idle() {
		return b.aggregate(), nil
	}
	// Without a deadline in ctx the transfer timeout bounds the wait, kept
	// beside ctx rather than in a derived context: parking allocates nothing.
	var timeout time.Duration
	var deadline time.Time
	if _, ok := ctx.Deadline(); !ok {
		timeout = e.cfg.TransferTimeout
		deadline = time.Now().Add(timeout)
	}
	if b.waitPolled(ctx, deadline) {
		return b.aggregate(), nil
	}
	if !deadline.IsZero() {
		timeout = time.Until(deadline)
		if timeout <= 0 {
			timeout = 1 // expired: waitIdle reports it after one last look
		}
	}
	if yield {
		err = b.waitIdle(ctx, timeout)
	} else {
		err = b.waitIdleThread(ctx, timeout) // a locked waiter sleeps in the kernel
	}
	if err != nil { // (a method value here would allocate on every wait)
		bs := b.aggregate()
		return bs, fmt.Errorf("wait for batch %d: %w", id, ErrTimeout)
	}
	return b.aggregate(), nil
}

// Cancel cancels batch id: slices not yet on the wire are dropped, the
// transports abort the I/O of slices in flight (Aborter: a stalled peer
// is not waited for) and those are awaited until nothing touches their
// memory, bounded by the transfer timeout plus 5 s. Afterwards every task
// is terminal and observed, and the engine touches none of the batch's
// memory any more. Past the bound it returns ErrTimeout and the tasks
// still running stay non-terminal (their memory still in use: an
// UnregisterMemory of it waits for them).
func (e *Engine) Cancel(ctx context.Context, id BatchID) error {
	b, err := e.batch(id)
	if err != nil {
		return err
	}
	b.canceled.Store(true)
	b.mu.Lock()
	b.mu.notify = nil
	b.mu.Unlock()
	if !b.idle() {
		e.abortCanceled()
	}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.TransferTimeout+5*time.Second)
	defer cancel()
	if err := b.waitIdle(ctx, 0); err != nil {
		e.log.Error("canceled batch still has requests in flight", "batch", id, "after", e.cfg.TransferTimeout+5*time.Second)
		return fmt.Errorf("cancel batch %d: in-flight requests did not finish: %w", id, ErrTimeout)
	}
	b.aggregate()
	return nil
}

// FreeBatch releases batch id. It returns ErrBatchBusy while a task has not
// been observed terminal (by TaskStatus, BatchStatus, Wait or Cancel).
func (e *Engine) FreeBatch(id BatchID) error {
	b, err := e.batch(id)
	if err != nil {
		return err
	}
	if b.busy() {
		return fmt.Errorf("free batch %d: %w", id, ErrBatchBusy)
	}
	b.mu.Lock()
	b.mu.freed = true
	b.mu.Unlock()
	e.batches.Lock()
	delete(e.batches.m, id)
	e.batches.Unlock()
	return nil
}

// Await declares that the caller waits for batch id (Wait, WaitLocked)
// right after each of its submissions that follow: the transports may then
// leave that batch's I/O to the two calls' own thread, with no hand-off to
// their goroutines (TCP: the submitter writes the last lane's share itself,
// however large, and the waiter reads a large answer itself, blocked in
// the kernel). A batch declared so and then not waited for still
// completes, only later: the transports read such answers themselves after
// a few milliseconds. Transfer declares its batch.
func (e *Engine) Await(id BatchID) error {
	b, err := e.batch(id)
	if err != nil {
		return err
	}
	b.awaited.Store(true)
	return nil
}

// Transfer runs reqs as one batch and waits for it (ctx bounds the wait; no
// deadline means the transfer timeout). On a timeout the batch is canceled
// (Cancel), and Transfer returns once no request of it touches the
// caller's memory any more: whatever it returns, the memory may then be
// reused or freed. Only when the cancellation itself times out (a
// transport that could not stop a copy in Cancel's bound) does it return
// with requests in flight; its error then wraps both timeouts.
func (e *Engine) Transfer(ctx context.Context, reqs []Request) error {
	id, err := e.AllocateBatch(len(reqs))
	if err != nil {
		return err
	}
	_ = e.Await(id) // before Submit: transports read it (Slice.SubmitterWaits)
	serr := e.Submit(id, reqs)
	if serr != nil && len(reqs) > 0 {
		if bs, _ := e.BatchStatus(id); bs.Tasks == 0 { // refused as a whole (no transport, bad request)
			_ = e.FreeBatch(id)
			return fmt.Errorf("transfer: %w", serr)
		}
	}
	bs, werr := e.Wait(ctx, id)
	if werr != nil {
		if cerr := e.Cancel(context.Background(), id); cerr != nil {
			return fmt.Errorf("transfer: %w; %w (its memory is still in use)", werr, cerr)
		}
		_ = e.FreeBatch(id)
		return werr
	}
	_ = e.FreeBatch(id)
	if bs.State != StateCompleted {
		if bs.Err != nil {
			return fmt.Errorf("transfer: %w", bs.Err)
		}
		if serr != nil {
			return fmt.Errorf("transfer: %w", serr)
		}
		return fmt.Errorf("transfer: ended %s", bs.State)
	}
	return nil
}

// Closed reports whether Close was called.
func (e *Engine) Closed() bool { return e.closed.Load() }

// Close stops the engine: the RPC server, the transports (tasks in flight
// end FAILED), the outboxes (notifications not yet sent fail); it
// unpublishes the segment and closes the metadata backend. A second Close is harmless.
func (e *Engine) Close() error {
	if e.closed.Swap(true) {
		return nil
	}
	e.closeOutboxes()
	e.stopPublisher()
	e.rpcSrv.Close()
	e.rpcPool.Close()
	e.transports.Lock()
	list := e.transports.list
	e.transports.list = nil
	e.transports.Unlock()
	var errs []error
	for _, in := range list {
		if err := in.t.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.MetadataTimeout)
	if err := e.meta.Unpublish(ctx, e.name); err != nil {
		errs = append(errs, err)
	}
	cancel()
	e.cancel()
	e.wg.Wait()
	if err := e.meta.Close(); err != nil {
		errs = append(errs, err)
	}
	e.metrics.set.Close()
	e.log.Info("engine closed", "segment", e.name)
	return errors.Join(errs...)
}
