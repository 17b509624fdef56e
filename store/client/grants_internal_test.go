package client

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/store/master"
	"github.com/kvferry/kvferry/store/wire"
)

// grantRig is a master, a holder lending a segment and a writer that holds
// put grants in it, all over mux on 127.0.0.1. The writer's heartbeat is
// an hour away: the tests drive its pool.
type grantRig struct {
	srv  *master.Server
	h, w *Client
	mc   *masterConn // w's connection
}

func newGrantRig(t *testing.T, mcfg master.Config, wcfg Config) *grantRig {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	mcfg.RPCAddr = "127.0.0.1:0"
	srv, err := master.NewServer(mcfg)
	assert.NilError(t, err)
	t.Cleanup(func() { srv.Close() })
	h, err := New(ctx, Config{MasterServerAddr: srv.Addr(), LocalHostname: "127.0.0.1", GlobalSegmentSize: 16 << 20,
		PingInterval: 100 * time.Millisecond})
	assert.NilError(t, err)
	t.Cleanup(func() { h.Close() })
	wcfg.MasterServerAddr, wcfg.LocalHostname, wcfg.PingInterval = srv.Addr(), "127.0.0.1", time.Hour
	w, err := New(ctx, wcfg)
	assert.NilError(t, err)
	t.Cleanup(func() { w.Close() })
	assert.Equal(t, w.conn.Load().rpc, MasterRPCMux)
	return &grantRig{srv: srv, h: h, w: w, mc: w.conn.Load()}
}

// grants returns the number of grants the master holds.
func (r *grantRig) grants() int { return r.srv.Service().Metrics().Grants }

func testPattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

// TestWriteDeadline: a put's slots may be written into only while the
// grants' connection is the same and open, the slots' grants are of the
// current generation and session, and two thirds of the lease since the
// last confirmation have not passed; the deadline moves with renewals.
func TestWriteDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r := newGrantRig(t, master.Config{GrantLease: 3 * time.Second}, Config{})
	assert.NilError(t, r.w.Put(ctx, "k", testPattern(1000, 1), ReplicateConfig{}))
	p := &r.w.grants
	slots, ok := p.reserve(r.mc, nil, 1, 1000)
	assert.Assert(t, ok)
	defer p.done(slots, slotGiveBack)

	d, err := p.writeDeadline(r.mc, slots)
	assert.NilError(t, err)
	p.mu.Lock()
	assert.Equal(t, d, p.mu.renewed.Add(2*time.Second))
	renewed, gen, session := p.mu.renewed, p.mu.gen, p.mu.session
	p.mu.Unlock()

	lapses := func(what string, change, undo func()) {
		t.Helper()
		p.mu.Lock()
		change()
		p.mu.Unlock()
		_, err := p.writeDeadline(r.mc, slots)
		assert.Assert(t, errors.Is(err, errGrantLapsed), "%s: %v", what, err)
		p.mu.Lock()
		undo()
		p.mu.Unlock()
		_, err = p.writeDeadline(r.mc, slots)
		assert.NilError(t, err, what)
	}
	lapses("deadline passed", func() { p.mu.renewed = time.Now().Add(-2 * time.Second) },
		func() { p.mu.renewed = renewed })
	lapses("generation moved on", func() { p.mu.gen = gen + 1 }, func() { p.mu.gen = gen })
	lapses("another session", func() { p.mu.session = session + 1 }, func() { p.mu.session = session })
	lapses("another connection", func() { p.mu.conn = &masterConn{} }, func() { p.mu.conn = r.mc })
	// (Undoing the session leaves the grants retired: the slots are still
	// checked, as a put already holds them.)

	// A renewal moves the deadline.
	p.mu.Lock()
	p.confirmLocked(renewed.Add(time.Second), gen)
	p.mu.Unlock()
	d2, err := p.writeDeadline(r.mc, slots)
	assert.NilError(t, err)
	assert.Equal(t, d2, d.Add(time.Second))

	// A closed connection: lapsed, and the pool's grants retired.
	r.mc.closer.Close()
	_, err = p.writeDeadline(r.mc, slots)
	assert.Assert(t, errors.Is(err, errGrantLapsed), "%v", err)
}

