package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/kvferry/kvferry/store/wire"
)

// Put grants (store/master grants.go): space a master reserved for this
// client's puts. A put that fits places its replicas in grants itself,
// writes them, and publishes the object with one PutCommit: one master
// round trip instead of PutStart and PutEnd. Puts that do not fit (too
// large, preferred segments, more replicas than grantMaxReplicas, no grant
// to be had) and every put over gRPC or to an embedded master take the
// PutStart/PutEnd way, as do puts whose commit the master refused.
//
// The client writes into a grant only while it knows the master that
// granted it still holds it for this client:
//   - over the mux connection that acquired it, and only while that
//     connection is open (wire.MuxClient.Session: a master that stops,
//     dies or steps down closes it, which the socket shows before the
//     write);
//   - within two thirds of the master's grant lease after the send time of
//     the last request whose answer confirmed it (a heartbeat, an
//     AcquireGrants or a PutCommit answered at the grant's generation; the
//     remaining third covers the copy);
//   - never after the master said it took grants back (a larger grant
//     generation) or asked for a remount (it forgot this client).
// These hold at each transfer, not only when the put placed its replicas:
// writeReplicas checks them again (writeDeadline) right before it submits
// each transfer, and bounds the transfer (and every wait before it: the
// holder's metadata, a staging chunk) to the write deadline.
// A grant that may no longer be valid is retired: nothing more is placed
// in it, and the heartbeat returns it once no put is writing into it.
// Returns go only over the connection the grant came over (the session
// recorded with it): a master reached over another connection may be
// another master, whose grants of the same ids are not ours.

// Grant tunables.
const (
	// grantMaxReplicas: puts with more replicas do not use grants.
	grantMaxReplicas = 4
	// grantMaxShare: a put uses grants when its aligned size is at most
	// 1/grantMaxShare of the master's grant size.
	grantMaxShare = 4
	// grantIdle: a grant no put used for this long is returned.
	grantIdle = 5 * time.Second
	// grantAlign is the master's allocation alignment inside a segment.
	grantAlign = 64
)

// extentAbs is a free range of a grant, at absolute addresses.
type extentAbs struct{ addr, len uint64 }

// clientGrant is one grant and what puts took of it.
type clientGrant struct {
	id                       uint64
	segID, segName, protocol string
	addr                     uint64      // start of the granted range
	gen                      uint64      // the grant generation it came at
	session                  uint64      // the mux session it came over
	free                     []extentAbs // sorted by addr, never adjacent
	inflight                 int         // puts writing into it now
	retired                  bool        // nothing more goes in; returned when inflight is 0
	unmounted                bool        // its segment is being unmounted: no put may write into it
	lastUse                  time.Time
}

// largestFree returns the length of the largest free range.
func (g *clientGrant) largestFree() uint64 {
	var m uint64
	for _, e := range g.free {
		m = max(m, e.len)
	}
	return m
}

// take carves n bytes, first fit; 0 when nothing fits.
func (g *clientGrant) take(n uint64) uint64 {
	for i := range g.free {
		e := &g.free[i]
		if e.len < n {
			continue
		}
		addr := e.addr
		e.addr += n
		e.len -= n
		if e.len == 0 {
			g.free = slices.Delete(g.free, i, i+1)
		}
		return addr
	}
	return 0
}

// give puts [addr, addr+n) back, merging with its neighbours.
func (g *clientGrant) give(addr, n uint64) {
	i, _ := slices.BinarySearchFunc(g.free, addr, func(e extentAbs, a uint64) int {
		switch {
		case e.addr < a:
			return -1
		case e.addr > a:
			return 1
		}
		return 0
	})
	prev := i > 0 && g.free[i-1].addr+g.free[i-1].len == addr
	next := i < len(g.free) && addr+n == g.free[i].addr
	switch {
	case prev && next:
		g.free[i-1].len += n + g.free[i].len
		g.free = slices.Delete(g.free, i, i+1)
	case prev:
		g.free[i-1].len += n
	case next:
		g.free[i].addr = addr
		g.free[i].len += n
	default:
		g.free = slices.Insert(g.free, i, extentAbs{addr, n})
	}
}

