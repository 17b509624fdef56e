package client

import (
	"context"
	"sync"
	"time"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/store/wire"
)

// Speculative gets (a kvferry extension; off with Config.NoSpeculativeGets,
// KVFERRY_STORE_SPECULATIVE_GETS=0). A get of a key this client put or
// read before starts reading the replica it knows of (its hint) when it
// asks the master, not after the answer: the value crosses from the holder
// during the master round trip, which on a small machine costs about as
// much as the read of a large value.
//
// The master's answer decides. The read is kept only when the answer names
// the same incarnation of the key (uid) in the same master instance (view
// version) with the same memory replica (segment, address, size and tag),
// complete. Then that replica held that incarnation, unchanged, from the
// hint to the answer: a master instance never gives a uid or a replica tag
// twice, an incarnation's bytes never change (an upsert or a new put is a
// new uid), and a replica's memory is reused only after the replica ends
// (which ends its tag). The lease the answer grants covers the rest of the
// read, checked as for any get. In every other case (another replica, the
// key gone, an error) the speculative read is canceled before the get goes
// on, and when Cancel returns the engine touches the buffer no more.
//
// The cost: a get whose hint went stale reads the value twice, and a get
// that fails may leave the buffer overwritten (a plain get writes it only
// once the master found the object). Only gets into registered memory of
// another client's replica speculate: nothing is staged or copied.

// maxHints bounds the hints kept (one per key).
const maxHints = 16384

// hint is where a key's incarnation was last seen.
type hint struct {
	view, uid, size uint64
	seg             string // the holder's segment name
	addr, tag       uint64
}

// hints maps keys to their hints. Safe for concurrent use; nil when off.
type hints struct {
	max uint64 // the largest value hinted; 0: any
	mu  sync.Mutex
	m   map[string]hint
}

func newHints(off bool, max uint64) *hints {
	if off {
		return nil
	}
	return &hints{max: max, m: make(map[string]hint)}
}

