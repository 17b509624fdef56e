package master

import (
	"context"
	"time"

	"github.com/kvferry/kvferry/store/wire"
)

// The handlers of the queries (queries.go) and drain jobs (drain.go).

func (g *handlers) GetReplicaListByRegex(_ context.Context, req *wire.GetReplicaListByRegexRequest) (*wire.GetReplicaListByRegexResponse, error) {
	svc, err := g.svc()
	if err != nil {
		return nil, err
	}
	hits, err := svc.GetReplicaListByRegex(req.GetTenantId(), req.GetPattern())
	if err != nil {
		return nil, err
	}
	resp := &wire.GetReplicaListByRegexResponse{Objects: make([]*wire.KeyReplicaList, len(hits)),
		LeaseTtlMs: uint64(svc.Config().DefaultKVLeaseTTL / time.Millisecond), ViewVersion: svc.ViewVersion()}
	for i, h := range hits {
		resp.Objects[i] = &wire.KeyReplicaList{Key: h.Key, Replicas: replicasToWire(h.Replicas), Size: h.Size,
			Uid: h.UID, Version: h.Version}
	}
	return resp, nil
}

func (g *handlers) BatchQueryIp(_ context.Context, req *wire.BatchQueryIpRequest) (*wire.BatchQueryIpResponse, error) {
	svc, err := g.svc()
	if err != nil {
		return nil, err
	}
	found := svc.BatchQueryIP(req.GetClientIds())
	resp := &wire.BatchQueryIpResponse{Clients: make([]*wire.ClientIps, len(found))}
	for i, c := range found {
		resp.Clients[i] = &wire.ClientIps{ClientId: c.ClientID, Ips: c.IPs}
	}
	return resp, nil
}

func (g *handlers) CalcCacheStats(_ context.Context, _ *wire.CalcCacheStatsRequest) (*wire.CalcCacheStatsResponse, error) {
	svc, err := g.svc()
	if err != nil {
		return nil, err
	}
	st := svc.CalcCacheStats()
	return &wire.CalcCacheStatsResponse{MemoryHits: st.MemoryHits, SsdHits: st.SSDHits, MemoryTotal: st.MemoryTotal,
		SsdTotal: st.SSDTotal, MemoryHitRate: st.MemoryHitRate, SsdHitRate: st.SSDHitRate,
		OverallHitRate: st.OverallHitRate, ValidGetRate: st.ValidGetRate}, nil
}

func (g *handlers) CreateDrainJob(_ context.Context, req *wire.CreateDrainJobRequest) (*wire.CreateDrainJobResponse, error) {
	svc, err := g.svc()
	if err != nil {
		return nil, err
	}
	id, err := svc.CreateDrainJob(drainRequestFromWire(req))
	if err != nil {
		return nil, err
	}
	return &wire.CreateDrainJobResponse{JobId: id}, nil
}

// drainRequestFromWire is req as CreateDrainJob takes it: an absent
// max_concurrency is the default, a present 0 (which Mooncake refuses) is
// INVALID_PARAMS.
func drainRequestFromWire(req *wire.CreateDrainJobRequest) DrainJobRequest {
	r := DrainJobRequest{Segments: req.GetSegments(), Targets: req.GetTargetSegments()}
	if req.MaxConcurrency != nil {
		r.MaxConcurrency = int(min(req.GetMaxConcurrency(), MaxDrainConcurrency))
		if r.MaxConcurrency == 0 {
			r.MaxConcurrency = -1
		}
	}
	return r
}

func (g *handlers) QueryDrainJob(_ context.Context, req *wire.DrainJobIdRequest) (*wire.QueryJobResponse, error) {
	svc, err := g.svc()
	if err != nil {
		return nil, err
	}
	j, err := svc.QueryDrainJob(req.GetJobId())
	if err != nil {
		return nil, err
	}
	return jobToWire(j), nil
}

func jobToWire(j JobInfo) *wire.QueryJobResponse {
	return &wire.QueryJobResponse{Id: j.ID, Type: j.Type, Status: j.Status, CreatedAtMsEpoch: j.Created.UnixMilli(),
		LastUpdatedAtMsEpoch: j.Updated.UnixMilli(), Segments: j.Segments, SucceededUnits: j.SucceededUnits,
		FailedUnits: j.FailedUnits, BlockedUnits: j.BlockedUnits, ActiveUnits: j.ActiveUnits,
		MigratedBytes: j.MigratedBytes, Message: j.Message, DroppedUnits: j.DroppedUnits}
}

func (g *handlers) CancelDrainJob(_ context.Context, req *wire.DrainJobIdRequest) (*wire.CancelDrainJobResponse, error) {
	svc, err := g.svc()
	if err != nil {
		return nil, err
	}
	if err := svc.CancelDrainJob(req.GetJobId()); err != nil {
		return nil, err
	}
	return &wire.CancelDrainJobResponse{}, nil
}

func (g *handlers) BatchReplicaClear(_ context.Context, req *wire.BatchReplicaClearRequest) (*wire.BatchReplicaClearResponse, error) {
	svc, err := g.svc()
	if err != nil {
		return nil, err
	}
	cleared, err := svc.BatchReplicaClear(req.GetClientId(), req.GetTenantId(), req.GetKeys(), req.GetSegmentName())
	if err != nil {
		return nil, err
	}
	return &wire.BatchReplicaClearResponse{ClearedKeys: cleared}, nil
}
