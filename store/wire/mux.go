package wire

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// The mux protocol is the store master's fast path: the Master service's
// unary calls carried as length-prefixed frames over one persistent TCP
// connection per client process, on the master's gRPC port. It exists
// because a gRPC unary call costs several goroutine hand-offs on each side
// (HTTP/2 stream setup, the transport's writer goroutine, a handler
// goroutine): about 190 us per round trip between two processes of a
// 2-core VM, against about 30 us for a plain TCP exchange. The messages are
// the protobuf messages of wire.proto; only the transport differs, and a
// call's answer and error are exactly those of the gRPC call.
//
// A connection starts with the client sending MuxHello; a master that
// speaks mux answers MuxHello, and a master that does not sees an invalid
// HTTP/2 preface and closes the connection (the client then uses gRPC).
// Then every frame is a 12-byte header and a body:
//
//	offset size  field
//	0      4     body length in bytes (little endian), at most MaxMuxBody
//	4      4     request id, chosen by the client, echoed in the answer
//	8      2     method (MuxMethod)
//	10     2     status: 0 in requests and in successful answers; in a
//	             failed answer the gRPC code of the failure (never 0)
//	12     n     body: the protobuf request or response message, or for
//	             a failed answer the store Code (int32, little endian)
//	             followed by the error text (UTF-8)
//
// The client may send many requests without waiting; the master answers
// each exactly once, in any order (today: in order). Either side closes the
// connection on a malformed frame.

// MuxHello opens a mux connection in both directions ("KVFMUX", version 1).
// It cannot be mistaken for the HTTP/2 client preface ("PRI * HTTP/2.0...").
var MuxHello = [8]byte{'K', 'V', 'F', 'M', 'U', 'X', 0, 1}

// Mux framing constants.
const (
	// MuxHeaderBytes is the size of a frame header.
	MuxHeaderBytes = 12
	// MaxMuxBody is the largest frame body either side accepts (64 MiB;
	// gRPC's default receive limit is 4 MiB).
	MaxMuxBody = 64 << 20
)

// MuxMethod identifies a Master call in a mux frame. The values are part of
// the protocol and never change.
type MuxMethod uint16

// Mux methods, one per Master rpc.
const (
	MuxPing                  MuxMethod = 1
	MuxMountSegment          MuxMethod = 2
	MuxReMountSegments       MuxMethod = 3
	MuxUnmountSegment        MuxMethod = 4
	MuxExistKey              MuxMethod = 5
	MuxBatchExistKey         MuxMethod = 6
	MuxGetReplicaList        MuxMethod = 7
	MuxBatchGetReplicaList   MuxMethod = 8
	MuxPutStart              MuxMethod = 9
	MuxBatchPutStart         MuxMethod = 10
	MuxPutEnd                MuxMethod = 11
	MuxBatchPutEnd           MuxMethod = 12
	MuxRemove                MuxMethod = 13
	MuxBatchRemove           MuxMethod = 14
	MuxRemoveByRegex         MuxMethod = 15
	MuxRemoveAll             MuxMethod = 16
	MuxListSegments          MuxMethod = 17
	MuxListKeys              MuxMethod = 18
	MuxAcquireGrants         MuxMethod = 19
	MuxPutCommit             MuxMethod = 20
	MuxReturnGrants          MuxMethod = 21
	MuxMountDiskSegment      MuxMethod = 22
	MuxFetchTasks            MuxMethod = 23
	MuxPromoteObject         MuxMethod = 24
	MuxCreateTask            MuxMethod = 25
	MuxQueryTask             MuxMethod = 26
	MuxWaitObject            MuxMethod = 27
	MuxGetReplicaListByRegex MuxMethod = 28
	MuxBatchQueryIp          MuxMethod = 29
	MuxCalcCacheStats        MuxMethod = 30
	MuxCreateDrainJob        MuxMethod = 31
	MuxQueryDrainJob         MuxMethod = 32
	MuxCancelDrainJob        MuxMethod = 33
	MuxBatchReplicaClear     MuxMethod = 34
	muxMethodEnd             MuxMethod = 35
)

