package client

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/store/wire"
)

// Ranged reads and writes, and the put and get sessions they run in
// (Mooncake's RealClient get_into_ranges, batch_get_session_start/_end,
// batch_get_into_multi_buffer_ranges, batch_put_session_start/_end/_revoke
// and batch_put_from_multi_buffer_ranges).

// Range is Size bytes at Offset inside a stored object, and the caller
// memory at Addr they are read into or written from.
type Range struct {
	Addr   uintptr
	Offset uint64
	Size   uint64
}

// sessions is a client's open put and get sessions, by key.
type sessions struct {
	// mu guards get, put and every session in them; idle (on mu) is
	// signalled when a put session's in-flight writes drop.
	mu   sync.Mutex
	idle *sync.Cond
	get  map[string]*getSession
	put  map[string]*putSession
}

// getSession is the replica lookup that a get session made once: the
// object's memory replicas and size, valid until deadline (the lease).
type getSession struct {
	reps     []*wire.Replica
	size     uint64
	deadline time.Time // zero: the master granted no lease
}

// putSession is an object reserved at the master and not yet completed:
// ranges are written into its replicas until the session ends.
type putSession struct {
	reps     []*wire.Replica
	size     uint64
	writable bool // false once end or revoke began
	inflight int  // range writes in progress
}

// expired reports whether the session's lease is over at now.
func (g *getSession) expired(now time.Time) bool {
	return !g.deadline.IsZero() && !now.Before(g.deadline)
}

// rangeFits reports whether size bytes at off lie inside an object of
// limit bytes (Mooncake's is_object_range_overflow, negated).
func rangeFits(off, size, limit uint64) bool {
	return size <= limit && off <= limit-size
}

// narrowed returns a copy of replica r cut to n bytes at off.
func narrowed(r *wire.Replica, off, n uint64) *wire.Replica {
	return &wire.Replica{SegmentName: r.GetSegmentName(), Address: r.GetAddress() + off, Size: n, Status: r.GetStatus(),
		SegmentId: r.GetSegmentId(), Protocol: r.GetProtocol(), Kind: r.GetKind(), Tag: r.GetTag()}
}