// slot is one replica of a put placed in a grant.
type slot struct {
	g    *clientGrant
	addr uint64
	n    uint64 // aligned length taken
}

// pendingReturn is a grant to give back over the mux session it came over.
type pendingReturn struct{ id, session uint64 }

// grantPool holds a client's grants. Safe for concurrent use.
type grantPool struct {
	mu struct {
		sync.Mutex
		conn    *masterConn // the connection the grants came over
		session uint64      // its mux session; 0: none yet (after an offer)
		epoch   uint64      // counts offers: an acquire that spans one keeps nothing
		bytes   uint64      // the master's grant size; 0: it offers none
		lease   time.Duration
		renewed time.Time // send time of the last request that confirmed the grants
		gen     uint64    // the grant generation they were confirmed at
		grants  []*clientGrant
		// acquiring is closed when the AcquireGrants in flight ends.
		acquiring chan struct{}
		// toReturn are grants taken out of the pool whose return may not
		// have reached the master, with the session they came over.
		toReturn []pendingReturn
		// idleUntil: no grant requests before it (the last one failed).
		idleUntil time.Time
	}
}

// grantBackoff is how long puts go the PutStart way after a grant request
// failed (no space, too many grants, an unknown client, ...).
const grantBackoff = time.Second

// offer takes a master's grant terms from its ReMountSegments answer. The
// master was (re)told about this client, so no grant held so far is used
// again: a master that answers a remount either never granted them or took
// them back (an expiry) or is another one. They are retired, not dropped:
// a concurrent put may have acquired some on this very connection after
// the master handled the remount (real grants, to give back), and a put
// may still be writing into some (they go back once it is done). Returns
// go over their own session only, so ids of another master are never
// sent; the master ignores ids it does not know.
func (p *grantPool) offer(mc *masterConn, resp *wire.ReMountSegmentsResponse) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.conn != mc {
		// Grants of another connection are never returned over mc: its
		// session numbers are its own, and its master may be another.
		// Puts writing into them see the connection replaced and stop.
		p.mu.grants = nil
		p.mu.toReturn = nil
	}
	p.retireAllLocked()
	p.mu.epoch++
	p.mu.idleUntil = time.Time{}
	p.mu.conn = mc
	p.mu.session = 0
	p.mu.bytes, p.mu.lease = 0, 0
	if mc.rpc == MasterRPCMux && resp.GetGrantBytes() > 0 && resp.GetGrantLeaseMs() > 0 {
		p.mu.bytes = resp.GetGrantBytes()
		p.mu.lease = time.Duration(resp.GetGrantLeaseMs()) * time.Millisecond
	}
}

// eligible reports whether a put of size bytes with cfg may use grants.
func (p *grantPool) eligible(mc *masterConn, size uint64, cfg ReplicateConfig) bool {
	if len(cfg.PreferredSegments) > 0 || cfg.ReplicaNum > grantMaxReplicas {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.bytes > 0 && p.mu.conn == mc && alignedLen(size) <= p.mu.bytes/grantMaxShare &&
		(len(p.mu.grants) > 0 || !time.Now().Before(p.mu.idleUntil))
}

func alignedLen(n uint64) uint64 { return (n + grantAlign - 1) &^ (grantAlign - 1) }

// checkLocked retires every grant that may no longer be valid: a closed or
// replaced connection, or a connection other than mc. It reports whether
// the grants may be written into now (the lease held recently enough).
// With peek false it looks at the connection without the socket peek
// (masterConn.sessionKnown): reserve's check, which writeDeadline repeats
// with the peek right before the put's transfer.
func (p *grantPool) checkLocked(mc *masterConn, now time.Time, peek bool) bool {
	if p.mu.conn != mc {
		return false
	}
	if len(p.mu.grants) > 0 {
		id, ok := mc.sessionKnown()
		if peek {
			id, ok = mc.session()
		}
		if !ok || id != p.mu.session {
			p.retireAllLocked()
			return false
		}
	}
	return now.Before(p.mu.renewed.Add(p.mu.lease * 2 / 3))
}

func (p *grantPool) retireAllLocked() {
	for _, g := range p.mu.grants {
		g.retired = true
	}
}

// retireAll retires every grant (Close).
func (p *grantPool) retireAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.retireAllLocked()
}

