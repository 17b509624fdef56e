package wire

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"gotest.tools/v3/assert"
)

// TestCodeValues is a known-answer table written from specs/mooncake.md §6.6
// (Mooncake's types.h), not from our constants.
func TestCodeValues(t *testing.T) {
	for _, tc := range []struct {
		name  string
		value int32
	}{
		{"OK", 0}, {"INTERNAL_ERROR", -1}, {"BUFFER_OVERFLOW", -10},
		{"SHARD_INDEX_OUT_OF_RANGE", -100}, {"SEGMENT_NOT_FOUND", -101},
		{"SEGMENT_ALREADY_EXISTS", -102}, {"CLIENT_NOT_FOUND", -103},
		{"NO_AVAILABLE_HANDLE", -200}, {"INVALID_VERSION", -300}, {"INVALID_KEY", -400},
		{"WRITE_FAIL", -500}, {"INVALID_PARAMS", -600}, {"ILLEGAL_CLIENT", -601},
		{"INVALID_WRITE", -700}, {"INVALID_READ", -701}, {"INVALID_REPLICA", -702},
		{"REPLICA_IS_NOT_READY", -703}, {"OBJECT_NOT_FOUND", -704},
		{"OBJECT_ALREADY_EXISTS", -705}, {"OBJECT_HAS_LEASE", -706}, {"LEASE_EXPIRED", -707},
		{"OBJECT_HAS_REPLICATION_TASK", -708}, {"OBJECT_NO_REPLICATION_TASK", -709},
		{"REPLICA_NOT_FOUND", -710}, {"REPLICA_ALREADY_EXISTS", -711}, {"REPLICA_IS_GONE", -712},
		{"REPLICA_NOT_IN_LOCAL_MEMORY", -713}, {"OBJECT_REPLICA_BUSY", -714},
		{"TRANSFER_FAIL", -800}, {"CHECKSUM_MISMATCH", -801}, {"RPC_FAIL", -900},
		{"RPC_TIMEOUT", -901}, {"ETCD_OPERATION_ERROR", -1000}, {"ETCD_KEY_NOT_EXIST", -1001},
		{"ETCD_TRANSACTION_FAIL", -1002}, {"ETCD_CTX_CANCELLED", -1003},
		{"UNAVAILABLE_IN_CURRENT_STATUS", -1010}, {"UNAVAILABLE_IN_CURRENT_MODE", -1011},
		{"NOT_SUPPORTED", -1012}, {"TASK_NOT_FOUND", -1400}, {"TASK_PENDING_LIMIT_EXCEEDED", -1401},
		{"JOB_NOT_FOUND", -1402},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Code(tc.value)
			assert.Assert(t, c.Known())
			assert.Equal(t, c.String(), tc.name)
		})
	}
	assert.Equal(t, len(Codes()), 42)
}

func TestCodeOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want Code
	}{
		{"nil", nil, OK},
		{"bare", ErrObjectNotFound, ErrObjectNotFound},
		{"wrapped", fmt.Errorf("get %q: %w", "k", ErrObjectHasLease), ErrObjectHasLease},
		{"deadline", fmt.Errorf("x: %w", context.DeadlineExceeded), ErrRPCTimeout},
		{"canceled", context.Canceled, ErrRPCFail},
		{"other", errors.New("boom"), ErrInternal},
		{"wrapped OK", fmt.Errorf("x: %w", OK), ErrInternal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, CodeOf(tc.err), tc.want)
		})
	}
}

func TestErrorOf(t *testing.T) {
	assert.NilError(t, ErrorOf(0))
	assert.Equal(t, ErrorOf(-704), error(ErrObjectNotFound))
	err := ErrorOf(-12345)
	assert.Assert(t, errors.Is(err, ErrInternal))
}

// TestStatusRoundTrip checks the translation table in both directions: every
// code survives master → gRPC status → client.
func TestStatusRoundTrip(t *testing.T) {
	for _, c := range Codes() {
		if c == OK {
			continue
		}
		t.Run(c.String(), func(t *testing.T) {
			err := fmt.Errorf("op %q: %w", "key", c)
			st := ToStatus(err)
			s, ok := status.FromError(st)
			assert.Assert(t, ok)
			if want, ok := grpcCodes[c]; ok {
				assert.Equal(t, s.Code(), want)
			} else {
				assert.Equal(t, s.Code(), codes.Unknown)
			}
			back := FromStatus(st)
			assert.Assert(t, errors.Is(back, c), "got %v", back)
			assert.Equal(t, CodeOf(back), c)
			var se *StatusError
			assert.Assert(t, errors.As(back, &se))
			assert.Equal(t, se.Message, err.Error())
		})
	}
	assert.NilError(t, ToStatus(nil))
	assert.NilError(t, FromStatus(nil))
}

func TestFromStatusTransport(t *testing.T) {
	for _, tc := range []struct {
		in   codes.Code
		want Code
	}{
		{codes.Unavailable, ErrRPCFail},
		{codes.DeadlineExceeded, ErrRPCTimeout},
		{codes.Unimplemented, ErrNotSupported},
		{codes.Canceled, ErrRPCFail},
		{codes.Internal, ErrRPCFail},
	} {
		t.Run(tc.in.String(), func(t *testing.T) {
			err := FromStatus(status.Error(tc.in, "x"))
			assert.Equal(t, CodeOf(err), tc.want)
		})
	}
	// A detail with an unknown or zero code is an internal error.
	st, err := status.New(codes.Unknown, "x").WithDetails(&ErrorDetail{Code: -4242})
	assert.NilError(t, err)
	assert.Equal(t, CodeOf(FromStatus(st.Err())), ErrInternal)
	// A plain error (not a status) is an RPC failure.
	assert.Equal(t, CodeOf(FromStatus(errors.New("dial"))), ErrRPCFail)
}
