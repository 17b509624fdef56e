package efa

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/descriptor"
	"github.com/kvferry/kvferry/engine/transport/efa/fabric"
)

// Name is the transport's name (Mooncake's protocol string).
const Name = "efa"

var _ engine.Transport = (*Transport)(nil)
var _ engine.MemoryRegistrar = (*Transport)(nil)
var _ engine.NICReporter = (*Transport)(nil)

// Transport is the efa transport of one engine.
type Transport struct {
	e        *engine.Engine
	cfg      Config
	log      *slog.Logger
	provider string
	fabric   string
	virtAddr bool
	devs     []*device
	deadline time.Duration
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	closed   atomic.Bool
	rr       atomic.Uint64
	keySeq   atomic.Uint64

	// life is held shared by every call into a device and exclusively by
	// Close, which closes the devices: libfabric objects must not be
	// closed under a call.
	life sync.RWMutex

	regs struct {
		sync.Mutex // serializes changes; readers load snap
		snap       atomic.Pointer[[]*memReg]
	}
	peers struct {
		sync.Mutex
		m map[*descriptor.Segment]*peerInfo
	}
	// hs holds the endpoint address each peer NIC path handed to a local
	// device in a Connection handshake, to drop it when the peer restarts.
	hs struct {
		sync.Mutex
		m map[string][]byte
	}
	unhook []func()
	// inc holds each peer segment's last seen incarnation (renewPeer).
	inc struct {
		sync.Mutex
		m map[string]string
	}
}

// memReg is one registered region with its memory region on every device.
type memReg struct {
	addr   uintptr
	length uint64
	region *engine.Region
	mrs    []*fabric.MR // by device; nil where it is not registered
}

// peerInfo is a peer's published record, parsed once per descriptor. For
// a peer that publishes only Mooncake's fields, ready is closed once the
// handshakes have filled addrs (or err); until then neither may be read.
type peerInfo struct {
	pub   *Published
	addrs [][]byte // endpoint address by device
	err   error
	ready chan struct{}
	// renew runs once, from Submit or Warmup (under t.life), when the
	// descriptor is a new incarnation of the peer (renewPeer).
	renew sync.Once
}

// Available reports whether the transport can run with cfg: libfabric
// loads and the provider offers FI_EP_RDM with FI_RMA.
func Available(cfg Config) error {
	cfg = cfg.withDefaults()
	l, err := getInfo(cfg, "")
	if err != nil {
		return err
	}
	l.Free()
	return nil
}

func getInfo(cfg Config, domain string) (*fabric.InfoList, error) {
	if err := fabric.Load(cfg.Library); err != nil {
		return nil, fmt.Errorf("%w: %w", engine.ErrNotSupported, err)
	}
	h := fabric.Hints{Provider: cfg.Provider, Domain: domain,
		Caps:   fabric.CapRMA | fabric.CapRead | fabric.CapWrite | fabric.CapRemoteRead | fabric.CapRemoteWrite,
		Mode:   fabric.ModeContext | fabric.ModeContext2,
		MRMode: fabric.MRLocal | fabric.MRVirtAddr | fabric.MRAllocated | fabric.MRProvKey,
		// Writes complete once their bytes are in the target's memory:
		// the engine reports success, and peers may read it, after that.
		TxOpFlags: fabric.DeliveryComplete,
	}
	l, err := fabric.GetInfo(h)
	if err != nil {
		if errors.Is(err, fabric.ErrNoProvider) {
			return nil, fmt.Errorf("%w: %w", engine.ErrNotSupported, err)
		}
		return nil, fmt.Errorf("efa: %w", err)
	}
	return l, nil
}

