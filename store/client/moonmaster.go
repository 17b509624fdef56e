package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/kvferry/kvferry/store/wire"
	"github.com/kvferry/kvferry/store/wire/coro"
	sp "github.com/kvferry/kvferry/store/wire/structpack"
)

// A master that speaks only Mooncake's protocol (mooncake_master, issue 36)
// is called through moonMaster: wire.MasterClient over coro_rpc, converting
// kvferry's protobuf requests and answers to Mooncake's struct_pack types
// and back. The calls Mooncake's master has no counterpart for fail with
// ErrNotSupportedByMooncakeMaster (docs/reports/coro-rpc.md, "client side").

// ErrNotSupportedByMooncakeMaster is wrapped by the error of every call
// that a Mooncake master (mooncake_master) cannot serve: put grants,
// versioned publish and waits, the disk tier, drain jobs, BatchReplicaClear
// of a tenant other than the default and the kvferry-only admin views.
// Such an error also carries wire.ErrNotSupported.
var ErrNotSupportedByMooncakeMaster = errors.New("not supported by a mooncake master")

// moonPoolSize is how many coro_rpc connections a client keeps to a
// Mooncake master: each makes one call at a time, so this many calls run
// at once (more wait for a free connection, within their deadline).
const moonPoolSize = 8

// moonMaster is wire.MasterClient over a pool of coro_rpc connections to
// one Mooncake-protocol master. Connections are dialled when a call needs
// one and dropped after an I/O error, so a restarted master is reached
// again by the next call.
type moonMaster struct {
	addr        string
	dialTimeout time.Duration
	slots       chan struct{}     // one token per connection open or being dialled
	idle        chan *coro.Client // connections not in a call
	done        chan struct{}     // closed by Close
	closeOnce   sync.Once
	mu          struct {
		sync.Mutex // guards open, nextTask and jobs
		open       map[*coro.Client]struct{}
		nextTask   uint64              // the last COPY task id handed out
		jobs       map[uint64]*moonJob // Mooncake tasks by their COPY tasks (moontasks.go)
	}
}

var _ wire.MasterClient = (*moonMaster)(nil)

func newMoonMaster(addr string, dialTimeout time.Duration) *moonMaster {
	m := &moonMaster{addr: addr, dialTimeout: dialTimeout, slots: make(chan struct{}, moonPoolSize),
		idle: make(chan *coro.Client, moonPoolSize), done: make(chan struct{})}
	m.mu.open = map[*coro.Client]struct{}{}
	m.mu.jobs = map[uint64]*moonJob{}
	return m
}

// Close closes every connection; calls in flight fail. A second Close is
// harmless.
func (m *moonMaster) Close() error {
	m.closeOnce.Do(func() {
		close(m.done)
		m.mu.Lock()
		for cl := range m.mu.open {
			_ = cl.Close()
		}
		m.mu.open = map[*coro.Client]struct{}{}
		m.mu.Unlock()
	})
	return nil
}

