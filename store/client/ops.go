package client

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/gpu"
	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/store/wire"
)

// ReplicateConfig is the replication request of a put (specs/mooncake.md
// §6.5). The zero value asks for one replica, no pins.
type ReplicateConfig struct {
	// ReplicaNum is the number of memory replicas, each on a different
	// segment (best effort). 0 means 1.
	ReplicaNum int
	// SoftPin keeps the object in memory longer: it is evicted last, for
	// the master's soft-pin TTL (or SoftPinTTL).
	SoftPin bool
	// SoftPinTTL overrides the master's soft-pin TTL; 0 means its default.
	SoftPinTTL time.Duration
	// HardPin keeps the object from ever being evicted.
	HardPin bool
	// PreferredSegments are segment names (transfer-engine segment names of
	// clients) tried first, in order.
	PreferredSegments []string
	// GroupIDs are Mooncake's lifecycle groups: one id per key of the call
	// (exactly one for Put; one per key for a batch), "" for an ungrouped
	// key; nil names none. Objects of one group share read leases and are
	// evicted together, and an object's group never changes (an upsert
	// naming another is INVALID_PARAMS). A list of the wrong length fails
	// the whole call with INVALID_PARAMS.
	GroupIDs []string

	// ver makes the put a versioned publish (version.go); nil: a plain
	// Mooncake put.
	ver *versionedPut
}

// checkGroups validates GroupIDs for a call of n keys.
func (r ReplicateConfig) checkGroups(n int) error {
	if r.GroupIDs != nil && len(r.GroupIDs) != n {
		return fmt.Errorf("%d group ids for %d keys: %w", len(r.GroupIDs), n, wire.ErrInvalidParams)
	}
	return nil
}

// forKeys returns r for the keys at idx of the call (its group ids picked).
func (r ReplicateConfig) forKeys(idx []int) ReplicateConfig {
	if r.GroupIDs == nil {
		return r
	}
	g := make([]string, len(idx))
	for n, i := range idx {
		g[n] = r.GroupIDs[i]
	}
	r.GroupIDs = g
	return r
}

func (r ReplicateConfig) toWire() *wire.ReplicateConfig {
	w := new(wire.ReplicateConfig)
	r.fillWire(w)
	return w
}

// fillWire sets w to toWire's config.
func (r ReplicateConfig) fillWire(w *wire.ReplicateConfig) {
	*w = wire.ReplicateConfig{
		ReplicaNum:        uint32(max(r.ReplicaNum, 0)),
		SoftPinTtlMs:      uint64(r.SoftPinTTL / time.Millisecond),
		HardPin:           r.HardPin,
		PreferredSegments: r.PreferredSegments,
		GroupIds:          r.GroupIDs,
		HasGroupIds:       r.GroupIDs != nil,
	}
	if r.SoftPin {
		w.SoftPin = wire.SoftPinAction_SOFT_PIN_ENABLE
	}
}

// span is the caller's side of a transfer: C memory at addr (buf nil), C
// memory in pieces (parts, multi.go), or a Go slice, which the engine never
// sees (it is copied through staging).
type span struct {
	addr  uintptr
	buf   []byte
	size  uint64
	parts []Buffer // in order, none empty; addr and buf unused
	// gpu is set when the memory is GPU device memory (gpuSpan, gpu.go):
	// copies then go through the CUDA driver, with device dev's context.
	gpu *gpu.Runtime
	dev int
}

func cSpan(addr uintptr, size uint64) span { return span{addr: addr, size: size} }
func goSpan(b []byte) span                 { return span{buf: b, size: uint64(len(b))} }

// registered reports whether the engine can use the span directly.
func (s span) registered(e *engine.Engine) bool {
	if s.parts != nil {
		return s.partsRegistered(e)
	}
	return s.buf == nil && s.addr != 0 && e.Registered(uint64(s.addr), s.size)
}

// valid reports whether the span names memory.
func (s span) valid() bool { return s.buf != nil || s.addr != 0 || s.parts != nil }

// appendRequests appends to reqs the engine requests that move the span to
// (OpWrite) or from (OpRead) size bytes at remote address at of segment
// target: one request, gathering the parts of host memory (the engine
// reads the pieces until it completes), or one per part of GPU memory (each part takes its
// own route). The span must be registered.
func (s span) appendRequests(reqs []engine.Request, op engine.OpCode, target engine.SegmentID, at uint64) []engine.Request {
	if s.parts == nil {
		return append(reqs, engine.Request{Op: op, Source: s.addr, Target: target, TargetOffset: at, Length: s.size})
	}
	if s.gpu == nil {
		return append(reqs, engine.Request{Op: op, Source: s.parts[0].Addr, Target: target, TargetOffset: at, Length: s.size,
			Pieces: s.pieces()})
	}
	for _, p := range s.parts {
		reqs = append(reqs, engine.Request{Op: op, Source: p.Addr, Target: target, TargetOffset: at, Length: p.Size})
		at += p.Size
	}
	return reqs
}

