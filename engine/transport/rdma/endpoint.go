package rdma

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/rpc"
	"github.com/kvferry/kvferry/engine/transport/rdma/handshake"
	"github.com/kvferry/kvferry/engine/transport/rdma/ibv"
	"github.com/kvferry/kvferry/metrics"
)

type epState int

const (
	epIdle       epState = iota // QPs created, not connected
	epConnecting                // active handshake in flight
	epWaitAck                   // connected passively; waiting for the peer's ready ACK
	epConnected                 // QPs in RTS: work can be posted
	epRetired                   // QPs in ERROR: draining, then destroyed
)

func (s epState) String() string {
	return [...]string{"idle", "connecting", "wait-ack", "connected", "retired"}[s]
}

// qpState is one QP of an endpoint and the ring of its posted work
// requests in posting order. Work request ids are sequence numbers; a
// completion for sequence s completes every earlier request too (RC
// completes in order and only some requests are signalled).
type qpState struct {
	ep   *endpoint
	qp   *ibv.QP
	ring []*op
	head uint64 // oldest outstanding sequence
	tail uint64 // next sequence
}

func (q *qpState) outstanding() int { return int(q.tail - q.head) }

// endpoint is the QPs from one local NIC to one peer NIC (Mooncake's
// RdmaEndPoint), connected by the Connection handshake on the peer's RPC
// port, lazily on first use or when the peer connects to us.
type endpoint struct {
	n        *nic
	peerPath string
	peerNIC  string
	rpcAddr  string

	mu       sync.Mutex
	state    epState
	qps      []*qpState
	peerQPNs []uint32
	pending  []*op
	since    time.Time // entered the current state
	next     int
	wrs      []ibv.SendWR
	outs     int       // work requests outstanding over all QPs
	gid      gidChoice // the local GID the QPs were brought up with
	retired  atomic.Bool
	obs      *metrics.Conn // kvferry_transport_* of (rdma, peer segment)
}

// markConnected moves ep to connected (ep.mu held) and counts the
// connection once.
func (ep *endpoint) markConnected() {
	if ep.state != epConnected {
		ep.obs.Open.Add(1)
	}
	ep.state = epConnected
}

// endpoint returns the usable endpoint of n toward peerPath, creating it
// (with fresh QPs) when there is none or the old one is retired. A new
// endpoint on a NIC at its endpoint limit evicts one (SIEVE or FIFO, as
// Mooncake's endpoint store): the victim is retired, its work retried.
func (n *nic) endpoint(peerPath, rpcAddr string) (*endpoint, error) {
	// Lock order: an endpoint's mu before its nic's mu, never the reverse.
	n.mu.Lock()
	if ep := n.eps.get(peerPath); ep != nil && !ep.retired.Load() {
		n.mu.Unlock()
		if rpcAddr != "" {
			ep.mu.Lock()
			if ep.rpcAddr == "" {
				ep.rpcAddr = rpcAddr
			}
			ep.mu.Unlock()
		}
		return ep, nil
	}
	peerSeg, peerNIC, ok := handshake.SplitNICPath(peerPath)
	if !ok {
		n.mu.Unlock()
		return nil, fmt.Errorf("rdma: bad peer nic path %q", peerPath)
	}
	ep := &endpoint{n: n, peerPath: peerPath, peerNIC: peerNIC, rpcAddr: rpcAddr, since: time.Now(),
		obs: n.t.e.MetricSet().Conn(Name, peerSeg),
		wrs: make([]ibv.SendWR, min(n.t.cfg.MaxWR, ibv.MaxChain))}
	cfg := n.t.cfg
	for range cfg.QPsPerEP {
		qp, err := n.pd.CreateQP(n.cq, n.cq, ibv.QPCaps{MaxSendWR: uint32(cfg.MaxWR), MaxRecvWR: uint32(cfg.MaxWR),
			MaxSGE: uint32(cfg.MaxSGE), MaxInline: uint32(cfg.MaxInline)})
		if err != nil {
			for _, q := range ep.qps {
				_ = q.qp.Destroy()
			}
			n.mu.Unlock()
			return nil, fmt.Errorf("rdma %s: endpoint to %s: %w", n.name, peerPath, err)
		}
		ep.qps = append(ep.qps, &qpState{ep: ep, qp: qp, ring: make([]*op, cfg.MaxWR)})
	}
	for _, q := range ep.qps {
		n.qps[q.qp.Num] = q
	}
	if old := n.eps.peek(peerPath); old != nil {
		// The retired one drains on its own, listed apart.
		n.eps.del(peerPath, old)
		n.draining = append(n.draining, old)
		ep.obs.Redials.Add(1)
	}
	evicted := n.eps.put(peerPath, ep)
	n.draining = append(n.draining, evicted...)
	n.mu.Unlock()
	for _, v := range evicted {
		n.t.log.Info("rdma endpoint evicted", "device", n.name, "peer", v.peerPath, "max_endpoints", n.eps.max, "store", cfg.EndpointStore)
		v.retire("evicted")
	}
	return ep, nil
}