// New opens the devices (Config.Domains), registers the engine's existing
// regions on them and starts one poller per device. It fails with an error
// wrapping engine.ErrNotSupported when libfabric or the provider is absent.
func New(e *engine.Engine, cfg Config) (*Transport, error) {
	cfg = cfg.withDefaults()
	l, err := getInfo(cfg, "")
	if err != nil {
		return nil, err
	}
	defer l.Free()
	t := &Transport{e: e, cfg: cfg, log: e.Logger().With("transport", Name), deadline: e.Config().TransferTimeout}
	t.ctx, t.cancel = context.WithCancel(e.Context())
	t.peers.m = map[*descriptor.Segment]*peerInfo{}
	t.hs.m = map[string][]byte{}
	t.inc.m = map[string]string{}
	empty := []*memReg{}
	t.regs.snap.Store(&empty)
	picked, err := pickInfos(l.Infos, cfg, e.SegmentName())
	if err != nil {
		t.cancel()
		return nil, err
	}
	seen := map[string]int{}
	for _, in := range picked {
		name := strings.TrimSuffix(in.Domain, "-rdm") // Mooncake's device name: rdmap0s2 for domain rdmap0s2-rdm
		if n := seen[name]; n > 0 {
			name = fmt.Sprintf("%s.%d", name, n)
		}
		seen[strings.TrimSuffix(in.Domain, "-rdm")]++
		d, err := openDevice(t, len(t.devs), name, in)
		if err != nil {
			t.closeDevices()
			t.cancel()
			return nil, err
		}
		t.devs = append(t.devs, d)
	}
	t.provider, t.fabric = picked[0].Provider, picked[0].Fabric
	t.virtAddr = picked[0].MRMode&fabric.MRVirtAddr != 0
	for _, d := range t.devs[1:] {
		if d.virtAddr != t.virtAddr {
			t.closeDevices()
			t.cancel()
			return nil, fmt.Errorf("efa: devices disagree on FI_MR_VIRT_ADDR: %w", engine.ErrNotSupported)
		}
	}
	if err := t.RegisterRegions(e.Regions()); err != nil {
		t.closeDevices()
		t.cancel()
		return nil, err
	}
	if err := t.hookConnection(); err != nil {
		t.Close()
		return nil, err
	}
	for _, d := range t.devs {
		t.wg.Add(1)
		go d.runPoller()
	}
	names := make([]string, len(t.devs))
	for i, d := range t.devs {
		names[i] = d.name
		t.log.Info("efa device", "device", d.name, "provider", d.info.Provider, "fabric", d.info.Fabric, "domain", d.info.Domain,
			"mr_mode", d.info.MRMode, "tx_size", d.info.TxSize, "slots", d.dev.Slots(), "addr", hex.EncodeToString(d.addr))
	}
	maj, mnr := fabric.Version()
	t.log.Info("efa transport installed", "provider", t.provider, "fabric", t.fabric, "devices", names, "libfabric", fmt.Sprintf("%d.%d", maj, mnr))
	return t, nil
}

// pickInfos chooses the fi_getinfo entries to open: the named domains in
// order (a name may repeat), else every domain of the efa provider, else
// the domain whose fabric (a subnet for socket providers) holds the
// engine's host address, else the first.
func pickInfos(infos []fabric.Info, cfg Config, segment string) ([]fabric.Info, error) {
	if len(infos) == 0 {
		return nil, fmt.Errorf("efa: provider %q lists no domain: %w", cfg.Provider, engine.ErrNotSupported)
	}
	var out []fabric.Info
	if len(cfg.Domains) > 0 {
		for _, want := range cfg.Domains {
			i := slices.IndexFunc(infos, func(in fabric.Info) bool {
				return in.Domain == want || in.Domain == want+"-rdm"
			})
			if i < 0 {
				return nil, fmt.Errorf("efa: provider %q has no domain %q: %w", cfg.Provider, want, engine.ErrNotSupported)
			}
			out = append(out, infos[i])
		}
		return out, nil
	}
	if cfg.Provider == DefaultProvider {
		seen := map[string]bool{}
		for _, in := range infos {
			if !seen[in.Domain] {
				seen[in.Domain] = true
				out = append(out, in)
			}
		}
		return out, nil
	}
	host := segment
	if h, _, err := net.SplitHostPort(segment); err == nil {
		host = h
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		for _, in := range infos {
			if p, err := netip.ParsePrefix(in.Fabric); err == nil && p.Contains(ip) {
				return []fabric.Info{in}, nil
			}
		}
	}
	return infos[:1], nil
}

// Name returns "efa".
func (t *Transport) Name() string { return Name }

// SliceSize returns the slice size.
func (t *Transport) SliceSize() uint64 { return t.cfg.SliceSize }

// Provider returns the libfabric provider and fabric in use.
func (t *Transport) Provider() (provider, fabricName string) { return t.provider, t.fabric }