// retireSegment retires the grants in segment segID, which this client is
// unmounting, so that no put writes into them any more (writeDeadline
// refuses them), and returns how many puts are still writing into them.
func (p *grantPool) retireSegment(segID string) (writing int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, g := range p.mu.grants {
		if g.segID == segID {
			g.retired, g.unmounted = true, true
			writing += g.inflight
		}
	}
	return writing
}

// waitSegmentIdle waits until no put writes into a grant of segment segID
// (retireSegment called before), or ctx ends.
func (p *grantPool) waitSegmentIdle(ctx context.Context, segID string) error {
	for {
		p.mu.Lock()
		writing := 0
		for _, g := range p.mu.grants {
			if g.segID == segID {
				writing += g.inflight
			}
		}
		p.mu.Unlock()
		if writing == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d puts still writing into segment %s: %w", writing, segID, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

// reserve places n replicas of size bytes in grants on distinct segment
// names; false when the grants cannot take them now. Only grants of the
// pool's current session and generation are used (a grant of an older
// generation may be one the master took back).
func (p *grantPool) reserve(mc *masterConn, dst []slot, n int, size uint64) ([]slot, bool) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.checkLocked(mc, now, false) {
		return nil, false
	}
	need := alignedLen(size)
	out := dst[:0]
	for _, g := range p.mu.grants {
		if len(out) == n {
			break
		}
		if g.retired || g.gen != p.mu.gen || g.session != p.mu.session || g.largestFree() < need ||
			slices.ContainsFunc(out, func(s slot) bool { return s.g.segName == g.segName }) {
			continue
		}
		out = append(out, slot{g: g, addr: g.take(need), n: need})
	}
	if len(out) < n {
		for _, s := range out {
			s.g.give(s.addr, s.n)
		}
		return nil, false
	}
	for _, s := range out {
		s.g.inflight++
		s.g.lastUse = now
	}
	return out, true
}

// errGrantLapsed: a put stopped writing into its grants because it can no
// longer be sure the master still holds them for this client.
var errGrantLapsed = errors.New("put grant lapsed")

// writeDeadline is checked right before each transfer into slots: it
// returns the time until which the put may start writing into them (two
// thirds of the lease after the last confirmation, the bound reserve uses),
// or errGrantLapsed when that has passed, when mc is no longer the grants'
// connection or is closed or replaced (another session), or when a grant
// of slots is not of the current generation (the master took grants back
// since) or session (an offer since).
func (p *grantPool) writeDeadline(mc *masterConn, slots []slot) (time.Time, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.conn != mc {
		return time.Time{}, fmt.Errorf("master connection replaced: %w", errGrantLapsed)
	}
	id, ok := mc.session()
	if !ok || id != p.mu.session {
		p.retireAllLocked()
		return time.Time{}, fmt.Errorf("master connection %d closed or replaced (now %d, up %t): %w",
			p.mu.session, id, ok, errGrantLapsed)
	}
	for _, s := range slots {
		if s.g.unmounted {
			return time.Time{}, fmt.Errorf("grant %d: segment %s is being unmounted: %w", s.g.id, s.g.segID, errGrantLapsed)
		}
		if s.g.session != id || s.g.gen != p.mu.gen {
			return time.Time{}, fmt.Errorf("grant %d of generation %d, session %d; now %d, %d: %w",
				s.g.id, s.g.gen, s.g.session, p.mu.gen, id, errGrantLapsed)
		}
	}
	d := p.mu.renewed.Add(p.mu.lease * 2 / 3)
	if !time.Now().Before(d) {
		return time.Time{}, fmt.Errorf("lease confirmed at %s, write deadline %s passed: %w",
			p.mu.renewed.Format(time.StampMilli), d.Format(time.StampMilli), errGrantLapsed)
	}
	return d, nil
}

// acquire asks the master for grants so that n replicas of size bytes
// fit; one acquisition runs at a time (the others wait for it). It returns
// false when the caller should put without grants.
func (c *Client) acquireGrants(ctx context.Context, mc *masterConn, n int, size uint64) bool {
	p := &c.grants
	need := alignedLen(size)
	p.mu.Lock()
	if d := p.mu.acquiring; d != nil {
		p.mu.Unlock()
		select {
		case <-d:
			return true // try reserve again
		case <-ctx.Done():
			return false
		}
	}
	if p.mu.conn != mc || p.mu.bytes == 0 || time.Now().Before(p.mu.idleUntil) {
		p.mu.Unlock()
		return false
	}
	p.checkLocked(mc, time.Now(), true)
	// Grants that cannot take this object are full for it: retire them
	// and ask for as many as the replicas need, elsewhere than the
	// segments whose grants still have room.
	var exclude []string
	have := 0
	for _, g := range p.mu.grants {
		switch {
		case g.retired:
		case g.largestFree() < need:
			g.retired = true
		case !slices.Contains(exclude, g.segName):
			exclude = append(exclude, g.segName)
			have++
		}
	}
	if have >= n {
		// Room enough, but not confirmed lately (heartbeats failed or
		// late): this put goes the PutStart way, and a heartbeat now.
		p.mu.Unlock()
		select {
		case c.kick <- struct{}{}:
		default:
		}
		return false
	}
	count := n - have
	session, ok := mc.session()
	if !ok {
		p.mu.Unlock()
		return false // not connected: the PutStart way dials
	}
	// Spent grants of this session go back with the request.
	returns := p.takeReturnsLocked(session, time.Time{})
	epoch := p.mu.epoch
	done := make(chan struct{})
	p.mu.acquiring = done
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.mu.acquiring = nil
		p.mu.Unlock()
		close(done)
	}()

	sent := time.Now()
	rctx, cancel := c.rpcCtx(wire.WithMuxSession(ctx, session))
	resp, err := mc.mc.AcquireGrants(rctx, &wire.AcquireGrantsRequest{ClientId: c.clientID, Count: uint32(count),
		MinBytes: need, ExcludeSegments: exclude, ReturnGrantIds: pendingIDs(returns)})
	cancel()
	c.metrics.grantAcquires.Add(1)
	if err != nil {
		err = c.rpcErr(err)
		c.log.Debug("acquire put grants failed", "err", err)
		p.mu.Lock()
		p.mu.idleUntil = time.Now().Add(grantBackoff)
		if code := wire.CodeOf(err); code == wire.ErrRPCFail || code == wire.ErrRPCTimeout {
			p.mu.toReturn = append(p.mu.toReturn, returns...) // maybe not returned
		}
		p.mu.Unlock()
		return false
	}
	c.metrics.grantReturns.Add(uint64(len(returns)))
	now, ok2 := mc.session()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.acceptLocked(mc, session, epoch, sent, resp, ok2 && now == session)
}