func (ep *endpoint) qpNums() []uint32 {
	out := make([]uint32, len(ep.qps))
	for i, q := range ep.qps {
		out[i] = q.qp.Num
	}
	return out
}

func (ep *endpoint) usable() bool {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.state == epConnected
}

func (ep *endpoint) hasPending() bool {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return len(ep.pending) > 0
}

// localDesc is this side's handshake for ep, naming GID g (the one its
// QPs are brought up with).
func (ep *endpoint) localDesc(g gidChoice) *handshake.Desc {
	f := false
	h := &handshake.Desc{LocalNICPath: ep.n.nicPath(), LocalLID: ep.n.port.LID, LocalGID: g.gid.String(),
		PeerNICPath: ep.peerPath, QPNum: ep.qpNums(), ReadyAck: &f}
	if ep.n.t.omitGID {
		h.LocalGID = "" // as a peer that leaves it out (tests)
	}
	return h
}

// renewQPsLocked replaces the QPs of an endpoint that never carried work
// (a setup retried with another GID), so the peer sees a new endpoint
// rather than a half-finished one (Mooncake reconstructs it the same way).
func (ep *endpoint) renewQPsLocked() error {
	n := ep.n
	cfg := n.t.cfg
	if ep.outs > 0 {
		return fmt.Errorf("rdma %s: endpoint to %s has work outstanding", n.name, ep.peerPath)
	}
	var fresh []*qpState
	for range ep.qps {
		qp, err := n.pd.CreateQP(n.cq, n.cq, ibv.QPCaps{MaxSendWR: uint32(cfg.MaxWR), MaxRecvWR: uint32(cfg.MaxWR),
			MaxSGE: uint32(cfg.MaxSGE), MaxInline: uint32(cfg.MaxInline)})
		if err != nil {
			for _, q := range fresh {
				_ = q.qp.Destroy()
			}
			return fmt.Errorf("rdma %s: endpoint to %s: %w", n.name, ep.peerPath, err)
		}
		fresh = append(fresh, &qpState{ep: ep, qp: qp, ring: make([]*op, cfg.MaxWR)})
	}
	old := ep.qps
	n.mu.Lock()
	for _, q := range old {
		delete(n.qps, q.qp.Num)
	}
	for _, q := range fresh {
		n.qps[q.qp.Num] = q
	}
	n.mu.Unlock()
	for _, q := range old {
		if err := q.qp.Destroy(); err != nil {
			n.t.log.Warn("rdma destroy qp failed", "device", n.name, "qp", q.qp.Num, "err", err)
		}
	}
	ep.qps = fresh
	ep.peerQPNs = nil
	return nil
}

// enqueue hands ops to ep: posted now when connected, else kept until the
// handshake (which enqueue starts when needed) ends.
func (ep *endpoint) enqueue(ops []*op) {
	ep.mu.Lock()
	switch ep.state {
	case epRetired:
		ep.mu.Unlock()
		for _, o := range ops {
			ep.n.t.fail(o, errEndpointGone, true)
		}
		return
	case epIdle:
		ep.state = epConnecting
		ep.since = time.Now()
		ep.n.t.wg.Add(1)
		go ep.connect()
	}
	for _, o := range ops {
		o.ep = ep
	}
	ep.pending = append(ep.pending, ops...)
	var failed []*op
	if ep.state == epConnected {
		failed = ep.postLocked()
	}
	ep.mu.Unlock()
	for _, o := range failed {
		ep.n.t.fail(o, errEndpointGone, true)
	}
}

