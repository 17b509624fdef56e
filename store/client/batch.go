package client

import (
	"context"
	"fmt"
	"time"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/store/wire"
)

// jobs are the remote requests of a batch: reqs[i] serves key keys[i]
// through replica reps[i].
type jobs struct {
	reqs []engine.Request
	keys []int
	reps []*wire.Replica
}

// grow makes room for n more jobs.
func (j *jobs) grow(n int) {
	if j.reqs == nil {
		j.reqs, j.keys, j.reps = make([]engine.Request, 0, n), make([]int, 0, n), make([]*wire.Replica, 0, n)
	}
}

// add appends the requests that move span d of key to (OpWrite) or from
// (OpRead) replica r of segment target: one per piece.
func (j *jobs) add(key int, r *wire.Replica, d span, op engine.OpCode, target engine.SegmentID) {
	n := len(j.reqs)
	j.reqs = d.appendRequests(j.reqs, op, target, r.GetAddress())
	for range len(j.reqs) - n {
		j.keys = append(j.keys, key)
		j.reps = append(j.reps, r)
	}
}

// runJobs runs the requests of j as one engine batch (one submission, one
// wait) and returns why each of them failed (nil: none failed; a nil entry:
// that request completed).
func (c *Client) runJobs(ctx context.Context, j *jobs) ([]error, error) {
	if len(j.reqs) == 0 {
		return nil, nil
	}
	id, err := c.e.AllocateBatch(len(j.reqs))
	if err != nil {
		return nil, err
	}
	serr := c.e.Submit(id, j.reqs)
	bs, werr := c.e.Wait(ctx, id)
	if werr != nil {
		_ = c.e.Cancel(context.Background(), id)
	}
	if serr == nil && werr == nil && bs.State == engine.StateCompleted && bs.Tasks == len(j.reqs) {
		_ = c.e.FreeBatch(id) // all done: no task to look at
		return nil, nil
	}
	failed := make([]error, len(j.reqs))
	for i := range j.reqs {
		st, err := c.e.TaskStatus(id, i)
		switch {
		case err != nil:
			failed[i] = err
		case st.State != engine.StateCompleted:
			failed[i] = st.Err
			if failed[i] == nil { // not terminal: the wait ended first
				failed[i] = fmt.Errorf("task %s when the wait ended (%v)", st.State, werr)
			}
		}
		if failed[i] != nil {
			_ = c.e.RemoveSegment(j.reps[i].GetSegmentName())
		}
	}
	_ = c.e.FreeBatch(id)
	if serr != nil {
		c.log.Debug("batch submit failed", "err", serr)
	}
	return failed, nil
}

// BatchPutFrom puts keys[i] from sizes[i] bytes of C memory at addrs[i],
// with one master call to start, one engine batch for the data in
// registered memory, and one master call to end. errs[i] is the result of
// keys[i] (an existing key is nil, as Put).
func (c *Client) BatchPutFrom(ctx context.Context, keys []string, addrs []uintptr, sizes []uint64, cfg ReplicateConfig) []error {
	return c.batchPutFrom(ctx, keys, addrs, sizes, cfg, false)
}

// BatchUpsertFrom is BatchPutFrom that replaces existing objects.
func (c *Client) BatchUpsertFrom(ctx context.Context, keys []string, addrs []uintptr, sizes []uint64, cfg ReplicateConfig) []error {
	return c.batchPutFrom(ctx, keys, addrs, sizes, cfg, true)
}

func (c *Client) batchPutFrom(ctx context.Context, keys []string, addrs []uintptr, sizes []uint64, cfg ReplicateConfig, upsert bool) []error {
	if len(addrs) != len(keys) || len(sizes) != len(keys) {
		errs := make([]error, len(keys))
		for i := range errs {
			errs[i] = fmt.Errorf("batch put: %d keys, %d buffers, %d sizes: %w", len(keys), len(addrs), len(sizes), wire.ErrInvalidParams)
		}
		return errs
	}
	data := make([]span, len(keys))
	for i := range keys {
		data[i] = cSpan(addrs[i], sizes[i])
	}
	return c.batchPut(ctx, keys, data, cfg, upsert)
}