// copyTo copies n bytes at offset off of the span to the host address dst
// (through the CUDA driver for GPU memory).
func (s span) copyTo(dst uintptr, off, n uint64) error {
	if s.parts != nil {
		return s.copyParts(dst, off, n, true)
	}
	if s.buf != nil {
		copy(cmem.Bytes(dst, n), s.buf[off:off+n])
		return nil
	}
	if s.gpu != nil {
		return s.gpuCopy(dst, s.addr+uintptr(off), n)
	}
	cmem.Copy(dst, s.addr+uintptr(off), n)
	return nil
}

// copyFrom copies n bytes from the host address src to offset off of the
// span (through the CUDA driver for GPU memory).
func (s span) copyFrom(off uint64, src uintptr, n uint64) error {
	if s.parts != nil {
		return s.copyParts(src, off, n, false)
	}
	if s.buf != nil {
		copy(s.buf[off:off+n], cmem.Bytes(src, n))
		return nil
	}
	if s.gpu != nil {
		return s.gpuCopy(s.addr+uintptr(off), src, n)
	}
	cmem.Copy(s.addr+uintptr(off), src, n)
	return nil
}

func transferFail(op, key string, err error) error {
	return fmt.Errorf("%s %q: %w: %w", op, key, wire.ErrTransferFail, err)
}

// ---------------------------------------------------------------------------
// Put

// Put stores value under key. An existing key is left as it is and Put
// returns nil (objects are immutable; use Upsert to overwrite), as in
// Mooncake. The bytes go through the staging buffer (or straight into a
// replica in this client's own segment).
func (c *Client) Put(ctx context.Context, key string, value []byte, cfg ReplicateConfig) error {
	return c.put(ctx, key, goSpan(value), cfg, false)
}

// PutFrom is Put of size bytes of C memory at addr. Registered memory
// (RegisterBuffer) is sent without a copy.
func (c *Client) PutFrom(ctx context.Context, key string, addr uintptr, size uint64, cfg ReplicateConfig) error {
	return c.put(ctx, key, cSpan(addr, size), cfg, false)
}

// Upsert stores value under key, replacing an existing object.
func (c *Client) Upsert(ctx context.Context, key string, value []byte, cfg ReplicateConfig) error {
	return c.put(ctx, key, goSpan(value), cfg, true)
}

// UpsertFrom is Upsert of size bytes of C memory at addr.
func (c *Client) UpsertFrom(ctx context.Context, key string, addr uintptr, size uint64, cfg ReplicateConfig) error {
	return c.put(ctx, key, cSpan(addr, size), cfg, true)
}

func (c *Client) put(ctx context.Context, key string, data span, cfg ReplicateConfig, upsert bool) (err error) {
	data = c.gpuSpan(data)
	c.metrics.puts.Add(1)
	c.hot.invalidate(key)
	c.hints.drop(key)
	start := time.Now()
	defer func() {
		c.obs.PutDuration.Observe(data.size, time.Since(start))
		if err != nil {
			c.metrics.putErrors.Add(1)
		} else {
			c.metrics.putBytes.Add(data.size)
		}
	}()
	return c.putOne(ctx, key, data, cfg, upsert)
}