var errEndpointGone = fmt.Errorf("rdma endpoint retired: %w", engine.ErrRejected)

// postLocked posts pending work: chains of up to one QP's free room,
// spread over the endpoint's QPs, within the NIC's completion credits.
// It returns ops that could not be posted because the endpoint broke.
func (ep *endpoint) postLocked() (failed []*op) {
	t := ep.n.t
	for len(ep.pending) > 0 {
		// Drop canceled slices before they reach the wire.
		if o := ep.pending[0]; o.s.Canceled() {
			ep.pending = ep.pending[1:]
			o.finish(engine.ErrCanceled)
			continue
		}
		posted := false
		for range len(ep.qps) {
			q := ep.qps[ep.next%len(ep.qps)]
			ep.next++
			room := len(q.ring) - q.outstanding()
			if room <= 0 {
				continue
			}
			// An even share of what is pending per QP, as Mooncake spreads
			// a batch over an endpoint's QPs.
			share := (len(ep.pending) + len(ep.qps) - 1) / len(ep.qps)
			want := min(room, share, len(ep.wrs))
			got := ep.n.takeCredits(want)
			if got == 0 {
				return failed
			}
			batch := ep.pending[:got]
			wrs := ep.wrs[:0]
			for i, o := range batch {
				opcode := ibv.WRWrite
				if o.s.Op == engine.OpRead {
					opcode = ibv.WRRead
				}
				wrs = append(wrs, ibv.SendWR{})
				last := i == len(batch)-1
				sig := last || (i+1)%t.cfg.SignalEvery == 0
				ibv.SetSendWR(&wrs[len(wrs)-1], q.tail+uint64(i), opcode, uint64(o.laddr), uint32(o.length), o.lkey, o.raddr, o.rkey, sig)
			}
			for i, o := range batch {
				q.ring[(q.tail+uint64(i))%uint64(len(q.ring))] = o
			}
			k, err := q.qp.PostSend(wrs)
			for i := 0; i < k; i++ {
				o := batch[i]
				ep.n.inflight.Add(int64(o.length))
			}
			q.tail += uint64(k)
			ep.outs += k
			if k < len(batch) {
				ep.n.returnCredits(len(batch) - k)
			}
			ep.pending = ep.pending[k:]
			if err != nil {
				t.log.Warn("rdma post failed: endpoint retired", "device", ep.n.name, "peer", ep.peerPath, "err", err)
				more := ep.retireLocked("post failed")
				return append(failed, more...)
			}
			posted = true
			break
		}
		if !posted {
			return failed
		}
	}
	return failed
}

// takeCredits reserves up to want completion-queue entries.
func (n *nic) takeCredits(want int) int {
	for {
		c := n.credits.Load()
		if c <= 0 {
			return 0
		}
		got := min(int64(want), c)
		if n.credits.CompareAndSwap(c, c-got) {
			return int(got)
		}
	}
}

func (n *nic) returnCredits(k int) { n.credits.Add(int64(k)) }

// complete handles the completion of sequence seq on q.
func (ep *endpoint) complete(q *qpState, seq uint64, status int, vendor uint32) {
	type done struct {
		o   *op
		err error
	}
	var out []done
	ep.mu.Lock()
	if seq < q.head || seq >= q.tail {
		ep.mu.Unlock()
		return // stale: the QP was reset meanwhile
	}
	var cause error
	if status != ibv.WCSuccess {
		cause = &wcError{status: status, vendor: vendor, nic: ep.n.name, peer: ep.peerPath}
	}
	for q.head <= seq {
		i := q.head % uint64(len(q.ring))
		o := q.ring[i]
		q.ring[i] = nil
		var err error
		if q.head == seq {
			err = cause
		}
		q.head++
		ep.outs--
		ep.n.returnCredits(1)
		if o != nil {
			ep.n.inflight.Add(-int64(o.length))
			out = append(out, done{o, err})
		}
	}
	var retry []*op
	if cause != nil && ep.state != epRetired {
		retry = ep.retireLocked(ibv.StatusString(status))
	}
	if ep.state == epRetired && ep.outs == 0 {
		ep.destroyLocked()
	}
	ep.mu.Unlock()
	t := ep.n.t
	for _, d := range out {
		if d.err == nil {
			ep.n.slicesDone.Add(1)
			ep.n.addBytes(d.o.length)
			d.o.finish(nil)
			continue
		}
		t.failWC(d.o, d.err.(*wcError))
	}
	for _, o := range retry {
		t.fail(o, errEndpointGone, true)
	}
}

