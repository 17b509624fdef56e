// Package rdma is the RDMA transport: one-sided READ and WRITE over RC
// queue pairs on InfiniBand or RoCE NICs, compatible with Mooncake's RDMA
// transport (descriptor devices, priority matrix and per-device keys; the
// Connection handshake on the RPC port). libibverbs is reached only
// through package ibv, opened at run time: on a host without it, or
// without NICs, New fails with engine.ErrNotSupported and the engine uses
// its other transports.
//
// Data path: the engine cuts requests into slices (MC_SLICE_SIZE); each
// slice picks a local NIC from the priority matrix row of its buffer's
// location and a peer NIC from the peer's matrix, so large requests stripe
// over all NICs. Slices to one endpoint (local NIC, peer NIC) are posted
// as chains with one doorbell, spread over the endpoint's QPs, with only
// every SignalEvery-th and the last request signalled. One poller per NIC
// drains the CQ, spinning briefly while work is in flight and parking on
// the completion channel otherwise. A failed completion retires the
// endpoint (its QPs go to ERROR; in-flight work flushes back) and the
// slice is retried on another path, up to MC_RETRY_CNT times and never
// past the engine's transfer deadline; a new endpoint (new QPs, a new
// handshake) is made on the next use, so a restarted peer is reconnected.
package rdma

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/descriptor"
	"github.com/kvferry/kvferry/engine/rpc"
	"github.com/kvferry/kvferry/engine/transport/rdma/ibv"
)

// Name is the transport's name.
const Name = "rdma"

// memReg is one registered region and its memory region on every NIC
// (mrs[i] belongs to nics[i]; nil where registration was not possible).
type memReg struct {
	addr     uintptr
	length   uint64
	location string
	remote   bool
	mrs      []*ibv.MR
}

func (m *memReg) end() uint64 { return uint64(m.addr) + m.length }

// Transport is the RDMA transport of one engine.
type Transport struct {
	e          *engine.Engine
	cfg        Config
	log        *slog.Logger
	nics       []*nic
	matrix     Matrix
	serverName string
	deadline   time.Duration
	ctx        context.Context
	cancel     context.CancelFunc
	wg         sync.WaitGroup
	closed     atomic.Bool
	rr         atomic.Uint64
	unhook     []func()

	regs struct {
		sync.Mutex
		snap atomic.Pointer[[]*memReg] // sorted by address
	}
	peers struct {
		sync.Mutex
		m map[*descriptor.Segment]*peerInfo
	}
}

// peerInfo is what routing needs from a peer descriptor, parsed once.
type peerInfo struct {
	server string // NIC path server part
	matrix Matrix
	index  map[string]int // device name -> index in Devices
}

// Available lists the usable RDMA devices (libibverbs loaded, device list
// read, filtered by cfg.Devices), or says why there are none.
func Available(cfg Config) ([]string, error) {
	if err := ibv.Load(cfg.Library); err != nil {
		return nil, fmt.Errorf("%w: %w", engine.ErrNotSupported, err)
	}
	names, err := ibv.DeviceNames()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", engine.ErrNotSupported, err)
	}
	names = filterDevices(names, cfg.Devices)
	if len(names) == 0 {
		return nil, fmt.Errorf("%w: no RDMA device (filter %v)", engine.ErrNotSupported, cfg.Devices)
	}
	return names, nil
}

func filterDevices(names, keep []string) []string {
	if len(keep) == 0 {
		return names
	}
	var out []string
	for _, n := range names {
		for _, k := range keep {
			if n == k {
				out = append(out, n)
				break
			}
		}
	}
	return out
}