// MuxHeader is a decoded frame header.
type MuxHeader struct {
	// BodyBytes is the length of the body that follows.
	BodyBytes uint32
	// ID matches an answer to its request.
	ID uint32
	// Method is the call.
	Method MuxMethod
	// Status is 0, or the gRPC code of a failed answer.
	Status uint16
}

// ErrMuxFrame is a malformed mux frame; the connection that carried it is
// closed.
var ErrMuxFrame = errors.New("malformed store master mux frame")

// PutMuxHeader encodes h into b[:MuxHeaderBytes].
func PutMuxHeader(b []byte, h MuxHeader) {
	_ = b[MuxHeaderBytes-1]
	binary.LittleEndian.PutUint32(b[0:], h.BodyBytes)
	binary.LittleEndian.PutUint32(b[4:], h.ID)
	binary.LittleEndian.PutUint16(b[8:], uint16(h.Method))
	binary.LittleEndian.PutUint16(b[10:], h.Status)
}

// ParseMuxHeader decodes and checks a frame header: a body over MaxMuxBody
// or an unknown method is ErrMuxFrame.
func ParseMuxHeader(b []byte) (MuxHeader, error) {
	if len(b) < MuxHeaderBytes {
		return MuxHeader{}, fmt.Errorf("%w: header of %d bytes", ErrMuxFrame, len(b))
	}
	h := MuxHeader{
		BodyBytes: binary.LittleEndian.Uint32(b[0:]),
		ID:        binary.LittleEndian.Uint32(b[4:]),
		Method:    MuxMethod(binary.LittleEndian.Uint16(b[8:])),
		Status:    binary.LittleEndian.Uint16(b[10:]),
	}
	switch {
	case h.BodyBytes > MaxMuxBody:
		return MuxHeader{}, fmt.Errorf("%w: body of %d bytes (at most %d)", ErrMuxFrame, h.BodyBytes, MaxMuxBody)
	case h.Method == 0 || h.Method >= muxMethodEnd:
		return MuxHeader{}, fmt.Errorf("%w: method %d", ErrMuxFrame, h.Method)
	}
	return h, nil
}

// AppendMuxError appends the body of a failed answer: the store Code of err
// and its text. It returns the body and the status (the gRPC code) to put
// in the header.
func AppendMuxError(b []byte, err error) ([]byte, uint16) {
	se := AsStatusError(err)
	b = binary.LittleEndian.AppendUint32(b, uint32(int32(se.Code)))
	b = append(b, se.Message...)
	st := uint16(se.GRPC)
	if st == 0 {
		st = uint16(codes.Unknown)
	}
	return b, st
}

// ParseMuxError decodes the body of a failed answer into the error a gRPC
// call would have returned after FromStatus: a *StatusError.
func ParseMuxError(status uint16, body []byte) error {
	if len(body) < 4 {
		return &StatusError{Code: ErrRPCFail, GRPC: codes.Code(status), Message: "malformed error answer from master"}
	}
	c := Code(int32(binary.LittleEndian.Uint32(body)))
	if !c.Known() || c == OK {
		c = ErrInternal
	}
	return &StatusError{Code: c, GRPC: codes.Code(status), Message: string(body[4:])}
}

// AsStatusError returns err as the *StatusError a client sees after a gRPC
// call that failed with err on the master and wire.FromStatus: the same
// Code, gRPC code and message as FromStatus(ToStatus(err)), without the
// gRPC status round trip. A *StatusError and a gRPC status error are
// decoded as they are; nil stays nil.
func AsStatusError(err error) *StatusError {
	if err == nil {
		return nil
	}
	var se *StatusError
	if errors.As(err, &se) {
		return se
	}
	if _, ok := err.(interface{ GRPCStatus() *status.Status }); ok {
		if errors.As(FromStatus(err), &se) {
			return se
		}
	}
	c := CodeOf(err)
	gc, ok := grpcCodes[c]
	if !ok {
		gc = codes.Unknown
	}
	return &StatusError{Code: c, GRPC: gc, Message: err.Error()}
}