// Devices lists the opened devices in descriptor order.
func (t *Transport) Devices() []string {
	out := make([]string, len(t.devs))
	for i, d := range t.devs {
		out[i] = d.name
	}
	return out
}

// ---- memory ----

// RegisterRegions registers every region on every device (fi_mr_regattr:
// host memory as FI_HMEM_SYSTEM, GPU memory as FI_HMEM_CUDA with its device
// where the provider has FI_HMEM; elsewhere GPU memory is left out and
// peers reach it by other transports). All or nothing.
func (t *Transport) RegisterRegions(rs []*engine.Region) error {
	t.life.RLock()
	defer t.life.RUnlock()
	if t.closed.Load() {
		return engine.ErrClosed
	}
	t.regs.Lock()
	defer t.regs.Unlock()
	var added []*memReg
	undo := func() {
		for _, m := range added {
			closeMRs(m)
		}
	}
	for _, r := range rs {
		if r.Length == 0 {
			continue
		}
		m := &memReg{addr: r.Addr, length: r.Length, region: r, mrs: make([]*fabric.MR, len(t.devs))}
		iface, dev := fabric.IfaceSystem, 0
		if r.Kind == engine.MemoryDevice || r.Kind == engine.MemoryManaged {
			iface, dev = fabric.IfaceCUDA, r.Device
		}
		for i, d := range t.devs {
			if iface == fabric.IfaceCUDA && d.info.Caps&fabric.CapHMEM == 0 {
				continue
			}
			mr, err := d.dev.RegMR(r.Addr, r.Length, fabric.AccessAll, t.keySeq.Add(1), iface, dev)
			if err != nil {
				closeMRs(m)
				undo()
				return fmt.Errorf("efa: register %#x+%d on %s: %w", r.Addr, r.Length, d.name, err)
			}
			m.mrs[i] = mr
		}
		added = append(added, m)
	}
	if len(added) == 0 {
		return nil
	}
	old := *t.regs.snap.Load()
	next := make([]*memReg, 0, len(old)+len(added))
	next = append(append(next, old...), added...)
	slices.SortFunc(next, func(a, b *memReg) int {
		if a.addr < b.addr {
			return -1
		}
		if a.addr > b.addr {
			return 1
		}
		return 0
	})
	t.regs.snap.Store(&next)
	return nil
}

// UnregisterRegions deregisters the regions' memory (operations of peers
// still aimed at them fail at the peer).
func (t *Transport) UnregisterRegions(rs []*engine.Region) {
	t.life.RLock()
	defer t.life.RUnlock()
	t.regs.Lock()
	defer t.regs.Unlock()
	old := *t.regs.snap.Load()
	next := make([]*memReg, 0, len(old))
	for _, m := range old {
		if slices.Contains(rs, m.region) {
			if !t.closed.Load() {
				closeMRs(m)
			}
			continue
		}
		next = append(next, m)
	}
	t.regs.snap.Store(&next)
}

func closeMRs(m *memReg) {
	for i, mr := range m.mrs {
		if mr != nil {
			_ = mr.Close()
			m.mrs[i] = nil
		}
	}
}

// local returns the registration holding all of [addr, addr+n).
func (t *Transport) local(addr uintptr, n uint64) *memReg {
	regs := *t.regs.snap.Load()
	i, _ := slices.BinarySearchFunc(regs, addr, func(m *memReg, a uintptr) int {
		if m.addr <= a {
			return -1
		}
		return 1
	})
	i--
	if i < 0 {
		return nil
	}
	m := regs[i]
	if uint64(addr-m.addr)+n > m.length {
		return nil
	}
	return m
}

// ---- descriptor ----

// published returns the transport's record for the descriptor.
func (t *Transport) published() *Published {
	p := &Published{Provider: t.provider, Fabric: t.fabric, VirtAddr: t.virtAddr}
	for _, d := range t.devs {
		p.Devices = append(p.Devices, PublishedDevice{Name: d.name, Addr: hex.EncodeToString(d.addr)})
	}
	for _, m := range *t.regs.snap.Load() {
		r := PublishedRegion{Addr: uint64(m.addr), Length: m.length, Keys: make([]uint64, len(t.devs))}
		for i, mr := range m.mrs {
			if mr != nil {
				r.Keys[i] = mr.Key()
			}
		}
		p.Regions = append(p.Regions, r)
	}
	return p
}

