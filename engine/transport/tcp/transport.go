package tcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/descriptor"
	"github.com/kvferry/kvferry/engine/gpu"
	"github.com/kvferry/kvferry/engine/peerauth"
	"github.com/kvferry/kvferry/engine/transport/tcp/tcpwire"
	"github.com/kvferry/kvferry/internal/netguard"
	"github.com/kvferry/kvferry/internal/ratelog"
	"github.com/kvferry/kvferry/metrics"
)

// Name is the transport's name.
const Name = "tcp"

// Defaults.
const (
	// DefaultLanes: on loopback (bench/tcp.sh ONLY=lanes, batches of 128 x
	// 1 MiB, one thread) 2 lanes wrote 1.25x what 1 did and 4 held that
	// figure (2.28 and 2.30 against 1.83 GB/s); under load 2-8 lanes all
	// beat 1. Four leave small requests a lane while large ones stripe
	// (docs/reports/benchmarks.md, Round 3).
	DefaultLanes         = 4
	DefaultStripeSize    = 512 << 10
	DefaultStatusTimeout = 30 * time.Second
	DefaultWindow        = 1024
	// MaxLanes is the most connections per peer.
	MaxLanes = 16
	// DefaultMaxConnsPerIP leaves room for many engines of one host, each
	// with up to 16 lanes.
	DefaultMaxConnsPerIP = 256
	DefaultIdleTimeout   = 5 * time.Minute
	DefaultHeaderTimeout = 10 * time.Second
	// DefaultMaxPolledConns bounds the server connections served outside
	// the network poller at once (Config.MaxPolledConns).
	DefaultMaxPolledConns = 256
	// stripeMinBytes is the least a lane gets from one submission before
	// the next lane is used.
	stripeMinBytes = 256 << 10
)

// Config configures the TCP transport. The zero value works.
type Config struct {
	// Port, when nonzero, is the data port to listen on (default: a
	// random free port of the engine's port range, as Mooncake picks it).
	Port int
	// Lanes is the number of connections per peer
	// (MC_TCP_LANES_PER_PEER, default 4, 1-16).
	Lanes int
	// StripeSize is the slice size large requests are cut into and striped
	// over the lanes (KVFERRY_TCP_STRIPE_SIZE, default 512 KiB).
	StripeSize uint64
	// StatusTimeout bounds the wait for a status frame or for progress of a
	// payload (MC_TCP_STATUS_TIMEOUT_SEC, default 30 s).
	StatusTimeout time.Duration
	// ConnectTimeout bounds a dial (default: the engine's ConnectTimeout).
	ConnectTimeout time.Duration
	// ProtoVersion is the framing used toward peers that support v2
	// (MC_TCP_PROTO=1 forces 1; default 2).
	ProtoVersion int
	// Window caps the slices in flight per lane (default 1024).
	Window int
	// GPU stages device memory through pinned bounce buffers, on the
	// initiator and the server side (nil: host memory only).
	GPU *gpu.Runtime
	// MaxConns caps connections the data port holds open (default
	// netguard.DefaultMaxConns); MaxConnsPerIP caps those from one IP
	// (default DefaultMaxConnsPerIP). A connection at a cap displaces the
	// oldest that has not sent a whole request header, else the one idle
	// longest (netguard.Limiter); it is closed at accept only while every
	// slot of the cap serves a request.
	MaxConns, MaxConnsPerIP int
	// IdleTimeout closes a server connection that sends no request for
	// this long (default DefaultIdleTimeout, longer than the client
	// lanes' own two idle minutes, so kvferry initiators close first).
	IdleTimeout time.Duration
	// HeaderTimeout bounds the arrival of the rest of a request header
	// once its first byte came (default DefaultHeaderTimeout).
	HeaderTimeout time.Duration
	// MaxPolledConns caps the server connections that run outside the
	// runtime's network poller while polling is on (internal/fdconn):
	// each holds an OS thread while it waits for a request. Connections
	// over the cap are served through the poller, their reads still
	// polled (default DefaultMaxPolledConns).
	MaxPolledConns int
}