// New opens the NICs the priority matrix names (cfg.Matrix, or one
// discovered from sysfs), registers the engine's existing regions on them
// and answers Connection requests on the engine's RPC port. It fails with
// an error wrapping engine.ErrNotSupported when no NIC can be used.
func New(e *engine.Engine, cfg Config) (*Transport, error) {
	cfg = cfg.withDefaults()
	names, err := Available(cfg)
	if err != nil {
		return nil, err
	}
	t := &Transport{e: e, cfg: cfg, log: e.Logger().With("transport", Name), deadline: e.Config().TransferTimeout}
	t.ctx, t.cancel = context.WithCancel(e.Context())
	t.peers.m = map[*descriptor.Segment]*peerInfo{}
	t.serverName = e.SegmentName()
	if cfg.ServerName != "" {
		if _, port, err := net.SplitHostPort(e.SegmentName()); err == nil {
			t.serverName = net.JoinHostPort(cfg.ServerName, port)
		} else {
			t.serverName = cfg.ServerName
		}
	}
	var m Matrix
	if cfg.Matrix != "" {
		if m, err = ParseMatrix(cfg.Matrix); err != nil {
			t.cancel()
			return nil, err
		}
		m = m.Filter(func(d string) bool { return contains(names, d) })
	} else {
		nics := make([]NIC, len(names))
		for i, n := range names {
			nics[i] = ReadNIC(cfg.SysFS, n, int(cfg.Port), -1)
		}
		gpus := cfg.GPUs
		if gpus == nil {
			gpus = GPUsFromSysfs(cfg.SysFS)
		}
		m = Discover(cfg.SysFS, nics, gpus)
	}
	var opened []string
	for _, name := range m.Devices() {
		n, err := openNIC(t, len(t.nics), name)
		if err != nil {
			t.log.Warn("rdma device disabled", "device", name, "err", err)
			continue
		}
		t.nics = append(t.nics, n)
		opened = append(opened, name)
	}
	if len(t.nics) == 0 {
		t.cancel()
		return nil, fmt.Errorf("%w: no RDMA device could be opened (of %v)", engine.ErrNotSupported, m.Devices())
	}
	t.matrix = m.Filter(func(d string) bool { return contains(opened, d) })
	empty := []*memReg{}
	t.regs.snap.Store(&empty)
	if err := t.RegisterRegions(e.Regions()); err != nil {
		t.Close()
		return nil, err
	}
	for _, typ := range []rpc.Type{rpc.TypeConnection, rpc.TypeLegacy} {
		remove, err := e.HandleRPC(typ, t.handleConnection)
		if err != nil {
			t.Close()
			return nil, err
		}
		t.unhook = append(t.unhook, remove)
	}
	for _, n := range t.nics {
		t.log.Info("rdma device", "device", n.name, "gid", n.gid.String(), "gid_index", n.gidIndex, "lid", n.port.LID,
			"mtu", n.mtu.Bytes(), "numa", n.info.NUMA, "pci", n.info.PCI, "netdev", n.info.Netdev)
	}
	t.log.Info("rdma transport installed", "devices", opened, "priority_matrix", string(t.matrix.JSON()), "nic_path_server", t.serverName)
	return t, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Name returns "rdma".
func (t *Transport) Name() string { return Name }

// SliceSize returns the slice size.
func (t *Transport) SliceSize() uint64 { return t.cfg.SliceSize }

// Matrix returns the local priority matrix (only opened NICs).
func (t *Transport) Matrix() Matrix { return t.matrix }

// Devices lists the opened NICs in descriptor order.
func (t *Transport) Devices() []string {
	out := make([]string, len(t.nics))
	for i, n := range t.nics {
		out[i] = n.name
	}
	return out
}

// ---- memory ----

// RegisterRegions registers rs on every NIC (engine.MemoryRegistrar). A
// region whose location is "*" takes the NUMA node of its first page.
func (t *Transport) RegisterRegions(rs []*engine.Region) error {
	if len(rs) == 0 {
		return nil
	}
	var added []*memReg
	undo := func() {
		for _, m := range added {
			t.dereg(m)
		}
	}
	for _, r := range rs {
		m := &memReg{addr: r.Addr, length: r.Length, location: resolveLocation(r.Location, r.Addr), remote: r.RemoteAccessible,
			mrs: make([]*ibv.MR, len(t.nics))}
		access := ibv.AccessLocalWrite
		if r.RemoteAccessible {
			access |= ibv.AccessRemoteWrite | ibv.AccessRemoteRead
		}
		for i, n := range t.nics {
			mr, err := n.pd.RegMR(r.Addr, r.Length, access)
			if err != nil {
				t.dereg(m)
				undo()
				return fmt.Errorf("rdma register on %s: %w", n.name, err)
			}
			m.mrs[i] = mr
		}
		added = append(added, m)
	}
	t.regs.Lock()
	old := *t.regs.snap.Load()
	next := append(append([]*memReg(nil), old...), added...)
	sort.Slice(next, func(i, j int) bool { return next[i].addr < next[j].addr })
	t.regs.snap.Store(&next)
	t.regs.Unlock()
	return nil
}

// UnregisterRegions deregisters rs on every NIC: peers' work on them fails
// with remote access errors from then on.
func (t *Transport) UnregisterRegions(rs []*engine.Region) {
	drop := map[uintptr]bool{}
	for _, r := range rs {
		drop[r.Addr] = true
	}
	t.regs.Lock()
	old := *t.regs.snap.Load()
	next := make([]*memReg, 0, len(old))
	var gone []*memReg
	for _, m := range old {
		if drop[m.addr] {
			gone = append(gone, m)
		} else {
			next = append(next, m)
		}
	}
	t.regs.snap.Store(&next)
	t.regs.Unlock()
	for _, m := range gone {
		t.dereg(m)
	}
}

func (t *Transport) dereg(m *memReg) {
	for i, mr := range m.mrs {
		if mr != nil {
			if err := mr.Dereg(); err != nil {
				t.log.Warn("rdma deregister failed", "device", t.nics[i].name, "addr", m.addr, "err", err)
			}
			m.mrs[i] = nil
		}
	}
}

// region returns the registration holding [addr, addr+n), or nil.
func (t *Transport) region(addr uintptr, n uint64) *memReg {
	rs := *t.regs.snap.Load()
	i := sort.Search(len(rs), func(i int) bool { return rs[i].addr > addr }) - 1
	if i < 0 {
		return nil
	}
	m := rs[i]
	if uint64(addr)+n > m.end() || uint64(addr)+n < uint64(addr) {
		return nil
	}
	return m
}

// resolveLocation turns "*" into "cpu:<node of the first page>" (as
// Mooncake does for host memory; GPU memory keeps its "cuda:N"), and keeps
// any other location.
func resolveLocation(loc string, addr uintptr) string {
	if loc != "*" && loc != "" {
		return loc
	}
	page := addr &^ 4095
	status := int32(-1)
	pages := [1]uintptr{page}
	_, _, errno := unix.Syscall6(unix.SYS_MOVE_PAGES, 0, 1, uintptr(unsafePointer(&pages[0])), 0, uintptr(unsafePointer(&status)), 0)
	if errno != 0 || status < 0 {
		return "*"
	}
	return fmt.Sprintf("cpu:%d", status)
}

// ---- descriptor ----

// Describe publishes the devices, the priority matrix and each buffer's
// location and keys in device order; the protocol becomes "rdma".
func (t *Transport) Describe(seg *descriptor.Segment) {
	seg.Protocol = descriptor.ProtocolRDMA
	if t.serverName != seg.Name {
		seg.RDMAServerName = t.serverName
	}
	seg.Devices = make([]descriptor.Device, len(t.nics))
	for i, n := range t.nics {
		seg.Devices[i] = descriptor.Device{Name: n.name, LID: n.port.LID, GID: n.gid.String()}
	}
	seg.PriorityMatrix = t.matrix.JSON()
	for i := range seg.Buffers {
		b := &seg.Buffers[i]
		m := t.region(uintptr(b.Addr), b.Length)
		if m == nil || uint64(m.addr) != b.Addr {
			continue
		}
		b.Name = m.location
		b.LKey = make([]uint32, len(m.mrs))
		for j, mr := range m.mrs {
			if mr != nil {
				b.LKey[j] = mr.LKey
			}
		}
		if m.remote {
			b.RKey = make([]uint32, len(m.mrs))
			for j, mr := range m.mrs {
				if mr != nil {
					b.RKey[j] = mr.RKey
				}
			}
		}
	}
}

// Reaches reports whether p publishes RDMA devices and a local NIC is up.
func (t *Transport) Reaches(p *engine.Peer) bool {
	if p.Local() || t.closed.Load() {
		return false
	}
	d := p.Descriptor()
	if d == nil || len(d.Devices) == 0 {
		return false
	}
	if d.Protocol != descriptor.ProtocolRDMA && !contains(d.Transports, Name) && !strings.Contains(d.Protocol, descriptor.ProtocolRDMA) {
		return false
	}
	for _, n := range t.nics {
		if n.active.Load() {
			return true
		}
	}
	return false
}

func (t *Transport) peerInfo(d *descriptor.Segment) *peerInfo {
	t.peers.Lock()
	defer t.peers.Unlock()
	if pi := t.peers.m[d]; pi != nil {
		return pi
	}
	pi := &peerInfo{server: d.Name, index: map[string]int{}}
	if d.RDMAServerName != "" {
		pi.server = d.RDMAServerName
	}
	for i, dev := range d.Devices {
		pi.index[dev.Name] = i
	}
	if len(d.PriorityMatrix) > 0 {
		if m, err := ParseMatrix(string(d.PriorityMatrix)); err == nil {
			pi.matrix = m
		}
	}
	if len(pi.matrix) == 0 {
		names := make([]string, len(d.Devices))
		for i, dev := range d.Devices {
			names[i] = dev.Name
		}
		pi.matrix = Matrix{"*": {names, {}}}
	}
	if len(t.peers.m) > 4096 {
		clear(t.peers.m)
	}
	t.peers.m[d] = pi
	return pi
}

// peerGIDFromDescriptor finds a peer NIC's GID in the cached descriptors
// (for peers whose handshake omits it).
func (t *Transport) peerGIDFromDescriptor(peerPath string) string {
	server, nicName, _ := splitNICPath(peerPath)
	t.peers.Lock()
	defer t.peers.Unlock()
	for d, pi := range t.peers.m {
		if pi.server == server {
			if i, ok := pi.index[nicName]; ok {
				return d.Devices[i].GID
			}
		}
	}
	return ""
}

// ---- data path ----

// Submit routes each slice to a (local NIC, peer NIC) endpoint and posts
// or queues it; it never waits for the network (a handshake runs in its
// own goroutine).
func (t *Transport) Submit(p *engine.Peer, slices []*engine.Slice) {
	if t.closed.Load() {
		for _, s := range slices {
			s.Complete(engine.ErrClosed)
		}
		return
	}
	ops := make([]op, len(slices))
	list := make([]*op, len(slices))
	for i, s := range slices {
		ops[i] = op{s: s, peer: p}
		list[i] = &ops[i]
	}
	t.dispatch(list)
}

// dispatch routes ops and hands them to their endpoints, one enqueue per
// endpoint.
func (t *Transport) dispatch(ops []*op) {
	groups := map[*endpoint][]*op{}
	var order []*endpoint
	for _, o := range ops {
		ep, err := t.route(o)
		if err != nil {
			o.s.Complete(err)
			continue
		}
		if groups[ep] == nil {
			order = append(order, ep)
		}
		groups[ep] = append(groups[ep], o)
	}
	for _, ep := range order {
		ep.enqueue(groups[ep])
	}
}

// route picks o's local NIC and peer NIC (Mooncake's selectDevice on both
// sides: the buffer's location row, preferred first; retry n walks the
// rows), its keys, and the endpoint between them.
func (t *Transport) route(o *op) (*endpoint, error) {
	s := o.s
	if o.local == nil {
		o.local = t.region(s.Local, s.Length)
		if o.local == nil {
			return nil, fmt.Errorf("rdma: local %#x+%d is not registered with the NICs: %w", s.Local, s.Length, engine.ErrAddressNotRegistered)
		}
	}
	d := o.peer.Descriptor()
	buf, ok := d.Find(s.Remote, s.Length)
	if !ok || len(buf.RKey) == 0 {
		return nil, fmt.Errorf("rdma: remote %#x+%d on %q is in no buffer with an rkey: %w", s.Remote, s.Length, o.peer.Name, engine.ErrAddressNotRegistered)
	}
	pi := t.peerInfo(d)
	rr := -1
	if t.cfg.RoundRobin {
		rr = int(t.rr.Add(1))
	}
	localName := t.matrix.Select(o.local.location, o.tries, rr, func(name string) bool {
		i := t.nicIndex(name)
		return i >= 0 && t.nics[i].active.Load() && o.local.mrs[i] != nil
	})
	if localName == "" {
		return nil, fmt.Errorf("rdma: no active NIC for location %q: %w", o.local.location, engine.ErrNotSupportedTransport)
	}
	n := t.nics[t.nicIndex(localName)]
	peerName := pi.matrix.Select(buf.Name, o.tries, rr, func(name string) bool {
		i, ok := pi.index[name]
		return ok && i < len(buf.RKey)
	})
	if peerName == "" {
		return nil, fmt.Errorf("rdma: peer %q offers no NIC for %q: %w", o.peer.Name, buf.Name, engine.ErrNotSupportedTransport)
	}
	o.nic = n
	o.lkey = o.local.mrs[n.idx].LKey
	o.rkey = buf.RKey[pi.index[peerName]]
	return n.endpoint(nicPath(pi.server, peerName), o.peer.Endpoint.Addr())
}

func (t *Transport) nicIndex(name string) int {
	for i, n := range t.nics {
		if n.name == name {
			return i
		}
	}
	return -1
}

// fail retries o on another path when that is allowed and time remains,
// and completes it with err otherwise.
func (t *Transport) fail(o *op, err error, retryable bool) {
	if o == nil {
		return
	}
	if retryable && !t.closed.Load() && !o.s.Canceled() && o.tries < t.cfg.RetryCount && time.Since(o.s.Posted) < t.deadline {
		o.tries++
		if o.nic != nil {
			o.nic.slicesRetried.Add(1)
		}
		t.e.MetricSet().Conn(Name, o.peer.Name).Retries.Add(1)
		t.dispatch([]*op{o})
		return
	}
	if o.nic != nil {
		o.nic.slicesFailed.Add(1)
	}
	if o.s.Canceled() {
		o.s.Complete(engine.ErrCanceled)
		return
	}
	if t.closed.Load() {
		err = fmt.Errorf("%w: %w", engine.ErrClosed, err)
	}
	o.s.Complete(&engine.TransferError{Op: o.s.Op, Peer: o.peer.Name, Transport: Name, Addr: o.s.Remote, Length: o.s.Length, Err: err})
}

// failWC handles a failed work completion: a flush or a path error retries
// elsewhere; a remote access error retries once after re-reading the
// peer's descriptor (its keys may have changed when it restarted).
func (t *Transport) failWC(o *op, e *wcError) {
	switch e.status {
	case ibv.WCRemAccessErr, ibv.WCRemInvReqErr:
		if o.accessRetried {
			t.fail(o, e, false)
			return
		}
		o.accessRetried = true
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			ctx, cancel := context.WithTimeout(t.ctx, t.e.Config().MetadataTimeout)
			defer cancel()
			if _, err := t.e.OpenSegmentNoCache(ctx, o.peer.Name); err != nil {
				t.fail(o, fmt.Errorf("%w (descriptor refresh: %v)", e, err), false)
				return
			}
			if p := t.e.Peer(o.peer.ID); p != nil {
				o.peer = p
			}
			t.fail(o, e, true)
		}()
	case ibv.WCLocProtErr, ibv.WCLocLenErr:
		t.fail(o, e, false)
	default:
		t.fail(o, e, true)
	}
}