// putOne is put without its metrics (batchPut asks it for the keys the
// master could not allocate yet).
func (c *Client) putOne(ctx context.Context, key string, data span, cfg ReplicateConfig, upsert bool) error {
	if key == "" || data.size == 0 || !data.valid() {
		return fmt.Errorf("put %q (%d bytes): %w", key, data.size, wire.ErrInvalidParams)
	}
	if err := cfg.checkGroups(1); err != nil {
		return fmt.Errorf("put %q: %w", key, err)
	}
	mc, err := c.master()
	if err != nil {
		return err
	}
	if c.grants.eligible(mc, data.size, cfg) {
		if done, err := c.putGranted(ctx, mc, key, data, cfg, upsert); done {
			return err
		}
	}
	var resp *wire.PutStartResponse
	err = c.allocCall(ctx, &mc, func(mc *masterConn) error {
		rctx, cancel := c.rpcCtx(ctx)
		defer cancel()
		var err error
		resp, err = mc.mc.PutStart(rctx, &wire.PutStartRequest{TenantId: c.tenant, ClientId: c.clientID, Key: key, Size: data.size,
			Config: cfg.toWire(), Upsert: upsert, Versioned: cfg.ver != nil, ExpectedVersion: cfg.ver.expected()})
		return c.rpcErr(err)
	})
	if err != nil {
		if !upsert && wire.CodeOf(err) == wire.ErrObjectAlreadyExists {
			return nil
		}
		return fmt.Errorf("put %q: %w", key, err)
	}
	if werr := c.writeReplicas(ctx, data, resp.GetReplicas(), nil); werr != nil {
		rctx, cancel := c.rpcCtx(context.Background())
		_, rerr := mc.mc.PutEnd(rctx, &wire.PutEndRequest{TenantId: c.tenant, ClientId: c.clientID, Key: key, Revoke: true})
		cancel()
		if rerr != nil {
			c.log.Warn("put revoke failed", "key", key, "err", c.rpcErr(rerr))
		}
		return transferFail("put", key, werr)
	}
	rctx, cancel := c.rpcCtx(ctx)
	endResp, err := mc.mc.PutEnd(rctx, &wire.PutEndRequest{TenantId: c.tenant, ClientId: c.clientID, Key: key})
	cancel()
	if err != nil {
		return fmt.Errorf("put %q: end: %w", key, c.rpcErr(err))
	}
	cfg.ver.set(endResp.GetVersion())
	return nil
}

// allocCall runs an allocating master call fn (PutStart). A master that
// cannot allocate yet (UNAVAILABLE_IN_CURRENT_STATUS: a new HA leader
// waiting out its predecessor's put grants, a master that no longer leads
// while the heartbeat finds the new one, or memory that holds only objects
// whose disk-tier files are still being written: backpressure) is asked
// again, after pauses that grow from allocRetryMin to allocRetry, until
// RPCTimeout has passed; *mc is the connection of the last try. fn returns
// the converted error (rpcErr).
func (c *Client) allocCall(ctx context.Context, mc **masterConn, fn func(mc *masterConn) error) error {
	deadline := time.Now().Add(c.cfg.RPCTimeout)
	pause := allocRetryMin
	for {
		err := fn(*mc)
		if wire.CodeOf(err) != wire.ErrUnavailableInStatus || !time.Now().Add(pause).Before(deadline) {
			return err
		}
		c.metrics.putWaits.Add(1)
		if !c.pause(ctx, &pause) {
			return err
		}
		next, merr := c.master()
		if merr != nil {
			return err
		}
		*mc = next
	}
}

// pause sleeps for *d, then doubles it up to allocRetry; false when ctx
// or the client ended first.
func (c *Client) pause(ctx context.Context, d *time.Duration) bool {
	t := time.NewTimer(*d)
	defer t.Stop()
	*d = min(2**d, allocRetry)
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-c.ctx.Done():
	}
	return false
}

// allocRetryMin and allocRetry are the first and the longest pause
// between tries of allocCall.
const (
	allocRetryMin = time.Millisecond
	allocRetry    = 100 * time.Millisecond
)

// writeBound limits a put's writes into space it may use only until a
// deadline that can move (put grants): check returns that deadline, or an
// error once writing is no longer allowed. A nil *writeBound is no limit
// (replicas the master allocated with PutStart).
type writeBound struct {
	check func() (time.Time, error)
}

// enter is called right before each write (memcpy or transfer submission)
// and before each wait that precedes one: it fails when the bound forbids
// writing now, and otherwise returns a ctx that ends at the deadline.
func (b *writeBound) enter(ctx context.Context) (context.Context, context.CancelFunc, error) {
	if b == nil {
		return ctx, func() {}, nil
	}
	d, err := b.by()
	if err != nil {
		return nil, nil, err
	}
	wctx, cancel := context.WithDeadline(ctx, d)
	return wctx, cancel, nil
}

// by is enter without the ctx: the deadline to bound the next wait by
// (zero for a nil bound), or the error when the bound forbids writing now.
// A wait that takes a deadline of its own (engine.TransferBy) needs no
// derived context, which would cost a context and a timer (issue 38).
func (b *writeBound) by() (time.Time, error) {
	if b == nil {
		return time.Time{}, nil
	}
	d, err := b.check()
	if err != nil {
		return time.Time{}, err
	}
	if !time.Now().Before(d) {
		return time.Time{}, fmt.Errorf("write deadline %s passed: %w", d.Format(time.StampMilli), errGrantLapsed)
	}
	return d, nil
}

// allowed reports whether the bound allows writing now.
func (b *writeBound) allowed() error {
	if b == nil {
		return nil
	}
	_, err := b.check()
	return err
}