// rangeIO moves the ranges rs between caller memory and replica r (op
// OpRead: from the replica; OpWrite: into it). A replica in this client's
// own segment is copied directly; the ranges in registered memory go as one
// engine batch; the others are staged through the local buffer one by one.
// The caller checked that every range lies inside the replica.
func (c *Client) rangeIO(ctx context.Context, op engine.OpCode, r *wire.Replica, rs []Range) error {
	if r.GetSegmentName() == c.segName {
		for _, g := range rs {
			if g.Size == 0 {
				continue
			}
			d := c.gpuSpan(cSpan(g.Addr, g.Size))
			at := uintptr(r.GetAddress() + g.Offset)
			var err error
			if op == engine.OpRead {
				err = d.copyFrom(0, at, g.Size)
			} else {
				err = d.copyTo(at, 0, g.Size)
			}
			if err != nil {
				return err
			}
		}
		c.metrics.localCopies.Add(1)
		return nil
	}
	one := []*wire.Replica{r}
	ids, err := c.open(ctx, one)
	if err != nil {
		return err
	}
	reqs := make([]engine.Request, 0, len(rs))
	var staged []Range
	for _, g := range rs {
		if g.Size == 0 {
			continue
		}
		if d := c.gpuSpan(cSpan(g.Addr, g.Size)); d.registered(c.e) {
			reqs = d.appendRequests(reqs, op, ids[0], r.GetAddress()+g.Offset)
		} else {
			staged = append(staged, g)
		}
	}
	if len(reqs) > 0 {
		if err := c.transfer(ctx, reqs, one); err != nil {
			return err
		}
	}
	for _, g := range staged {
		d := c.gpuSpan(cSpan(g.Addr, g.Size))
		n := narrowed(r, g.Offset, g.Size)
		if op == engine.OpRead {
			err = c.readReplica(ctx, n, d, g.Size)
		} else {
			err = c.writeReplicas(ctx, d, []*wire.Replica{n}, nil)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// readRanges reads rs of key from the first of reps that serves them all.
func (c *Client) readRanges(ctx context.Context, key string, reps []*wire.Replica, rs []Range) error {
	order := c.readOrder(nil, reps)
	if len(order) == 0 {
		return fmt.Errorf("get %q ranges: %w", key, wire.ErrReplicaIsNotReady)
	}
	var err error
	for _, r := range order {
		if err = c.rangeIO(ctx, engine.OpRead, r, rs); err == nil {
			return nil
		}
		c.log.Debug("replica range read failed", "key", key, "segment", r.GetSegmentName(), "err", err)
	}
	return transferFail("get ranges", key, err)
}

// checkRanges returns, for each range, INVALID_PARAMS when it does not fit
// an object of size bytes or names no memory (nil otherwise), and the ranges
// that do fit.
func checkRanges(op, key string, rs []Range, size uint64, errs []error) []Range {
	ok := make([]Range, 0, len(rs))
	for j, g := range rs {
		if !rangeFits(g.Offset, g.Size, size) || (g.Addr == 0 && g.Size > 0) {
			errs[j] = fmt.Errorf("%s %q: range of %d bytes at %d, object of %d: %w", op, key, g.Size, g.Offset, size,
				wire.ErrInvalidParams)
			continue
		}
		ok = append(ok, g)
	}
	return ok
}

// GetRanges reads byte ranges of objects (Mooncake's get_into_ranges):
// ranges[i] of keys[i], each into memory registered with the engine (a range
// outside registered memory, or outside its object, is INVALID_PARAMS and
// not read). A key may appear more than once; the master is asked once for
// all of them, and the ranges held by other clients go as one engine batch
// (a key whose read fails there is read again from its other replicas).
// errs[i][j] is the result of ranges[i][j] (nil: Size bytes read).
func (c *Client) GetRanges(ctx context.Context, keys []string, ranges [][]Range) [][]error {
	errs := make([][]error, len(keys))
	for i := range keys {
		if i < len(ranges) {
			errs[i] = make([]error, len(ranges[i]))
		}
	}
	fail := func(i int, err error) {
		for j := range errs[i] {
			if errs[i][j] == nil {
				errs[i][j] = err
			}
		}
	}
	if len(ranges) != len(keys) {
		return errs
	}
	start := time.Now()
	uniq, lists, lease, err := c.lookupKeys(ctx, keys)
	if err != nil {
		for i := range keys {
			fail(i, fmt.Errorf("get ranges: %w", err))
		}
		return errs
	}
	var jobs jobs
	var batched, pend []pendingRanges
	for i, k := range keys {
		res := lists[uniq[k]]
		if res.err != nil {
			fail(i, res.err)
			continue
		}
		var ok []Range
		for j, g := range ranges[i] {
			switch {
			case !rangeFits(g.Offset, g.Size, res.size) || (g.Addr == 0 && g.Size > 0):
				errs[i][j] = fmt.Errorf("get ranges %q: range of %d bytes at %d, object of %d: %w", k, g.Size, g.Offset,
					res.size, wire.ErrInvalidParams)
			case g.Size > 0 && !c.e.Registered(uint64(g.Addr), g.Size):
				errs[i][j] = fmt.Errorf("get ranges %q: buffer at %#x of %d bytes not registered: %w", k, g.Addr, g.Size,
					wire.ErrInvalidParams)
			default:
				ok = append(ok, g)
			}
		}
		if len(ok) == 0 {
			continue
		}
		keyStart := start
		reps, err := c.memoryReplicas(ctx, k, nil, res.reps, &keyStart)
		if err != nil {
			fail(i, err)
			continue
		}
		order := c.readOrder(nil, reps)
		if len(order) == 0 || order[0].GetSegmentName() == c.segName {
			// Nothing to read, or a copy from this client's own segment.
			pend = append(pend, pendingRanges{key: i, reps: reps, ranges: ok, start: keyStart})
			continue
		}
		ids, err := c.open(ctx, order[:1])
		if err != nil {
			pend = append(pend, pendingRanges{key: i, reps: order[1:], ranges: ok, start: keyStart})
			continue
		}
		jobs.grow(len(ok))
		for _, g := range ok {
			if g.Size > 0 {
				jobs.add(i, narrowed(order[0], g.Offset, g.Size), c.gpuSpan(cSpan(g.Addr, g.Size)), engine.OpRead, ids[0])
			}
		}
		batched = append(batched, pendingRanges{key: i, reps: order[1:], ranges: ok, start: keyStart})
	}
	// The first replica of every remote key, all ranges in one engine batch;
	// a key with a failed range falls back to its other replicas.
	failed, err := c.runJobs(ctx, &jobs)
	bad := make(map[int]error)
	for j, key := range jobs.keys {
		if err != nil {
			bad[key] = err
		} else if failed != nil && failed[j] != nil {
			bad[key] = failed[j]
		}
	}
	for _, p := range batched {
		if why, ok := bad[p.key]; ok {
			_ = c.e.RemoveSegment(jobs.reps[slices.Index(jobs.keys, p.key)].GetSegmentName())
			c.log.Debug("replica range read failed", "key", keys[p.key], "err", why)
			pend = append(pend, p)
			continue
		}
		if lease > 0 && time.Since(p.start) > lease {
			fail(p.key, fmt.Errorf("get ranges %q: read took %v, lease %v: %w", keys[p.key], time.Since(p.start), lease,
				wire.ErrLeaseExpired))
		}
	}
	for _, p := range pend {
		err := c.readRanges(ctx, keys[p.key], p.reps, p.ranges)
		if err == nil && lease > 0 && time.Since(p.start) > lease {
			err = fmt.Errorf("get ranges %q: read took %v, lease %v: %w", keys[p.key], time.Since(p.start), lease,
				wire.ErrLeaseExpired)
		}
		if err != nil {
			fail(p.key, err)
		}
	}
	return errs
}

// pendingRanges is one key's valid ranges of a GetRanges call, the
// replicas left to read them from, and when its lease began.
type pendingRanges struct {
	key    int
	reps   []*wire.Replica
	ranges []Range
	start  time.Time
}

// keyReplicas is the master's answer for one key of lookupKeys.
type keyReplicas struct {
	reps []*wire.Replica
	size uint64
	err  error
}

// lookupKeys asks the master, in one call, for the replicas of every
// distinct key of keys: uniq maps a key to its answer in lists.
func (c *Client) lookupKeys(ctx context.Context, keys []string) (uniq map[string]int, lists []keyReplicas,
	lease time.Duration, err error) {
	uniq = make(map[string]int, len(keys))
	distinct := make([]string, 0, len(keys))
	for _, k := range keys {
		if _, ok := uniq[k]; !ok {
			uniq[k] = len(distinct)
			distinct = append(distinct, k)
		}
	}
	var resp *wire.BatchGetReplicaListResponse
	err = c.readCall(func(mc *masterConn) error {
		rctx, cancel := c.rpcCtx(ctx)
		defer cancel()
		var err error
		resp, err = mc.mc.BatchGetReplicaList(rctx, &wire.BatchKeyRequest{TenantId: c.tenant, Keys: distinct})
		return c.rpcErr(err)
	})
	if err != nil {
		return nil, nil, 0, err
	}
	results := resp.GetResults()
	lists = make([]keyReplicas, len(distinct))
	for i, k := range distinct {
		switch {
		case k == "":
			lists[i].err = fmt.Errorf("get: empty key: %w", wire.ErrInvalidParams)
		case i >= len(results):
			lists[i].err = fmt.Errorf("get %q: no answer: %w", k, wire.ErrInternal)
		case results[i].GetCode() != 0:
			lists[i].err = fmt.Errorf("get %q: %w", k, wire.ErrorOf(results[i].GetCode()))
		default:
			lists[i] = keyReplicas{reps: results[i].GetReplicas(), size: results[i].GetSize()}
		}
	}
	return uniq, lists, time.Duration(resp.GetLeaseTtlMs()) * time.Millisecond, nil
}

// StartGetSession looks up the replicas of keys once and keeps them, with
// the lease the master granted, for GetSessionRanges (Mooncake's
// batch_get_session_start). errs[i]: the master's error for keys[i], or
// INVALID_REPLICA when it has no memory replica. A key's earlier session is
// replaced, and dropped when the lookup fails.
func (c *Client) StartGetSession(ctx context.Context, keys []string) []error {
	errs := make([]error, len(keys))
	if len(keys) == 0 {
		return errs
	}
	start := time.Now()
	uniq, lists, lease, err := c.lookupKeys(ctx, keys)
	if err != nil {
		for i := range errs {
			errs[i] = fmt.Errorf("get session: %w", err)
		}
		return errs
	}
	found := make([]*getSession, len(keys))
	for i, k := range keys {
		res := lists[uniq[k]]
		if res.err != nil {
			errs[i] = res.err
			continue
		}
		keyStart := start
		reps, err := c.memoryReplicas(ctx, k, nil, res.reps, &keyStart)
		if err == nil && len(c.readOrder(nil, reps)) == 0 {
			err = fmt.Errorf("get session %q: no memory replica: %w", k, wire.ErrInvalidReplica)
		}
		if err != nil {
			errs[i] = err
			continue
		}
		g := &getSession{reps: reps, size: res.size}
		if lease > 0 {
			g.deadline = keyStart.Add(lease)
		}
		found[i] = g
	}
	s := &c.sessions
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.get == nil {
		s.get = make(map[string]*getSession)
	}
	for i, k := range keys {
		if found[i] == nil {
			delete(s.get, k)
		} else {
			s.get[k] = found[i]
		}
	}
	return errs
}

// GetSessionRanges reads ranges[i] of keys[i] through the replicas its get
// session holds, asking the master nothing (Mooncake's
// batch_get_into_multi_buffer_ranges). n[i] is the bytes read for keys[i];
// a key without a session, or with a range outside its object, is
// INVALID_PARAMS and nothing of it is read; a session whose lease expired
// (before or during the read) is dropped and LEASE_EXPIRED.
func (c *Client) GetSessionRanges(ctx context.Context, keys []string, ranges [][]Range) (n []uint64, errs []error) {
	n, errs = make([]uint64, len(keys)), make([]error, len(keys))
	if len(ranges) != len(keys) {
		for i := range errs {
			errs[i] = fmt.Errorf("get session ranges: %d keys, %d range lists: %w", len(keys), len(ranges), wire.ErrInvalidParams)
		}
		return n, errs
	}
	s := &c.sessions
	got := make([]*getSession, len(keys))
	s.mu.Lock()
	now := time.Now()
	for i, k := range keys {
		g := s.get[k]
		switch {
		case g == nil:
			errs[i] = fmt.Errorf("get session ranges %q: no session: %w", k, wire.ErrInvalidParams)
		case g.expired(now):
			delete(s.get, k)
			errs[i] = fmt.Errorf("get session ranges %q: %w", k, wire.ErrLeaseExpired)
		default:
			got[i] = g
		}
	}
	s.mu.Unlock()
	for i, g := range got {
		if g == nil {
			continue
		}
		rerrs := make([]error, len(ranges[i]))
		ok := checkRanges("get session ranges", keys[i], ranges[i], g.size, rerrs)
		if len(ok) != len(ranges[i]) {
			errs[i] = fmt.Errorf("get session ranges %q: %w", keys[i], wire.ErrInvalidParams)
			continue
		}
		if errs[i] = c.readRanges(ctx, keys[i], g.reps, ok); errs[i] != nil {
			continue
		}
		if g.expired(time.Now()) {
			errs[i] = fmt.Errorf("get session ranges %q: lease expired during the read: %w", keys[i], wire.ErrLeaseExpired)
			s.mu.Lock()
			if s.get[keys[i]] == g {
				delete(s.get, keys[i])
			}
			s.mu.Unlock()
			continue
		}
		for _, g := range ok {
			n[i] += g.Size
		}
	}
	return n, errs
}

// EndGetSession drops the get sessions of keys (Mooncake's
// batch_get_session_end); a key without one is ignored.
func (c *Client) EndGetSession(keys []string) {
	s := &c.sessions
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		delete(s.get, k)
	}
}

// StartPutSession reserves keys[i] (sizes[i] bytes) at the master without
// writing them (Mooncake's batch_put_session_start): their bytes then come
// with PutSessionRanges, and EndPutSession makes them readable. errs[i]:
// INVALID_PARAMS for a key that has a session already, or the master's
// error (OBJECT_ALREADY_EXISTS for a stored key). A session never ended is
// an abandoned put to the master, which discards it after its
// PutStartDiscardTimeout.
func (c *Client) StartPutSession(ctx context.Context, keys []string, sizes []uint64, cfg ReplicateConfig) []error {
	errs := make([]error, len(keys))
	bad := func(err error) []error {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	if len(sizes) != len(keys) {
		return bad(fmt.Errorf("put session: %d keys, %d sizes: %w", len(keys), len(sizes), wire.ErrInvalidParams))
	}
	if err := cfg.checkGroups(len(keys)); err != nil {
		return bad(fmt.Errorf("put session: %w", err))
	}
	if len(keys) == 0 {
		return errs
	}
	s := &c.sessions
	var idx []int
	var startKeys []string
	var startSizes []uint64
	seen := make(map[string]bool, len(keys))
	s.mu.Lock()
	for i, k := range keys {
		if s.put[k] != nil || seen[k] {
			errs[i] = fmt.Errorf("put session %q: a session is open: %w", k, wire.ErrInvalidParams)
			continue
		}
		if k == "" || sizes[i] == 0 {
			errs[i] = fmt.Errorf("put session %q (%d bytes): %w", k, sizes[i], wire.ErrInvalidParams)
			continue
		}
		seen[k] = true
		idx = append(idx, i)
		startKeys = append(startKeys, k)
		startSizes = append(startSizes, sizes[i])
	}
	s.mu.Unlock()
	if len(idx) == 0 {
		return errs
	}
	mc, err := c.master()
	if err != nil {
		for _, i := range idx {
			errs[i] = err
		}
		return errs
	}
	var resp *wire.BatchPutStartResponse
	err = c.allocCall(ctx, &mc, func(mc *masterConn) error {
		rctx, cancel := c.rpcCtx(ctx)
		defer cancel()
		var err error
		resp, err = mc.mc.BatchPutStart(rctx, &wire.BatchPutStartRequest{TenantId: c.tenant, ClientId: c.clientID, Keys: startKeys,
			Sizes: startSizes, Config: cfg.forKeys(idx).toWire()})
		return c.rpcErr(err)
	})
	if err != nil {
		for _, i := range idx {
			errs[i] = fmt.Errorf("put session %q: %w", keys[i], err)
		}
		return errs
	}
	results := resp.GetResults()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.put == nil {
		s.put = make(map[string]*putSession)
	}
	for j, i := range idx {
		switch {
		case j >= len(results):
			errs[i] = fmt.Errorf("put session %q: no answer: %w", keys[i], wire.ErrInternal)
		case results[j].GetCode() != 0:
			errs[i] = fmt.Errorf("put session %q: %w", keys[i], wire.ErrorOf(results[j].GetCode()))
		default:
			s.put[keys[i]] = &putSession{reps: results[j].GetReplicas(), size: sizes[i], writable: true}
		}
	}
	return errs
}

// PutSessionRanges writes ranges[i] into every replica of keys[i]'s put
// session (Mooncake's batch_put_from_multi_buffer_ranges): Offset is where
// in the object each range goes. n[i] is the bytes written for keys[i]; a key
// without an open session, or with a range outside its object, is
// INVALID_PARAMS and nothing of it is written.
func (c *Client) PutSessionRanges(ctx context.Context, keys []string, ranges [][]Range) (n []uint64, errs []error) {
	n, errs = make([]uint64, len(keys)), make([]error, len(keys))
	if len(ranges) != len(keys) {
		for i := range errs {
			errs[i] = fmt.Errorf("put session ranges: %d keys, %d range lists: %w", len(keys), len(ranges), wire.ErrInvalidParams)
		}
		return n, errs
	}
	s := &c.sessions
	got := make([]*putSession, len(keys))
	s.mu.Lock()
	for i, k := range keys {
		p := s.put[k]
		if p == nil || !p.writable {
			errs[i] = fmt.Errorf("put session ranges %q: no open session: %w", k, wire.ErrInvalidParams)
			continue
		}
		rerrs := make([]error, len(ranges[i]))
		if ok := checkRanges("put session ranges", k, ranges[i], p.size, rerrs); len(ok) != len(ranges[i]) {
			errs[i] = fmt.Errorf("put session ranges %q: %w", k, wire.ErrInvalidParams)
			continue
		}
		p.inflight++
		got[i] = p
	}
	s.mu.Unlock()
	for i, p := range got {
		if p == nil {
			continue
		}
		for _, r := range p.reps {
			if errs[i] = c.rangeIO(ctx, engine.OpWrite, r, ranges[i]); errs[i] != nil {
				errs[i] = transferFail("put session ranges", keys[i], errs[i])
				break
			}
		}
		if errs[i] == nil {
			for _, g := range ranges[i] {
				n[i] += g.Size
			}
		}
		s.mu.Lock()
		p.inflight--
		if s.idle != nil {
			s.idle.Broadcast()
		}
		s.mu.Unlock()
	}
	return n, errs
}

// sealPut closes the put sessions of keys to new range writes and waits for
// those in flight (each bounded by its transfer deadline). It returns the
// keys that have a session and their indices; the others get INVALID_PARAMS.
func (c *Client) sealPut(op string, keys []string, errs []error) ([]string, []int) {
	s := &c.sessions
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.idle == nil {
		s.idle = sync.NewCond(&s.mu)
	}
	var sealed []string
	var idx []int
	for i, k := range keys {
		p := s.put[k]
		if p == nil {
			errs[i] = fmt.Errorf("%s %q: no session: %w", op, k, wire.ErrInvalidParams)
			continue
		}
		p.writable = false
		sealed = append(sealed, k)
		idx = append(idx, i)
	}
	for busy := true; busy; {
		busy = false
		for _, k := range sealed {
			if p := s.put[k]; p != nil && p.inflight > 0 {
				busy = true
			}
		}
		if busy {
			s.idle.Wait()
		}
	}
	return sealed, idx
}

// finishPut ends (revoke false) or revokes the put sessions of keys at the
// master. A key whose master call failed keeps its session (sealed), so
// that end or revoke can be tried again; with revoke, a key the master no
// longer knows counts as revoked.
func (c *Client) finishPut(ctx context.Context, op string, keys []string, revoke bool) []error {
	errs := make([]error, len(keys))
	sealed, idx := c.sealPut(op, keys, errs)
	if len(sealed) == 0 {
		return errs
	}
	var resp *wire.BatchCodesResponse
	mc, err := c.master()
	if err == nil {
		rctx, cancel := c.rpcCtx(ctx)
		resp, err = mc.mc.BatchPutEnd(rctx, &wire.BatchPutEndRequest{TenantId: c.tenant, ClientId: c.clientID, Keys: sealed,
			Revoke: revoke})
		cancel()
		err = c.rpcErr(err)
	}
	codes := resp.GetCodes()
	if err == nil && len(codes) != len(sealed) {
		err = fmt.Errorf("%d answers for %d keys: %w", len(codes), len(sealed), wire.ErrRPCFail)
	}
	s := &c.sessions
	s.mu.Lock()
	defer s.mu.Unlock()
	for j, i := range idx {
		if err != nil {
			errs[i] = fmt.Errorf("%s %q: %w", op, keys[i], err)
			continue
		}
		if code := codes[j]; code != 0 && !(revoke && wire.ErrorOf(code) == wire.ErrObjectNotFound) {
			errs[i] = fmt.Errorf("%s %q: %w", op, keys[i], wire.ErrorOf(code))
			continue
		}
		delete(s.put, keys[i])
	}
	return errs
}

// EndPutSession completes the put sessions of keys (Mooncake's
// batch_put_session_end): it waits for their range writes in flight, then
// the master makes the objects readable. errs[i] is INVALID_PARAMS for a
// key without a session.
func (c *Client) EndPutSession(ctx context.Context, keys []string) []error {
	return c.finishPut(ctx, "put session end", keys, false)
}

// RevokePutSession abandons the put sessions of keys (Mooncake's
// batch_put_session_revoke): it waits for their range writes in flight,
// then the master frees the reserved space. errs[i] is INVALID_PARAMS for a
// key without a session.
func (c *Client) RevokePutSession(ctx context.Context, keys []string) []error {
	return c.finishPut(ctx, "put session revoke", keys, true)
}