// acceptLocked adds the grants of an AcquireGrants answer to a request sent
// at sent over session, when the pool's epoch was epoch; up: that session
// was still the connection's, and open, when the answer came. Grants that
// may not be valid now are kept retired, only to be returned: the
// connection changed under the call (they may come from a master that is
// gone), an offer came meanwhile (the master may have forgotten them), or
// an answer at a larger generation came meanwhile (this one is older: the
// master took grants back since, maybe some of these). It reports whether
// the grants are usable.
func (p *grantPool) acceptLocked(mc *masterConn, session, epoch uint64, sent time.Time,
	resp *wire.AcquireGrantsResponse, up bool) bool {
	gen := resp.GetGrantGeneration()
	stale := p.mu.conn != mc || !up || p.mu.epoch != epoch || (p.mu.session == session && gen < p.mu.gen)
	if !stale && p.mu.session != session {
		// The first grants of this session: its generations start here.
		p.retireAllLocked()
		p.mu.session = session
		p.mu.gen = gen
		p.mu.renewed = sent
	}
	if !stale {
		p.confirmLocked(sent, gen)
	}
	for _, g := range resp.GetGrants() {
		p.mu.grants = append(p.mu.grants, newClientGrant(g, gen, session, stale))
	}
	return !stale
}

func newClientGrant(g *wire.Grant, gen, session uint64, retired bool) *clientGrant {
	return &clientGrant{id: g.GetId(), segID: g.GetSegmentId(), segName: g.GetSegmentName(), protocol: g.GetProtocol(),
		addr: g.GetAddress(), gen: gen, session: session,
		free: []extentAbs{{g.GetAddress(), g.GetSize()}}, retired: retired, lastUse: time.Now()}
}