// wcError is a failed work completion.
type wcError struct {
	status int
	vendor uint32
	nic    string
	peer   string
}

func (e *wcError) Error() string {
	return fmt.Sprintf("rdma %s -> %s: %s (vendor error %#x)", e.nic, e.peer, ibv.StatusString(e.status), e.vendor)
}

// Unwrap maps the status to the engine's errors.
func (e *wcError) Unwrap() error {
	switch e.status {
	case ibv.WCRemAccessErr, ibv.WCRemInvReqErr:
		return engine.ErrRejected
	case ibv.WCRetryExcErr, ibv.WCRnrRetryExcErr:
		return engine.ErrTimeout
	}
	return nil
}

// retire moves ep's QPs to ERROR (in-flight work flushes back with errors
// and is retried elsewhere) and retries its pending work elsewhere.
func (ep *endpoint) retire(reason string) {
	ep.mu.Lock()
	var retry []*op
	if ep.state != epRetired {
		retry = ep.retireLocked(reason)
	}
	if ep.outs == 0 {
		ep.destroyLocked()
	}
	ep.mu.Unlock()
	for _, o := range retry {
		ep.n.t.fail(o, errEndpointGone, true)
	}
}

func (ep *endpoint) retireLocked(reason string) []*op {
	prev := ep.state
	if prev == epConnected {
		ep.obs.Open.Add(-1)
	}
	ep.state = epRetired
	ep.retired.Store(true)
	ep.since = time.Now()
	if prev != epIdle {
		for _, q := range ep.qps {
			if err := q.qp.ToState(ibv.QPSErr); err != nil {
				ep.n.t.log.Warn("rdma qp to ERROR failed", "device", ep.n.name, "qp", q.qp.Num, "err", err)
			}
		}
	}
	ep.n.t.log.Debug("rdma endpoint retired", "device", ep.n.name, "peer", ep.peerPath, "reason", reason, "outstanding", ep.outs)
	p := ep.pending
	ep.pending = nil
	return p
}

// destroyLocked destroys the QPs of a drained retired endpoint and forgets
// it.
func (ep *endpoint) destroyLocked() {
	if ep.qps == nil {
		return
	}
	n := ep.n
	n.mu.Lock()
	for _, q := range ep.qps {
		delete(n.qps, q.qp.Num)
	}
	n.eps.del(ep.peerPath, ep)
	for i, d := range n.draining {
		if d == ep {
			n.draining = append(n.draining[:i], n.draining[i+1:]...)
			break
		}
	}
	n.mu.Unlock()
	for _, q := range ep.qps {
		if err := q.qp.Destroy(); err != nil {
			n.t.log.Warn("rdma destroy qp failed", "device", n.name, "qp", q.qp.Num, "err", err)
		}
	}
	ep.qps = nil
}

// forceDrainLocked fails every outstanding work request of a retired
// endpoint whose completions did not come back (a device that stopped
// answering), so nothing waits forever.
func (ep *endpoint) forceDrainLocked() []*op {
	var out []*op
	for _, q := range ep.qps {
		for q.head < q.tail {
			i := q.head % uint64(len(q.ring))
			if o := q.ring[i]; o != nil {
				ep.n.inflight.Add(-int64(o.length))
				out = append(out, o)
			}
			q.ring[i] = nil
			q.head++
			ep.outs--
			ep.n.returnCredits(1)
		}
	}
	return out
}