// TestUnmountRetiresSegmentGrants: a segment being unmounted takes its
// put grants out of use at once: no put places a replica in them, a put
// that holds slots in them may not write any more, and the unmount waits
// for the puts writing into them before the memory goes (a grant put
// copies into its own segment with no engine pin; it once wrote into an
// unmapped segment: TestMountedSegments, -race -count=8).
func TestUnmountRetiresSegmentGrants(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r := newGrantRig(t, master.Config{GrantLease: 3 * time.Second}, Config{})
	assert.NilError(t, r.w.Put(ctx, "k", testPattern(1000, 1), ReplicateConfig{}))
	p := &r.w.grants
	slots, ok := p.reserve(r.mc, nil, 1, 1000)
	assert.Assert(t, ok)
	seg := slots[0].g.segID
	_, err := p.writeDeadline(r.mc, slots)
	assert.NilError(t, err)

	assert.Equal(t, p.retireSegment(seg), 1, "one put writes into the segment")
	_, err = p.writeDeadline(r.mc, slots)
	assert.Assert(t, errors.Is(err, errGrantLapsed), "%v", err)
	if other, ok := p.reserve(r.mc, nil, 1, 1000); ok { // a grant in another segment may take it
		assert.Assert(t, other[0].g.segID != seg, "a retired segment's grants take no replica")
		p.done(other, slotGiveBack)
	}

	short, cancelShort := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancelShort()
	assert.Assert(t, errors.Is(p.waitSegmentIdle(short, seg), context.DeadlineExceeded))
	waited := make(chan error, 1)
	go func() { waited <- p.waitSegmentIdle(ctx, seg) }()
	p.done(slots, slotRetire)
	assert.NilError(t, <-waited)
	assert.Equal(t, p.retireSegment(seg), 0)
}

// TestWriteReplicasChecksEachChunk: a bounded write checks its bound
// before every transfer submission, so a bound that fails between two
// staging chunks stops the write after the chunk already sent; and every
// transfer runs under a ctx that ends at the bound's deadline.
func TestWriteReplicasChecksEachChunk(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// A 256 KiB staging buffer: 64 KiB chunks.
	r := newGrantRig(t, master.Config{}, Config{LocalBufferSize: 256 << 10})
	assert.Equal(t, r.w.staging.chunk, uint64(64<<10))
	const size = 300_000
	base := uint64(r.h.global.Addr()) + 8<<20 // far from anything the master allocated
	holder := cmem.Bytes(uintptr(base), size)
	clear(holder)
	rep := []*wire.Replica{{SegmentName: r.h.segName, Address: base, Size: size}}
	data := testPattern(size, 3)

	// Checks: before the metadata lookup, before the staging wait, then
	// one per chunk. The fourth (second chunk) fails.
	checks := 0
	bound := &writeBound{check: func() (time.Time, error) {
		checks++
		if checks >= 4 {
			return time.Time{}, errGrantLapsed
		}
		return time.Now().Add(10 * time.Second), nil
	}}
	err := r.w.writeReplicas(ctx, goSpan(data), rep, bound)
	assert.Assert(t, errors.Is(err, errGrantLapsed), "%v", err)
	assert.Equal(t, checks, 4)
	assert.Assert(t, bytes.Equal(holder[:64<<10], data[:64<<10]), "first chunk not written")
	assert.Assert(t, bytes.Equal(holder[64<<10:], make([]byte, size-64<<10)), "written past the failed check")

	// A deadline already passed: nothing is submitted.
	clear(holder)
	past := &writeBound{check: func() (time.Time, error) { return time.Now().Add(-time.Millisecond), nil }}
	err = r.w.writeReplicas(ctx, goSpan(data), rep, past)
	assert.Assert(t, errors.Is(err, errGrantLapsed), "%v", err)
	assert.Assert(t, bytes.Equal(holder, make([]byte, size)), "written after the deadline")

	// Unbounded, all of it.
	assert.NilError(t, r.w.writeReplicas(ctx, goSpan(data), rep, nil))
	assert.Assert(t, bytes.Equal(holder, data))
}

// TestStaleAcquireAnswer: an AcquireGrants answer at an older grant
// generation than the pool's (a PutCommit answered after the master took
// a grant back got in first) or that spans an offer is kept only to be
// returned, and reserve never places a put in a grant of another
// generation or session.
func TestStaleAcquireAnswer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r := newGrantRig(t, master.Config{}, Config{})
	assert.NilError(t, r.w.Put(ctx, "k", testPattern(1000, 1), ReplicateConfig{}))
	p := &r.w.grants
	session, ok := r.mc.session()
	assert.Assert(t, ok)

	p.mu.Lock()
	assert.Equal(t, len(p.mu.grants), 1)
	g0 := p.mu.grants[0]
	gen, epoch := p.mu.gen, p.mu.epoch
	stale := &wire.AcquireGrantsResponse{GrantGeneration: gen, Grants: []*wire.Grant{{Id: 1001, SegmentName: g0.segName,
		SegmentId: g0.segID, Address: g0.addr + 1<<20, Size: 1 << 20}}}
	// The pool moved on to gen+1 meanwhile (a commit's answer).
	p.confirmLocked(time.Now(), gen+1)
	assert.Assert(t, g0.retired)
	g0.retired = false // as if it had slipped in before: reserve must still skip it
	assert.Assert(t, !p.acceptLocked(r.mc, session, epoch, time.Now(), stale, true))
	assert.Equal(t, len(p.mu.grants), 2)
	assert.Assert(t, p.mu.grants[1].retired)
	p.mu.Unlock()
	_, ok = p.reserve(r.mc, nil, 1, 1000)
	assert.Assert(t, !ok, "reserved in a grant of an older generation")

	// An answer at the current generation is taken; one of another
	// session is not used.
	p.mu.Lock()
	cur := &wire.AcquireGrantsResponse{GrantGeneration: gen + 1, Grants: []*wire.Grant{{Id: 1002, SegmentName: g0.segName,
		SegmentId: g0.segID, Address: g0.addr + 2<<20, Size: 1 << 20}}}
	assert.Assert(t, p.acceptLocked(r.mc, session, epoch, time.Now(), cur, true))
	p.mu.grants[2].session = session + 1
	p.mu.Unlock()
	_, ok = p.reserve(r.mc, nil, 1, 1000)
	assert.Assert(t, !ok, "reserved in a grant of another session")
	p.mu.Lock()
	p.mu.grants[2].session = session
	p.mu.Unlock()
	slots, ok := p.reserve(r.mc, nil, 1, 1000)
	assert.Assert(t, ok)
	assert.Equal(t, slots[0].g.id, uint64(1002))
	p.done(slots, slotGiveBack)

	// An answer that spans an offer is not used either.
	p.mu.Lock()
	p.mu.epoch++
	spans := &wire.AcquireGrantsResponse{GrantGeneration: gen + 1, Grants: []*wire.Grant{{Id: 1003}}}
	assert.Assert(t, !p.acceptLocked(r.mc, session, epoch, time.Now(), spans, true))
	assert.Assert(t, p.mu.grants[len(p.mu.grants)-1].retired)
	p.mu.epoch--
	// The stale and the spanning ones go back (over their session).
	var ids []uint64
	for _, pr := range p.takeReturnsLocked(session, time.Time{}) {
		ids = append(ids, pr.id)
	}
	p.mu.Unlock()
	assert.DeepEqual(t, ids, []uint64{1001, 1003})
}