// confirmLocked records an answer at grant generation gen to a request
// sent at sent, over the grants' connection: grants of that generation are
// confirmed as of sent; a larger generation retires the older grants (and
// only answers at it confirm from then on, as of their own send time).
func (p *grantPool) confirmLocked(sent time.Time, gen uint64) {
	if gen > p.mu.gen {
		for _, g := range p.mu.grants {
			if g.gen < gen {
				g.retired = true
			}
		}
		p.mu.gen = gen
		p.mu.renewed = sent
		return
	}
	if gen == p.mu.gen && sent.After(p.mu.renewed) {
		p.mu.renewed = sent
	}
}

// done ends a put's use of its slots: committed (the master took the
// ranges), given back (the ranges are free again: the put failed before the
// master took them), or retired (the grants are not to be trusted).
func (p *grantPool) done(slots []slot, how slotEnd) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range slots {
		s.g.inflight--
		switch how {
		case slotGiveBack:
			s.g.give(s.addr, s.n)
		case slotRetire:
			s.g.retired = true
		}
	}
}

type slotEnd int

const (
	slotCommitted slotEnd = iota
	slotGiveBack
	slotRetire
)

// committed records a successful PutCommit sent at sent. The commit went
// over the grants' session (pinned) and its answer came back over it, so
// what the client knows of the connection (no peek) tells whether that is
// still the grants' session.
func (p *grantPool) committed(mc *masterConn, slots []slot, sent time.Time, gen uint64) {
	p.done(slots, slotCommitted)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.conn == mc {
		if id, ok := mc.sessionKnown(); ok && id == p.mu.session {
			p.confirmLocked(sent, gen)
		}
	}
}

// heartbeat records a Ping answer to a request sent at sent over mc.
func (p *grantPool) heartbeat(mc *masterConn, sent time.Time, resp *wire.PingResponse) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.conn != mc || len(p.mu.grants) == 0 {
		return
	}
	if resp.GetStatus() != wire.ClientStatus_CLIENT_STATUS_OK {
		p.retireAllLocked()
		return
	}
	if id, ok := mc.session(); !ok || id != p.mu.session {
		p.retireAllLocked()
		return
	}
	p.confirmLocked(sent, resp.GetGrantGeneration())
	if resp.GetReturnGrants() {
		for _, g := range p.mu.grants {
			if g.inflight == 0 {
				g.retired = true
			}
		}
	}
}

// takeReturns takes out of the pool the grants to give back over mc's
// current session (see takeReturnsLocked); nil when mc is not the grants'
// connection or is down.
func (p *grantPool) takeReturns(mc *masterConn, idleBefore time.Time) ([]pendingReturn, uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.conn != mc {
		return nil, 0
	}
	session, ok := mc.session()
	if !ok {
		return nil, 0 // kept: dropped once another session is up
	}
	return p.takeReturnsLocked(session, idleBefore), session
}

