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
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/descriptor"
	"github.com/kvferry/kvferry/engine/rpc"
	"github.com/kvferry/kvferry/engine/transport/rdma/handshake"
	"github.com/kvferry/kvferry/engine/transport/rdma/ibv"
	"github.com/kvferry/kvferry/engine/transport/rdma/priority"
)

// Name is the transport's name.
const Name = "rdma"

// Transport is the RDMA transport of one engine.
type Transport struct {
	e          *engine.Engine
	cfg        Config
	log        *slog.Logger
	nics       []*nic
	matrix     priority.Matrix
	serverName string
	deadline   time.Duration
	ctx        context.Context
	cancel     context.CancelFunc
	wg         sync.WaitGroup
	closed     atomic.Bool
	rr         atomic.Uint64
	unhook     []func()
	omitGID    bool // handshakes leave local_gid out (tests: an old peer)

	regs struct {
		sync.Mutex
		snap atomic.Pointer[[]*memReg] // sorted by address
	}
	gpu   gpuState
	peers struct {
		sync.Mutex
		m map[*descriptor.Segment]*peerInfo
	}
}

// peerInfo is what routing needs from a peer descriptor, parsed once.
type peerInfo struct {
	server string // NIC path server part
	matrix priority.Matrix
	index  map[string]int // device name -> index in Devices
	// gpuKeys: every GPU buffer of the peer carries an rkey (it registered
	// its GPU memory with its NICs).
	gpuKeys bool
}

// Available lists the usable RDMA devices (libibverbs loaded, device list
// read, filtered by cfg.Devices: device names, network interfaces or PCI
// addresses), or says why there are none.
func Available(cfg Config) ([]string, error) {
	names, _, err := available(cfg.withDefaults())
	return names, err
}

// available is Available for a configuration with defaults; it also
// returns the filter entries that matched nothing.
func available(cfg Config) ([]string, []error, error) {
	if err := ibv.Load(cfg.Library); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", engine.ErrNotSupported, err)
	}
	names, err := ibv.DeviceNames()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", engine.ErrNotSupported, err)
	}
	names, unmatched := filterDevices(names, cfg.Devices, cfg.Class)
	if len(names) == 0 {
		return nil, unmatched, fmt.Errorf("%w: no RDMA device (filter %v)", engine.ErrNotSupported, cfg.Devices)
	}
	return names, unmatched, nil
}

