package wire

import (
	"context"
	"errors"
	"fmt"
)

// Code is a Mooncake store ErrorCode: 0 for success, negative for failures
// (specs/mooncake.md §6.6). A non-zero Code is an error; OK is never used as
// one (CodeOf(nil) is OK).
type Code int32

// Store error codes, with Mooncake's values (mooncake-store types.h).
const (
	OK                          Code = 0
	ErrInternal                 Code = -1
	ErrBufferOverflow           Code = -10
	ErrShardIndexOutOfRange     Code = -100
	ErrSegmentNotFound          Code = -101
	ErrSegmentAlreadyExists     Code = -102
	ErrClientNotFound           Code = -103
	ErrNoAvailableHandle        Code = -200
	ErrInvalidVersion           Code = -300
	ErrInvalidKey               Code = -400
	ErrWriteFail                Code = -500
	ErrInvalidParams            Code = -600
	ErrIllegalClient            Code = -601
	ErrInvalidWrite             Code = -700
	ErrInvalidRead              Code = -701
	ErrInvalidReplica           Code = -702
	ErrReplicaIsNotReady        Code = -703
	ErrObjectNotFound           Code = -704
	ErrObjectAlreadyExists      Code = -705
	ErrObjectHasLease           Code = -706
	ErrLeaseExpired             Code = -707
	ErrObjectHasReplicationTask Code = -708
	ErrObjectNoReplicationTask  Code = -709
	ErrReplicaNotFound          Code = -710
	ErrReplicaAlreadyExists     Code = -711
	ErrReplicaIsGone            Code = -712
	ErrReplicaNotInLocalMemory  Code = -713
	ErrObjectReplicaBusy        Code = -714
	ErrTransferFail             Code = -800
	ErrChecksumMismatch         Code = -801
	ErrRPCFail                  Code = -900
	ErrRPCTimeout               Code = -901
	ErrEtcdOperation            Code = -1000
	ErrEtcdKeyNotExist          Code = -1001
	ErrEtcdTransactionFail      Code = -1002
	ErrEtcdCtxCancelled         Code = -1003
	ErrUnavailableInStatus      Code = -1010
	ErrUnavailableInMode        Code = -1011
	ErrNotSupported             Code = -1012
	ErrTaskNotFound             Code = -1400
	ErrTaskPendingLimitExceeded Code = -1401
	ErrJobNotFound              Code = -1402
)

// codeNames holds Mooncake's name of every Code this package knows.
var codeNames = map[Code]string{
	OK:                          "OK",
	ErrInternal:                 "INTERNAL_ERROR",
	ErrBufferOverflow:           "BUFFER_OVERFLOW",
	ErrShardIndexOutOfRange:     "SHARD_INDEX_OUT_OF_RANGE",
	ErrSegmentNotFound:          "SEGMENT_NOT_FOUND",
	ErrSegmentAlreadyExists:     "SEGMENT_ALREADY_EXISTS",
	ErrClientNotFound:           "CLIENT_NOT_FOUND",
	ErrNoAvailableHandle:        "NO_AVAILABLE_HANDLE",
	ErrInvalidVersion:           "INVALID_VERSION",
	ErrInvalidKey:               "INVALID_KEY",
	ErrWriteFail:                "WRITE_FAIL",
	ErrInvalidParams:            "INVALID_PARAMS",
	ErrIllegalClient:            "ILLEGAL_CLIENT",
	ErrInvalidWrite:             "INVALID_WRITE",
	ErrInvalidRead:              "INVALID_READ",
	ErrInvalidReplica:           "INVALID_REPLICA",
	ErrReplicaIsNotReady:        "REPLICA_IS_NOT_READY",
	ErrObjectNotFound:           "OBJECT_NOT_FOUND",
	ErrObjectAlreadyExists:      "OBJECT_ALREADY_EXISTS",
	ErrObjectHasLease:           "OBJECT_HAS_LEASE",
	ErrLeaseExpired:             "LEASE_EXPIRED",
	ErrObjectHasReplicationTask: "OBJECT_HAS_REPLICATION_TASK",
	ErrObjectNoReplicationTask:  "OBJECT_NO_REPLICATION_TASK",
	ErrReplicaNotFound:          "REPLICA_NOT_FOUND",
	ErrReplicaAlreadyExists:     "REPLICA_ALREADY_EXISTS",
	ErrReplicaIsGone:            "REPLICA_IS_GONE",
	ErrReplicaNotInLocalMemory:  "REPLICA_NOT_IN_LOCAL_MEMORY",
	ErrObjectReplicaBusy:        "OBJECT_REPLICA_BUSY",
	ErrTransferFail:             "TRANSFER_FAIL",
	ErrChecksumMismatch:         "CHECKSUM_MISMATCH",
	ErrRPCFail:                  "RPC_FAIL",
	ErrRPCTimeout:               "RPC_TIMEOUT",
	ErrEtcdOperation:            "ETCD_OPERATION_ERROR",
	ErrEtcdKeyNotExist:          "ETCD_KEY_NOT_EXIST",
	ErrEtcdTransactionFail:      "ETCD_TRANSACTION_FAIL",
	ErrEtcdCtxCancelled:         "ETCD_CTX_CANCELLED",
	ErrUnavailableInStatus:      "UNAVAILABLE_IN_CURRENT_STATUS",
	ErrUnavailableInMode:        "UNAVAILABLE_IN_CURRENT_MODE",
	ErrNotSupported:             "NOT_SUPPORTED",
	ErrTaskNotFound:             "TASK_NOT_FOUND",
	ErrTaskPendingLimitExceeded: "TASK_PENDING_LIMIT_EXCEEDED",
	ErrJobNotFound:              "JOB_NOT_FOUND",
}

// Codes returns every Code this package knows, OK included, in no order.
func Codes() []Code {
	out := make([]Code, 0, len(codeNames))
	for c := range codeNames {
		out = append(out, c)
	}
	return out
}

// Known reports whether c is a code this package knows.
func (c Code) Known() bool {
	_, ok := codeNames[c]
	return ok
}

// String returns Mooncake's name of the code, e.g. "OBJECT_NOT_FOUND", or
// "UNKNOWN(-n)".
func (c Code) String() string {
	if n, ok := codeNames[c]; ok {
		return n
	}
	return fmt.Sprintf("UNKNOWN(%d)", int32(c))
}

// Error returns the Mooncake name and value, e.g. "OBJECT_NOT_FOUND (-704)".
func (c Code) Error() string {
	return fmt.Sprintf("%s (%d)", c.String(), int32(c))
}

// CodeOf returns the store Code an error carries: OK for nil, the wrapped
// Code if there is one, RPC_TIMEOUT for a passed deadline, RPC_FAIL for a
// cancelled context, and INTERNAL_ERROR for anything else.
func CodeOf(err error) Code {
	if err == nil {
		return OK
	}
	var c Code
	if errors.As(err, &c) {
		if c == OK {
			return ErrInternal
		}
		return c
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return ErrRPCTimeout
	case errors.Is(err, context.Canceled):
		return ErrRPCFail
	}
	return ErrInternal
}

// ErrorOf returns the error for an integer code received from a peer: nil for
// 0, the Code for a known negative value and ErrInternal wrapped with the
// value for anything else.
func ErrorOf(code int32) error {
	c := Code(code)
	switch {
	case c == OK:
		return nil
	case c.Known():
		return c
	}
	return fmt.Errorf("unknown store error code %d: %w", code, ErrInternal)
}