// takeReturnsLocked takes out of the pool the grants to give back over
// session: retired ones and ones idle since before idleBefore, if no put
// writes into them, and those whose return may have been lost. Those of
// other sessions are dropped: the master that granted them is gone or
// forgot them (a closed connection), and the one reached now may be
// another, to which their ids mean nothing or someone else's grants.
func (p *grantPool) takeReturnsLocked(session uint64, idleBefore time.Time) []pendingReturn {
	var out []pendingReturn
	for _, r := range p.mu.toReturn {
		if r.session == session {
			out = append(out, r)
		}
	}
	p.mu.toReturn = nil
	p.mu.grants = slices.DeleteFunc(p.mu.grants, func(g *clientGrant) bool {
		if g.inflight == 0 && (g.retired || g.lastUse.Before(idleBefore)) {
			if g.session == session {
				out = append(out, pendingReturn{g.id, g.session})
			}
			return true
		}
		return false
	})
	return out
}

func pendingIDs(rs []pendingReturn) []uint64 {
	if len(rs) == 0 {
		return nil
	}
	ids := make([]uint64, len(rs))
	for i, r := range rs {
		ids[i] = r.id
	}
	return ids
}

// returnGrants gives the master back the grants the pool is done with.
// The heartbeat calls it; Close calls it with everything retired.
func (c *Client) returnGrants(ctx context.Context, mc *masterConn, idleBefore time.Time) {
	rs, session := c.grants.takeReturns(mc, idleBefore)
	if len(rs) == 0 {
		return
	}
	rctx, cancel := c.rpcCtx(wire.WithMuxSession(ctx, session))
	_, err := mc.mc.ReturnGrants(rctx, &wire.ReturnGrantsRequest{ClientId: c.clientID, GrantIds: pendingIDs(rs)})
	cancel()
	if err != nil {
		// Tried again at the next heartbeat if the session is still up;
		// the master forgets them with this client if it is gone, or
		// fences them when it expires it.
		c.log.Debug("return put grants failed", "grants", len(rs), "err", wire.FromStatus(err))
		c.grants.mu.Lock()
		if c.grants.mu.conn == mc {
			c.grants.mu.toReturn = append(c.grants.mu.toReturn, rs...)
		}
		c.grants.mu.Unlock()
		return
	}
	c.metrics.grantReturns.Add(uint64(len(rs)))
}