// flushPending posts work queued on n's endpoints once credits freed up.
func (t *Transport) flushPending(n *nic) {
	for _, ep := range n.endpoints() {
		ep.mu.Lock()
		var failed []*op
		if ep.state == epConnected && len(ep.pending) > 0 {
			failed = ep.postLocked()
		}
		ep.mu.Unlock()
		for _, o := range failed {
			t.fail(o, errEndpointGone, true)
		}
	}
}

// ---- handshake (passive side) ----

// handleConnection answers a peer's Connection request on the RPC port
// (Mooncake's onSetupRdmaConnections): it finds the local NIC the request
// names, brings the endpoint's QPs to RTS toward the peer's, and replies
// with ours; a refusal is a reply whose reply_msg says why. It is
// registered with the engine's RPC dispatch (engine.HandleRPC).
func (t *Transport) handleConnection(_ context.Context, body []byte, from net.Addr) ([]byte, error) {
	reject := func(msg string) ([]byte, error) {
		t.log.Warn("rdma handshake refused", "from", from, "reason", msg)
		return encodeHandshake(&handshake{ReplyMsg: msg}), nil
	}
	peer, err := decodeHandshake(body)
	if err != nil {
		return reject("Malformed handshake: " + err.Error())
	}
	if t.closed.Load() {
		return reject("rdma transport closed")
	}
	_, localNIC, ok := splitNICPath(peer.PeerNICPath)
	if !ok {
		return reject("Invalid peer_nic_path in handshake: " + peer.PeerNICPath)
	}
	i := t.nicIndex(localNIC)
	if i < 0 {
		return reject("Local RDMA context not found for handshake NIC: " + localNIC)
	}
	n := t.nics[i]
	if peer.PeerNICPath != n.nicPath() {
		return reject(fmt.Sprintf("Invalid argument: peer nic path inconsistency, expect %s, while got %s", n.nicPath(), peer.PeerNICPath))
	}
	if _, _, ok := splitNICPath(peer.LocalNICPath); !ok {
		return reject("Parse peer nic path failed: " + peer.LocalNICPath)
	}
	for attempt := 0; attempt < 2; attempt++ {
		ep, err := n.endpoint(peer.LocalNICPath, "")
		if err != nil {
			return reject(err.Error())
		}
		reply, used, err := ep.passive(peer)
		if errors.Is(err, errReconnect) && attempt == 0 && !peer.isReadyAck() {
			// The peer restarted (new QPs): retire ours, answer on fresh ones.
			t.log.Info("rdma peer re-established its endpoint", "device", n.name, "peer", peer.LocalNICPath)
			ep.retire("peer reconnected")
			continue
		}
		if err != nil {
			return reject(err.Error())
		}
		if used.rpcAddr == "" {
			used.rpcAddr = t.rpcAddrFor(peer.LocalNICPath)
		}
		t.flushEndpoint(used)
		return encodeHandshake(reply), nil
	}
	return reject("Local RDMA endpoint unavailable for " + localNIC + " <- " + peer.LocalNICPath)
}

