package client

import (
	"context"
	"fmt"
	"time"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/store/wire"
)

// job is one remote request of a batch and the key it serves.
type job struct {
	key int
	rep *wire.Replica
	req engine.Request
}

// runJobs runs the requests of jobs as one engine batch (one submission,
// one wait) and returns which jobs failed.
func (c *Client) runJobs(ctx context.Context, jobs []job) ([]bool, error) {
	failed := make([]bool, len(jobs))
	if len(jobs) == 0 {
		return failed, nil
	}
	reqs := make([]engine.Request, len(jobs))
	for i, j := range jobs {
		reqs[i] = j.req
	}
	id, err := c.e.AllocateBatch(len(reqs))
	if err != nil {
		return nil, err
	}
	serr := c.e.Submit(id, reqs)
	if _, werr := c.e.Wait(ctx, id); werr != nil {
		_ = c.e.Cancel(context.Background(), id)
	}
	for i := range jobs {
		st, err := c.e.TaskStatus(id, i)
		failed[i] = err != nil || st.State != engine.StateCompleted
		if failed[i] {
			_ = c.e.RemoveSegment(jobs[i].rep.GetSegmentName())
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
	return c.batchPut(ctx, keys, addrs, sizes, cfg, false)
}

// BatchUpsertFrom is BatchPutFrom that replaces existing objects.
func (c *Client) BatchUpsertFrom(ctx context.Context, keys []string, addrs []uintptr, sizes []uint64, cfg ReplicateConfig) []error {
	return c.batchPut(ctx, keys, addrs, sizes, cfg, true)
}

func (c *Client) batchPut(ctx context.Context, keys []string, addrs []uintptr, sizes []uint64, cfg ReplicateConfig, upsert bool) []error {
	for _, k := range keys {
		c.hot.invalidate(k)
	}
	errs := make([]error, len(keys))
	if len(addrs) != len(keys) || len(sizes) != len(keys) {
		for i := range errs {
			errs[i] = fmt.Errorf("batch put: %d keys, %d buffers, %d sizes: %w", len(keys), len(addrs), len(sizes), wire.ErrInvalidParams)
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
		if k == "" || sizes[i] == 0 || addrs[i] == 0 {
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
			Sizes: startSizes, Config: cfg.toWire(), Upsert: upsert})
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
	started := make([]bool, len(keys))
	var jobs []job
	for n, i := range idx {
		if n >= len(results) {
			errs[i] = fmt.Errorf("put %q: no answer: %w", keys[i], wire.ErrInternal)
			continue
		}
		res := results[n]
		if res.GetCode() != 0 {
			err := wire.ErrorOf(res.GetCode())
			if !upsert && wire.CodeOf(err) == wire.ErrObjectAlreadyExists {
				continue
			}
			errs[i] = fmt.Errorf("put %q: %w", keys[i], err)
			continue
		}
		started[i] = true
		data := cSpan(addrs[i], sizes[i])
		var remote []*wire.Replica
		for _, r := range res.GetReplicas() {
			if r.GetSegmentName() == c.segName {
				data.copyTo(uintptr(r.GetAddress()), 0, data.size)
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
		for k, r := range remote {
			jobs = append(jobs, job{key: i, rep: r, req: engine.Request{Op: engine.OpWrite, Source: data.addr,
				Target: ids[k], TargetOffset: r.GetAddress(), Length: data.size}})
		}
	}
	failed, err := c.runJobs(ctx, jobs)
	for n, j := range jobs {
		if (err != nil || failed[n]) && errs[j.key] == nil {
			errs[j.key] = transferFail("put", keys[j.key], fmt.Errorf("write to %s failed", j.rep.GetSegmentName()))
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
	n = make([]uint64, len(keys))
	errs = make([]error, len(keys))
	if len(addrs) != len(keys) || len(sizes) != len(keys) {
		for i := range errs {
			errs[i] = fmt.Errorf("batch get: %d keys, %d buffers, %d sizes: %w", len(keys), len(addrs), len(sizes), wire.ErrInvalidParams)
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
	var jobs []job
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
		if sizes[i] < size || addrs[i] == 0 {
			errs[i] = fmt.Errorf("get %q: object of %d bytes, buffer of %d: %w", k, size, sizes[i], wire.ErrInvalidParams)
			continue
		}
		n[i] = size
		if c.hot.read(k, res.GetUid(), size, cSpan(addrs[i], size)) {
			continue
		}
		keyStart := start
		reps, err := c.memoryReplicas(ctx, k, res.GetReplicas(), &keyStart)
		if err != nil {
			errs[i] = err
			continue
		}
		d := cSpan(addrs[i], size)
		if keyStart != start { // promoted: read it now, under its new lease
			errs[i] = c.readAny(ctx, k, reps, d, size, keyStart, lease)
			continue
		}
		if len(reps) == 0 {
			errs[i] = fmt.Errorf("get %q: %w", k, wire.ErrReplicaIsNotReady)
			continue
		}
		if reps[0].GetSegmentName() == c.segName || !d.registered(c.e) {
			errs[i] = c.readAny(ctx, k, reps, d, size, start, lease)
			continue
		}
		ids, err := c.open(ctx, reps[:1])
		if err != nil {
			errs[i] = c.readAny(ctx, k, reps[1:], d, size, start, lease)
			continue
		}
		jobs = append(jobs, job{key: i, rep: reps[0], req: engine.Request{Op: engine.OpRead, Source: d.addr,
			Target: ids[0], TargetOffset: reps[0].GetAddress(), Length: size}})
	}
	failed, err := c.runJobs(ctx, jobs)
	for j, jb := range jobs {
		i := jb.key
		if err == nil && !failed[j] {
			if lease > 0 && time.Since(start) > lease {
				errs[i] = fmt.Errorf("get %q: %w", keys[i], wire.ErrLeaseExpired)
			} else {
				c.hot.offer(keys[i], results[i].GetUid(), n[i], cSpan(addrs[i], n[i]))
			}
			continue
		}
		// Fall back to the other replicas of this key.
		reps := c.readOrder(results[i].GetReplicas())
		var rest []*wire.Replica
		for _, r := range reps {
			if r != jb.rep {
				rest = append(rest, r)
			}
		}
		if len(rest) == 0 {
			errs[i] = transferFail("get", keys[i], fmt.Errorf("read from %s failed", jb.rep.GetSegmentName()))
			continue
		}
		errs[i] = c.readAny(ctx, keys[i], rest, cSpan(addrs[i], n[i]), n[i], start, lease)
	}
	for i := range errs {
		if errs[i] != nil {
			n[i] = 0
		}
	}
	return n, errs
}