// batchPut puts keys[i] from data[i] (C memory, in one piece or several).
func (c *Client) batchPut(ctx context.Context, keys []string, data []span, cfg ReplicateConfig, upsert bool) []error {
	for _, k := range keys {
		c.hot.invalidate(k)
		c.hints.drop(k)
	}
	errs := make([]error, len(keys))
	sizes := make([]uint64, len(keys))
	for i, d := range data {
		sizes[i] = d.size
	}
	if err := cfg.checkGroups(len(keys)); err != nil {
		for i := range errs {
			errs[i] = fmt.Errorf("batch put: %w", err)
		}
		return errs
	}
	c.metrics.puts.Add(uint64(len(keys)))
	defer c.observeBatch(&c.obs.PutDuration, sizes, time.Now())
	mc, err := c.master()
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	// Start every well-formed put in one call.
	var idx []int
	var startKeys []string
	var startSizes []uint64
	for i, k := range keys {
		if k == "" || sizes[i] == 0 || !data[i].valid() {
			errs[i] = fmt.Errorf("put %q (%d bytes): %w", k, sizes[i], wire.ErrInvalidParams)
			continue
		}
		idx = append(idx, i)
		startKeys = append(startKeys, k)
		startSizes = append(startSizes, sizes[i])
	}
	if len(idx) == 0 {
		return c.countPutErrs(errs, sizes)
	}
	var resp *wire.BatchPutStartResponse
	err = c.allocCall(ctx, &mc, func(mc *masterConn) error {
		rctx, cancel := c.rpcCtx(ctx)
		defer cancel()
		var err error
		resp, err = mc.mc.BatchPutStart(rctx, &wire.BatchPutStartRequest{TenantId: c.tenant, ClientId: c.clientID, Keys: startKeys,
			Sizes: startSizes, Config: cfg.forKeys(idx).toWire(), Upsert: upsert})
		if err != nil {
			return c.rpcErr(err)
		}
		// A master that allocates nothing yet answers every key so.
		for _, r := range resp.GetResults() {
			if wire.Code(r.GetCode()) != wire.ErrUnavailableInStatus {
				return nil
			}
		}
		return wire.ErrUnavailableInStatus
	})
	if err != nil && resp != nil && wire.CodeOf(err) == wire.ErrUnavailableInStatus {
		err = nil // per-key answers
	}
	if err != nil {
		err = fmt.Errorf("batch put start: %w", err)
		for _, i := range idx {
			errs[i] = err
		}
		return c.countPutErrs(errs, sizes)
	}
	results := resp.GetResults()
	var later []int // keys the master could not allocate yet
	started := make([]bool, len(keys))
	pieces := 0 // engine requests per replica of all keys
	for _, d := range data {
		pieces += d.requests()
	}
	var jobs jobs
	for n, i := range idx {
		if n >= len(results) {
			errs[i] = fmt.Errorf("put %q: no answer: %w", keys[i], wire.ErrInternal)
			continue
		}
		res := results[n]
		if wire.Code(res.GetCode()) == wire.ErrUnavailableInStatus {
			// Not now (the disk tier's writers are behind, or a new
			// leader's fence): put alone below, asking again.
			later = append(later, i)
			continue
		}
		if res.GetCode() != 0 {
			err := wire.ErrorOf(res.GetCode())
			if !upsert && wire.CodeOf(err) == wire.ErrObjectAlreadyExists {
				continue
			}
			errs[i] = fmt.Errorf("put %q: %w", keys[i], err)
			continue
		}
		started[i] = true
		data := c.gpuSpan(data[i])
		var remote []*wire.Replica
		for _, r := range res.GetReplicas() {
			if r.GetSegmentName() == c.segName {
				if err := data.copyTo(uintptr(r.GetAddress()), 0, data.size); err != nil {
					errs[i] = transferFail("put", keys[i], err)
				}
				c.metrics.localCopies.Add(1)
			} else {
				remote = append(remote, r)
			}
		}
		if len(remote) == 0 {
			continue
		}
		if !data.registered(c.e) {
			// Staged, one key at a time.
			if err := c.writeReplicas(ctx, data, remote, nil); err != nil {
				errs[i] = transferFail("put", keys[i], err)
			}
			continue
		}
		ids, err := c.open(ctx, remote)
		if err != nil {
			errs[i] = transferFail("put", keys[i], err)
			continue
		}
		jobs.grow(pieces * len(remote))
		for k, r := range remote {
			jobs.add(i, r, data, engine.OpWrite, ids[k])
		}
	}
	failed, err := c.runJobs(ctx, &jobs)
	for n, key := range jobs.keys {
		if (err != nil || (failed != nil && failed[n] != nil)) && errs[key] == nil {
			why := err
			if why == nil {
				why = failed[n]
			}
			errs[key] = transferFail("put", keys[key], fmt.Errorf("write to %s failed: %v", jobs.reps[n].GetSegmentName(), why))
		}
	}
	// End the good ones, revoke the failed ones.
	var endKeys, revokeKeys []string
	var endIdx []int
	for i, ok := range started {
		switch {
		case !ok:
		case errs[i] == nil:
			endKeys = append(endKeys, keys[i])
			endIdx = append(endIdx, i)
		default:
			revokeKeys = append(revokeKeys, keys[i])
		}
	}
	if len(revokeKeys) > 0 {
		rctx, cancel := c.rpcCtx(context.Background())
		if _, err := mc.mc.BatchPutEnd(rctx, &wire.BatchPutEndRequest{TenantId: c.tenant, ClientId: c.clientID, Keys: revokeKeys, Revoke: true}); err != nil {
			c.log.Warn("batch put revoke failed", "keys", len(revokeKeys), "err", c.rpcErr(err))
		}
		cancel()
	}
	if len(endKeys) > 0 {
		rctx, cancel := c.rpcCtx(ctx)
		end, err := mc.mc.BatchPutEnd(rctx, &wire.BatchPutEndRequest{TenantId: c.tenant, ClientId: c.clientID, Keys: endKeys})
		cancel()
		if err != nil {
			err = fmt.Errorf("batch put end: %w", c.rpcErr(err))
			for _, i := range endIdx {
				errs[i] = err
			}
		} else {
			for n, e := range errorsOf(end.GetCodes(), len(endKeys)) {
				if e != nil {
					errs[endIdx[n]] = fmt.Errorf("put %q: end: %w", keys[endIdx[n]], e)
				}
			}
		}
	}
	for _, i := range later {
		errs[i] = c.putOne(ctx, keys[i], data[i], cfg.forKeys([]int{i}), upsert)
	}
	return c.countPutErrs(errs, sizes)
}