// get returns a connection for one call: an idle one, a new one while the
// pool has room, or the next one freed, within ctx.
func (m *moonMaster) get(ctx context.Context) (*coro.Client, error) {
	select {
	case <-m.done:
		return nil, ErrClosed
	case cl := <-m.idle:
		return cl, nil
	default:
	}
	select {
	case <-m.done:
		return nil, ErrClosed
	case cl := <-m.idle:
		return cl, nil
	case m.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	dctx, cancel := context.WithTimeout(ctx, m.dialTimeout)
	cl, err := coro.Dial(dctx, m.addr)
	cancel()
	if err != nil {
		<-m.slots
		return nil, err
	}
	m.mu.Lock()
	select {
	case <-m.done:
		m.mu.Unlock()
		_ = cl.Close()
		<-m.slots
		return nil, ErrClosed
	default:
	}
	m.mu.open[cl] = struct{}{}
	m.mu.Unlock()
	return cl, nil
}

// put gives cl back after a call; broken drops it (its connection failed).
func (m *moonMaster) put(cl *coro.Client, broken bool) {
	if !broken {
		select {
		case <-m.done:
		case m.idle <- cl:
			return
		}
	}
	m.mu.Lock()
	delete(m.mu.open, cl)
	m.mu.Unlock()
	_ = cl.Close()
	<-m.slots
}

// call sends body to method fn and returns the answer body. A failure is
// a *wire.StatusError: RPC_TIMEOUT when ctx's deadline passed, RPC_FAIL
// for a connection that failed, NOT_SUPPORTED for a function the master
// lacks.
func (m *moonMaster) call(ctx context.Context, fn coro.Method, body []byte) ([]byte, error) {
	cl, err := m.get(ctx)
	if err != nil {
		return nil, m.transportErr(ctx, fn, err)
	}
	resp, err := cl.Call(ctx, fn.ID, body)
	var re *coro.RPCError
	switch {
	case err == nil:
		m.put(cl, false)
		return resp.Body, nil
	case errors.As(err, &re):
		m.put(cl, false)
		code, gc := wire.ErrRPCFail, codes.Unavailable
		switch re.Code {
		case coro.ErrcFunctionNotRegistered:
			code, gc = wire.ErrNotSupported, codes.Unimplemented
		case coro.ErrcInvalidRPCArguments:
			code, gc = wire.ErrInvalidParams, codes.InvalidArgument
		}
		return nil, &wire.StatusError{Code: code, GRPC: gc, Message: fmt.Sprintf("mooncake master %s: %s: %v", m.addr, fn.Name, re)}
	default:
		m.put(cl, true)
		return nil, m.transportErr(ctx, fn, err)
	}
}

func (m *moonMaster) transportErr(ctx context.Context, fn coro.Method, err error) error {
	if errors.Is(err, ErrClosed) {
		return fmt.Errorf("mooncake master %s: %s: %w", m.addr, fn.Name, err)
	}
	code, gc := wire.ErrRPCFail, codes.Unavailable
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) || isTimeout(err) {
		code, gc = wire.ErrRPCTimeout, codes.DeadlineExceeded
	}
	return &wire.StatusError{Code: code, GRPC: gc, Message: fmt.Sprintf("mooncake master %s: %s: %v", m.addr, fn.Name, err)}
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// invoke calls fn with a (encoded by ac) and decodes the answer with rc.
func invoke[A, R any](ctx context.Context, m *moonMaster, fn coro.Method, ac sp.Codec[A], a *A, rc sp.Codec[R]) (R, error) {
	var zero R
	body, err := m.call(ctx, fn, sp.Marshal(ac, a))
	if err != nil {
		return zero, err
	}
	r, err := sp.Unmarshal(rc, body, sp.Limits{})
	if err != nil {
		return zero, &wire.StatusError{Code: wire.ErrRPCFail, GRPC: codes.Internal,
			Message: fmt.Sprintf("mooncake master %s: %s answer: %v", m.addr, fn.Name, err)}
	}
	return r, nil
}

// invokeOK is invoke for an answer of tl::expected form: the value, or the
// error of the Mooncake error code the master answered.
func invokeOK[A, T any](ctx context.Context, m *moonMaster, fn coro.Method, ac sp.Codec[A], a *A, rc sp.Codec[sp.Expected[T, coro.ErrorCode]]) (T, error) {
	r, err := invoke(ctx, m, fn, ac, a, rc)
	if err != nil {
		return r.Value, err
	}
	if !r.OK {
		var zero T
		return zero, m.codeErr(fn, r.Err)
	}
	return r.Value, nil
}

// codeErr is the error of a Mooncake error code a master answered.
func (m *moonMaster) codeErr(fn coro.Method, c coro.ErrorCode) error {
	code := moonCode(c)
	return &wire.StatusError{Code: code, GRPC: codes.Unknown, Message: fmt.Sprintf("mooncake master %s: %s: %v", m.addr, fn.Name, code)}
}

// moonCode is kvferry's code of a Mooncake error code (they share their
// values); one it does not know, or OK in an error slot, is INTERNAL_ERROR.
func moonCode(c coro.ErrorCode) wire.Code {
	code := wire.Code(c)
	if !code.Known() || code == wire.OK {
		return wire.ErrInternal
	}
	return code
}

// unsupported is the error of a call Mooncake's master has no counterpart
// for.
func (m *moonMaster) unsupported(call string) error {
	return fmt.Errorf("store master %s: %s: %w: %w", m.addr, call, ErrNotSupportedByMooncakeMaster, wire.ErrNotSupported)
}

// Conversions between kvferry's wire messages and Mooncake's types.

func parseID(what, s string) (coro.UUID, error) {
	u, err := coro.ParseUUID(s)
	if err != nil {
		return coro.UUID{}, fmt.Errorf("%s: %w: %w", what, err, wire.ErrInvalidParams)
	}
	return u, nil
}

// tenantOf is the tenant a Mooncake request names ("" is "default").
func tenantOf(raw string) (string, error) { return wire.TenantID(raw) }

// segmentToCoro is the Mooncake Segment of a kvferry segment: its name is
// the transfer-engine segment name, which is also the endpoint readers
// open (te_endpoint; with P2P handshake metadata it is "host:port", as a
// Mooncake client's getLocalIpAndPort).
func segmentToCoro(s *wire.Segment) (coro.Segment, error) {
	id, err := parseID("segment id", s.GetId())
	if err != nil {
		return coro.Segment{}, err
	}
	return coro.Segment{ID: id, Name: s.GetName(), Base: s.GetBase(), Size: s.GetSize(), TEEndpoint: s.GetName(),
		Protocol: s.GetProtocol()}, nil
}

func configToCoro(c *wire.ReplicateConfig) coro.ReplicateConfig {
	out := coro.ReplicateConfig{ReplicaNum: uint64(max(c.GetReplicaNum(), 1)), SoftPinAction: coro.SoftPinAction(c.GetSoftPin()),
		WithHardPin: c.GetHardPin(), PreferredSegments: c.GetPreferredSegments()}
	if out.PreferredSegments == nil {
		out.PreferredSegments = []string{}
	}
	if len(out.PreferredSegments) > 0 {
		out.PreferredSegment = out.PreferredSegments[0]
	}
	out.PreferredNoFSegments = []string{}
	if ms := c.GetSoftPinTtlMs(); ms > 0 {
		out.SoftPinTTLMs = &ms
	}
	if c.GetHasGroupIds() {
		g := append([]string{}, c.GetGroupIds()...)
		out.GroupIDs = &g
	}
	return out
}

// replicasFromCoro are kvferry replicas of Mooncake replica descriptors,
// with the object's size. Memory replicas convert field for field (the
// transport endpoint is the segment name a reader opens; the replica id
// is the tag). Disk, local-disk, NoF and DFS replicas are served by
// Mooncake's own file and NVMe-oF paths, which kvferry's client does not
// read: they are left out, and counted in far.
func replicasFromCoro(ds []coro.ReplicaDescriptor) (reps []*wire.Replica, size uint64, far int) {
	reps = make([]*wire.Replica, 0, len(ds))
	for _, d := range ds {
		switch d.Kind {
		case coro.KindMemory:
			reps = append(reps, &wire.Replica{SegmentName: d.Buffer.TransportEndpoint, Address: d.Buffer.BufferAddress,
				Size: d.Buffer.Size, Status: wire.ReplicaStatus(d.Status), Protocol: d.Buffer.Protocol,
				Kind: wire.ReplicaKind_REPLICA_KIND_MEMORY, Tag: d.ID})
			if size == 0 {
				size = d.Buffer.Size
			}
		case coro.KindNoF:
			far++
			if size == 0 {
				size = d.Buffer.Size
			}
		case coro.KindDisk:
			far++
			if size == 0 {
				size = d.Disk.ObjectSize
			}
		case coro.KindLocalDisk:
			far++
			if size == 0 {
				size = d.LocalDisk.ObjectSize
			}
		case coro.KindDFS:
			far++
			if size == 0 {
				size = d.DFS.ObjectSize
			}
		}
	}
	return reps, size, far
}

// listFromCoro converts one GetReplicaList answer; an object whose only
// replicas are ones kvferry's client cannot read is an error.
func (m *moonMaster) listFromCoro(key string, l coro.GetReplicaListResponse) (*wire.GetReplicaListResponse, error) {
	reps, size, far := replicasFromCoro(l.Replicas)
	if len(reps) == 0 && far > 0 {
		return nil, fmt.Errorf("mooncake master %s: object %q has only disk or NVMe-oF replicas (%d), which kvferry's client does not read: %w",
			m.addr, key, far, wire.ErrInvalidReplica)
	}
	return &wire.GetReplicaListResponse{Replicas: reps, LeaseTtlMs: l.LeaseTTLMs, Size: size}, nil
}

// The wire.MasterClient methods. The grpc.CallOptions are ignored.

func (m *moonMaster) Ping(ctx context.Context, in *wire.PingRequest, _ ...grpc.CallOption) (*wire.PingResponse, error) {
	id, err := parseID("ping client id", in.GetClientId())
	if err != nil {
		return nil, err
	}
	r, err := invokeOK(ctx, m, coro.MethodPing, coro.UUIDCodec, &id, coro.ExpPingCodec)
	if err != nil {
		return nil, err
	}
	return &wire.PingResponse{Status: wire.ClientStatus(r.ClientStatus), ViewVersion: uint64(r.ViewVersionID)}, nil
}

func (m *moonMaster) MountSegment(ctx context.Context, in *wire.MountSegmentRequest, _ ...grpc.CallOption) (*wire.MountSegmentResponse, error) {
	id, err := parseID("mount client id", in.GetClientId())
	if err != nil {
		return nil, err
	}
	seg, err := segmentToCoro(in.GetSegment())
	if err != nil {
		return nil, err
	}
	a := coro.MountSegmentArgs{Segment: seg, ClientID: id}
	if _, err := invokeOK(ctx, m, coro.MethodMountSegment, coro.MountSegmentArgsCodec, &a, coro.ExpVoidCodec); err != nil {
		return nil, err
	}
	return &wire.MountSegmentResponse{}, nil
}

// ReMountSegments answers grant_bytes 0: a Mooncake master hands out no
// put grants, so the client puts with PutStart and PutEnd.
func (m *moonMaster) ReMountSegments(ctx context.Context, in *wire.ReMountSegmentsRequest, _ ...grpc.CallOption) (*wire.ReMountSegmentsResponse, error) {
	id, err := parseID("remount client id", in.GetClientId())
	if err != nil {
		return nil, err
	}
	a := coro.ReMountSegmentArgs{ClientID: id, Segments: make([]coro.Segment, 0, len(in.GetSegments()))}
	for _, s := range in.GetSegments() {
		seg, err := segmentToCoro(s)
		if err != nil {
			return nil, err
		}
		a.Segments = append(a.Segments, seg)
	}
	if _, err := invokeOK(ctx, m, coro.MethodReMountSegment, coro.ReMountSegmentArgsCodec, &a, coro.ExpVoidCodec); err != nil {
		return nil, err
	}
	return &wire.ReMountSegmentsResponse{}, nil
}

func (m *moonMaster) UnmountSegment(ctx context.Context, in *wire.UnmountSegmentRequest, _ ...grpc.CallOption) (*wire.UnmountSegmentResponse, error) {
	cid, err := parseID("unmount client id", in.GetClientId())
	if err != nil {
		return nil, err
	}
	sid, err := parseID("unmount segment id", in.GetSegmentId())
	if err != nil {
		return nil, err
	}
	var r coro.ExpVoid
	fn := coro.MethodUnmountSegment
	if in.GetGraceful() {
		fn = coro.MethodGracefulUnmountSegment
		a := coro.GracefulUnmountSegmentArgs{SegmentID: sid, ClientID: cid, GracePeriodMs: in.GetGraceMs()}
		r, err = invoke(ctx, m, fn, coro.GracefulUnmountSegmentArgsCodec, &a, coro.ExpVoidCodec)
	} else {
		a := coro.UnmountSegmentArgs{SegmentID: sid, ClientID: cid}
		r, err = invoke(ctx, m, fn, coro.UnmountSegmentArgsCodec, &a, coro.ExpVoidCodec)
	}
	if err != nil {
		return nil, err
	}
	if !r.OK {
		return nil, m.codeErr(fn, r.Err)
	}
	return &wire.UnmountSegmentResponse{}, nil
}

func (m *moonMaster) ExistKey(ctx context.Context, in *wire.KeyRequest, _ ...grpc.CallOption) (*wire.ExistKeyResponse, error) {
	tenant, err := tenantOf(in.GetTenantId())
	if err != nil {
		return nil, err
	}
	a := coro.KeyArgs{Key: in.GetKey(), TenantID: tenant}
	r, err := invokeOK(ctx, m, coro.MethodExistKey, coro.KeyArgsCodec, &a, coro.ExpBoolCodec)
	if err != nil {
		return nil, err
	}
	return &wire.ExistKeyResponse{Exists: r}, nil
}

// batchLen checks that a batch answer has one result per key.
func (m *moonMaster) batchLen(fn coro.Method, got, want int) error {
	if got != want {
		return &wire.StatusError{Code: wire.ErrRPCFail, GRPC: codes.Internal,
			Message: fmt.Sprintf("mooncake master %s: %s: %d results for %d keys", m.addr, fn.Name, got, want)}
	}
	return nil
}

func (m *moonMaster) BatchExistKey(ctx context.Context, in *wire.BatchKeyRequest, _ ...grpc.CallOption) (*wire.BatchExistKeyResponse, error) {
	tenant, err := tenantOf(in.GetTenantId())
	if err != nil {
		return nil, err
	}
	a := coro.KeysArgs{Keys: nonNil(in.GetKeys()), TenantID: tenant}
	rs, err := invoke(ctx, m, coro.MethodBatchExistKey, coro.KeysArgsCodec, &a, coro.BatchBoolCodec)
	if err != nil {
		return nil, err
	}
	if err := m.batchLen(coro.MethodBatchExistKey, len(rs), len(a.Keys)); err != nil {
		return nil, err
	}
	out := &wire.BatchExistKeyResponse{Results: make([]int32, len(rs))}
	for i, r := range rs {
		switch {
		case !r.OK:
			out.Results[i] = int32(moonCode(r.Err))
		case r.Value:
			out.Results[i] = 1
		}
	}
	return out, nil
}

func (m *moonMaster) GetReplicaList(ctx context.Context, in *wire.KeyRequest, _ ...grpc.CallOption) (*wire.GetReplicaListResponse, error) {
	tenant, err := tenantOf(in.GetTenantId())
	if err != nil {
		return nil, err
	}
	a := coro.KeyArgs{Key: in.GetKey(), TenantID: tenant}
	r, err := invokeOK(ctx, m, coro.MethodGetReplicaList, coro.KeyArgsCodec, &a, coro.ExpReplicaListCodec)
	if err != nil {
		return nil, err
	}
	return m.listFromCoro(in.GetKey(), r)
}

func (m *moonMaster) BatchGetReplicaList(ctx context.Context, in *wire.BatchKeyRequest, _ ...grpc.CallOption) (*wire.BatchGetReplicaListResponse, error) {
	tenant, err := tenantOf(in.GetTenantId())
	if err != nil {
		return nil, err
	}
	a := coro.KeysArgs{Keys: nonNil(in.GetKeys()), TenantID: tenant}
	rs, err := invoke(ctx, m, coro.MethodBatchGetReplicaList, coro.KeysArgsCodec, &a, coro.BatchReplicaListCodec)
	if err != nil {
		return nil, err
	}
	if err := m.batchLen(coro.MethodBatchGetReplicaList, len(rs), len(a.Keys)); err != nil {
		return nil, err
	}
	out := &wire.BatchGetReplicaListResponse{Results: make([]*wire.ReplicaListResult, len(rs))}
	for i, r := range rs {
		if !r.OK {
			out.Results[i] = &wire.ReplicaListResult{Code: int32(moonCode(r.Err))}
			continue
		}
		l, err := m.listFromCoro(a.Keys[i], r.Value)
		if err != nil {
			out.Results[i] = &wire.ReplicaListResult{Code: int32(wire.ErrInvalidReplica)}
			continue
		}
		out.Results[i] = &wire.ReplicaListResult{Replicas: l.Replicas, Size: l.Size}
		if out.LeaseTtlMs == 0 || r.Value.LeaseTTLMs < out.LeaseTtlMs {
			out.LeaseTtlMs = r.Value.LeaseTTLMs
		}
	}
	return out, nil
}

func (m *moonMaster) PutStart(ctx context.Context, in *wire.PutStartRequest, _ ...grpc.CallOption) (*wire.PutStartResponse, error) {
	if in.GetVersioned() {
		return nil, m.unsupported("versioned publish (PutStart with an expected version)")
	}
	id, err := parseID("put start client id", in.GetClientId())
	if err != nil {
		return nil, err
	}
	tenant, err := tenantOf(in.GetTenantId())
	if err != nil {
		return nil, err
	}
	fn := coro.MethodPutStart
	if in.GetUpsert() {
		fn = coro.MethodUpsertStart
	}
	a := coro.PutStartArgs{ClientID: id, Key: in.GetKey(), SliceLength: in.GetSize(), Config: configToCoro(in.GetConfig()), TenantID: tenant}
	r, err := invokeOK(ctx, m, fn, coro.PutStartArgsCodec, &a, coro.ExpDescriptorsCodec)
	if err != nil {
		return nil, err
	}
	reps, _, _ := replicasFromCoro(r)
	return &wire.PutStartResponse{Replicas: reps}, nil
}

func (m *moonMaster) BatchPutStart(ctx context.Context, in *wire.BatchPutStartRequest, _ ...grpc.CallOption) (*wire.BatchPutStartResponse, error) {
	id, err := parseID("batch put start client id", in.GetClientId())
	if err != nil {
		return nil, err
	}
	tenant, err := tenantOf(in.GetTenantId())
	if err != nil {
		return nil, err
	}
	fn := coro.MethodBatchPutStart
	if in.GetUpsert() {
		fn = coro.MethodBatchUpsertStart
	}
	a := coro.BatchPutStartArgs{ClientID: id, Keys: nonNil(in.GetKeys()), SliceLengths: in.GetSizes(), Config: configToCoro(in.GetConfig()), TenantID: tenant}
	if a.SliceLengths == nil {
		a.SliceLengths = []uint64{}
	}
	rs, err := invoke(ctx, m, fn, coro.BatchPutStartArgsCodec, &a, coro.BatchDescriptorsCodec)
	if err != nil {
		return nil, err
	}
	if err := m.batchLen(fn, len(rs), len(a.Keys)); err != nil {
		return nil, err
	}
	out := &wire.BatchPutStartResponse{Results: make([]*wire.PutStartResult, len(rs))}
	for i, r := range rs {
		if !r.OK {
			out.Results[i] = &wire.PutStartResult{Code: int32(moonCode(r.Err))}
			continue
		}
		reps, _, _ := replicasFromCoro(r.Value)
		out.Results[i] = &wire.PutStartResult{Replicas: reps}
	}
	return out, nil
}

// PutEnd commits (or revokes) the memory replicas of a put; Mooncake's
// UpsertEnd is its PutEnd, so one call serves puts and upserts.
func (m *moonMaster) PutEnd(ctx context.Context, in *wire.PutEndRequest, _ ...grpc.CallOption) (*wire.PutEndResponse, error) {
	id, err := parseID("put end client id", in.GetClientId())
	if err != nil {
		return nil, err
	}
	tenant, err := tenantOf(in.GetTenantId())
	if err != nil {
		return nil, err
	}
	var r coro.ExpVoid
	fn := coro.MethodPutEnd
	if in.GetRevoke() {
		fn = coro.MethodPutRevoke
		a := coro.PutRevokeArgs{ClientID: id, Key: in.GetKey(), ReplicaType: coro.ReplicaMemory, TenantID: tenant}
		r, err = invoke(ctx, m, fn, coro.PutRevokeArgsCodec, &a, coro.ExpVoidCodec)
	} else {
		a := coro.PutEndArgs{ClientID: id, Meta: coro.ObjectMeta{Key: in.GetKey()}, ReplicaType: coro.ReplicaMemory, TenantID: tenant}
		r, err = invoke(ctx, m, fn, coro.PutEndArgsCodec, &a, coro.ExpVoidCodec)
	}
	if err != nil {
		return nil, err
	}
	if !r.OK {
		return nil, m.codeErr(fn, r.Err)
	}
	return &wire.PutEndResponse{}, nil
}

func (m *moonMaster) BatchPutEnd(ctx context.Context, in *wire.BatchPutEndRequest, _ ...grpc.CallOption) (*wire.BatchCodesResponse, error) {
	id, err := parseID("batch put end client id", in.GetClientId())
	if err != nil {
		return nil, err
	}
	tenant, err := tenantOf(in.GetTenantId())
	if err != nil {
		return nil, err
	}
	keys := nonNil(in.GetKeys())
	var rs []coro.ExpVoid
	fn := coro.MethodBatchPutEnd
	if in.GetRevoke() {
		fn = coro.MethodBatchPutRevoke
		a := coro.BatchPutRevokeArgs{ClientID: id, Keys: keys, ReplicaType: coro.ReplicaMemory, TenantID: tenant}
		rs, err = invoke(ctx, m, fn, coro.BatchPutRevokeArgsCodec, &a, coro.BatchVoidCodec)
	} else {
		a := coro.BatchPutEndArgs{ClientID: id, Metas: make([]coro.ObjectMeta, len(keys)), ReplicaType: coro.ReplicaMemory, TenantID: tenant}
		for i, k := range keys {
			a.Metas[i].Key = k
		}
		rs, err = invoke(ctx, m, fn, coro.BatchPutEndArgsCodec, &a, coro.BatchVoidCodec)
	}
	if err != nil {
		return nil, err
	}
	return m.codes(fn, rs, len(keys))
}

// codes converts a batch of void answers.
func (m *moonMaster) codes(fn coro.Method, rs []coro.ExpVoid, n int) (*wire.BatchCodesResponse, error) {
	if err := m.batchLen(fn, len(rs), n); err != nil {
		return nil, err
	}
	out := &wire.BatchCodesResponse{Codes: make([]int32, len(rs))}
	for i, r := range rs {
		if !r.OK {
			out.Codes[i] = int32(moonCode(r.Err))
		}
	}
	return out, nil
}

func (m *moonMaster) Remove(ctx context.Context, in *wire.RemoveRequest, _ ...grpc.CallOption) (*wire.RemoveResponse, error) {
	tenant, err := tenantOf(in.GetTenantId())
	if err != nil {
		return nil, err
	}
	a := coro.RemoveArgs{Key: in.GetKey(), Force: in.GetForce(), TenantID: tenant}
	if _, err := invokeOK(ctx, m, coro.MethodRemove, coro.RemoveArgsCodec, &a, coro.ExpVoidCodec); err != nil {
		return nil, err
	}
	return &wire.RemoveResponse{}, nil
}

func (m *moonMaster) BatchRemove(ctx context.Context, in *wire.BatchRemoveRequest, _ ...grpc.CallOption) (*wire.BatchCodesResponse, error) {
	tenant, err := tenantOf(in.GetTenantId())
	if err != nil {
		return nil, err
	}
	a := coro.BatchRemoveArgs{Keys: nonNil(in.GetKeys()), Force: in.GetForce(), TenantID: tenant}
	rs, err := invoke(ctx, m, coro.MethodBatchRemove, coro.BatchRemoveArgsCodec, &a, coro.BatchVoidCodec)
	if err != nil {
		return nil, err
	}
	return m.codes(coro.MethodBatchRemove, rs, len(a.Keys))
}

func (m *moonMaster) RemoveByRegex(ctx context.Context, in *wire.RemoveByRegexRequest, _ ...grpc.CallOption) (*wire.CountResponse, error) {
	tenant, err := tenantOf(in.GetTenantId())
	if err != nil {
		return nil, err
	}
	a := coro.RemoveArgs{Key: in.GetPattern(), Force: in.GetForce(), TenantID: tenant}
	r, err := invokeOK(ctx, m, coro.MethodRemoveByRegex, coro.RemoveArgsCodec, &a, coro.ExpInt64Codec)
	if err != nil {
		return nil, err
	}
	return &wire.CountResponse{Count: r}, nil
}

// RemoveAll answers Mooncake's bare count (its RemoveAll has no error
// slot).
func (m *moonMaster) RemoveAll(ctx context.Context, in *wire.RemoveAllRequest, _ ...grpc.CallOption) (*wire.CountResponse, error) {
	tenant, err := tenantOf(in.GetTenantId())
	if err != nil {
		return nil, err
	}
	a := coro.RemoveAllArgs{Force: in.GetForce(), TenantID: tenant}
	n, err := invoke(ctx, m, coro.MethodRemoveAll, coro.RemoveAllArgsCodec, &a, sp.Int64)
	if err != nil {
		return nil, err
	}
	return &wire.CountResponse{Count: n}, nil
}

func (m *moonMaster) GetReplicaListByRegex(ctx context.Context, in *wire.GetReplicaListByRegexRequest, _ ...grpc.CallOption) (*wire.GetReplicaListByRegexResponse, error) {
	tenant, err := tenantOf(in.GetTenantId())
	if err != nil {
		return nil, err
	}
	a := coro.KeyArgs{Key: in.GetPattern(), TenantID: tenant}
	r, err := invokeOK(ctx, m, coro.MethodGetReplicaListByRegex, coro.KeyArgsCodec, &a, coro.ExpRegexReplicasCodec)
	if err != nil {
		return nil, err
	}
	out := &wire.GetReplicaListByRegexResponse{Objects: make([]*wire.KeyReplicaList, 0, len(r))}
	for _, kv := range r {
		reps, size, _ := replicasFromCoro(kv.Value)
		out.Objects = append(out.Objects, &wire.KeyReplicaList{Key: kv.Key, Replicas: reps, Size: size})
	}
	return out, nil
}

func (m *moonMaster) BatchQueryIp(ctx context.Context, in *wire.BatchQueryIpRequest, _ ...grpc.CallOption) (*wire.BatchQueryIpResponse, error) {
	ids := make([]coro.UUID, len(in.GetClientIds()))
	for i, s := range in.GetClientIds() {
		id, err := parseID("query ip client id", s)
		if err != nil {
			return nil, err
		}
		ids[i] = id
	}
	r, err := invokeOK(ctx, m, coro.MethodBatchQueryIP, coro.UUIDsCodec, &ids, coro.ExpClientIPsCodec)
	if err != nil {
		return nil, err
	}
	out := &wire.BatchQueryIpResponse{Clients: make([]*wire.ClientIps, 0, len(r))}
	for _, kv := range r {
		out.Clients = append(out.Clients, &wire.ClientIps{ClientId: kv.Key.String(), Ips: kv.Value})
	}
	return out, nil
}

// The calls a Mooncake master has no counterpart for.

func (m *moonMaster) ListSegments(context.Context, *wire.ListSegmentsRequest, ...grpc.CallOption) (*wire.ListSegmentsResponse, error) {
	return nil, m.unsupported("ListSegments")
}

func (m *moonMaster) ListKeys(context.Context, *wire.ListKeysRequest, ...grpc.CallOption) (*wire.ListKeysResponse, error) {
	return nil, m.unsupported("ListKeys")
}

func (m *moonMaster) AcquireGrants(context.Context, *wire.AcquireGrantsRequest, ...grpc.CallOption) (*wire.AcquireGrantsResponse, error) {
	return nil, m.unsupported("put grants (AcquireGrants)")
}

func (m *moonMaster) PutCommit(context.Context, *wire.PutCommitRequest, ...grpc.CallOption) (*wire.PutCommitResponse, error) {
	return nil, m.unsupported("put grants (PutCommit)")
}

func (m *moonMaster) ReturnGrants(context.Context, *wire.ReturnGrantsRequest, ...grpc.CallOption) (*wire.ReturnGrantsResponse, error) {
	return nil, m.unsupported("put grants (ReturnGrants)")
}

func (m *moonMaster) MountDiskSegment(context.Context, *wire.MountDiskSegmentRequest, ...grpc.CallOption) (*wire.MountDiskSegmentResponse, error) {
	return nil, m.unsupported("the disk tier (MountDiskSegment)")
}

func (m *moonMaster) PromoteObject(context.Context, *wire.KeyRequest, ...grpc.CallOption) (*wire.GetReplicaListResponse, error) {
	return nil, m.unsupported("disk-tier reads (PromoteObject)")
}

func (m *moonMaster) WaitObject(context.Context, *wire.WaitObjectRequest, ...grpc.CallOption) (*wire.GetReplicaListResponse, error) {
	return nil, m.unsupported("versioned gets (WaitObject)")
}

func (m *moonMaster) CalcCacheStats(context.Context, *wire.CalcCacheStatsRequest, ...grpc.CallOption) (*wire.CalcCacheStatsResponse, error) {
	return nil, m.unsupported("CalcCacheStats")
}

func (m *moonMaster) CreateDrainJob(context.Context, *wire.CreateDrainJobRequest, ...grpc.CallOption) (*wire.CreateDrainJobResponse, error) {
	return nil, m.unsupported("drain jobs (CreateDrainJob)")
}

func (m *moonMaster) QueryDrainJob(context.Context, *wire.DrainJobIdRequest, ...grpc.CallOption) (*wire.QueryJobResponse, error) {
	return nil, m.unsupported("drain jobs (QueryDrainJob)")
}

func (m *moonMaster) CancelDrainJob(context.Context, *wire.DrainJobIdRequest, ...grpc.CallOption) (*wire.CancelDrainJobResponse, error) {
	return nil, m.unsupported("drain jobs (CancelDrainJob)")
}

// BatchReplicaClear maps onto Mooncake's BatchReplicaClear, which has no
// tenant parameter: it clears keys of the default tenant, so a client of
// another tenant gets the not-supported error.
func (m *moonMaster) BatchReplicaClear(ctx context.Context, in *wire.BatchReplicaClearRequest, _ ...grpc.CallOption) (*wire.BatchReplicaClearResponse, error) {
	tenant, err := tenantOf(in.GetTenantId())
	if err != nil {
		return nil, err
	}
	if tenant != wire.DefaultTenant {
		return nil, m.unsupported(fmt.Sprintf("BatchReplicaClear of tenant %q (only the default tenant)", tenant))
	}
	id, err := parseID("replica clear client id", in.GetClientId())
	if err != nil {
		return nil, err
	}
	a := coro.ReplicaClearArgs{Keys: nonNil(in.GetKeys()), ClientID: id, SegmentName: in.GetSegmentName()}
	r, err := invokeOK(ctx, m, coro.MethodBatchReplicaClear, coro.ReplicaClearArgsCodec, &a, coro.ExpStringsCodec)
	if err != nil {
		return nil, err
	}
	return &wire.BatchReplicaClearResponse{ClearedKeys: r}, nil
}

// CreateTask maps a copy onto CreateCopyTask and a move onto
// CreateMoveTask (source to targets[0]); targets are segment names, as
// Mooncake's are. The task id is Mooncake's UUID in its text form.
func (m *moonMaster) CreateTask(ctx context.Context, in *wire.CreateTaskRequest, _ ...grpc.CallOption) (*wire.CreateTaskResponse, error) {
	tenant, err := tenantOf(in.GetTenantId())
	if err != nil {
		return nil, err
	}
	var r coro.ExpUUID
	var fn coro.Method
	switch in.GetKind() {
	case wire.TaskKind_TASK_KIND_COPY:
		fn = coro.MethodCreateCopyTask
		a := coro.CreateCopyTaskArgs{Key: in.GetKey(), TenantID: tenant, Targets: nonNil(in.GetTargets())}
		r, err = invoke(ctx, m, fn, coro.CreateCopyTaskArgsCodec, &a, coro.ExpUUIDCodec)
	case wire.TaskKind_TASK_KIND_MOVE:
		if len(in.GetTargets()) != 1 {
			return nil, fmt.Errorf("create move task for %q: %d targets, want 1: %w", in.GetKey(), len(in.GetTargets()), wire.ErrInvalidParams)
		}
		fn = coro.MethodCreateMoveTask
		a := coro.CreateMoveTaskArgs{Key: in.GetKey(), TenantID: tenant, Source: in.GetSource(), Target: in.GetTargets()[0]}
		r, err = invoke(ctx, m, fn, coro.CreateMoveTaskArgsCodec, &a, coro.ExpUUIDCodec)
	default:
		return nil, fmt.Errorf("create task for %q: kind %v is neither copy nor move: %w", in.GetKey(), in.GetKind(), wire.ErrInvalidParams)
	}
	if err != nil {
		return nil, err
	}
	if !r.OK {
		return nil, m.codeErr(fn, r.Err)
	}
	return &wire.CreateTaskResponse{TaskId: r.Value.String()}, nil
}

// QueryTask maps onto Mooncake's QueryTask; taskStatusFromCoro converts
// the status back.
func (m *moonMaster) QueryTask(ctx context.Context, in *wire.QueryTaskRequest, _ ...grpc.CallOption) (*wire.QueryTaskResponse, error) {
	id, err := parseID("task id", in.GetTaskId())
	if err != nil {
		return nil, err
	}
	r, err := invokeOK(ctx, m, coro.MethodQueryTask, coro.UUIDCodec, &id, coro.ExpQueryTaskCodec)
	if err != nil {
		return nil, err
	}
	return queryTaskFromCoro(r), nil
}

// queryTaskFromCoro is kvferry's QueryTaskResponse of Mooncake's. A zero
// assigned client (none, or kvferry-master's for a holder whose id is no
// UUID) is "".
func queryTaskFromCoro(q coro.QueryTaskResponse) *wire.QueryTaskResponse {
	out := &wire.QueryTaskResponse{Id: q.ID.String(), Type: wire.TaskKind_TASK_KIND_COPY, Status: taskStatusFromCoro(q.Status),
		CreatedAtMsEpoch: q.CreatedAtMsEpoch, LastUpdatedAtMsEpoch: q.LastUpdatedAtMsEpoch, Message: q.Message}
	if q.Type == coro.TaskReplicaMove {
		out.Type = wire.TaskKind_TASK_KIND_MOVE
	}
	if q.AssignedClient != (coro.UUID{}) {
		out.AssignedClient = q.AssignedClient.String()
	}
	return out
}

// taskStatusFromCoro is kvferry's status of a Mooncake task status
// (Mooncake numbers FAILED 2 and SUCCESS 3, kvferry SUCCESS 2 and FAILED
// 3); one it does not know reads as PENDING.
func taskStatusFromCoro(st coro.TaskStatus) wire.TaskStatus {
	switch st {
	case coro.TaskProcessing:
		return wire.TaskStatus_TASK_STATUS_PROCESSING
	case coro.TaskSuccess:
		return wire.TaskStatus_TASK_STATUS_SUCCESS
	case coro.TaskFailed:
		return wire.TaskStatus_TASK_STATUS_FAILED
	default:
		return wire.TaskStatus_TASK_STATUS_PENDING
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// probeMooncake reports whether the master at addr answers a coro_rpc
// ServiceReady call within timeout, and with which store version.
func probeMooncake(ctx context.Context, addr string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cl, err := coro.Dial(ctx, addr)
	if err != nil {
		return "", err
	}
	defer cl.Close()
	r, err := coro.InvokeNoArgs(ctx, cl, coro.MethodServiceReady, coro.ExpStringCodec)
	if err != nil {
		return "", err
	}
	if !r.OK {
		return "", fmt.Errorf("ServiceReady: %w", wire.Code(r.Err))
	}
	return r.Value, nil
}

// masterKind is what probeMaster found a master to be.
type masterKind int

const (
	// masterUnknown: no coro_rpc answer (not reachable, closed the
	// connection, or no answer within the probe's deadline).
	masterUnknown masterKind = iota
	// masterKvferry answered kvferry_master_info.
	masterKvferry
	// masterMooncake answered kvferry_master_info "function not
	// registered", as mooncake_master does.
	masterMooncake
)

// probeMaster asks the master at addr, over coro_rpc and within timeout,
// for kvferry_master_info: a function only kvferry-master registers. Both
// masters answer at once: kvferry-master with its protocol version,
// mooncake_master with coro_rpc's "function not registered" (checked
// against the real one; docs/reports/coro-rpc.md). Any other outcome,
// including a slow master, is masterUnknown, which the caller treats as a
// kvferry master: a loaded kvferry-master is never taken for Mooncake's.
// why says what the master answered, for the log.
func probeMaster(ctx context.Context, addr string, timeout time.Duration) (kind masterKind, why string) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cl, err := coro.Dial(ctx, addr)
	if err != nil {
		return masterUnknown, "no answer to " + coro.MethodKvferryMasterInfo.Name + " (" + err.Error() + ")"
	}
	defer cl.Close()
	info, err := coro.InvokeNoArgs(ctx, cl, coro.MethodKvferryMasterInfo, coro.MasterInfoCodec)
	var re *coro.RPCError
	switch {
	case err == nil:
		return masterKvferry, fmt.Sprintf("answered %s (kvferry protocol %d, features %s)",
			coro.MethodKvferryMasterInfo.Name, info.Protocol, strings.Join(info.Features, ","))
	case errors.As(err, &re) && re.Code == coro.ErrcFunctionNotRegistered:
		return masterMooncake, "answered " + coro.MethodKvferryMasterInfo.Name + " \"function not registered\" (mooncake_master)"
	default:
		return masterUnknown, "no answer to " + coro.MethodKvferryMasterInfo.Name + " (" + err.Error() + ")"
	}
}
