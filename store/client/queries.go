package client

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/kvferry/kvferry/store/wire"
)

// Master queries and drain jobs of Mooncake's Client and master
// (client_service.h GetReplicaListByRegex, BatchQueryIp, CalcCacheStats;
// master_service.h CreateDrainJob, QueryDrainJob, CancelDrainJob).

// replicaDescsOf converts the master's replicas.
func replicaDescsOf(reps []*wire.Replica) []ReplicaDesc {
	out := make([]ReplicaDesc, 0, len(reps))
	for _, rep := range reps {
		out = append(out, ReplicaDesc{
			SegmentName: rep.GetSegmentName(), Address: rep.GetAddress(), Size: rep.GetSize(),
			Status: strings.TrimPrefix(rep.GetStatus().String(), "REPLICA_STATUS_"), Protocol: rep.GetProtocol(),
			Disk: rep.GetKind() == wire.ReplicaKind_REPLICA_KIND_LOCAL_DISK, FilePath: rep.GetFilePath(),
		})
	}
	return out
}

// ReplicaListByRegex returns where every object of the client's tenant
// whose key matches pattern lives (Mooncake's GetReplicaListByRegex): Go
// RE2 syntax, searched anywhere in the key (anchor it with ^ and $). The
// map holds each matched key with a readable replica; like a read it
// grants leases. Errors: INVALID_PARAMS (a bad pattern), BUFFER_OVERFLOW
// (more than 65536 keys match).
func (c *Client) ReplicaListByRegex(ctx context.Context, pattern string) (map[string]KeyReplicas, error) {
	var resp *wire.GetReplicaListByRegexResponse
	err := c.readCall(func(mc *masterConn) error {
		rctx, cancel := c.rpcCtx(ctx)
		defer cancel()
		var err error
		resp, err = mc.mc.GetReplicaListByRegex(rctx, &wire.GetReplicaListByRegexRequest{TenantId: c.tenant, Pattern: pattern})
		return c.rpcErr(err)
	})
	if err != nil {
		return nil, fmt.Errorf("replica list by regex %q: %w", pattern, err)
	}
	out := make(map[string]KeyReplicas, len(resp.GetObjects()))
	for _, o := range resp.GetObjects() {
		out[o.GetKey()] = KeyReplicas{Size: o.GetSize(), Replicas: replicaDescsOf(o.GetReplicas())}
	}
	return out, nil
}

// BatchQueryIP returns the hosts (transfer-engine segment names without
// the port) of the segments each of clientIDs mounted (Mooncake's
// BatchQueryIp; a client's id is its ClientID). Clients the master does
// not know, and clients without a mounted segment, are not in the map.
func (c *Client) BatchQueryIP(ctx context.Context, clientIDs []string) (map[string][]string, error) {
	var resp *wire.BatchQueryIpResponse
	err := c.readCall(func(mc *masterConn) error {
		rctx, cancel := c.rpcCtx(ctx)
		defer cancel()
		var err error
		resp, err = mc.mc.BatchQueryIp(rctx, &wire.BatchQueryIpRequest{ClientIds: clientIDs})
		return c.rpcErr(err)
	})
	if err != nil {
		return nil, fmt.Errorf("batch query ip (%d clients): %w", len(clientIDs), err)
	}
	out := make(map[string][]string, len(resp.GetClients()))
	for _, ci := range resp.GetClients() {
		out[ci.GetClientId()] = ci.GetIps()
	}
	return out, nil
}

// CacheStats are the master's cache statistics (Mooncake's
// CacheHitStatDict). Hits count the master's replica-list answers since
// it started, by the kind of their first replica (memory, or disk for an
// object only on disk tiers); the totals are the objects cached now with
// a memory replica and with a disk replica. The "rates" are hits divided
// by those totals, as Mooncake computes them (they may exceed 1), rounded
// to two decimals; ValidGetRate is the share of replica-list calls that
// found the object.
type CacheStats struct {
	MemoryHits, SSDHits                       uint64
	MemoryTotal, SSDTotal                     uint64
	MemoryHitRate, SSDHitRate, OverallHitRate float64
	ValidGetRate                              float64
}

// CalcCacheStats returns the master's cache statistics (Mooncake's
// CalcCacheStats).
func (c *Client) CalcCacheStats(ctx context.Context) (CacheStats, error) {
	var resp *wire.CalcCacheStatsResponse
	err := c.readCall(func(mc *masterConn) error {
		rctx, cancel := c.rpcCtx(ctx)
		defer cancel()
		var err error
		resp, err = mc.mc.CalcCacheStats(rctx, &wire.CalcCacheStatsRequest{})
		return c.rpcErr(err)
	})
	if err != nil {
		return CacheStats{}, fmt.Errorf("calc cache stats: %w", err)
	}
	return CacheStats{MemoryHits: resp.GetMemoryHits(), SSDHits: resp.GetSsdHits(), MemoryTotal: resp.GetMemoryTotal(),
		SSDTotal: resp.GetSsdTotal(), MemoryHitRate: resp.GetMemoryHitRate(), SSDHitRate: resp.GetSsdHitRate(),
		OverallHitRate: resp.GetOverallHitRate(), ValidGetRate: resp.GetValidGetRate()}, nil
}

