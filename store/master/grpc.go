package master

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"

	"github.com/kvferry/kvferry/store/wire"
)

// handlers adapts the active Service to wire.MasterServer: it converts
// messages and returns plain store errors (wrapping a wire.Code). Each
// transport turns them into what its clients see: the gRPC server through
// statusInterceptor (wire.ToStatus, the one Go → gRPC table), the mux
// protocol and the in-process client as the *wire.StatusError that
// wire.FromStatus would have made of the gRPC status. A server that does
// not lead answers ErrNotLeader.
type handlers struct {
	wire.UnimplementedMasterServer
	s *Server
}

var _ wire.MasterServer = (*handlers)(nil)

// ObserveMuxCall times a call served over the mux protocol
// (wire.MuxObserver).
func (g *handlers) ObserveMuxCall(method string, d time.Duration, err error) {
	g.s.rpc.observe(method, d, err)
}

func (g *handlers) svc() (*Service, error) {
	if svc := g.s.active.Load(); svc != nil {
		return svc, nil
	}
	return nil, ErrNotLeader
}

// statusInterceptor turns the handlers' store errors into gRPC status
// errors that carry the Code (wire.ToStatus), and times the call.
func (s *Server) statusInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	t0 := time.Now()
	resp, err := h(ctx, req)
	s.rpc.observe(info.FullMethod, time.Since(t0), err)
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	return resp, nil
}

// codeOf turns a per-key error into its wire integer.
func codeOf(err error) int32 { return int32(wire.CodeOf(err)) }

func segmentFromWire(p *wire.Segment) SegmentInfo {
	if p == nil {
		return SegmentInfo{}
	}
	return SegmentInfo{ID: p.GetId(), Name: p.GetName(), Protocol: p.GetProtocol(), Base: p.GetBase(), Size: p.GetSize()}
}

func segmentToWire(s SegmentInfo) *wire.Segment {
	return &wire.Segment{Id: s.ID, Name: s.Name, Protocol: s.Protocol, Base: s.Base, Size: s.Size,
		ClientId: s.ClientID, UsedBytes: s.UsedBytes}
}

func replicasToWire(rs []Replica) []*wire.Replica {
	out := make([]*wire.Replica, len(rs))
	for i, r := range rs {
		out[i] = &wire.Replica{SegmentName: r.SegmentName, Address: r.Addr, Size: r.Size,
			Status: r.Status, SegmentId: r.SegmentID, Protocol: r.Protocol, Kind: r.Kind, FilePath: r.FilePath, Tag: r.Tag}
	}
	return out
}

// replicaListToWire is the answer naming l, from svc.
func replicaListToWire(svc *Service, l ReplicaList) *wire.GetReplicaListResponse {
	return &wire.GetReplicaListResponse{Replicas: replicasToWire(l.Replicas), Size: l.Size,
		LeaseTtlMs: uint64(l.LeaseTTL / time.Millisecond), Uid: l.UID, Version: l.Version, ViewVersion: svc.ViewVersion()}
}

func configFromWire(c *wire.ReplicateConfig) ReplicateConfig {
	if c == nil {
		return ReplicateConfig{}
	}
	return ReplicateConfig{
		ReplicaNum:        int(c.GetReplicaNum()),
		SoftPin:           c.GetSoftPin(),
		SoftPinTTL:        time.Duration(c.GetSoftPinTtlMs()) * time.Millisecond,
		HardPin:           c.GetHardPin(),
		PreferredSegments: c.GetPreferredSegments(),
		GroupIDs:          groupIDsFromWire(c),
	}
}

// groupIDsFromWire returns the group ids of c: nil when it names none, else
// a (possibly empty) non-nil list.
func groupIDsFromWire(c *wire.ReplicateConfig) []string {
	if !c.GetHasGroupIds() {
		return nil
	}
	return append(make([]string, 0, len(c.GetGroupIds())), c.GetGroupIds()...)
}

func (g *handlers) Ping(_ context.Context, req *wire.PingRequest) (*wire.PingResponse, error) {
	svc, err := g.svc()
	if err != nil {
		return nil, err
	}
	p, err := svc.Heartbeat(req.GetClientId())
	if err != nil {
		return nil, err
	}
	return &wire.PingResponse{Status: p.Status, ViewVersion: svc.ViewVersion(), GrantGeneration: p.GrantGeneration,
		ReturnGrants: p.ReturnGrants}, nil
}