// checkDeadline retires ep when its oldest work is older than d, and
// fails work of an endpoint retired for longer than d whose completions
// never came back.
func (ep *endpoint) checkDeadline(d time.Duration) {
	now := time.Now()
	ep.mu.Lock()
	var retry, dead []*op
	oldest := now
	for _, q := range ep.qps {
		if q.head < q.tail {
			if o := q.ring[q.head%uint64(len(q.ring))]; o != nil && o.s.Posted.Before(oldest) {
				oldest = o.s.Posted
			}
		}
	}
	for _, o := range ep.pending {
		if o.s.Posted.Before(oldest) {
			oldest = o.s.Posted
		}
	}
	switch {
	case ep.state == epRetired && ep.outs > 0 && now.Sub(ep.since) > min(d, 5*time.Second):
		dead = ep.forceDrainLocked()
		ep.destroyLocked()
	case ep.state != epRetired && now.Sub(oldest) > d:
		retry = ep.retireLocked("transfer deadline passed")
	case ep.state == epWaitAck && now.Sub(ep.since) > ep.n.t.cfg.HandshakeTimeout:
		retry = ep.retireLocked("no ready ack")
	}
	if ep.state == epRetired && ep.outs == 0 {
		ep.destroyLocked()
	}
	ep.mu.Unlock()
	for _, o := range append(retry, dead...) {
		ep.n.t.fail(o, fmt.Errorf("rdma %s -> %s: %w", ep.n.name, ep.peerPath, engine.ErrTimeout), true)
	}
}

// setupQPs brings every QP from RESET to RTS toward the peer's QPs, from
// local GID g. A failed transition is a *setupError naming its stage.
func (ep *endpoint) setupQPs(g gidChoice, peerGID string, peerLID uint16, peerQPNs []uint32) error {
	if len(peerQPNs) != len(ep.qps) {
		return fmt.Errorf("QP count mismatch in peer and local endpoints (%d vs %d), check MC_NUM_QP_PER_EP", len(peerQPNs), len(ep.qps))
	}
	gid, err := ibv.ParseGID(peerGID)
	if err != nil {
		return fmt.Errorf("invalid peer GID: %s", peerGID)
	}
	n := ep.n
	cfg := n.t.cfg
	access := ibv.AccessLocalWrite | ibv.AccessRemoteRead | ibv.AccessRemoteWrite | ibv.AccessRemoteAtom
	for i, q := range ep.qps {
		if err := q.qp.ToState(ibv.QPSReset); err != nil {
			return &setupError{"reset", err}
		}
		if err := q.qp.ToInit(cfg.Port, cfg.PKeyIndex, access); err != nil {
			return &setupError{"init", fmt.Errorf("check the local port: %w", err)}
		}
		r := ibv.RTR{DGID: gid, DestQPNum: peerQPNs[i], DLID: peerLID, Port: cfg.Port, SGIDIndex: uint8(g.index),
			PathMTU: n.mtu, HopLimit: qpHopLimit, MinRNRTimer: qpMinRNRTimer, MaxDestRdAtomic: qpMaxRdAtomic, Global: true}
		if cfg.TrafficClass >= 0 {
			r.TrafficClass = uint8(cfg.TrafficClass)
		}
		if cfg.ServiceLevel >= 0 {
			r.SL = uint8(cfg.ServiceLevel)
		}
		if err := q.qp.ToRTR(r); err != nil {
			return &setupError{"rtr", fmt.Errorf("check mtu, gid (local index %d %s, peer %s), peer lid, peer qp num: %w", g.index, g.gid, peerGID, err)}
		}
		if err := q.qp.ToRTS(qpTimeout, qpRetryCount, qpRNRRetry, 0, qpMaxRdAtomic); err != nil {
			return &setupError{"rts", err}
		}
		q.head, q.tail = 0, 0
	}
	ep.peerQPNs = append([]uint32(nil), peerQPNs...)
	ep.gid = g
	return nil
}

