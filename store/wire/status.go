package wire

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// grpcCodes is the one Code → gRPC code table. A Code missing here travels
// as codes.Unknown; the exact Code always travels in the ErrorDetail.
var grpcCodes = map[Code]codes.Code{
	ErrInternal:                 codes.Internal,
	ErrBufferOverflow:           codes.ResourceExhausted,
	ErrShardIndexOutOfRange:     codes.InvalidArgument,
	ErrSegmentNotFound:          codes.NotFound,
	ErrSegmentAlreadyExists:     codes.AlreadyExists,
	ErrClientNotFound:           codes.NotFound,
	ErrNoAvailableHandle:        codes.ResourceExhausted,
	ErrInvalidVersion:           codes.InvalidArgument,
	ErrInvalidKey:               codes.InvalidArgument,
	ErrInvalidParams:            codes.InvalidArgument,
	ErrIllegalClient:            codes.PermissionDenied,
	ErrReplicaIsNotReady:        codes.FailedPrecondition,
	ErrObjectNotFound:           codes.NotFound,
	ErrObjectAlreadyExists:      codes.AlreadyExists,
	ErrObjectHasLease:           codes.FailedPrecondition,
	ErrLeaseExpired:             codes.FailedPrecondition,
	ErrObjectHasReplicationTask: codes.FailedPrecondition,
	ErrReplicaNotFound:          codes.NotFound,
	ErrReplicaAlreadyExists:     codes.AlreadyExists,
	ErrObjectReplicaBusy:        codes.FailedPrecondition,
	ErrRPCFail:                  codes.Unavailable,
	ErrRPCTimeout:               codes.DeadlineExceeded,
	ErrEtcdKeyNotExist:          codes.NotFound,
	ErrUnavailableInStatus:      codes.Unavailable,
	ErrUnavailableInMode:        codes.Unimplemented,
	ErrNotSupported:             codes.Unimplemented,
	ErrTaskNotFound:             codes.NotFound,
	ErrTaskPendingLimitExceeded: codes.ResourceExhausted,
	ErrJobNotFound:              codes.NotFound,
}

// StatusError is a store error received over gRPC.
type StatusError struct {
	// Code is the store code, from the status's ErrorDetail or, for a status
	// without one (a transport failure), from its gRPC code.
	Code Code
	// GRPC is the gRPC status code.
	GRPC codes.Code
	// Message is the status message (the error text on the master side).
	Message string
}

// Error returns the remote message.
func (e *StatusError) Error() string {
	return "master: " + e.Message
}

// Unwrap returns the store Code, so errors.Is(err, wire.ErrObjectNotFound)
// works across the wire.
func (e *StatusError) Unwrap() error { return e.Code }

// ToStatus turns a master-side error into a gRPC status error carrying the
// store Code as an ErrorDetail. nil stays nil.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	c := CodeOf(err)
	gc, ok := grpcCodes[c]
	if !ok {
		gc = codes.Unknown
	}
	st := status.New(gc, err.Error())
	if withDetail, derr := st.WithDetails(&ErrorDetail{Code: int32(c)}); derr == nil {
		st = withDetail
	}
	return st.Err()
}

// FromStatus turns an error returned by a gRPC call into a store error: a
// *StatusError that unwraps to the store Code. A status without an
// ErrorDetail is a transport failure: DeadlineExceeded becomes RPC_TIMEOUT,
// Unimplemented NOT_SUPPORTED and anything else RPC_FAIL. nil stays nil.
func FromStatus(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		var c Code
		if errors.As(err, &c) {
			return err
		}
		return &StatusError{Code: ErrRPCFail, GRPC: codes.Unknown, Message: err.Error()}
	}
	for _, d := range st.Details() {
		if ed, ok := d.(*ErrorDetail); ok {
			c := Code(ed.GetCode())
			if !c.Known() || c == OK {
				c = ErrInternal
			}
			return &StatusError{Code: c, GRPC: st.Code(), Message: st.Message()}
		}
	}
	c := ErrRPCFail
	switch st.Code() {
	case codes.DeadlineExceeded:
		c = ErrRPCTimeout
	case codes.Unimplemented:
		c = ErrNotSupported
	}
	return &StatusError{Code: c, GRPC: st.Code(), Message: st.Message()}
}