func (c *Client) countPutErrs(errs []error, sizes []uint64) []error {
	for i, e := range errs {
		if e != nil {
			c.metrics.putErrors.Add(1)
		} else if i < len(sizes) {
			c.metrics.putBytes.Add(sizes[i])
		}
	}
	return errs
}

// BatchGetInto reads keys[i] into sizes[i] bytes of C memory at addrs[i],
// with one master call and one engine batch for registered buffers.
// n[i] is the object size read, errs[i] the failure of keys[i].
func (c *Client) BatchGetInto(ctx context.Context, keys []string, addrs []uintptr, sizes []uint64) (n []uint64, errs []error) {
	if len(addrs) != len(keys) || len(sizes) != len(keys) {
		errs = make([]error, len(keys))
		for i := range errs {
			errs[i] = fmt.Errorf("batch get: %d keys, %d buffers, %d sizes: %w", len(keys), len(addrs), len(sizes), wire.ErrInvalidParams)
		}
		return make([]uint64, len(keys)), errs
	}
	flat := make([]Buffer, len(keys))
	bufs := make([][]Buffer, len(keys))
	for i := range keys {
		flat[i] = Buffer{Addr: addrs[i], Size: sizes[i]}
		bufs[i] = flat[i : i+1 : i+1]
	}
	return c.batchGet(ctx, keys, bufs)
}