// connect runs the active side of the handshake (Mooncake's
// setupConnectionsByActive); owned by the transport's wait group.
func (ep *endpoint) connect() {
	t := ep.n.t
	defer t.wg.Done()
	err := ep.doConnect()
	ep.obs.Dials.Add(1)
	if err != nil {
		ep.obs.DialErrors.Add(1)
	}
	ep.mu.Lock()
	var failed []*op
	if err != nil {
		if ep.state != epRetired {
			failed = ep.retireLocked("handshake failed")
		}
		if ep.outs == 0 {
			ep.destroyLocked()
		}
	} else {
		failed = ep.postLocked()
	}
	ep.mu.Unlock()
	if err != nil {
		t.log.Warn("rdma handshake failed", "device", ep.n.name, "peer", ep.peerPath, "rpc", ep.rpcAddr, "err", err)
	}
	for _, o := range failed {
		if o != nil {
			t.fail(o, engine.PathFailed(engine.FailoverRefused, fmt.Errorf("rdma connect %s -> %s: %w", ep.n.name, ep.peerPath, err)), true)
		}
	}
}

func (ep *endpoint) doConnect() error {
	t := ep.n.t
	ctx, cancel := context.WithTimeout(t.ctx, t.cfg.HandshakeTimeout)
	defer cancel()
	cc := t.e.RPCClientConfig() // the engine's key and TLS
	cc.Timeout = t.cfg.HandshakeTimeout
	var tried []gidChoice
	for retries := 0; ; retries++ {
		ep.mu.Lock()
		if ep.state != epConnecting {
			st := ep.state
			ep.mu.Unlock()
			if st == epConnected {
				return nil
			}
			return fmt.Errorf("endpoint %s", st)
		}
		g := ep.n.gid()
		tried = append(tried, g)
		local := ep.localDesc(g)
		addr := ep.rpcAddr
		ep.mu.Unlock()
		if addr == "" {
			return fmt.Errorf("no rpc address for %s", ep.peerPath)
		}
		reply, err := rpc.Call(ctx, addr, rpc.TypeConnection, handshake.Encode(local), cc)
		if err != nil {
			return err
		}
		peer, err := handshake.Decode(reply)
		if err != nil {
			return err
		}
		ep.mu.Lock()
		if ep.state == epConnected || ep.state == epWaitAck {
			// Simultaneous open: the peer connected to us meanwhile, with
			// the same QPs as its reply names.
			if slices.Equal(ep.peerQPNs, peer.QPNum) {
				ep.markConnected()
				ep.mu.Unlock()
				if peer.ReadyAckSupported() {
					return ep.sendReadyAck(ctx, addr, local, cc)
				}
				return nil
			}
			ep.mu.Unlock()
			return fmt.Errorf("peer QP list mismatch on a connected endpoint")
		}
		if ep.state != epConnecting {
			st := ep.state
			ep.mu.Unlock()
			return fmt.Errorf("endpoint became %s during the handshake", st)
		}
		if peer.ReplyMsg != "" {
			ep.mu.Unlock()
			return fmt.Errorf("handshake rejected by peer: %s", peer.ReplyMsg)
		}
		if peer.LocalNICPath != ep.peerPath || peer.PeerNICPath != local.LocalNICPath {
			ep.mu.Unlock()
			return fmt.Errorf("handshake reply mismatch: peer says %s -> %s, expected %s -> %s",
				peer.LocalNICPath, peer.PeerNICPath, ep.peerPath, local.LocalNICPath)
		}
		ep.mu.Unlock()
		if peer.LocalGID == "" {
			// As Mooncake: the peer NIC's GID and LID from its descriptor.
			if peer.LocalGID, peer.LocalLID, err = t.peerNIC(ctx, ep.peerPath); err != nil {
				return err
			}
		}
		ep.mu.Lock()
		if ep.state != epConnecting {
			st := ep.state
			ep.mu.Unlock()
			return fmt.Errorf("endpoint became %s during the handshake", st)
		}
		if err := ep.setupQPs(g, peer.LocalGID, peer.LocalLID, peer.QPNum); err != nil {
			if ep.n.gidRetryable(err, retries) {
				ep.mu.Unlock()
				if ep.n.reprobeGID(g, tried) {
					ep.mu.Lock()
					rerr := ep.renewQPsLocked()
					ep.mu.Unlock()
					if rerr != nil {
						return rerr
					}
					t.log.Warn("rdma handshake retried with another local GID", "device", ep.n.name, "peer", ep.peerPath,
						"from", g.gid.String(), "to", ep.n.gid().gid.String(), "attempt", retries+1, "max", t.cfg.AutoGIDRetries, "err", err)
					continue
				}
				return err
			}
			ep.mu.Unlock()
			return err
		}
		ackNeeded := peer.ReadyAckSupported()
		if !ackNeeded {
			ep.markConnected()
		}
		ep.mu.Unlock()
		if ackNeeded {
			if err := ep.sendReadyAck(ctx, addr, local, cc); err != nil {
				return err
			}
			ep.mu.Lock()
			if ep.state == epConnecting {
				ep.markConnected()
			}
			ep.mu.Unlock()
		}
		t.log.Debug("rdma endpoint connected", "device", ep.n.name, "peer", ep.peerPath, "qps", local.QPNum, "peer_qps", peer.QPNum)
		return nil
	}
}