// Describe publishes the record (Extra["efa"]) and, where no RDMA
// transport has, Mooncake's EFA fields: protocol "efa", the devices and
// every buffer's keys.
func (t *Transport) Describe(seg *descriptor.Segment) {
	pub := t.published()
	b, err := json.Marshal(pub)
	if err != nil {
		t.log.Error("efa: encoding the descriptor record failed", "err", err)
		return
	}
	if !t.cfg.MooncakeOnly {
		if seg.Extra == nil {
			seg.Extra = map[string]json.RawMessage{}
		}
		seg.Extra[Name] = b
	}
	describeMooncake(seg, t.devs, pub)
}

// peerInfo parses p's record once per descriptor d. A peer that publishes
// only Mooncake's fields gets its handshakes started here (p names where
// to send them; nil only checks the fields); a failed handshake is
// forgotten, so that the next use tries again.
func (t *Transport) peerInfo(p *engine.Peer, d *descriptor.Segment) *peerInfo {
	t.peers.Lock()
	defer t.peers.Unlock()
	if pi := t.peers.m[d]; pi != nil {
		return pi
	}
	pi := &peerInfo{}
	if raw, ok := d.Extra[Name]; !ok {
		pub, err := t.mooncakePublished(d)
		if err != nil {
			pi.err = err
			return pi
		}
		if p == nil {
			return &peerInfo{pub: pub}
		}
		pi.pub, pi.ready = pub, make(chan struct{})
		go func() { // bounded by the handshake deadline
			t.connectMooncake(p, d, pi)
			if pi.err != nil {
				t.log.Warn("efa handshake failed", "peer", d.Name, "err", pi.err)
				t.peers.Lock()
				if t.peers.m[d] == pi {
					delete(t.peers.m, d)
				}
				t.peers.Unlock()
			}
		}()
	} else if pub, err := ParsePublished(raw); err != nil {
		pi.err = fmt.Errorf("efa: %q: %w", d.Name, err)
	} else if pub.Provider != t.provider {
		pi.err = fmt.Errorf("efa: %q uses provider %q, this engine %q: %w", d.Name, pub.Provider, t.provider, engine.ErrNotSupportedTransport)
	} else {
		pi.pub = pub
		for _, dev := range pub.Devices {
			a, _ := hex.DecodeString(dev.Addr) // checked by ParsePublished
			pi.addrs = append(pi.addrs, a)
		}
	}
	if len(t.peers.m) > 4096 {
		clear(t.peers.m)
	}
	t.peers.m[d] = pi
	return pi
}

// selfInfo is the peer information of this engine's own segment, from
// what it would publish now (the cached local descriptor may predate a
// registration): transfers to it loop through the provider, as Mooncake's
// EFA transport serves them too (it copies locally instead).
func (t *Transport) selfInfo() *peerInfo {
	pub := t.published()
	pi := &peerInfo{pub: pub}
	for _, d := range t.devs {
		pi.addrs = append(pi.addrs, d.addr)
	}
	return pi
}

// Reaches reports whether p publishes devices of the same provider (this
// engine's own segment included, looped through the provider).
func (t *Transport) Reaches(p *engine.Peer) bool {
	if t.closed.Load() {
		return false
	}
	if p.Local() {
		return true
	}
	d := p.Descriptor()
	if d == nil {
		return false
	}
	return t.peerInfo(nil, d).err == nil
}

// NICStats reports each device (showLinks): its provider and fabric as the
// link layer, its address as the GID, its load.
func (t *Transport) NICStats() []engine.NICStat {
	out := make([]engine.NICStat, len(t.devs))
	for i, d := range t.devs {
		out[i] = engine.NICStat{Device: d.name, Transport: Name, Active: !t.closed.Load(), State: "active",
			LinkLayer: d.info.Provider + " " + d.info.Fabric, GID: hex.EncodeToString(d.addr), NUMA: -1,
			InflightBytes: d.inflightBytes.Load(), BytesCompleted: d.bytesDone.Load(),
			SlicesCompleted: d.slicesDone.Load(), SlicesFailed: d.slicesFailed.Load(), Endpoints: d.peerCount()}
		if t.closed.Load() {
			out[i].State = "down"
		}
	}
	return out
}

// ---- data path ----