// rpcAddrFor derives a peer's RPC address from its NIC path's server part
// (a P2P segment name is "<host>:<port>").
func (t *Transport) rpcAddrFor(peerPath string) string {
	server, _, _ := splitNICPath(peerPath)
	if m, err := descriptor.ParseP2PName(server); err == nil {
		return m.Addr()
	}
	return ""
}

func (t *Transport) flushEndpoint(ep *endpoint) {
	ep.mu.Lock()
	var failed []*op
	if ep.state == epConnected && len(ep.pending) > 0 {
		failed = ep.postLocked()
	}
	ep.mu.Unlock()
	for _, o := range failed {
		t.fail(o, errEndpointGone, true)
	}
}

// ---- reporting and shutdown ----

// NICStats reports every NIC (engine.NICReporter).
func (t *Transport) NICStats() []engine.NICStat {
	out := make([]engine.NICStat, len(t.nics))
	for i, n := range t.nics {
		out[i] = n.stat()
	}
	return out
}

// Close retires every endpoint (in-flight slices complete with ErrClosed),
// deregisters memory and closes the NICs. A second Close is harmless.
func (t *Transport) Close() error {
	if t.closed.Swap(true) {
		return nil
	}
	for _, u := range t.unhook {
		u()
	}
	for _, n := range t.nics {
		for _, ep := range n.endpoints() {
			ep.retire("transport closed")
		}
	}
	// Let flushed completions come back, then force what did not.
	deadline := time.Now().Add(2 * time.Second)
	for _, n := range t.nics {
		for n.inflight.Load() > 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
	t.cancel()
	t.wg.Wait()
	for _, n := range t.nics {
		for _, ep := range n.endpoints() {
			ep.mu.Lock()
			dead := ep.forceDrainLocked()
			ep.destroyLocked()
			ep.mu.Unlock()
			for _, o := range dead {
				t.fail(o, engine.ErrClosed, false)
			}
		}
		n.close()
	}
	rs := *t.regs.snap.Load()
	for _, m := range rs {
		t.dereg(m)
	}
	return nil
}

var _ = json.Marshal