// sendReadyAck tells the passive peer that our QPs are ready (Mooncake's
// ready-ACK phase): the same descriptor with ready_ack true.
func (ep *endpoint) sendReadyAck(ctx context.Context, addr string, local *handshake.Desc, cc rpc.ClientConfig) error {
	tr := true
	ack := *local
	ack.ReadyAck = &tr
	reply, err := rpc.Call(ctx, addr, rpc.TypeConnection, handshake.Encode(&ack), cc)
	if err != nil {
		return fmt.Errorf("ready ack: %w", err)
	}
	r, err := handshake.Decode(reply)
	if err != nil {
		return fmt.Errorf("ready ack: %w", err)
	}
	if r.ReplyMsg != "" {
		return fmt.Errorf("ready ack rejected by peer: %s", r.ReplyMsg)
	}
	return nil
}

// passive answers a peer's Connection request for ep (Mooncake's
// setupConnectionsByPassive), bringing new QPs up from local GID g. The
// caller has filled in a missing local_gid from the peer's descriptor.
func (ep *endpoint) passive(peer *handshake.Desc, g gidChoice) (*handshake.Desc, *endpoint, error) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if peer.IsReadyAck() {
		if ep.state != epWaitAck && ep.state != epConnected {
			//lint:ignore ST1005 Mooncake's own text: it goes back to the peer in the handshake reply
			return nil, nil, fmt.Errorf("Received RDMA ready ACK for unconnected endpoint")
		}
		if !slices.Equal(ep.peerQPNs, peer.QPNum) {
			//lint:ignore ST1005 Mooncake's own text: it goes back to the peer in the handshake reply
			return nil, nil, fmt.Errorf("Received stale RDMA ready ACK with mismatched peer QP numbers")
		}
		ep.markConnected()
		ep.since = time.Now()
		return ep.localDesc(ep.gid), ep, nil
	}
	if ep.state == epConnected || ep.state == epWaitAck {
		if slices.Equal(ep.peerQPNs, peer.QPNum) {
			if !peer.ReadyAckSupported() {
				ep.markConnected()
			}
			return ep.localDesc(ep.gid), ep, nil
		}
		// The peer restarted: this endpoint's QPs talk to QPs gone.
		return nil, nil, errReconnect
	}
	if ep.state == epRetired {
		return nil, nil, errReconnect
	}
	if peer.LocalGID == "" {
		//lint:ignore ST1005 Mooncake's own text: it goes back to the peer in the handshake reply
		return nil, nil, fmt.Errorf("Peer nic not found in that server: %s", ep.peerPath)
	}
	if err := ep.setupQPs(g, peer.LocalGID, peer.LocalLID, peer.QPNum); err != nil {
		return nil, nil, err
	}
	ep.since = time.Now()
	if peer.ReadyAckSupported() {
		ep.state = epWaitAck
	} else {
		ep.markConnected()
	}
	return ep.localDesc(g), ep, nil
}

var errReconnect = fmt.Errorf("endpoint must be re-established")