func (g *handlers) MountSegment(_ context.Context, req *wire.MountSegmentRequest) (*wire.MountSegmentResponse, error) {
	svc, err := g.svc()
	if err != nil {
		return nil, err
	}
	if err := svc.MountSegment(req.GetClientId(), segmentFromWire(req.GetSegment())); err != nil {
		return nil, err
	}
	return &wire.MountSegmentResponse{}, nil
}

func (g *handlers) ReMountSegments(_ context.Context, req *wire.ReMountSegmentsRequest) (*wire.ReMountSegmentsResponse, error) {
	svc, err := g.svc()
	if err != nil {
		return nil, err
	}
	segs := make([]SegmentInfo, len(req.GetSegments()))
	for i, p := range req.GetSegments() {
		segs[i] = segmentFromWire(p)
	}
	if err := svc.ReMountSegments(req.GetClientId(), segs); err != nil {
		return nil, err
	}
	return svc.grantOffer(), nil
}

func (g *handlers) UnmountSegment(ctx context.Context, req *wire.UnmountSegmentRequest) (*wire.UnmountSegmentResponse, error) {
	svc, err := g.svc()
	if err != nil {
		return nil, err
	}
	if req.GetGraceful() {
		grace := time.Duration(req.GetGraceMs()) * time.Millisecond
		if grace <= 0 || grace > maxDrainWait {
			grace = maxDrainWait
		}
		err = svc.DrainSegment(ctx, req.GetClientId(), req.GetSegmentId(), grace)
	} else {
		err = svc.UnmountSegment(req.GetClientId(), req.GetSegmentId())
	}
	if err != nil {
		return nil, err
	}
	return &wire.UnmountSegmentResponse{}, nil
}

// maxDrainWait bounds how long a graceful unmount waits for its moves.
const maxDrainWait = 5 * time.Minute

func (g *handlers) MountDiskSegment(_ context.Context, req *wire.MountDiskSegmentRequest) (*wire.MountDiskSegmentResponse, error) {
	svc, err := g.svc()
	if err != nil {
		return nil, err
	}
	p := req.GetSegment()
	info := DiskSegmentInfo{ID: p.GetId(), Name: p.GetName(), Path: p.GetPath(), Capacity: p.GetCapacity()}
	entries := make([]DiskEntry, len(req.GetEntries()))
	for i, e := range req.GetEntries() {
		entries[i] = DiskEntry{Tenant: e.GetTenantId(), Key: e.GetKey(), UID: e.GetUid(), Size: e.GetSize(), FileBytes: e.GetFileBytes()}
	}
	drop, err := svc.MountDiskSegment(req.GetClientId(), info, entries)
	if err != nil {
		return nil, err
	}
	out := &wire.MountDiskSegmentResponse{Drop: make([]uint32, len(drop))}
	for i, d := range drop {
		out.Drop[i] = uint32(d)
	}
	return out, nil
}

func (g *handlers) FetchTasks(ctx context.Context, req *wire.FetchTasksRequest) (*wire.FetchTasksResponse, error) {
	svc, err := g.svc()
	if err != nil {
		return nil, err
	}
	done := make([]TaskResult, len(req.GetDone()))
	for i, r := range req.GetDone() {
		var rerr error
		if r.GetCode() != 0 {
			rerr = fmt.Errorf("%s: %w", r.GetMessage(), wire.ErrorOf(r.GetCode()))
		}
		done[i] = TaskResult{ID: r.GetId(), Err: rerr, FileBytes: r.GetFileBytes()}
	}
	tasks, err := svc.FetchTasks(ctx, req.GetClientId(), done, time.Duration(req.GetWaitMs())*time.Millisecond, int(req.GetMax()))
	if err != nil {
		return nil, err
	}
	return &wire.FetchTasksResponse{Tasks: tasks}, nil
}

func (g *handlers) PromoteObject(ctx context.Context, req *wire.KeyRequest) (*wire.GetReplicaListResponse, error) {
	svc, err := g.svc()
	if err != nil {
		return nil, err
	}
	l, err := svc.PromoteObject(ctx, req.GetTenantId(), req.GetKey())
	if err != nil {
		return nil, err
	}
	return replicaListToWire(svc, l), nil
}