// TestOfferReturnsGrants: grants the pool holds when a remount answer
// comes (a concurrent put may have acquired them on this very connection
// after the master handled the remount) are given back, not forgotten:
// the master would count them as used space until it expired the client.
func TestOfferReturnsGrants(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r := newGrantRig(t, master.Config{}, Config{})
	assert.NilError(t, r.w.Put(ctx, "k", testPattern(1000, 1), ReplicateConfig{}))
	assert.Equal(t, r.grants(), 1)
	p := &r.w.grants
	p.mu.Lock()
	gb, lease := p.mu.bytes, p.mu.lease
	p.mu.Unlock()
	p.offer(r.mc, &wire.ReMountSegmentsResponse{GrantBytes: gb, GrantLeaseMs: uint64(lease / time.Millisecond)})
	_, ok := p.reserve(r.mc, nil, 1, 1000)
	assert.Assert(t, !ok, "reserved in a grant held before the offer")
	r.w.returnGrants(ctx, r.mc, time.Time{})
	assert.Equal(t, r.grants(), 0, "grant leaked at the master")
	// The pool goes on: the next put acquires afresh.
	assert.NilError(t, r.w.Put(ctx, "k2", testPattern(1000, 2), ReplicateConfig{}))
	assert.Equal(t, r.w.Metrics().GrantPuts, uint64(2))
	assert.Equal(t, r.grants(), 1)
}

// TestReturnsStayInTheirSession: grant returns recorded under one mux
// session are never sent over another (whose master may be another one);
// a call pinned to a session fails without dialing once it is gone.
func TestReturnsStayInTheirSession(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r := newGrantRig(t, master.Config{}, Config{})
	assert.NilError(t, r.w.Put(ctx, "k", testPattern(1000, 1), ReplicateConfig{}))
	assert.Equal(t, r.grants(), 1)
	p := &r.w.grants
	session, ok := r.mc.session()
	assert.Assert(t, ok)

	// The grant, as if it had come over an earlier connection: retired and
	// taken out of the pool, but not sent.
	p.mu.Lock()
	g := p.mu.grants[0]
	g.session = session + 7
	g.retired = true
	p.mu.toReturn = append(p.mu.toReturn, pendingReturn{id: g.id, session: session + 7})
	p.mu.Unlock()
	r.w.returnGrants(ctx, r.mc, time.Time{})
	assert.Equal(t, r.grants(), 1, "returned over another session")
	assert.Equal(t, r.w.Metrics().GrantReturns, uint64(0))
	p.mu.Lock()
	assert.Equal(t, len(p.mu.grants), 0)
	assert.Equal(t, len(p.mu.toReturn), 0)
	// Recorded under this session: sent.
	p.mu.toReturn = append(p.mu.toReturn, pendingReturn{id: g.id, session: session})
	p.mu.Unlock()
	r.w.returnGrants(ctx, r.mc, time.Time{})
	assert.Equal(t, r.grants(), 0)

	// Pinned calls.
	mux := r.mc.mc.(*wire.MuxClient)
	_, err := mux.Ping(wire.WithMuxSession(ctx, session+1), &wire.PingRequest{ClientId: r.w.clientID})
	assert.Equal(t, wire.CodeOf(err), wire.ErrRPCFail)
	_, err = mux.Ping(wire.WithMuxSession(ctx, session), &wire.PingRequest{ClientId: r.w.clientID})
	assert.NilError(t, err)
}