// batchGet reads keys[i] into bufs[i] (one buffer or several, filled in
// order).
func (c *Client) batchGet(ctx context.Context, keys []string, bufs [][]Buffer) (n []uint64, errs []error) {
	n = make([]uint64, len(keys))
	errs = make([]error, len(keys))
	if len(bufs) != len(keys) {
		for i := range errs {
			errs[i] = fmt.Errorf("batch get: %d keys, %d buffer lists: %w", len(keys), len(bufs), wire.ErrInvalidParams)
		}
		return n, errs
	}
	c.metrics.gets.Add(uint64(len(keys)))
	defer c.observeBatch(&c.obs.GetDuration, n, time.Now())
	defer func() {
		for i, e := range errs {
			if e != nil {
				c.countGetErr(e)
			} else {
				c.metrics.getBytes.Add(n[i])
			}
		}
	}()
	start := time.Now()
	var resp *wire.BatchGetReplicaListResponse
	err := c.readCall(func(mc *masterConn) error {
		rctx, cancel := c.rpcCtx(ctx)
		defer cancel()
		var err error
		resp, err = mc.mc.BatchGetReplicaList(rctx, &wire.BatchKeyRequest{TenantId: c.tenant, Keys: keys})
		return c.rpcErr(err)
	})
	if err != nil {
		err = fmt.Errorf("batch get: %w", err)
		for i := range errs {
			errs[i] = err
		}
		return n, errs
	}
	lease := time.Duration(resp.GetLeaseTtlMs()) * time.Millisecond
	results := resp.GetResults()
	dests := make([]span, len(keys))
	var jobs jobs
	for i, k := range keys {
		if i >= len(results) {
			errs[i] = fmt.Errorf("get %q: no answer: %w", k, wire.ErrInternal)
			continue
		}
		res := results[i]
		if res.GetCode() != 0 {
			errs[i] = fmt.Errorf("get %q: %w", k, wire.ErrorOf(res.GetCode()))
			continue
		}
		size := res.GetSize()
		room, ok := capacity(bufs[i])
		if !ok || room < size || size == 0 {
			errs[i] = fmt.Errorf("get %q: object of %d bytes, buffers of %d: %w", k, size, room, wire.ErrInvalidParams)
			continue
		}
		n[i] = size
		d := c.gpuSpan(prefixSpan(bufs[i], size))
		dests[i] = d
		if c.hot.read(k, res.GetUid(), size, d) {
			continue
		}
		if served, err := c.readDisk(ctx, k, res.GetUid(), size, res.GetReplicas(), d); served {
			errs[i] = err
			continue
		}
		keyStart := start
		reps, err := c.memoryReplicas(ctx, k, nil, res.GetReplicas(), &keyStart)
		if err != nil {
			errs[i] = err
			continue
		}
		if keyStart != start { // promoted: read it now, under its new lease
			_, errs[i] = c.readAny(ctx, k, reps, d, size, keyStart, lease)
			continue
		}
		if len(reps) == 0 {
			errs[i] = fmt.Errorf("get %q: %w", k, wire.ErrReplicaIsNotReady)
			continue
		}
		if reps[0].GetSegmentName() == c.segName || !d.registered(c.e) {
			_, errs[i] = c.readAny(ctx, k, reps, d, size, start, lease)
			continue
		}
		ids, err := c.open(ctx, reps[:1])
		if err != nil {
			_, errs[i] = c.readAny(ctx, k, reps[1:], d, size, start, lease)
			continue
		}
		if jobs.reqs == nil {
			jobs.grow(len(keys) - i)
		}
		jobs.add(i, reps[0], d, engine.OpRead, ids[0])
	}
	failed, err := c.runJobs(ctx, &jobs)
	keyFailed := make(map[int]*wire.Replica)
	keyWhy := make(map[int]error)
	for j, key := range jobs.keys {
		if err != nil || (failed != nil && failed[j] != nil) {
			keyFailed[key] = jobs.reps[j]
			if keyWhy[key] = err; err == nil {
				keyWhy[key] = failed[j]
			}
		}
	}
	for j, i := range jobs.keys {
		if j > 0 && jobs.keys[j-1] == i {
			continue // one verdict per key
		}
		bad, isBad := keyFailed[i]
		if !isBad {
			if lease > 0 && time.Since(start) > lease {
				errs[i] = fmt.Errorf("get %q: %w", keys[i], wire.ErrLeaseExpired)
			} else {
				c.hot.offer(keys[i], results[i].GetUid(), n[i], dests[i])
			}
			continue
		}
		// Fall back to the other replicas of this key.
		var rest []*wire.Replica
		for _, r := range c.readOrder(nil, results[i].GetReplicas()) {
			if r != bad {
				rest = append(rest, r)
			}
		}
		if len(rest) == 0 {
			errs[i] = transferFail("get", keys[i], fmt.Errorf("read from %s failed: %v", bad.GetSegmentName(), keyWhy[i]))
			continue
		}
		_, errs[i] = c.readAny(ctx, keys[i], rest, dests[i], n[i], start, lease)
	}
	for i := range errs {
		if errs[i] != nil {
			n[i] = 0
		}
	}
	return n, errs
}