// writeReplicas writes data to every replica: replicas in this client's
// segment by memcpy, the others with one engine transfer (per staging
// chunk when the data is not registered).
//
// With a bound (put grants), the bound is checked again right before every
// memcpy and every transfer submission, after any wait (the holder's
// metadata, a staging chunk), and every wait and transfer runs under a ctx
// that ends at the bound's deadline; a failed check ends the write with
// its error (errGrantLapsed) and nothing more is submitted. A transfer
// already submitted cannot be recalled: when its ctx ends the engine
// cancels it, dropping the slices not yet on the wire and waiting for those
// that are. So the one assumption left is that a slice the engine put on
// the wire before the deadline lands in the holder's memory within the
// remaining third of the grant lease (the master fences a range it took
// back for a whole lease after the last confirmation the client could have
// seen); a staging chunk is at most 4 MiB.
func (c *Client) writeReplicas(ctx context.Context, data span, reps []*wire.Replica, bound *writeBound) error {
	// The lists below live on the stack for the usual few replicas of one
	// request each (issue 38: allocations per put).
	var remoteBuf [4]*wire.Replica
	remote := remoteBuf[:0]
	for _, r := range reps {
		if r.GetSize() < data.size {
			return fmt.Errorf("replica of %d bytes for %d: %w", r.GetSize(), data.size, wire.ErrInvalidReplica)
		}
	}
	for _, r := range reps {
		if r.GetSegmentName() == c.segName {
			if err := bound.allowed(); err != nil {
				return err
			}
			if err := data.copyTo(uintptr(r.GetAddress()), 0, data.size); err != nil {
				return err
			}
			c.metrics.localCopies.Add(1)
			continue
		}
		remote = append(remote, r)
	}
	if len(remote) == 0 {
		return nil
	}
	var idBuf [4]engine.SegmentID
	ids, err := c.openBound(ctx, bound, remote, idBuf[:0])
	if err != nil {
		return err
	}
	if data.registered(c.e) {
		var reqBuf [4]engine.Request
		reqs := reqBuf[:0]
		for i, r := range remote {
			reqs = data.appendRequests(reqs, engine.OpWrite, ids[i], r.GetAddress())
		}
		return c.boundTransfer(ctx, bound, reqs, remote)
	}
	reqs := make([]engine.Request, len(remote))
	if c.staging == nil {
		return fmt.Errorf("data not in registered memory and no local buffer: %w", wire.ErrInvalidParams)
	}
	wctx, cancel, err := bound.enter(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	chunk, err := c.staging.get(wctx)
	if err != nil {
		return err
	}
	defer c.staging.put(chunk)
	for off := uint64(0); off < data.size; off += c.staging.chunk {
		n := min(c.staging.chunk, data.size-off)
		if err := data.copyTo(chunk, off, n); err != nil {
			return err
		}
		c.metrics.stagedBytes.Add(n)
		for i, r := range remote {
			reqs[i] = engine.Request{Op: engine.OpWrite, Source: chunk, Target: ids[i], TargetOffset: r.GetAddress() + off, Length: n}
		}
		if err := c.boundTransfer(ctx, bound, reqs, remote); err != nil {
			return err
		}
	}
	return nil
}

// boundTransfer is transfer under bound: checked right before submitting,
// and bounded by its deadline.
func (c *Client) boundTransfer(ctx context.Context, bound *writeBound, reqs []engine.Request, reps []*wire.Replica) error {
	by, err := bound.by()
	if err != nil {
		return err
	}
	return c.transferBy(ctx, by, reqs, reps)
}

// openBound is open under bound: a look-up of a holder not open yet is
// checked first and runs under a ctx that ends at the bound's deadline.
// Holders already open need no check here: nothing waits, and the
// transfer's own check (boundTransfer) comes next. The ids are appended to
// ids (the caller's buffer).
func (c *Client) openBound(ctx context.Context, bound *writeBound, reps []*wire.Replica, ids []engine.SegmentID) ([]engine.SegmentID, error) {
	for _, r := range reps {
		id, ok := c.e.CachedSegment(r.GetSegmentName())
		if !ok {
			d, err := bound.by() // the one check before the look-up
			if err != nil {
				return nil, err
			}
			if !d.IsZero() {
				wctx, cancel := context.WithDeadline(ctx, d)
				defer cancel()
				ctx = wctx
			}
			return c.open(ctx, reps)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// open returns the engine segment ids of the replicas' holders.
func (c *Client) open(ctx context.Context, reps []*wire.Replica) ([]engine.SegmentID, error) {
	ids := make([]engine.SegmentID, len(reps))
	for i, r := range reps {
		id, err := c.e.OpenSegment(ctx, r.GetSegmentName())
		if err != nil {
			return nil, fmt.Errorf("open segment %q: %w", r.GetSegmentName(), err)
		}
		ids[i] = id
	}
	return ids, nil
}

// transfer runs reqs; on failure it drops the cached descriptors of the
// peers involved, so a restarted holder is looked up afresh.
func (c *Client) transfer(ctx context.Context, reqs []engine.Request, reps []*wire.Replica) error {
	return c.transferBy(ctx, time.Time{}, reqs, reps)
}

// transferBy is transfer with its wait also bounded by deadline (zero:
// none beyond ctx's).
func (c *Client) transferBy(ctx context.Context, deadline time.Time, reqs []engine.Request, reps []*wire.Replica) error {
	err := c.e.TransferBy(ctx, deadline, reqs)
	if err != nil {
		for _, r := range reps {
			_ = c.e.RemoveSegment(r.GetSegmentName())
		}
	}
	return err
}

// ---------------------------------------------------------------------------
// Get

// Get returns a copy of the object stored under key.
func (c *Client) Get(ctx context.Context, key string) ([]byte, error) {
	var out []byte
	_, err := c.get(ctx, key, false, func(size uint64) (span, error) {
		out = make([]byte, size)
		return goSpan(out), nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// GetBytes reads the object stored under key into buf and returns its size.
// A buf shorter than the object is INVALID_PARAMS and nothing is read.
func (c *Client) GetBytes(ctx context.Context, key string, buf []byte) (uint64, error) {
	return c.get(ctx, key, false, func(size uint64) (span, error) {
		if uint64(len(buf)) < size {
			return span{}, fmt.Errorf("get %q: object of %d bytes, buffer of %d: %w", key, size, len(buf), wire.ErrInvalidParams)
		}
		return goSpan(buf[:size]), nil
	})
}

// GetInto reads the object stored under key into size bytes of C memory at
// addr and returns the object's size. A buffer smaller than the object is
// INVALID_PARAMS and nothing is written, except by a speculative read of
// the key's earlier incarnation (spec.go), which a failed get may leave
// behind. Registered memory (RegisterBuffer) is filled without a copy.
func (c *Client) GetInto(ctx context.Context, key string, addr uintptr, size uint64) (uint64, error) {
	return c.get(ctx, key, true, func(objSize uint64) (span, error) {
		if size < objSize {
			return span{}, fmt.Errorf("get %q: object of %d bytes, buffer of %d: %w", key, objSize, size, wire.ErrInvalidParams)
		}
		if addr == 0 {
			return span{}, fmt.Errorf("get %q: NULL buffer: %w", key, wire.ErrInvalidParams)
		}
		return cSpan(addr, objSize), nil
	})
}

// get reads key into the span dest returns for its size; with mayGuess,
// dest has no side effects and may be called for a guessed size (a
// speculative get, spec.go).
func (c *Client) get(ctx context.Context, key string, mayGuess bool, dest func(size uint64) (span, error)) (n uint64, err error) {
	c.metrics.gets.Add(1)
	began := time.Now()
	defer func() {
		c.obs.GetDuration.Observe(n, time.Since(began))
		if err != nil {
			c.countGetErr(err)
		} else {
			c.metrics.getBytes.Add(n)
		}
	}()
	if key == "" {
		return 0, fmt.Errorf("get: empty key: %w", wire.ErrInvalidParams)
	}
	start := time.Now()
	var spec *speculation
	var specState speculation // spec's storage: no allocation per get
	if mayGuess {
		spec = c.speculate(ctx, key, dest, &specState) // spec.go
	}
	var resp *wire.GetReplicaListResponse
	var pooled *wire.GetReplicaListResponse // resp, when it is from replicaLists
	defer func() {
		if pooled != nil {
			replicaLists.Put(pooled)
		}
	}()
	err = c.readCall(func(mc *masterConn) error {
		rctx, cancel := c.rpcCtx(ctx)
		defer cancel()
		req := keyRequests.Get().(*wire.KeyRequest) // encoded when sent, not kept
		defer keyRequests.Put(req)
		req.TenantId, req.Key = c.tenant, key
		defer req.Reset()
		if mux, ok := mc.mc.(*wire.MuxClient); ok {
			// Ask, read the value while the master answers (when a hint
			// names it), then read the answer (most often there by then)
			// into a reused message.
			var call wire.MuxCall
			if err := mux.StartGetReplicaList(rctx, req, &call); err != nil {
				return c.rpcErr(err)
			}
			if spec != nil && !spec.waited {
				c.wait(rctx, spec) // bounded by the RPC timeout
			}
			if pooled == nil {
				pooled = replicaLists.Get().(*wire.GetReplicaListResponse)
			}
			resp = pooled
			return c.rpcErr(call.Wait(resp))
		}
		var err error
		resp, err = mc.mc.GetReplicaList(rctx, req)
		return c.rpcErr(err)
	})
	if err != nil {
		c.drop(spec)
		if wire.CodeOf(err) == wire.ErrObjectNotFound {
			c.hints.drop(key)
		}
		return 0, fmt.Errorf("get %q: %w", key, err)
	}
	size := resp.GetSize()
	lease := time.Duration(resp.GetLeaseTtlMs()) * time.Millisecond
	if spec != nil {
		if spec.matches(resp) {
			if c.keep(ctx, spec, start, lease) {
				return size, nil
			}
		} else {
			c.drop(spec)
		}
	}
	d, err := dest(size)
	if err != nil {
		return 0, err
	}
	d = c.gpuSpan(d)
	if c.hot.read(key, resp.GetUid(), size, d) {
		return size, nil
	}
	if served, err := c.readDisk(ctx, key, resp.GetUid(), size, resp.GetReplicas(), d); served {
		if err != nil {
			return 0, err
		}
		return size, nil
	}
	var mem [4]*wire.Replica // on the stack for up to four replicas
	reps, err := c.memoryReplicas(ctx, key, mem[:0], resp.GetReplicas(), &start)
	if err != nil {
		return 0, err
	}
	from, err := c.readAny(ctx, key, reps, d, size, start, lease)
	if err != nil {
		return 0, err
	}
	if from.GetSegmentName() != c.segName {
		c.hot.offer(key, resp.GetUid(), size, d)
		c.hints.set(key, hintOf(resp, from))
	}
	return size, nil
}

// replicaLists holds the answers of gets over the mux: the mux decodes
// into one, reusing its replicas; nothing of it is kept past the get (a
// hint copies what it needs, hintOf).
var replicaLists = sync.Pool{New: func() any { return new(wire.GetReplicaListResponse) }}

// keyRequests holds the KeyRequests of gets: a request is encoded when it
// is sent (mux, gRPC, Mooncake's protocol, the in-process master reads it
// during the call) and not kept past the call.
var keyRequests = sync.Pool{New: func() any { return new(wire.KeyRequest) }}

// readAny reads from the first replica that answers (ours first), which
// it returns, and checks that the lease granted at start still held when
// the read ended.
func (c *Client) readAny(ctx context.Context, key string, reps []*wire.Replica, d span, size uint64,
	start time.Time, lease time.Duration) (*wire.Replica, error) {
	if len(reps) == 0 {
		return nil, fmt.Errorf("get %q: %w", key, wire.ErrReplicaIsNotReady)
	}
	var lastErr error
	var from *wire.Replica
	var order [4]*wire.Replica // on the stack for up to four replicas
	for _, r := range c.readOrder(order[:0], reps) {
		if lastErr = c.readReplica(ctx, r, d, size); lastErr == nil {
			from = r
			break
		}
		c.log.Debug("replica read failed", "key", key, "segment", r.GetSegmentName(), "err", lastErr)
	}
	if from == nil {
		return nil, transferFail("get", key, lastErr)
	}
	if lease > 0 && time.Since(start) > lease {
		return nil, fmt.Errorf("get %q: read took %v, lease %v: %w", key, time.Since(start), lease, wire.ErrLeaseExpired)
	}
	return from, nil
}

// readOrder appends to out the memory replicas of reps (disk replicas are
// read through a promotion, tier.go), those in this client's segment
// first.
func (c *Client) readOrder(out, reps []*wire.Replica) []*wire.Replica {
	for _, r := range reps {
		if r.GetSegmentName() == c.segName && r.GetKind() == wire.ReplicaKind_REPLICA_KIND_MEMORY {
			out = append(out, r)
		}
	}
	for _, r := range reps {
		if r.GetSegmentName() != c.segName && r.GetKind() == wire.ReplicaKind_REPLICA_KIND_MEMORY {
			out = append(out, r)
		}
	}
	return out
}

func (c *Client) readReplica(ctx context.Context, r *wire.Replica, d span, size uint64) error {
	if r.GetSize() < size {
		return fmt.Errorf("replica of %d bytes for %d: %w", r.GetSize(), size, wire.ErrInvalidReplica)
	}
	if r.GetSegmentName() == c.segName {
		if err := d.copyFrom(0, uintptr(r.GetAddress()), size); err != nil {
			return err
		}
		c.metrics.localCopies.Add(1)
		return nil
	}
	id, err := c.e.OpenSegment(ctx, r.GetSegmentName())
	if err != nil {
		return fmt.Errorf("open segment %q: %w", r.GetSegmentName(), err)
	}
	oneBuf := [1]*wire.Replica{r} // on the stack, as the request below
	one := oneBuf[:]
	if d.registered(c.e) {
		var reqs [1]engine.Request
		return c.transfer(ctx, d.appendRequests(reqs[:0], engine.OpRead, id, r.GetAddress()), one)
	}
	if c.staging == nil {
		return fmt.Errorf("buffer not in registered memory and no local buffer: %w", wire.ErrInvalidParams)
	}
	chunk, err := c.staging.get(ctx)
	if err != nil {
		return err
	}
	defer c.staging.put(chunk)
	for off := uint64(0); off < size; off += c.staging.chunk {
		n := min(c.staging.chunk, size-off)
		if err := c.transfer(ctx, []engine.Request{{Op: engine.OpRead, Source: chunk, Target: id,
			TargetOffset: r.GetAddress() + off, Length: n}}, one); err != nil {
			return err
		}
		if err := d.copyFrom(off, chunk, n); err != nil {
			return err
		}
		c.metrics.stagedBytes.Add(n)
	}
	return nil
}

// ---------------------------------------------------------------------------
// Existence, size, removal

// IsExist reports whether key has a readable replica; a yes grants a read
// lease (as Mooncake).
func (c *Client) IsExist(ctx context.Context, key string) (bool, error) {
	var resp *wire.ExistKeyResponse
	err := c.readCall(func(mc *masterConn) error {
		rctx, cancel := c.rpcCtx(ctx)
		defer cancel()
		var err error
		resp, err = mc.mc.ExistKey(rctx, &wire.KeyRequest{TenantId: c.tenant, Key: key})
		return c.rpcErr(err)
	})
	if err != nil {
		return false, fmt.Errorf("is exist %q: %w", key, err)
	}
	return resp.GetExists(), nil
}

// BatchIsExist is IsExist for many keys in one master call.
func (c *Client) BatchIsExist(ctx context.Context, keys []string) ([]bool, error) {
	var resp *wire.BatchExistKeyResponse
	err := c.readCall(func(mc *masterConn) error {
		rctx, cancel := c.rpcCtx(ctx)
		defer cancel()
		var err error
		resp, err = mc.mc.BatchExistKey(rctx, &wire.BatchKeyRequest{TenantId: c.tenant, Keys: keys})
		return c.rpcErr(err)
	})
	if err != nil {
		return nil, fmt.Errorf("batch is exist (%d keys): %w", len(keys), err)
	}
	out := make([]bool, len(keys))
	for i, v := range resp.GetResults() {
		if i < len(out) {
			out[i] = v == 1
		}
	}
	return out, nil
}

// GetSize returns the size of the object stored under key.
func (c *Client) GetSize(ctx context.Context, key string) (uint64, error) {
	var resp *wire.GetReplicaListResponse
	err := c.readCall(func(mc *masterConn) error {
		rctx, cancel := c.rpcCtx(ctx)
		defer cancel()
		var err error
		resp, err = mc.mc.GetReplicaList(rctx, &wire.KeyRequest{TenantId: c.tenant, Key: key})
		return c.rpcErr(err)
	})
	if err != nil {
		return 0, fmt.Errorf("get size %q: %w", key, err)
	}
	return resp.GetSize(), nil
}

// Remove deletes key. A leased object (read in the last lease period) is
// OBJECT_HAS_LEASE unless force.
func (c *Client) Remove(ctx context.Context, key string, force bool) error {
	c.hot.invalidate(key)
	c.hints.drop(key)
	mc, err := c.master()
	if err != nil {
		return err
	}
	ctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	if _, err := mc.mc.Remove(ctx, &wire.RemoveRequest{TenantId: c.tenant, Key: key, Force: force}); err != nil {
		return fmt.Errorf("remove %q: %w", key, c.rpcErr(err))
	}
	return nil
}

// BatchRemove is Remove for many keys in one master call; errs[i] is the
// result of keys[i].
func (c *Client) BatchRemove(ctx context.Context, keys []string, force bool) ([]error, error) {
	for _, k := range keys {
		c.hot.invalidate(k)
		c.hints.drop(k)
	}
	mc, err := c.master()
	if err != nil {
		return nil, err
	}
	ctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	resp, err := mc.mc.BatchRemove(ctx, &wire.BatchRemoveRequest{TenantId: c.tenant, Keys: keys, Force: force})
	if err != nil {
		return nil, fmt.Errorf("batch remove (%d keys): %w", len(keys), c.rpcErr(err))
	}
	return errorsOf(resp.GetCodes(), len(keys)), nil
}

func errorsOf(codes []int32, n int) []error {
	out := make([]error, n)
	for i := range out {
		if i < len(codes) {
			out[i] = wire.ErrorOf(codes[i])
		} else {
			out[i] = wire.ErrInternal
		}
	}
	return out
}

// RemoveByRegex deletes every object whose key matches pattern (RE2
// syntax, unanchored) and returns how many it removed.
func (c *Client) RemoveByRegex(ctx context.Context, pattern string, force bool) (int64, error) {
	c.hot.clear()
	c.hints.clear()
	mc, err := c.master()
	if err != nil {
		return 0, err
	}
	ctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	resp, err := mc.mc.RemoveByRegex(ctx, &wire.RemoveByRegexRequest{TenantId: c.tenant, Pattern: pattern, Force: force})
	if err != nil {
		return 0, fmt.Errorf("remove by regex %q: %w", pattern, c.rpcErr(err))
	}
	return resp.GetCount(), nil
}

// RemoveAll deletes every object (leased ones only with force) and returns
// how many it removed.
func (c *Client) RemoveAll(ctx context.Context, force bool) (int64, error) {
	c.hot.clear()
	c.hints.clear()
	mc, err := c.master()
	if err != nil {
		return 0, err
	}
	ctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	resp, err := mc.mc.RemoveAll(ctx, &wire.RemoveAllRequest{TenantId: c.tenant, Force: force})
	if err != nil {
		return 0, fmt.Errorf("remove all: %w", c.rpcErr(err))
	}
	return resp.GetCount(), nil
}

// RegisterBuffer registers size bytes of C memory at addr with the transfer
// engine, so PutFrom and GetInto use it without a copy.
func (c *Client) RegisterBuffer(addr uintptr, size uint64) error {
	if c.closed.Load() {
		return ErrClosed
	}
	if addr == 0 || size == 0 {
		return fmt.Errorf("register buffer %#x+%d: %w", addr, size, wire.ErrInvalidParams)
	}
	if err := c.e.RegisterMemory(addr, size, "*", true); err != nil {
		return fmt.Errorf("register buffer %#x+%d: %w", addr, size, err)
	}
	return nil
}

// UnregisterBuffer unregisters a buffer registered at addr.
func (c *Client) UnregisterBuffer(addr uintptr) error {
	if c.closed.Load() {
		return ErrClosed
	}
	if err := c.e.UnregisterMemory(addr); err != nil {
		return fmt.Errorf("unregister buffer %#x: %w", addr, err)
	}
	return nil
}

// ReplicaDesc describes one replica of an object.
type ReplicaDesc struct {
	// SegmentName is the holder's transfer-engine segment name.
	SegmentName string
	// Address is the replica's absolute address in the holder's memory.
	Address uint64
	// Size is the replica's length in bytes.
	Size uint64
	// Status is Mooncake's ReplicaStatus name ("COMPLETE", ...).
	Status string
	// Protocol is the transport the holder offers.
	Protocol string
	// Disk is true for a LOCAL_DISK replica: a file on the disk tier of
	// client SegmentName, under directory FilePath (Address is 0).
	Disk     bool
	FilePath string
}

// KeyReplicas is the master's answer for one key of ReplicaDescs.
type KeyReplicas struct {
	// Err is the key's failure (OBJECT_NOT_FOUND, ...), nil on success.
	Err error
	// Size is the object size in bytes.
	Size uint64
	// Replicas are the readable replicas.
	Replicas []ReplicaDesc
}

// ReplicaDescs returns where the objects of keys live, in one master call
// (Mooncake's batch_get_replica_desc). Like a read it grants leases.
func (c *Client) ReplicaDescs(ctx context.Context, keys []string) ([]KeyReplicas, error) {
	var resp *wire.BatchGetReplicaListResponse
	err := c.readCall(func(mc *masterConn) error {
		rctx, cancel := c.rpcCtx(ctx)
		defer cancel()
		var err error
		resp, err = mc.mc.BatchGetReplicaList(rctx, &wire.BatchKeyRequest{TenantId: c.tenant, Keys: keys})
		return c.rpcErr(err)
	})
	if err != nil {
		return nil, fmt.Errorf("replica descs (%d keys): %w", len(keys), err)
	}
	res := resp.GetResults()
	if len(res) != len(keys) {
		return nil, fmt.Errorf("replica descs: %d answers for %d keys: %w", len(res), len(keys), wire.ErrRPCFail)
	}
	out := make([]KeyReplicas, len(keys))
	for i, r := range res {
		out[i] = KeyReplicas{Err: wire.ErrorOf(r.GetCode()), Size: r.GetSize(), Replicas: replicaDescsOf(r.GetReplicas())}
	}
	return out, nil
}
