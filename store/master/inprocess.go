package master

import (
	"context"

	"google.golang.org/grpc"

	"github.com/kvferry/kvferry/store/wire"
)

// InProcessClient returns a wire.MasterClient that calls this server's
// handlers directly: no socket, no serialization. It is the embedded
// master's fast path (a master round trip costs a function call instead of
// a loopback exchange). Answers and errors are exactly those of a remote
// call after wire.FromStatus: errors are *wire.StatusError values with the
// Code, gRPC code and message a gRPC client would see. Requests are read
// during the call only and responses are fresh, so neither side shares
// memory with the other afterwards. Safe for concurrent use; after Close
// every call fails with UNAVAILABLE_IN_CURRENT_STATUS.
func (s *Server) InProcessClient() wire.MasterClient { return inProcess{g: &handlers{s: s}} }

// inProcess adapts handlers to wire.MasterClient. Call options are
// meaningless in process and ignored.
type inProcess struct{ g *handlers }

// answer returns resp, or err as a remote caller would see it.
func answer[T any](resp *T, err error) (*T, error) {
	if err != nil {
		return nil, wire.AsStatusError(err)
	}
	return resp, nil
}

var _ wire.MasterClient = inProcess{}

// Ping calls the handler directly.
func (c inProcess) Ping(ctx context.Context, in *wire.PingRequest, _ ...grpc.CallOption) (*wire.PingResponse, error) {
	return answer(c.g.Ping(ctx, in))
}

// MountSegment calls the handler directly.
func (c inProcess) MountSegment(ctx context.Context, in *wire.MountSegmentRequest, _ ...grpc.CallOption) (*wire.MountSegmentResponse, error) {
	return answer(c.g.MountSegment(ctx, in))
}

// ReMountSegments calls the handler directly.
func (c inProcess) ReMountSegments(ctx context.Context, in *wire.ReMountSegmentsRequest, _ ...grpc.CallOption) (*wire.ReMountSegmentsResponse, error) {
	return answer(c.g.ReMountSegments(ctx, in))
}

// UnmountSegment calls the handler directly.
func (c inProcess) UnmountSegment(ctx context.Context, in *wire.UnmountSegmentRequest, _ ...grpc.CallOption) (*wire.UnmountSegmentResponse, error) {
	return answer(c.g.UnmountSegment(ctx, in))
}

// ExistKey calls the handler directly.
func (c inProcess) ExistKey(ctx context.Context, in *wire.KeyRequest, _ ...grpc.CallOption) (*wire.ExistKeyResponse, error) {
	return answer(c.g.ExistKey(ctx, in))
}

// BatchExistKey calls the handler directly.
func (c inProcess) BatchExistKey(ctx context.Context, in *wire.BatchKeyRequest, _ ...grpc.CallOption) (*wire.BatchExistKeyResponse, error) {
	return answer(c.g.BatchExistKey(ctx, in))
}

// GetReplicaList calls the handler directly.
func (c inProcess) GetReplicaList(ctx context.Context, in *wire.KeyRequest, _ ...grpc.CallOption) (*wire.GetReplicaListResponse, error) {
	return answer(c.g.GetReplicaList(ctx, in))
}

// BatchGetReplicaList calls the handler directly.
func (c inProcess) BatchGetReplicaList(ctx context.Context, in *wire.BatchKeyRequest, _ ...grpc.CallOption) (*wire.BatchGetReplicaListResponse, error) {
	return answer(c.g.BatchGetReplicaList(ctx, in))
}

// PutStart calls the handler directly.
func (c inProcess) PutStart(ctx context.Context, in *wire.PutStartRequest, _ ...grpc.CallOption) (*wire.PutStartResponse, error) {
	return answer(c.g.PutStart(ctx, in))
}

// BatchPutStart calls the handler directly.
func (c inProcess) BatchPutStart(ctx context.Context, in *wire.BatchPutStartRequest, _ ...grpc.CallOption) (*wire.BatchPutStartResponse, error) {
	return answer(c.g.BatchPutStart(ctx, in))
}

// PutEnd calls the handler directly.
func (c inProcess) PutEnd(ctx context.Context, in *wire.PutEndRequest, _ ...grpc.CallOption) (*wire.PutEndResponse, error) {
	return answer(c.g.PutEnd(ctx, in))
}

// BatchPutEnd calls the handler directly.
func (c inProcess) BatchPutEnd(ctx context.Context, in *wire.BatchPutEndRequest, _ ...grpc.CallOption) (*wire.BatchCodesResponse, error) {
	return answer(c.g.BatchPutEnd(ctx, in))
}

// Remove calls the handler directly.
func (c inProcess) Remove(ctx context.Context, in *wire.RemoveRequest, _ ...grpc.CallOption) (*wire.RemoveResponse, error) {
	return answer(c.g.Remove(ctx, in))
}

// BatchRemove calls the handler directly.
func (c inProcess) BatchRemove(ctx context.Context, in *wire.BatchRemoveRequest, _ ...grpc.CallOption) (*wire.BatchCodesResponse, error) {
	return answer(c.g.BatchRemove(ctx, in))
}

// RemoveByRegex calls the handler directly.
func (c inProcess) RemoveByRegex(ctx context.Context, in *wire.RemoveByRegexRequest, _ ...grpc.CallOption) (*wire.CountResponse, error) {
	return answer(c.g.RemoveByRegex(ctx, in))
}