// Submit routes each slice to a local device (round robin, so a request's
// slices stripe over the devices) and a peer device, and posts or queues
// it; it never waits for the network.
func (t *Transport) Submit(p *engine.Peer, slices []*engine.Slice) {
	t.life.RLock()
	defer t.life.RUnlock()
	if t.closed.Load() {
		for _, s := range slices {
			s.Complete(engine.ErrClosed)
		}
		return
	}
	var pi *peerInfo
	if p.Local() {
		pi = t.selfInfo()
	} else if d := p.Descriptor(); d != nil {
		pi = t.peerInfo(p, d)
	}
	if pi != nil && pi.err == nil && !p.Local() && (pi.ready == nil || isClosed(pi.ready)) {
		t.renewPeer(p.Descriptor(), pi)
	}
	if pi != nil && pi.ready != nil {
		select {
		case <-pi.ready:
		default: // a Mooncake peer's handshake runs: submit once it is over
			go func() {
				select {
				case <-pi.ready:
					if pi.err != nil {
						for _, s := range slices {
							s.Complete(pi.err)
						}
						return
					}
					t.Submit(p, slices)
				case <-t.ctx.Done():
					for _, s := range slices {
						s.Complete(engine.ErrClosed)
					}
				}
			}()
			return
		}
	}
	groups := make([][]pending, len(t.devs))
	for _, s := range slices {
		if s.Canceled() {
			s.Complete(engine.ErrCanceled)
			continue
		}
		if pi == nil || pi.err != nil {
			err := fmt.Errorf("efa: %q has no usable efa descriptor: %w", p.Name, engine.ErrNotSupportedTransport)
			if pi != nil {
				err = pi.err
			}
			s.Complete(err)
			continue
		}
		op, li, err := t.route(p, pi, s)
		if err != nil {
			s.Complete(err)
			continue
		}
		groups[li] = append(groups[li], op)
	}
	for i, g := range groups {
		if len(g) > 0 {
			t.devs[i].submit(g)
		}
	}
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// renewPeer, once per parsed descriptor, sees whether d is a new
// incarnation of its segment (a restarted peer): then every device forgets
// the failure marks and AV entries of the peer's addresses, so that the
// new process is reached at once even where it answers at an old address.
// The caller holds t.life.
func (t *Transport) renewPeer(d *descriptor.Segment, pi *peerInfo) {
	pi.renew.Do(func() {
		if d == nil || d.Incarnation == "" {
			return
		}
		t.inc.Lock()
		prev, seen := t.inc.m[d.Name]
		if len(t.inc.m) >= DefaultAVCount {
			clear(t.inc.m)
		}
		t.inc.m[d.Name] = d.Incarnation
		t.inc.Unlock()
		if !seen || prev == d.Incarnation {
			return
		}
		t.log.Info("efa peer restarted: its endpoints are re-created", "peer", d.Name, "incarnation", d.Incarnation)
		for _, dev := range t.devs {
			for _, a := range pi.addrs {
				dev.forget(a)
			}
		}
	})
}

// route checks s against the local and the peer's registered regions and
// builds its operation on the next local device.
func (t *Transport) route(p *engine.Peer, pi *peerInfo, s *engine.Slice) (pending, int, error) {
	if len(s.Pieces) > 1 {
		return pending{}, 0, fmt.Errorf("efa: gathered slices: %w", engine.ErrNotSupported)
	}
	m := t.local(s.Local, s.Length)
	if m == nil {
		return pending{}, 0, fmt.Errorf("efa: local %#x+%d is not registered with the efa devices: %w", s.Local, s.Length, engine.ErrAddressNotRegistered)
	}
	r, ok := pi.pub.Region(s.Remote, s.Length)
	if !ok {
		return pending{}, 0, fmt.Errorf("efa: remote %#x+%d on %q is outside its registered regions: %w", s.Remote, s.Length, p.Name, engine.ErrAddressNotRegistered)
	}
	n := uint64(t.rr.Add(1))
	li := int(n % uint64(len(t.devs)))
	if m.mrs[li] == nil {
		return pending{}, 0, fmt.Errorf("efa: local %#x+%d (%s memory) is not registered with %s: %w", s.Local, s.Length, m.region.Kind, t.devs[li].name, engine.ErrAddressNotRegistered)
	}
	pd := int(n % uint64(len(pi.addrs)))
	if r.Keys[pd] == 0 && len(r.Keys) > 1 { // a region the peer left off this device
		for j, k := range r.Keys {
			if k != 0 {
				pd = j
				break
			}
		}
	}
	return t.pairOp(pending{s: s, peerName: p.Name, pi: pi, m: m, r: r}, li, pd), li, nil
}

// pairOp builds o's operation from local device li to peer device pd.
func (t *Transport) pairOp(o pending, li, pd int) pending {
	s := o.s
	raddr := s.Remote
	if !o.pi.pub.VirtAddr {
		raddr -= o.r.Addr
	}
	op := fabric.Op{Local: uint64(s.Local), Length: s.Length, Remote: raddr, Key: o.r.Keys[pd]}
	if t.devs[li].mrLocal {
		op.Desc = o.m.mrs[li].Desc()
	}
	if s.Op == engine.OpWrite {
		op.Write = 1
	}
	o.op, o.peer, o.li, o.pd = op, o.pi.addrs[pd], li, pd
	o.tried |= pairBit(li, pd, len(o.pi.addrs))
	return o
}

// pairBit is the bit of the (local device, peer device) pair in
// pending.tried; pairs past 64 share the last bit.
func pairBit(li, pd, npeer int) uint64 {
	return 1 << min(li*npeer+pd, 63)
}

// reroute returns o moved to another (local device, peer device) pair it
// has not tried, as the RDMA transport retries a slice on another NIC: a
// local device registered for its memory, a peer device with a key for
// its range, a peer endpoint not marked failed there. False when none is
// left, the slice is canceled, or the transport is closing.
func (t *Transport) reroute(o pending) (pending, bool) {
	if o.pi == nil || o.s.Canceled() || t.closed.Load() {
		return o, false
	}
	npeer := len(o.pi.addrs)
	for k := 1; k < len(t.devs)*npeer; k++ {
		// Peer devices first (another NIC of the peer from the same local
		// one), then the local devices.
		pd := (o.pd + k) % npeer
		li := (o.li + (o.pd+k)/npeer) % len(t.devs)
		if o.tried&pairBit(li, pd, npeer) != 0 || o.m.mrs[li] == nil || o.r.Keys[pd] == 0 || t.devs[li].isGone(o.pi.addrs[pd]) {
			continue
		}
		return t.pairOp(o, li, pd), true
	}
	return o, false
}

// failErr turns a failed completion into the slice's error: a lost
// connection is engine.ErrPeerGone, a refused key or range
// engine.ErrRejected.
func failErr(op *pending, dev string, errno int32, prov int32) error {
	e := &fabric.Error{Op: "fi_cq_readerr", Errno: int(errno)}
	class := engine.ErrRejected
	switch syscall.Errno(errno) {
	case syscall.ECONNRESET, syscall.ECONNREFUSED, syscall.ECONNABORTED, syscall.EPIPE, syscall.ENOTCONN,
		syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.ENETDOWN, syscall.ECANCELED, syscall.ETIMEDOUT,
		syscall.EIO, syscall.ESHUTDOWN:
		class = engine.ErrPeerGone
	}
	dir := "read"
	if op.op.Write != 0 {
		dir = "write"
	}
	return fmt.Errorf("efa: %s %#x+%d on %q via %s (provider error %d): %w: %w", dir, op.s.Remote, op.s.Length, op.peerName, dev, prov, class, e)
}

// Close stops the pollers, closes the devices and fails what was in
// flight with engine.ErrClosed. A second Close is harmless.
func (t *Transport) Close() error {
	if t.closed.Swap(true) {
		return nil
	}
	for _, u := range t.unhook {
		u()
	}
	t.cancel()
	for _, d := range t.devs {
		d.wake()
	}
	t.wg.Wait()
	t.life.Lock()
	defer t.life.Unlock()
	t.regs.Lock()
	for _, m := range *t.regs.snap.Load() {
		closeMRs(m)
	}
	t.regs.Unlock()
	t.closeDevices()
	return nil
}

// closeDevices closes every device; the endpoints' operations are gone
// with them, so their slices complete with engine.ErrClosed.
func (t *Transport) closeDevices() {
	for _, d := range t.devs {
		d.close()
	}
}