// DrainJobRequest is what CreateDrainJob drains (Mooncake's
// CreateDrainJobRequest).
type DrainJobRequest struct {
	// Segments are the transfer-engine names of the segments to empty.
	Segments []string
	// Targets restrict where the replicas go; empty means any other
	// segment.
	Targets []string
	// MaxConcurrency is the moves in flight at once; 0 means the master's
	// default (4).
	MaxConcurrency uint32
}

// CreateDrainJob starts moving every replica off req.Segments (before
// their nodes leave) and returns the job's id; QueryDrainJob follows it.
// Errors: INVALID_PARAMS (no segment, a repeated one, a target among
// them), SEGMENT_NOT_FOUND, UNAVAILABLE_IN_CURRENT_STATUS (a segment that
// is draining or drained already, a target that takes no allocation).
func (c *Client) CreateDrainJob(ctx context.Context, req DrainJobRequest) (string, error) {
	mc, err := c.master()
	if err != nil {
		return "", err
	}
	rctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	in := &wire.CreateDrainJobRequest{Segments: req.Segments, TargetSegments: req.Targets}
	if req.MaxConcurrency > 0 {
		in.MaxConcurrency = &req.MaxConcurrency
	}
	resp, err := mc.mc.CreateDrainJob(rctx, in)
	if err != nil {
		return "", fmt.Errorf("create drain job of %v: %w", req.Segments, c.rpcErr(err))
	}
	return resp.GetJobId(), nil
}

// JobInfo is the state of a drain job (Mooncake's QueryJobResponse).
type JobInfo struct {
	ID string
	// Type is "DRAIN"; Status is CREATED, PLANNING, RUNNING, SUCCEEDED,
	// FAILED or CANCELED.
	Type, Status string
	Created      time.Time
	Updated      time.Time
	Segments     []string
	// SucceededUnits counts replicas moved off the segments (DroppedUnits
	// of them were dropped instead: the object had a replica on every
	// other segment already), FailedUnits failed moves, BlockedUnits
	// those that could not start at the last planning round (no room, a
	// put in progress), ActiveUnits those in flight.
	SucceededUnits, FailedUnits, BlockedUnits, ActiveUnits, DroppedUnits uint64
	MigratedBytes                                                        uint64
	Message                                                              string
}

// Done reports whether the job ended (SUCCEEDED, FAILED or CANCELED).
func (j JobInfo) Done() bool {
	return j.Status == "SUCCEEDED" || j.Status == "FAILED" || j.Status == "CANCELED"
}

// QueryDrainJob returns the state of a drain job. Errors: JOB_NOT_FOUND,
// INVALID_PARAMS (an id that is not one).
func (c *Client) QueryDrainJob(ctx context.Context, id string) (JobInfo, error) {
	var resp *wire.QueryJobResponse
	err := c.readCall(func(mc *masterConn) error {
		rctx, cancel := c.rpcCtx(ctx)
		defer cancel()
		var err error
		resp, err = mc.mc.QueryDrainJob(rctx, &wire.DrainJobIdRequest{JobId: id})
		return c.rpcErr(err)
	})
	if err != nil {
		return JobInfo{}, fmt.Errorf("query drain job %q: %w", id, err)
	}
	return JobInfo{ID: resp.GetId(), Type: strings.TrimPrefix(resp.GetType().String(), "JOB_TYPE_"),
		Status:  strings.TrimPrefix(resp.GetStatus().String(), "JOB_STATUS_"),
		Created: time.UnixMilli(resp.GetCreatedAtMsEpoch()), Updated: time.UnixMilli(resp.GetLastUpdatedAtMsEpoch()),
		Segments: resp.GetSegments(), SucceededUnits: resp.GetSucceededUnits(), FailedUnits: resp.GetFailedUnits(),
		BlockedUnits: resp.GetBlockedUnits(), ActiveUnits: resp.GetActiveUnits(), DroppedUnits: resp.GetDroppedUnits(),
		MigratedBytes: resp.GetMigratedBytes(), Message: resp.GetMessage()}, nil
}

// CancelDrainJob stops a drain job: it starts no more moves and its
// segments take allocations again (moves in flight finish). Errors:
// JOB_NOT_FOUND, UNAVAILABLE_IN_CURRENT_STATUS (the job ended already).
func (c *Client) CancelDrainJob(ctx context.Context, id string) error {
	mc, err := c.master()
	if err != nil {
		return err
	}
	rctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	if _, err := mc.mc.CancelDrainJob(rctx, &wire.DrainJobIdRequest{JobId: id}); err != nil {
		return fmt.Errorf("cancel drain job %q: %w", id, c.rpcErr(err))
	}
	return nil
}