func (c Config) withDefaults(e *engine.Engine) Config {
	if c.Lanes <= 0 {
		c.Lanes = DefaultLanes
	}
	if c.Lanes > MaxLanes {
		c.Lanes = MaxLanes
	}
	if c.StripeSize == 0 {
		c.StripeSize = DefaultStripeSize
	}
	if c.StatusTimeout <= 0 {
		c.StatusTimeout = DefaultStatusTimeout
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = e.Config().ConnectTimeout
	}
	if c.ProtoVersion != 1 {
		c.ProtoVersion = 2
	}
	if c.Window <= 0 {
		c.Window = DefaultWindow
	}
	if c.MaxConns <= 0 {
		c.MaxConns = netguard.DefaultMaxConns()
	}
	if c.MaxConnsPerIP <= 0 {
		c.MaxConnsPerIP = DefaultMaxConnsPerIP
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.HeaderTimeout <= 0 {
		c.HeaderTimeout = DefaultHeaderTimeout
	}
	if c.MaxPolledConns <= 0 {
		c.MaxPolledConns = DefaultMaxPolledConns
	}
	return c
}

// Transport is the TCP transport of one engine.
type Transport struct {
	e      *engine.Engine
	cfg    Config
	log    *slog.Logger
	srv    *server
	port   int
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed atomic.Bool

	peers struct {
		sync.Mutex
		m map[string]*peerConns // by "host:port"
	}
	last         atomic.Pointer[peerHit] // peerFor's last answer
	logs         ratelog.Every
	sent, failed atomic.Uint64
	polled       atomic.Uint64 // slices read by their waiter (conn.Poll)
	inlined      atomic.Uint64 // slices written by their submitter (lane.submit)
	obs          *metrics.Server
	// inc is the engine's incarnation (descriptor.Segment.Incarnation),
	// which the server's answer to an identity hello names.
	inc [tcpwire.IncarnationSize]byte
	// staleHellos counts hellos refused for another incarnation (server
	// side); staleDials the connections that found another incarnation
	// behind a peer's data port, and rereads the descriptor re-reads they
	// caused (client side).
	staleHellos, staleDials, rereads atomic.Uint64

	// Test hooks, set before any traffic (export_test.go): beforeServe runs
	// before the server serves a request, beforeWrite before each piece a
	// lane writes (writeAll).
	beforeServe func(h tcpwire.Header)
	beforeWrite func()
}

// New starts the TCP transport for e: it listens on a random port of the
// engine's port range, on the engine's bind address.
func New(e *engine.Engine, cfg Config) (*Transport, error) {
	cfg = cfg.withDefaults(e)
	ec := e.Config()
	var ln net.Listener
	port := cfg.Port
	var err error
	if port != 0 {
		ln, err = net.Listen("tcp", net.JoinHostPort(e.BindIP(), strconv.Itoa(port)))
	} else {
		ln, port, err = engine.ListenRandomPort(e.BindIP(), ec.MinRPCPort, ec.MaxRPCPort)
	}
	if err != nil {
		return nil, fmt.Errorf("tcp transport: %w", err)
	}
	t := &Transport{e: e, cfg: cfg, log: e.Logger().With("transport", Name), port: port, obs: e.MetricSet().Server(Name)}
	t.inc, _ = descriptor.ParseIncarnation(e.Incarnation())
	t.ctx, t.cancel = context.WithCancel(e.Context())
	t.peers.m = make(map[string]*peerConns)
	t.srv = &server{t: t, ln: ln, conns: make(map[net.Conn]struct{}), limit: netguard.NewLimiter(cfg.MaxConns, cfg.MaxConnsPerIP).WithFrames(tcpwire.HeaderSize, wholeHeader),
		guard: peerauth.NewGuard(ec.Auth, peerauth.RoleData, 0, t.log)}
	t.srv.wg.Add(1)
	go t.srv.runAccept()
	return t, nil
}

// Name returns "tcp".
func (t *Transport) Name() string { return Name }

// Port returns the data port.
func (t *Transport) Port() int { return t.port }

// Describe publishes the data port and protocol version, and that the
// data port answers the identity hello (descriptor.FeatureDataHello). The
// protocol Mooncake peers see stays that of a transport described before
// (rdma).
func (t *Transport) Describe(seg *descriptor.Segment) {
	if seg.Protocol == "" {
		seg.Protocol = descriptor.ProtocolTCP
	}
	seg.TCPDataPort = t.port
	seg.TCPProtoVersion = descriptor.TCPProtoV2
	if seg.Incarnation != "" && !seg.Has(descriptor.FeatureDataHello) {
		seg.Features = append(seg.Features, descriptor.FeatureDataHello)
	}
}

// Reaches reports whether p serves TCP.
func (t *Transport) Reaches(p *engine.Peer) bool {
	d := p.Descriptor()
	if d == nil || d.TCPDataPort <= 0 {
		return false
	}
	if strings.Contains(d.Protocol, descriptor.ProtocolTCP) {
		return true
	}
	for _, n := range d.Transports {
		if n == Name {
			return true
		}
	}
	return false
}

// SliceSize returns the stripe size.
func (t *Transport) SliceSize() uint64 { return t.cfg.StripeSize }

// GathersPieces reports that tcp sends a slice of several local pieces as
// one frame (engine.Gatherer): a write's payload is written from the
// pieces with the frame's header in one writev, a read's payload is read
// into them in order. The engine gives it such slices of host memory only.
func (t *Transport) GathersPieces() bool { return true }

// Stats are the transport's counters.
type Stats struct {
	// SlicesSent and SlicesFailed count client-side slices.
	SlicesSent, SlicesFailed uint64
	// Served and Rejected count server-side requests.
	Served, Rejected uint64
	// ConnsRefused counts server connections closed at accept for a cap
	// (every slot serving a request); ConnsDisplaced those closed to make
	// room for a new one (netguard.Limiter); ServerConns is the number open
	// now.
	ConnsRefused, ConnsDisplaced uint64
	ServerConns                  int
	// Conns is the number of open client connections.
	Conns int
	// SlicesPolled counts client-side slices whose answer the goroutine
	// waiting for them read itself (engine.Poller), not the lane's reader.
	SlicesPolled uint64
	// SlicesInline counts client-side slices written by the goroutine that
	// submitted them (Submit), not by the lane's writer.
	SlicesInline uint64
	// ServerConnsPolled is the number of open server connections running
	// outside the network poller (at most Config.MaxPolledConns).
	ServerConnsPolled int
	// StaleRefused counts data connections refused because their identity
	// hello expected another incarnation of this segment.
	StaleRefused uint64
	// StaleDials counts connections that found another incarnation (or a
	// server without identity) behind a peer's data port; Rereads the
	// descriptor re-reads they caused.
	StaleDials, Rereads uint64
}

// Stats returns the transport's counters.
func (t *Transport) Stats() Stats {
	s := Stats{SlicesSent: t.sent.Load(), SlicesFailed: t.failed.Load(), Served: t.srv.served.Load(), Rejected: t.srv.rejected.Load(),
		ConnsRefused: t.srv.limit.Refused(), ConnsDisplaced: t.srv.limit.Displaced(), ServerConns: t.srv.limit.Open(), SlicesPolled: t.polled.Load(),
		SlicesInline: t.inlined.Load(), ServerConnsPolled: int(t.srv.detached.Load()),
		StaleRefused: t.staleHellos.Load(), StaleDials: t.staleDials.Load(), Rereads: t.rereads.Load()}
	t.peers.Lock()
	for _, pc := range t.peers.m {
		for _, l := range pc.lanes {
			if l.connected.Load() {
				s.Conns++
			}
		}
	}
	t.peers.Unlock()
	return s
}

func (t *Transport) logReject(peer string, h tcpwire.Header) {
	t.warn("reject", "tcp request outside registered memory refused", "peer", peer, "addr", h.Addr, "bytes", h.Size, "op", opName(h.Write))
}

// warn logs at Warn, at most one line per kind every few seconds (with the
// count of lines held back), so a hostile peer cannot flood the log.
func (t *Transport) warn(kind, msg string, args ...any) {
	if ok, n := t.logs.Allow(kind); ok {
		if n > 0 {
			args = append(args, "suppressed", n)
		}
		t.log.Warn(msg, args...)
	}
}

func opName(w bool) string {
	if w {
		return "write"
	}
	return "read"
}

// peerConns holds the lanes to one peer data endpoint, bound to one
// incarnation of the peer ("" for a peer without identity: Mooncake).
type peerConns struct {
	addr  string
	v2    bool
	inc   string
	lanes []*lane
	next  atomic.Uint32
	// rr holds the slices waiting for the descriptor re-read in progress
	// after a stale incarnation (lane.reread); nil when none runs.
	rr struct {
		sync.Mutex
		pending []*engine.Slice
	}
}

// peerHit is the peer last looked up, with its descriptor then.
type peerHit struct {
	p  *engine.Peer
	d  *descriptor.Segment
	pc *peerConns
}

// peerFor returns the lanes to p's data endpoint, made afresh when the
// descriptor names another framing or incarnation there than the lanes
// serve; the slices still queued on the replaced lanes come back in moved
// (for the caller to send on the new ones).
func (t *Transport) peerFor(p *engine.Peer) (pc *peerConns, moved []*engine.Slice, err error) {
	d := p.Descriptor()
	// The same peer with the same descriptor has the same lanes: no
	// address to format, no lock (one peer's small requests, mostly).
	if h := t.last.Load(); h != nil && h.p == p && h.d == d && !t.closed.Load() {
		return h.pc, nil, nil
	}
	host := p.Endpoint.IPOrHostName
	if host == "" {
		return nil, nil, fmt.Errorf("segment %q has no host: %w", p.Name, engine.ErrInvalidArgument)
	}
	addr := net.JoinHostPort(host, strconv.Itoa(d.TCPDataPort))
	v2 := d.TCPProtoVersion >= 2 && t.cfg.ProtoVersion >= 2
	inc := ""
	if _, ok := descriptor.ParseIncarnation(d.Incarnation); ok && d.Has(descriptor.FeatureDataHello) {
		inc = d.Incarnation
	}
	t.peers.Lock()
	defer t.peers.Unlock()
	if t.closed.Load() {
		return nil, nil, engine.ErrClosed
	}
	pc = t.peers.m[addr]
	if pc == nil || pc.v2 != v2 || pc.inc != inc {
		if pc != nil {
			for _, l := range pc.lanes {
				moved = append(moved, l.stopTake()...)
			}
		}
		t.pruneLocked()
		pc = &peerConns{addr: addr, v2: v2, inc: inc}
		for i := 0; i < t.cfg.Lanes; i++ {
			l := newLane(t, addr, p, v2, inc)
			l.pc = pc
			pc.lanes = append(pc.lanes, l)
		}
		t.peers.m[addr] = pc
	}
	t.last.Store(&peerHit{p: p, d: d, pc: pc})
	return pc, moved, nil
}

// pruneLocked forgets the endpoints whose lanes all retired (idle past
// idleClose, or their peer closed the connections), so that peers that
// restart on new ports do not pile up lanes here for good; it runs when a
// new endpoint is added, the only time the table grows. A forgotten
// endpoint is made afresh on its next use; a submitter that still holds it
// restarts its lanes, which retire again when idle (and stop with the
// transport's context). The caller holds t.peers.
func (t *Transport) pruneLocked() {
	for addr, pc := range t.peers.m {
		idle := true
		for _, l := range pc.lanes {
			if !l.retired() {
				idle = false
				break
			}
		}
		if idle {
			delete(t.peers.m, addr)
		}
	}
}

// Endpoints returns the number of peer data endpoints the transport holds
// lanes for.
func (t *Transport) Endpoints() int {
	t.peers.Lock()
	defer t.peers.Unlock()
	return len(t.peers.m)
}

// Submit queues slices on the peer's lanes. Small submissions all go to the
// first lane, so that concurrent small requests share system calls on both
// sides; larger ones use as many lanes as give each at least 256 KiB, and
// large ones are striped over every lane.
//
// A lane's share that puts little on the wire from here (READ headers,
// small writes) is written by the submitter itself when the lane is idle.
// When the submitter waits for the batch right away (Slice.SubmitterWaits)
// it also writes the last share itself, however large, after handing the
// others to their lanes' writers: the lanes still write in parallel, and
// one writer goroutine fewer is woken (issue 18: a single 1 MiB store put).
func (t *Transport) Submit(p *engine.Peer, slices []*engine.Slice) {
	if t.closed.Load() {
		failAll(slices, engine.ErrClosed)
		return
	}
	pc, moved, err := t.peerFor(p)
	if err != nil {
		failAll(slices, err)
		return
	}
	if len(moved) > 0 {
		slices = append(slices[:len(slices):len(slices)], t.movable(p, moved)...)
	}
	var total uint64
	for _, s := range slices {
		total += s.Length
	}
	n := int(total / stripeMinBytes)
	n = max(1, min(n, len(pc.lanes), len(slices)))
	start := 0
	if n > 1 || total >= stripeMinBytes {
		start = pc.startLane(n)
	}
	per := (len(slices) + n - 1) / n
	last := (len(slices) - 1) / per // the last share's index
	waits := slices[0].SubmitterWaits()
	for k := 0; k <= last; k++ {
		lo, hi := k*per, min((k+1)*per, len(slices))
		share := slices[lo:hi]
		pc.lanes[(start+k)%len(pc.lanes)].submit(share, wireBytes(share) <= inlineMaxBytes || (waits && k == last))
	}
}

// startLane picks the first of the n consecutive lanes a large submission
// uses: the first group of n lanes, counting from lane 0, that are all
// free (nothing queued, written or awaited), else the next lane in turn.
// So a caller that moves one large request after another (a store client's
// 1 MiB puts and gets) keeps using the same connections, whose writers and
// readers on both sides are still polling from the last one, instead of
// waking parked ones on each request (issue 38: with every request
// starting one lane further, 4 lanes and 2 stripes, each connection sat
// idle every other request); concurrent submissions, which find those
// lanes busy, still spread over the others.
func (pc *peerConns) startLane(n int) int {
	if n < len(pc.lanes) {
		for first := 0; first+n <= len(pc.lanes); first += n {
			free := true
			for _, l := range pc.lanes[first : first+n] {
				if !l.free() {
					free = false
					break
				}
			}
			if free {
				return first
			}
		}
	}
	return int(pc.next.Add(1))
}

// movable returns those of ss, queued on lanes that peerFor replaced, that
// p's registered memory (as its descriptor now says) holds; the others
// fail.
func (t *Transport) movable(p *engine.Peer, ss []*engine.Slice) []*engine.Slice {
	keep := make([]*engine.Slice, 0, len(ss)) // ss may be the caller's
	for _, s := range ss {
		if p.Contains(s.Remote, s.Length) {
			keep = append(keep, s)
			continue
		}
		t.failed.Add(1)
		s.Complete(&engine.TransferError{Op: s.Op, Peer: p.Name, Transport: Name, Addr: s.Remote, Length: s.Length,
			Err: fmt.Errorf("the peer's descriptor changed (a restart) and no longer registers the range: %w", engine.ErrAddressNotRegistered)})
	}
	return keep
}

// requeue queues ss on a lane of p's endpoint, for its writer (never
// written by the calling goroutine, which may be a lane's reader or
// writer).
func (t *Transport) requeue(p *engine.Peer, ss []*engine.Slice) {
	if len(ss) == 0 {
		return
	}
	pc, moved, err := t.peerFor(p)
	if err != nil {
		failAll(ss, err)
		return
	}
	ss = append(ss, t.movable(p, moved)...)
	l := pc.lanes[int(pc.next.Add(1))%len(pc.lanes)]
	l.enqueue(ss)
	l.wake()
}

// wireBytes is what writing ss puts on the wire from this side: a header
// per slice and the payloads of writes (a READ's payload comes back).
func wireBytes(ss []*engine.Slice) uint64 {
	n := uint64(len(ss)) * tcpwire.HeaderSize
	for _, s := range ss {
		if s.Op == engine.OpWrite {
			n += s.Length
		}
	}
	return n
}

func failAll(slices []*engine.Slice, err error) {
	for _, s := range slices {
		s.Complete(err)
	}
}

// AbortCanceled kills every connection that reads or writes a slice of a
// canceled batch (engine.Aborter): its reader fails those slices with
// ErrCanceled at once instead of waiting up to StatusTimeout for a stalled
// peer, once the writer has left their payloads; the other slices on it
// are retried once, as after a lost connection.
func (t *Transport) AbortCanceled() {
	t.peers.Lock()
	var lanes []*lane
	for _, pc := range t.peers.m {
		lanes = append(lanes, pc.lanes...)
	}
	t.peers.Unlock()
	for _, l := range lanes {
		l.abortCanceled()
	}
}

var _ engine.Aborter = (*Transport)(nil)

// ReleasesSlices marks that the transport touches no slice after
// completing it unless it holds it (engine.Releaser): the writer holds the
// chunk it writes, the reader clears reading before it completes a slice.
func (t *Transport) ReleasesSlices() {}

var _ engine.Releaser = (*Transport)(nil)

// Close stops the server and every lane; slices in flight fail.
func (t *Transport) Close() error {
	if t.closed.Swap(true) {
		return nil
	}
	t.cancel()
	t.srv.close()
	t.peers.Lock()
	var lanes []*lane
	for _, pc := range t.peers.m {
		lanes = append(lanes, pc.lanes...)
	}
	t.peers.m = map[string]*peerConns{}
	t.peers.Unlock()
	for _, l := range lanes {
		l.stop()
	}
	t.wg.Wait()
	return nil
}

// ErrStaleIncarnation is returned (wrapped, beside engine.ErrPeerGone)
// when a peer's data port is served by another incarnation of the segment
// than the one the descriptor names, or by a server that does not answer
// the identity hello: the peer restarted, or another process took its old
// port. No request is sent on such a connection.
var ErrStaleIncarnation = errors.New("tcp data port served by another incarnation of the segment")

// errConn marks connection-level failures, which are retried once on a
// fresh connection (an idle pooled connection the peer closed, say).
var errConn = engine.ErrPeerGone