// putGranted puts through grants. It reports false (and nothing done that
// anyone can see) when the put must go the PutStart/PutEnd way.
func (c *Client) putGranted(ctx context.Context, mc *masterConn, key string, data span, cfg ReplicateConfig,
	upsert bool) (bool, error) {
	n := max(cfg.ReplicaNum, 1)
	st := commitStates.Get().(*commitState)
	defer st.release()
	slots, ok := c.grants.reserve(mc, st.slots[:0], n, data.size)
	if !ok {
		if !c.acquireGrants(ctx, mc, n, data.size) {
			return false, nil
		}
		if slots, ok = c.grants.reserve(mc, st.slots[:0], n, data.size); !ok {
			return false, nil
		}
	}
	reps, placed := st.lists(len(slots))
	for i, s := range slots {
		*reps[i] = wire.Replica{SegmentName: s.g.segName, SegmentId: s.g.segID, Protocol: s.g.protocol,
			Address: s.addr, Size: data.size}
		*placed[i] = wire.GrantedReplica{GrantId: s.g.id, Address: s.addr}
	}
	bound := &writeBound{check: func() (time.Time, error) { return c.grants.writeDeadline(mc, slots) }}
	if werr := c.writeReplicas(ctx, data, reps, bound); werr != nil {
		// Nothing was published. The holder may be gone (the master may
		// not know yet), or the grants lapsed before a transfer: the
		// grants go, and the PutStart way places the object where the
		// master sees fit.
		c.grants.done(slots, slotRetire)
		if errors.Is(werr, errGrantLapsed) || bound.allowed() != nil { // or a wait ran into the deadline
			c.metrics.grantLapses.Add(1)
		}
		c.log.Debug("put into grant failed, putting with put start", "key", key, "err", werr)
		c.metrics.grantFallbacks.Add(1)
		return false, nil
	}
	sent := time.Now()
	cfg.fillWire(&st.cfg)
	st.req = wire.PutCommitRequest{TenantId: c.tenant, ClientId: c.clientID, Key: key, Size: data.size,
		Config: &st.cfg, Upsert: upsert, Replicas: placed, Versioned: cfg.ver != nil, ExpectedVersion: cfg.ver.expected()}
	// Over the grants' session only (a new one may reach another master).
	var resp *wire.PutCommitResponse
	var err error
	if mux, ok := mc.mc.(*wire.MuxClient); ok {
		rctx, cancel := c.rpcCtx(ctx)
		resp = &st.resp
		err = mux.PutCommitOn(rctx, slots[0].g.session, &st.req, resp)
		cancel()
	} else {
		rctx, cancel := c.rpcCtx(wire.WithMuxSession(ctx, slots[0].g.session))
		resp, err = mc.mc.PutCommit(rctx, &st.req)
		cancel()
	}
	if err == nil {
		c.grants.committed(mc, slots, sent, resp.GetGrantGeneration())
		c.metrics.grantPuts.Add(1)
		cfg.ver.set(resp.GetVersion())
		c.hintPut(key, data.size, reps, resp)
		return true, nil
	}
	err = c.rpcErr(err)
	if wire.CodeOf(err) == wire.ErrInvalidVersion {
		c.grants.done(slots, slotGiveBack) // the master took nothing
		return true, fmt.Errorf("put %q: %w", key, err)
	}
	if wire.CodeOf(err) == wire.ErrObjectAlreadyExists {
		c.grants.done(slots, slotGiveBack) // the master took nothing
		if !upsert {
			return true, nil
		}
	} else {
		// Refused (grant taken back) or unknown (the call failed): the
		// ranges are not to be used again; the PutStart way decides.
		c.grants.done(slots, slotRetire)
	}
	c.log.Debug("put commit failed, putting with put start", "key", key, "err", err)
	c.metrics.grantFallbacks.Add(1)
	return false, nil
}

// commitState holds what a put into grants sends and reads back: the
// grant slots it takes, the replicas it writes, the PutCommit request with its config and granted
// replicas, and the answer, for up to four replicas without allocating
// (more are made as needed). A request is encoded when sent and kept by
// no wire (mux, gRPC, the in-process master); the replicas are read by
// the transfers and copied by the put's hint (hintPut); nothing of it
// outlives putGranted.
type commitState struct {
	req     wire.PutCommitRequest
	cfg     wire.ReplicateConfig
	resp    wire.PutCommitResponse
	reps    [4]wire.Replica
	repPtrs [4]*wire.Replica
	placed  [4]wire.GrantedReplica
	plPtrs  [4]*wire.GrantedReplica
	slots   [4]slot
}

var commitStates = sync.Pool{New: func() any { return new(commitState) }}

// lists returns n replicas and n granted replicas to fill.
func (st *commitState) lists(n int) ([]*wire.Replica, []*wire.GrantedReplica) {
	if n > len(st.reps) {
		reps := make([]*wire.Replica, n)
		placed := make([]*wire.GrantedReplica, n)
		for i := range n {
			reps[i], placed[i] = new(wire.Replica), new(wire.GrantedReplica)
		}
		return reps, placed
	}
	for i := range n {
		st.repPtrs[i], st.plPtrs[i] = &st.reps[i], &st.placed[i]
	}
	return st.repPtrs[:n], st.plPtrs[:n]
}

// release clears what st refers to and gives it back.
func (st *commitState) release() {
	tags := st.resp.ReplicaTags[:0]
	*st = commitState{}
	st.resp.ReplicaTags = tags
	commitStates.Put(st)
}