func (h *hints) get(key string) (hint, bool) {
	if h == nil {
		return hint{}, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.m[key]
	return v, ok
}

// set records v for key (nothing for a replica without a tag). When full,
// an arbitrary hint makes room: a missing hint costs only the overlap.
func (h *hints) set(key string, v hint) {
	if h == nil {
		return
	}
	if v.tag == 0 || v.view == 0 || (h.max > 0 && v.size > h.max) {
		h.drop(key)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.m[key]; !ok && len(h.m) >= maxHints {
		for k := range h.m {
			delete(h.m, k)
			break
		}
	}
	h.m[key] = v
}

func (h *hints) drop(key string) {
	if h == nil {
		return
	}
	h.mu.Lock()
	delete(h.m, key)
	h.mu.Unlock()
}

func (h *hints) clear() {
	if h == nil {
		return
	}
	h.mu.Lock()
	clear(h.m)
	h.mu.Unlock()
}

// hintOf is the hint an answer gives for a replica read from it.
func hintOf(resp *wire.GetReplicaListResponse, r *wire.Replica) hint {
	return hint{view: resp.GetViewVersion(), uid: resp.GetUid(), size: resp.GetSize(),
		seg: r.GetSegmentName(), addr: r.GetAddress(), tag: r.GetTag()}
}

// hintPut records where a put through grants placed key: its first
// replica in another client's segment.
func (c *Client) hintPut(key string, size uint64, reps []*wire.Replica, resp *wire.PutCommitResponse) {
	tags := resp.GetReplicaTags()
	if len(tags) != len(reps) {
		c.hints.drop(key) // a master without tags
		return
	}
	for i, r := range reps {
		if r.GetSegmentName() != c.segName {
			c.hints.set(key, hint{view: resp.GetViewVersion(), uid: resp.GetUid(), size: size,
				seg: r.GetSegmentName(), addr: r.GetAddress(), tag: tags[i]})
			return
		}
	}
	c.hints.drop(key)
}

// speculation is a read of a hinted replica in flight.
type speculation struct {
	h     hint
	batch engine.BatchID
	// waited: the read ended (wait), with st and err.
	waited bool
	st     engine.BatchStatus
	err    error
}

// speculate starts reading key's hinted replica into the destination dest
// gives for the hinted size, and returns into filled in; nil when there is
// no hint or the get does not qualify (see above). The getter then starts
// its master call, waits for the read under the call's context (it reads
// the value itself, engine.Await, as a plain read does; a read that
// outlasts the RPC timeout, a holder that stopped answering, waits for the
// answer first) and only then for the answer, which has most often come
// meanwhile; it ends the speculation with keep or drop.
func (c *Client) speculate(ctx context.Context, key string, dest func(size uint64) (span, error), into *speculation) *speculation {
	h, ok := c.hints.get(key)
	if !ok || h.seg == c.segName || c.hot.holds(key, h.uid) || !c.startsCalls() {
		return nil
	}
	d, err := dest(h.size)
	if err != nil {
		return nil
	}
	d = c.gpuSpan(d)
	if !d.registered(c.e) {
		return nil
	}
	id, err := c.e.OpenSegment(ctx, h.seg)
	if err != nil {
		c.hints.drop(key)
		return nil
	}
	var one [1]engine.Request // a plain span's one request
	reqs := d.appendRequests(one[:0], engine.OpRead, id, h.addr)
	batch, err := c.e.AllocateBatch(len(reqs))
	if err != nil {
		return nil
	}
	_ = c.e.Await(batch) // before Submit: the transports read it
	if err := c.e.Submit(batch, reqs); err != nil {
		if bs, _ := c.e.BatchStatus(batch); bs.Tasks == 0 {
			_ = c.e.FreeBatch(batch)
			return nil
		}
		// Partly submitted: what went out is in flight; drop or keep
		// decides as for the rest (keep sees it failed).
	}
	c.metrics.specReads.Add(1)
	*into = speculation{h: h, batch: batch}
	return into
}

// wait waits for s's read to end; keep and drop wait again if it did not
// within ctx.
func (c *Client) wait(ctx context.Context, s *speculation) {
	if s == nil || s.waited {
		return
	}
	st, err := c.e.Wait(ctx, s.batch)
	if err != nil && ctx.Err() != nil {
		return
	}
	s.st, s.err, s.waited = st, err, true
}

// startsCalls reports whether the master connection starts calls whose
// answers are read later (mux).
func (c *Client) startsCalls() bool {
	mc, err := c.master()
	if err != nil {
		return false
	}
	_, ok := mc.mc.(*wire.MuxClient)
	return ok
}

// matches reports whether resp names the incarnation and replica s read.
func (s *speculation) matches(resp *wire.GetReplicaListResponse) bool {
	if resp.GetViewVersion() != s.h.view || resp.GetUid() != s.h.uid || resp.GetSize() != s.h.size {
		return false
	}
	for _, r := range resp.GetReplicas() {
		if r.GetKind() == wire.ReplicaKind_REPLICA_KIND_MEMORY && r.GetStatus() == wire.ReplicaStatus_REPLICA_STATUS_COMPLETE &&
			r.GetSegmentName() == s.h.seg && r.GetAddress() == s.h.addr && r.GetTag() == s.h.tag && r.GetSize() >= s.h.size {
			return true
		}
	}
	return false
}

// keep waits for s's read, which the answer confirmed; true when it
// completed within the lease granted at start (else the get reads again).
func (c *Client) keep(ctx context.Context, s *speculation, start time.Time, lease time.Duration) bool {
	c.wait(ctx, s)
	if !s.waited || s.err != nil { // ctx ended first, or the wait failed
		c.drop(s)
		return false
	}
	bs := s.st
	_ = c.e.FreeBatch(s.batch)
	if bs.State != engine.StateCompleted || (lease > 0 && time.Since(start) > lease) {
		c.metrics.specMisses.Add(1)
		return false
	}
	c.metrics.specHits.Add(1)
	return true
}

// drop cancels s: when it returns, nothing writes the buffer any more.
func (c *Client) drop(s *speculation) {
	if s == nil {
		return
	}
	_ = c.e.Cancel(context.Background(), s.batch)
	_ = c.e.FreeBatch(s.batch)
	c.metrics.specMisses.Add(1)
}