// RemoveAll calls the handler directly.
func (c inProcess) RemoveAll(ctx context.Context, in *wire.RemoveAllRequest, _ ...grpc.CallOption) (*wire.CountResponse, error) {
	return answer(c.g.RemoveAll(ctx, in))
}

// ListSegments calls the handler directly.
func (c inProcess) ListSegments(ctx context.Context, in *wire.ListSegmentsRequest, _ ...grpc.CallOption) (*wire.ListSegmentsResponse, error) {
	return answer(c.g.ListSegments(ctx, in))
}

// ListKeys calls the handler directly.
func (c inProcess) ListKeys(ctx context.Context, in *wire.ListKeysRequest, _ ...grpc.CallOption) (*wire.ListKeysResponse, error) {
	return answer(c.g.ListKeys(ctx, in))
}

// AcquireGrants calls the handler directly.
func (c inProcess) AcquireGrants(ctx context.Context, in *wire.AcquireGrantsRequest, _ ...grpc.CallOption) (*wire.AcquireGrantsResponse, error) {
	return answer(c.g.AcquireGrants(ctx, in))
}

// PutCommit calls the handler directly.
func (c inProcess) PutCommit(ctx context.Context, in *wire.PutCommitRequest, _ ...grpc.CallOption) (*wire.PutCommitResponse, error) {
	return answer(c.g.PutCommit(ctx, in))
}

// ReturnGrants calls the handler directly.
func (c inProcess) ReturnGrants(ctx context.Context, in *wire.ReturnGrantsRequest, _ ...grpc.CallOption) (*wire.ReturnGrantsResponse, error) {
	return answer(c.g.ReturnGrants(ctx, in))
}

// MountDiskSegment calls the handler directly.
func (c inProcess) MountDiskSegment(ctx context.Context, in *wire.MountDiskSegmentRequest, _ ...grpc.CallOption) (*wire.MountDiskSegmentResponse, error) {
	return answer(c.g.MountDiskSegment(ctx, in))
}

// FetchTasks calls the handler directly.
func (c inProcess) FetchTasks(ctx context.Context, in *wire.FetchTasksRequest, _ ...grpc.CallOption) (*wire.FetchTasksResponse, error) {
	return answer(c.g.FetchTasks(ctx, in))
}

// PromoteObject calls the handler directly.
func (c inProcess) PromoteObject(ctx context.Context, in *wire.KeyRequest, _ ...grpc.CallOption) (*wire.GetReplicaListResponse, error) {
	return answer(c.g.PromoteObject(ctx, in))
}

// CreateTask calls the handler directly.
func (c inProcess) CreateTask(ctx context.Context, in *wire.CreateTaskRequest, _ ...grpc.CallOption) (*wire.CreateTaskResponse, error) {
	return answer(c.g.CreateTask(ctx, in))
}

// QueryTask calls the handler directly.
func (c inProcess) QueryTask(ctx context.Context, in *wire.QueryTaskRequest, _ ...grpc.CallOption) (*wire.QueryTaskResponse, error) {
	return answer(c.g.QueryTask(ctx, in))
}

// WaitObject calls the handler directly.
func (c inProcess) WaitObject(ctx context.Context, in *wire.WaitObjectRequest, _ ...grpc.CallOption) (*wire.GetReplicaListResponse, error) {
	return answer(c.g.WaitObject(ctx, in))
}

// GetReplicaListByRegex calls the handler directly.
func (c inProcess) GetReplicaListByRegex(ctx context.Context, in *wire.GetReplicaListByRegexRequest, _ ...grpc.CallOption) (*wire.GetReplicaListByRegexResponse, error) {
	return answer(c.g.GetReplicaListByRegex(ctx, in))
}

// BatchQueryIp calls the handler directly.
func (c inProcess) BatchQueryIp(ctx context.Context, in *wire.BatchQueryIpRequest, _ ...grpc.CallOption) (*wire.BatchQueryIpResponse, error) {
	return answer(c.g.BatchQueryIp(ctx, in))
}

// CalcCacheStats calls the handler directly.
func (c inProcess) CalcCacheStats(ctx context.Context, in *wire.CalcCacheStatsRequest, _ ...grpc.CallOption) (*wire.CalcCacheStatsResponse, error) {
	return answer(c.g.CalcCacheStats(ctx, in))
}

// CreateDrainJob calls the handler directly.
func (c inProcess) CreateDrainJob(ctx context.Context, in *wire.CreateDrainJobRequest, _ ...grpc.CallOption) (*wire.CreateDrainJobResponse, error) {
	return answer(c.g.CreateDrainJob(ctx, in))
}

// QueryDrainJob calls the handler directly.
func (c inProcess) QueryDrainJob(ctx context.Context, in *wire.DrainJobIdRequest, _ ...grpc.CallOption) (*wire.QueryJobResponse, error) {
	return answer(c.g.QueryDrainJob(ctx, in))
}

// CancelDrainJob calls the handler directly.
func (c inProcess) CancelDrainJob(ctx context.Context, in *wire.DrainJobIdRequest, _ ...grpc.CallOption) (*wire.CancelDrainJobResponse, error) {
	return answer(c.g.CancelDrainJob(ctx, in))
}

// BatchReplicaClear calls the handler directly.
func (c inProcess) BatchReplicaClear(ctx context.Context, in *wire.BatchReplicaClearRequest, _ ...grpc.CallOption) (*wire.BatchReplicaClearResponse, error) {
	return answer(c.g.BatchReplicaClear(ctx, in))
}