// New opens the NICs the priority matrix names (cfg.Matrix, or one
// discovered from sysfs), registers the engine's existing regions on them
// and answers Connection requests on the engine's RPC port. It fails with
// an error wrapping engine.ErrNotSupported when no NIC can be used.
func New(e *engine.Engine, cfg Config) (*Transport, error) {
	cfg = cfg.withDefaults()
	names, unmatched, err := available(cfg)
	if err != nil {
		return nil, err
	}
	t := &Transport{e: e, cfg: cfg, log: e.Logger().With("transport", Name), deadline: e.Config().TransferTimeout}
	for _, err := range unmatched {
		t.log.Warn("rdma device filter entry unused", "err", err)
	}
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
	var m priority.Matrix
	if cfg.Matrix != "" {
		if m, err = priority.Parse(cfg.Matrix); err != nil {
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
		g := n.gid()
		t.log.Info("rdma device", "device", n.name, "gid", g.gid.String(), "gid_index", g.index, "gid_class", g.class.String(), "lid", n.port.LID,
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
func (t *Transport) Matrix() priority.Matrix { return t.matrix }

// Devices lists the opened NICs in descriptor order.
func (t *Transport) Devices() []string {
	out := make([]string, len(t.nics))
	for i, n := range t.nics {
		out[i] = n.name
	}
	return out
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
		seg.Devices[i] = descriptor.Device{Name: n.name, LID: n.port.LID, GID: n.gid().gid.String()}
	}
	seg.PriorityMatrix = t.matrix.JSON()
	t.describeBuffers(seg)
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
	pi.gpuKeys = true
	for _, b := range d.Buffers {
		if b.GPU() && b.Mem != descriptor.MemManaged && !hasKey(b.RKey) {
			pi.gpuKeys = false
			break
		}
	}
	if len(d.PriorityMatrix) > 0 {
		if m, err := priority.Parse(string(d.PriorityMatrix)); err == nil {
			pi.matrix = m
		}
	}
	if len(pi.matrix) == 0 {
		names := make([]string, len(d.Devices))
		for i, dev := range d.Devices {
			names[i] = dev.Name
		}
		pi.matrix = priority.Matrix{"*": {names, {}}}
	}
	if len(t.peers.m) > 4096 {
		clear(t.peers.m)
	}
	t.peers.m[d] = pi
	return pi
}

// peerNIC finds a peer NIC's GID and LID in the peer's descriptor, for a
// handshake without local_gid: a descriptor cached for routing, else the
// one the metadata service has under the NIC path's server name
// (Mooncake's getSegmentDescByName).
func (t *Transport) peerNIC(ctx context.Context, peerPath string) (gid string, lid uint16, err error) {
	server, nicName, ok := handshake.SplitNICPath(peerPath)
	if !ok {
		//lint:ignore ST1005 Mooncake's own text: it goes back to the peer in the handshake reply
		return "", 0, fmt.Errorf("Parse peer nic path failed: %s", peerPath)
	}
	t.peers.Lock()
	for d, pi := range t.peers.m {
		if pi.server == server {
			if i, ok := pi.index[nicName]; ok && d.Devices[i].GID != "" {
				t.peers.Unlock()
				return d.Devices[i].GID, d.Devices[i].LID, nil
			}
		}
	}
	t.peers.Unlock()
	ctx, cancel := context.WithTimeout(ctx, t.e.Config().MetadataTimeout)
	defer cancel()
	id, err := t.e.OpenSegmentNoCache(ctx, server)
	if err == nil {
		var d *descriptor.Segment
		if d, err = t.e.SegmentDescriptor(id); err == nil {
			for _, dev := range d.Devices {
				if dev.Name == nicName && dev.GID != "" {
					return dev.GID, dev.LID, nil
				}
			}
		}
	}
	if err != nil {
		//lint:ignore ST1005 Mooncake's own text: it goes back to the peer in the handshake reply
		return "", 0, fmt.Errorf("Peer nic not found in that server: %s (descriptor of %q: %v)", peerPath, server, err)
	}
	//lint:ignore ST1005 Mooncake's own text: it goes back to the peer in the handshake reply
	return "", 0, fmt.Errorf("Peer nic not found in that server: %s", peerPath)
}

// republish publishes the descriptor again (a NIC's GID changed).
func (t *Transport) republish() {
	ctx, cancel := context.WithTimeout(t.ctx, t.e.Config().MetadataTimeout)
	defer cancel()
	if err := t.e.Publish(ctx); err != nil {
		t.log.Warn("rdma: publishing the new GID failed", "err", err)
	}
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
		ops[i] = op{s: s, peer: p, laddr: s.Local, raddr: s.Remote, length: s.Length}
		list[i] = &ops[i]
	}
	t.dispatch(list)
}

// dispatch routes ops and hands them to their endpoints, one enqueue per
// endpoint. An op crossing a memory region boundary on either side is cut
// there into parts (route), each routed on its own.
func (t *Transport) dispatch(ops []*op) {
	groups := map[*endpoint][]*op{}
	var order []*endpoint
	for len(ops) > 0 {
		o := ops[0]
		ops = ops[1:]
		ep, rest, err := t.route(o)
		if rest != nil {
			ops = append(ops, rest)
		}
		if err != nil {
			t.fail(o, err, false)
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
// rows), its keys, and the endpoint between them. When o's range crosses
// a memory region boundary (local or remote) it is cut there: o keeps the
// first part and rest (nil otherwise) is the remainder.
func (t *Transport) route(o *op) (ep *endpoint, rest *op, err error) {
	if o.local == nil {
		o.local = t.region(o.laddr, o.length)
		if o.local == nil {
			return nil, nil, fmt.Errorf("rdma: local %#x+%d is not registered with the NICs: %w", o.laddr, o.length, engine.ErrAddressNotRegistered)
		}
	}
	lc := o.local.chunk(uint64(o.laddr))
	if lc == nil {
		return nil, nil, fmt.Errorf("rdma: local %#x+%d (%s memory) is not registered with the NICs: %w", o.laddr, o.length, o.local.kind, engine.ErrAddressNotRegistered)
	}
	d := o.peer.Descriptor()
	buf, ok := o.peer.RemoteBuffer(o.raddr, 1) // the very buffer (memory region) holding raddr
	if !ok || !hasKey(buf.RKey) {
		return nil, nil, fmt.Errorf("rdma: remote %#x+%d on %q is in no buffer with an rkey: %w", o.raddr, o.length, o.peer.Name, engine.ErrAddressNotRegistered)
	}
	if n := min(lc.end()-uint64(o.laddr), buf.Addr+buf.Length-o.raddr); n < o.length {
		if rest = o.cut(n); rest == nil {
			return nil, nil, fmt.Errorf("rdma: remote %#x+%d on %q runs past its buffers: %w", o.raddr, o.length, o.peer.Name, engine.ErrAddressNotRegistered)
		}
	}
	pi := t.peerInfo(d)
	rr := -1
	if t.cfg.RoundRobin {
		rr = int(t.rr.Add(1))
	}
	localName := t.matrix.Select(o.local.location, o.tries, rr, func(name string) bool {
		i := t.nicIndex(name)
		return i >= 0 && t.nics[i].active.Load() && lc.mrs[i] != nil
	})
	if localName == "" {
		return nil, rest, engine.PathFailed(engine.FailoverNoPath,
			fmt.Errorf("rdma: no active NIC for location %q: %w", o.local.location, engine.ErrNotSupportedTransport))
	}
	n := t.nics[t.nicIndex(localName)]
	peerName := pi.matrix.Select(buf.Name, o.tries, rr, func(name string) bool {
		i, ok := pi.index[name]
		return ok && i < len(buf.RKey) && buf.RKey[i] != 0
	})
	if peerName == "" {
		return nil, rest, fmt.Errorf("rdma: peer %q offers no NIC for %q: %w", o.peer.Name, buf.Name, engine.ErrNotSupportedTransport)
	}
	o.nic = n
	o.lkey = lc.mrs[n.idx].LKey
	o.rkey = uint32(buf.RKey[pi.index[peerName]]) // verbs keys are 32 bits
	ep, err = n.endpoint(handshake.NICPath(pi.server, peerName), o.peer.Endpoint.Addr())
	return ep, rest, err
}

func hasKey(keys []uint64) bool {
	for _, k := range keys {
		if k != 0 {
			return true
		}
	}
	return false
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
		o.finish(engine.ErrCanceled)
		return
	}
	if t.closed.Load() {
		err = fmt.Errorf("%w: %w", engine.ErrClosed, err)
	} else {
		err = pathErr(err)
	}
	o.finish(&engine.TransferError{Op: o.s.Op, Peer: o.peer.Name, Transport: Name, Addr: o.raddr, Length: o.length, Err: err})
}

// pathErr marks err, an op's final error, as a failure of the RDMA path
// (engine.PathFailure) where another transport may still carry the slice:
// a failed work completion (a remote access error only after the
// descriptor re-read; never a local protection or length error, which
// are the request's), an endpoint retired under it, a refused handshake.
// Errors marked where they arise (no active NIC) stay as they are.
func pathErr(err error) error {
	var pf engine.PathFailure
	var wc *wcError
	switch {
	case errors.As(err, &pf):
		return err
	case errors.As(err, &wc):
		switch wc.status {
		case ibv.WCLocProtErr, ibv.WCLocLenErr:
			return err
		case ibv.WCRemAccessErr, ibv.WCRemInvReqErr:
			return engine.PathFailed(engine.FailoverAccess, err)
		}
		return engine.PathFailed(engine.FailoverCompletion, err)
	case errors.Is(err, errEndpointGone):
		return engine.PathFailed(engine.FailoverReset, err)
	}
	return err
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
func (t *Transport) handleConnection(ctx context.Context, body []byte, from net.Addr) ([]byte, error) {
	reject := func(msg string) ([]byte, error) {
		t.log.Warn("rdma handshake refused", "from", from, "reason", msg)
		return handshake.Encode(&handshake.Desc{ReplyMsg: msg}), nil
	}
	peer, err := handshake.Decode(body)
	if err != nil {
		return reject("Malformed handshake: " + err.Error())
	}
	if t.closed.Load() {
		return reject("rdma transport closed")
	}
	_, localNIC, ok := handshake.SplitNICPath(peer.PeerNICPath)
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
	if _, _, ok := handshake.SplitNICPath(peer.LocalNICPath); !ok {
		return reject("Parse peer nic path failed: " + peer.LocalNICPath)
	}
	if peer.LocalGID == "" && !peer.IsReadyAck() {
		// As Mooncake: the peer NIC's GID and LID from its descriptor.
		if peer.LocalGID, peer.LocalLID, err = t.peerNIC(ctx, peer.LocalNICPath); err != nil {
			return reject(err.Error())
		}
	}
	reconnected := false
	var tried []gidChoice
	for gidRetries := 0; ; {
		ep, err := n.endpoint(peer.LocalNICPath, "")
		if err != nil {
			return reject(err.Error())
		}
		g := n.gid()
		reply, used, err := ep.passive(peer, g)
		if errors.Is(err, errReconnect) && !reconnected && !peer.IsReadyAck() {
			// The peer restarted (new QPs): retire ours, answer on fresh ones.
			t.log.Info("rdma peer re-established its endpoint", "device", n.name, "peer", peer.LocalNICPath)
			reconnected = true
			ep.retire("peer reconnected")
			continue
		}
		if err != nil && n.gidRetryable(err, gidRetries) {
			tried = append(tried, g)
			if n.reprobeGID(g, tried) {
				// Fresh QPs from the new GID (Mooncake resets the endpoint).
				gidRetries++
				t.log.Warn("rdma passive setup retried with another local GID", "device", n.name, "peer", peer.LocalNICPath,
					"from", g.gid.String(), "to", n.gid().gid.String(), "attempt", gidRetries, "max", t.cfg.AutoGIDRetries, "err", err)
				ep.retire("setup retried with another GID")
				continue
			}
		}
		if err != nil {
			return reject(err.Error())
		}
		if used.rpcAddr == "" {
			used.rpcAddr = t.rpcAddrFor(peer.LocalNICPath)
		}
		t.flushEndpoint(used)
		return handshake.Encode(reply), nil
	}
}

// rpcAddrFor derives a peer's RPC address from its NIC path's server part
// (a P2P segment name is "<host>:<port>").
func (t *Transport) rpcAddrFor(peerPath string) string {
	server, _, _ := handshake.SplitNICPath(peerPath)
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
	}
	// The memory regions go before their protection domains: ibv_dealloc_pd
	// refuses a PD that still has MRs (EBUSY), and an MR outlives neither its
	// PD nor its device context.
	rs := *t.regs.snap.Load()
	for _, m := range rs {
		t.dereg(m)
	}
	for _, n := range t.nics {
		n.close()
	}
	return nil
}

var _ = json.Marshal