// muxCall is one entry of the method table: a new request message and the
// call of a MasterServer method with it.
type muxCall struct {
	name   string
	newReq func() proto.Message
	serve  func(ctx context.Context, s MasterServer, req proto.Message) (proto.Message, error)
	// slow calls may wait (for a task, a load from disk, a drain): the
	// server answers them from a goroutine of their own, so the calls
	// behind them on the connection do not wait too.
	slow bool
}

// Name returns the method's gRPC full name ("/kvferry.store.v1.Master/Ping"),
// or "" for an unknown method.
func (m MuxMethod) Name() string {
	if m == 0 || m >= muxMethodEnd {
		return ""
	}
	return muxCalls[m].name
}

// serveFn adapts a typed MasterServer method to the table.
func serveFn[Req, Resp proto.Message](f func(MasterServer, context.Context, Req) (Resp, error)) func(context.Context, MasterServer, proto.Message) (proto.Message, error) {
	return func(ctx context.Context, s MasterServer, req proto.Message) (proto.Message, error) {
		resp, err := f(s, ctx, req.(Req))
		if err != nil {
			return nil, err
		}
		return resp, nil
	}
}

var muxCalls = [muxMethodEnd]muxCall{
	MuxPing: {Master_Ping_FullMethodName, func() proto.Message { return new(PingRequest) },
		serveFn(MasterServer.Ping), false},
	MuxMountSegment: {Master_MountSegment_FullMethodName, func() proto.Message { return new(MountSegmentRequest) },
		serveFn(MasterServer.MountSegment), false},
	MuxReMountSegments: {Master_ReMountSegments_FullMethodName, func() proto.Message { return new(ReMountSegmentsRequest) },
		serveFn(MasterServer.ReMountSegments), false},
	MuxUnmountSegment: {Master_UnmountSegment_FullMethodName, func() proto.Message { return new(UnmountSegmentRequest) },
		serveFn(MasterServer.UnmountSegment), true}, // a graceful unmount waits for its moves
	MuxExistKey: {Master_ExistKey_FullMethodName, func() proto.Message { return new(KeyRequest) },
		serveFn(MasterServer.ExistKey), false},
	MuxBatchExistKey: {Master_BatchExistKey_FullMethodName, func() proto.Message { return new(BatchKeyRequest) },
		serveFn(MasterServer.BatchExistKey), false},
	MuxGetReplicaList: {Master_GetReplicaList_FullMethodName, func() proto.Message { return new(KeyRequest) },
		serveFn(MasterServer.GetReplicaList), false},
	MuxBatchGetReplicaList: {Master_BatchGetReplicaList_FullMethodName, func() proto.Message { return new(BatchKeyRequest) },
		serveFn(MasterServer.BatchGetReplicaList), false},
	MuxPutStart: {Master_PutStart_FullMethodName, func() proto.Message { return new(PutStartRequest) },
		serveFn(MasterServer.PutStart), false},
	MuxBatchPutStart: {Master_BatchPutStart_FullMethodName, func() proto.Message { return new(BatchPutStartRequest) },
		serveFn(MasterServer.BatchPutStart), false},
	MuxPutEnd: {Master_PutEnd_FullMethodName, func() proto.Message { return new(PutEndRequest) },
		serveFn(MasterServer.PutEnd), false},
	MuxBatchPutEnd: {Master_BatchPutEnd_FullMethodName, func() proto.Message { return new(BatchPutEndRequest) },
		serveFn(MasterServer.BatchPutEnd), false},
	MuxRemove: {Master_Remove_FullMethodName, func() proto.Message { return new(RemoveRequest) },
		serveFn(MasterServer.Remove), false},
	MuxBatchRemove: {Master_BatchRemove_FullMethodName, func() proto.Message { return new(BatchRemoveRequest) },
		serveFn(MasterServer.BatchRemove), false},
	MuxRemoveByRegex: {Master_RemoveByRegex_FullMethodName, func() proto.Message { return new(RemoveByRegexRequest) },
		serveFn(MasterServer.RemoveByRegex), false},
	MuxRemoveAll: {Master_RemoveAll_FullMethodName, func() proto.Message { return new(RemoveAllRequest) },
		serveFn(MasterServer.RemoveAll), false},
	MuxListSegments: {Master_ListSegments_FullMethodName, func() proto.Message { return new(ListSegmentsRequest) },
		serveFn(MasterServer.ListSegments), false},
	MuxListKeys: {Master_ListKeys_FullMethodName, func() proto.Message { return new(ListKeysRequest) },
		serveFn(MasterServer.ListKeys), false},
	MuxAcquireGrants: {Master_AcquireGrants_FullMethodName, func() proto.Message { return new(AcquireGrantsRequest) },
		serveFn(MasterServer.AcquireGrants), false},
	MuxPutCommit: {Master_PutCommit_FullMethodName, func() proto.Message { return new(PutCommitRequest) },
		serveFn(MasterServer.PutCommit), false},
	MuxReturnGrants: {Master_ReturnGrants_FullMethodName, func() proto.Message { return new(ReturnGrantsRequest) },
		serveFn(MasterServer.ReturnGrants), false},
	MuxMountDiskSegment: {Master_MountDiskSegment_FullMethodName, func() proto.Message { return new(MountDiskSegmentRequest) },
		serveFn(MasterServer.MountDiskSegment), false},
	MuxFetchTasks: {Master_FetchTasks_FullMethodName, func() proto.Message { return new(FetchTasksRequest) },
		serveFn(MasterServer.FetchTasks), true},
	MuxPromoteObject: {Master_PromoteObject_FullMethodName, func() proto.Message { return new(KeyRequest) },
		serveFn(MasterServer.PromoteObject), true},
	MuxCreateTask: {Master_CreateTask_FullMethodName, func() proto.Message { return new(CreateTaskRequest) },
		serveFn(MasterServer.CreateTask), false},
	MuxQueryTask: {Master_QueryTask_FullMethodName, func() proto.Message { return new(QueryTaskRequest) },
		serveFn(MasterServer.QueryTask), false},
	MuxWaitObject: {Master_WaitObject_FullMethodName, func() proto.Message { return new(WaitObjectRequest) },
		serveFn(MasterServer.WaitObject), true},
	MuxGetReplicaListByRegex: {Master_GetReplicaListByRegex_FullMethodName, func() proto.Message { return new(GetReplicaListByRegexRequest) },
		serveFn(MasterServer.GetReplicaListByRegex), false},
	MuxBatchQueryIp: {Master_BatchQueryIp_FullMethodName, func() proto.Message { return new(BatchQueryIpRequest) },
		serveFn(MasterServer.BatchQueryIp), false},
	MuxCalcCacheStats: {Master_CalcCacheStats_FullMethodName, func() proto.Message { return new(CalcCacheStatsRequest) },
		serveFn(MasterServer.CalcCacheStats), false},
	MuxCreateDrainJob: {Master_CreateDrainJob_FullMethodName, func() proto.Message { return new(CreateDrainJobRequest) },
		serveFn(MasterServer.CreateDrainJob), false},
	MuxQueryDrainJob: {Master_QueryDrainJob_FullMethodName, func() proto.Message { return new(DrainJobIdRequest) },
		serveFn(MasterServer.QueryDrainJob), false},
	MuxCancelDrainJob: {Master_CancelDrainJob_FullMethodName, func() proto.Message { return new(DrainJobIdRequest) },
		serveFn(MasterServer.CancelDrainJob), false},
	MuxBatchReplicaClear: {Master_BatchReplicaClear_FullMethodName, func() proto.Message { return new(BatchReplicaClearRequest) },
		serveFn(MasterServer.BatchReplicaClear), false},
}
