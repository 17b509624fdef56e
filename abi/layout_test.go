package abi

import (
	"testing"
	"unsafe"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
)

// TestLayout compares the Go mirror of struct transfer_request with the C
// compiler's layout of our header, and both with Mooncake's (40 bytes).
func TestLayout(t *testing.T) {
	c := cLayout()
	var r cTransferRequest
	assert.Equal(t, unsafe.Sizeof(r), c["sizeof(transfer_request)"])
	assert.Equal(t, unsafe.Sizeof(r), uintptr(40))
	assert.Equal(t, unsafe.Offsetof(r.Source), c["offsetof(source)"])
	assert.Equal(t, unsafe.Offsetof(r.TargetID), c["offsetof(target_id)"])
	assert.Equal(t, unsafe.Offsetof(r.TargetOffset), c["offsetof(target_offset)"])
	assert.Equal(t, unsafe.Offsetof(r.Length), c["offsetof(length)"])
	assert.Equal(t, c["sizeof(transfer_status)"], uintptr(16))
	assert.Equal(t, c["sizeof(notify_msg)"], uintptr(16))
	assert.Equal(t, c["sizeof(buffer_entry)"], uintptr(16))
}

// TestCodes checks the Go -> C translation tables in both directions: every
// sentinel has its Mooncake code, and codes stay distinct.
func TestCodes(t *testing.T) {
	resource := map[error]int{
		nil:                            0,
		engine.ErrInvalidArgument:      -1,
		engine.ErrTooManyRequests:      -2,
		engine.ErrAddressNotRegistered: -3,
		engine.ErrBatchBusy:            -4,
		engine.ErrAddressOverlapped:    -7,
		engine.ErrMetadata:             -200,
		engine.ErrUnknownSegment:       -200,
		engine.ErrTimeout:              -400,
		engine.ErrCanceled:             -401,
		engine.ErrClosed:               -403,
		engine.ErrNotSupported:         -303,
		errPanic:                       -999,
		engine.ErrUnknownBatch:         -1,
		engine.ErrRejected:             -1,
	}
	for err, want := range resource {
		assert.Equal(t, resourceCode(err), want, "%v", err)
	}
	status := map[error]int{
		nil:                             0,
		engine.ErrInvalidArgument:       1,
		engine.ErrUnknownBatch:          1,
		engine.ErrTooManyRequests:       2,
		engine.ErrAddressNotRegistered:  3,
		engine.ErrBatchBusy:             4,
		engine.ErrNotSupportedTransport: 8,
		engine.ErrMetadata:              200,
	}
	for err, want := range status {
		assert.Equal(t, statusCode(err), want, "%v", err)
	}
}