func (g *handlers) CreateTask(_ context.Context, req *wire.CreateTaskRequest) (*wire.CreateTaskResponse, error) {
	svc, err := g.svc()
	if err != nil {
		return nil, err
	}
	id, err := svc.CreateTask(req.GetTenantId(), req.GetKey(), req.GetKind(), req.GetSource(), req.GetTargets())
	if err != nil {
		return nil, err
	}
	return &wire.CreateTaskResponse{TaskId: id}, nil
}

func (g *handlers) QueryTask(_ context.Context, req *wire.QueryTaskRequest) (*wire.QueryTaskResponse, error) {
	svc, err := g.svc()
	if err != nil {
		return nil, err
	}
	t, err := svc.QueryTask(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	return &wire.QueryTaskResponse{Id: t.ID, Type: t.Kind, Status: t.Status, CreatedAtMsEpoch: t.Created.UnixMilli(),
		LastUpdatedAtMsEpoch: t.Updated.UnixMilli(), AssignedClient: t.AssignedClient, Message: t.Message}, nil
}

func (g *handlers) ExistKey(_ context.Context, req *wire.KeyRequest) (*wire.ExistKeyResponse, error) {
	svc, err := g.svc()
	if err != nil {
		return nil, err
	}
	ok, err := svc.ExistKey(req.GetTenantId(), req.GetKey())
	if err != nil {
		return nil, err
	}
	return &wire.ExistKeyResponse{Exists: ok}, nil
}

func (g *handlers) BatchExistKey(_ context.Context, req *wire.BatchKeyRequest) (*wire.BatchExistKeyResponse, error) {
	svc, err := g.svc()
	if err != nil {
		return nil, err
	}
	return &wire.BatchExistKeyResponse{Results: svc.BatchExistKey(req.GetTenantId(), req.GetKeys())}, nil
}

func (g *handlers) GetReplicaList(_ context.Context, req *wire.KeyRequest) (*wire.GetReplicaListResponse, error) {
	svc, err := g.svc()
	if err != nil {
		return nil, err
	}
	l, err := svc.GetReplicaList(req.GetTenantId(), req.GetKey())
	if err != nil {
		return nil, err
	}
	return replicaListToWire(svc, l), nil
}

func (g *handlers) BatchGetReplicaList(_ context.Context, req *wire.BatchKeyRequest) (*wire.BatchGetReplicaListResponse, error) {
	svc, err := g.svc()
	if err != nil {
		return nil, err
	}
	lists, errs := svc.BatchGetReplicaList(req.GetTenantId(), req.GetKeys())
	resp := &wire.BatchGetReplicaListResponse{Results: make([]*wire.ReplicaListResult, len(lists)),
		LeaseTtlMs: uint64(svc.Config().DefaultKVLeaseTTL / time.Millisecond)}
	for i := range lists {
		resp.Results[i] = &wire.ReplicaListResult{Code: codeOf(errs[i]), Replicas: replicasToWire(lists[i].Replicas), Uid: lists[i].UID,
			Size: lists[i].Size}
	}
	return resp, nil
}

func (g *handlers) PutStart(_ context.Context, req *wire.PutStartRequest) (*wire.PutStartResponse, error) {
	svc, err := g.svc()
	if err != nil {
		return nil, err
	}
	cfg := configFromWire(req.GetConfig())
	cfg.Versioned, cfg.ExpectedVersion = req.GetVersioned(), req.GetExpectedVersion()
	reps, err := svc.PutStart(req.GetClientId(), req.GetTenantId(), req.GetKey(), req.GetSize(), cfg, req.GetUpsert())
	if err != nil {
		return nil, err
	}
	return &wire.PutStartResponse{Replicas: replicasToWire(reps)}, nil
}

func (g *handlers) BatchPutStart(_ context.Context, req *wire.BatchPutStartRequest) (*wire.BatchPutStartResponse, error) {
	svc, err := g.svc()
	if err != nil {
		return nil, err
	}
	reps, errs := svc.BatchPutStart(req.GetClientId(), req.GetTenantId(), req.GetKeys(), req.GetSizes(), configFromWire(req.GetConfig()), req.GetUpsert())
	resp := &wire.BatchPutStartResponse{Results: make([]*wire.PutStartResult, len(reps))}
	for i := range reps {
		resp.Results[i] = &wire.PutStartResult{Code: codeOf(errs[i]), Replicas: replicasToWire(reps[i])}
	}
	return resp, nil
}

func (g *handlers) PutEnd(_ context.Context, req *wire.PutEndRequest) (*wire.PutEndResponse, error) {
	svc, err := g.svc()
	if err != nil {
		return nil, err
	}
	var version uint64
	if req.GetRevoke() {
		err = svc.PutRevoke(req.GetClientId(), req.GetTenantId(), req.GetKey())
	} else {
		version, err = svc.PutEndVersion(req.GetClientId(), req.GetTenantId(), req.GetKey())
	}
	if err != nil {
		return nil, err
	}
	return &wire.PutEndResponse{Version: version}, nil
}

func (g *handlers) BatchPutEnd(_ context.Context, req *wire.BatchPutEndRequest) (*wire.BatchCodesResponse, error) {
	svc, err := g.svc()
	if err != nil {
		return nil, err
	}
	return &wire.BatchCodesResponse{Codes: codesOf(svc.BatchPutEnd(req.GetClientId(), req.GetTenantId(), req.GetKeys(), req.GetRevoke()))}, nil
}

func codesOf(errs []error) []int32 {
	out := make([]int32, len(errs))
	for i, e := range errs {
		out[i] = codeOf(e)
	}
	return out
}

func (g *handlers) Remove(_ context.Context, req *wire.RemoveRequest) (*wire.RemoveResponse, error) {
	svc, err := g.svc()
	if err != nil {
		return nil, err
	}
	if err := svc.Remove(req.GetTenantId(), req.GetKey(), req.GetForce()); err != nil {
		return nil, err
	}
	return &wire.RemoveResponse{}, nil
}

func (g *handlers) BatchRemove(_ context.Context, req *wire.BatchRemoveRequest) (*wire.BatchCodesResponse, error) {
	svc, err := g.svc()
	if err != nil {
		return nil, err
	}
	return &wire.BatchCodesResponse{Codes: codesOf(svc.BatchRemove(req.GetTenantId(), req.GetKeys(), req.GetForce()))}, nil
}

func (g *handlers) RemoveByRegex(_ context.Context, req *wire.RemoveByRegexRequest) (*wire.CountResponse, error) {
	svc, err := g.svc()
	if err != nil {
		return nil, err
	}
	n, err := svc.RemoveByRegex(req.GetTenantId(), req.GetPattern(), req.GetForce())
	if err != nil {
		return nil, err
	}
	return &wire.CountResponse{Count: n}, nil
}

func (g *handlers) RemoveAll(_ context.Context, req *wire.RemoveAllRequest) (*wire.CountResponse, error) {
	svc, err := g.svc()
	if err != nil {
		return nil, err
	}
	n, err := svc.RemoveAll(req.GetTenantId(), req.GetForce())
	if err != nil {
		return nil, err
	}
	return &wire.CountResponse{Count: n}, nil
}

func (g *handlers) ListSegments(_ context.Context, _ *wire.ListSegmentsRequest) (*wire.ListSegmentsResponse, error) {
	svc, err := g.svc()
	if err != nil {
		return nil, err
	}
	segs := svc.Segments()
	resp := &wire.ListSegmentsResponse{Segments: make([]*wire.Segment, len(segs))}
	for i, s := range segs {
		resp.Segments[i] = segmentToWire(s)
	}
	return resp, nil
}

func (g *handlers) ListKeys(_ context.Context, req *wire.ListKeysRequest) (*wire.ListKeysResponse, error) {
	svc, err := g.svc()
	if err != nil {
		return nil, err
	}
	keys, err := svc.Keys(req.GetTenantId())
	if err != nil {
		return nil, err
	}
	return &wire.ListKeysResponse{Keys: keys}, nil
}

// grantOffer tells a (re)mounting client whether and how this master
// hands out put grants.
func (s *Service) grantOffer() *wire.ReMountSegmentsResponse {
	if s.cfg.DisableGrants {
		return &wire.ReMountSegmentsResponse{}
	}
	return &wire.ReMountSegmentsResponse{GrantBytes: s.cfg.GrantBytes,
		GrantLeaseMs: uint64(s.cfg.GrantLease / time.Millisecond)}
}

func (g *handlers) AcquireGrants(_ context.Context, req *wire.AcquireGrantsRequest) (*wire.AcquireGrantsResponse, error) {
	svc, err := g.svc()
	if err != nil {
		return nil, err
	}
	grants, gen, err := svc.AcquireGrants(req.GetClientId(), int(req.GetCount()), req.GetMinBytes(), req.GetExcludeSegments(),
		req.GetReturnGrantIds())
	if err != nil {
		return nil, err
	}
	resp := &wire.AcquireGrantsResponse{Grants: make([]*wire.Grant, len(grants)), GrantGeneration: gen}
	for i, gr := range grants {
		resp.Grants[i] = &wire.Grant{Id: gr.ID, SegmentId: gr.SegmentID, SegmentName: gr.SegmentName,
			Protocol: gr.Protocol, Address: gr.Addr, Size: gr.Size}
	}
	return resp, nil
}

func (g *handlers) PutCommit(_ context.Context, req *wire.PutCommitRequest) (*wire.PutCommitResponse, error) {
	svc, err := g.svc()
	if err != nil {
		return nil, err
	}
	c, err := putCommit(svc, req, nil)
	if err != nil {
		return nil, err
	}
	return &wire.PutCommitResponse{GrantGeneration: c.Gen, Version: c.Version, Uid: c.UID, ReplicaTags: c.Tags,
		ViewVersion: svc.ViewVersion()}, nil
}

// AppendPutCommit answers a mux PutCommit (wire.MuxPutCommitter).
func (g *handlers) AppendPutCommit(_ context.Context, b []byte, req *wire.PutCommitRequest) ([]byte, error) {
	svc, err := g.svc()
	if err != nil {
		return b, err
	}
	var tags [4]uint64 // on the stack for up to four replicas
	c, err := putCommit(svc, req, tags[:0])
	if err != nil {
		return b, err
	}
	return wire.AppendPutCommitResponse(b, c.Gen, c.Version, c.UID, c.Tags, svc.ViewVersion()), nil
}

// putCommit runs req on svc, the replicas' tags appended to tags.
func putCommit(svc *Service, req *wire.PutCommitRequest, tags []uint64) (Committed, error) {
	var repBuf [4]GrantedReplica // on the stack for up to four replicas
	reps := repBuf[:0]
	for _, r := range req.GetReplicas() {
		reps = append(reps, GrantedReplica{GrantID: r.GetGrantId(), Addr: r.GetAddress()})
	}
	cfg := configFromWire(req.GetConfig())
	cfg.Versioned, cfg.ExpectedVersion = req.GetVersioned(), req.GetExpectedVersion()
	return svc.putCommitVersion(req.GetClientId(), req.GetTenantId(), req.GetKey(), req.GetSize(), cfg,
		req.GetUpsert(), reps, tags)
}

func (g *handlers) WaitObject(ctx context.Context, req *wire.WaitObjectRequest) (*wire.GetReplicaListResponse, error) {
	svc, err := g.svc()
	if err != nil {
		return nil, err
	}
	l, err := svc.WaitObject(ctx, req.GetTenantId(), req.GetKey(), req.GetMinVersion(), time.Duration(req.GetWaitMs())*time.Millisecond)
	if err != nil {
		return nil, err
	}
	return replicaListToWire(svc, l), nil
}

func (g *handlers) ReturnGrants(_ context.Context, req *wire.ReturnGrantsRequest) (*wire.ReturnGrantsResponse, error) {
	svc, err := g.svc()
	if err != nil {
		return nil, err
	}
	svc.ReturnGrants(req.GetClientId(), req.GetGrantIds())
	return &wire.ReturnGrantsResponse{}, nil
}

// AppendReplicaList answers a mux GetReplicaList (wire.MuxReplicaLister).
func (g *handlers) AppendReplicaList(_ context.Context, b []byte, tenant, key []byte) ([]byte, error) {
	svc, err := g.svc()
	if err != nil {
		return b, err
	}
	return svc.AppendReplicaList(b, tenant, key)
}
