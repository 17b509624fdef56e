package abi

import (
	"errors"
	"fmt"
	"testing"
	"unsafe"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/agent/trtllm"
	"github.com/kvferry/kvferry/engine"
)

// The TensorRT-LLM agent's logic is tested in agent/trtllm; here are the
// layouts and the code table.

// TestTRTLayout compares the Go mirror of kvferry_trtllm_desc_t with the C
// compiler's view and with TensorRT-LLM's MemoryDesc (24 bytes,
// specs/tensorrt-llm.md §1.3), and the header's states and memory types with
// the agent's.
func TestTRTLayout(t *testing.T) {
	c := trtCLayout()
	var d trtllm.Desc
	assert.Equal(t, unsafe.Sizeof(d), c["sizeof(kvferry_trtllm_desc_t)"])
	assert.Equal(t, unsafe.Sizeof(d), uintptr(24))
	assert.Equal(t, unsafe.Offsetof(d.Len), c["offsetof(len)"])
	assert.Equal(t, unsafe.Offsetof(d.DeviceID), c["offsetof(device_id)"])
	assert.Equal(t, c["sizeof(kvferry_trtllm_notif_t)"], uintptr(32))
	assert.Equal(t, c["offsetof(kvferry_trtllm_notif_t.msg)"], uintptr(16))
	assert.Equal(t, c["KVFERRY_XFER_IN_PROGRESS"], uintptr(trtllm.InProgress))
	assert.Equal(t, c["KVFERRY_XFER_SUCCESS"], uintptr(trtllm.Success))
	assert.Equal(t, c["KVFERRY_XFER_FAILURE"], uintptr(trtllm.Failure))
	assert.Equal(t, c["KVFERRY_TRTLLM_DRAM"], uintptr(trtllm.DRAM))
	assert.Equal(t, c["KVFERRY_TRTLLM_VRAM"], uintptr(trtllm.VRAM))
}

// trtCodeCases is the Go -> KVFERRY_ERR_* table of the kvferry_trtllm_*
// calls as known answers: every sentinel of agent/trtllm and the engine
// errors its calls pass on.
var trtCodeCases = []struct {
	err  error
	want int
}{
	{nil, 0},
	{trtllm.ErrNotLoaded, errMetadata},
	{trtllm.ErrQueueFull, errTooManyRequests},
	{trtllm.ErrMemoryType, errNotImplemented},
	{trtllm.ErrHIPMemory, errNotImplemented},
	{engine.ErrInvalidArgument, errInvalidArgument},
	{engine.ErrUnknownBatch, errInvalidArgument},
	{errNULL, errInvalidArgument},
	{engine.ErrAddressNotRegistered, errAddressNotReg},
	{engine.ErrAddressOverlapped, errAddressOverlapped},
	{engine.ErrTooManyRequests, errTooManyRequests},
	{engine.ErrUnknownSegment, errMetadata},
	{engine.ErrMetadata, errMetadata},
	{engine.ErrNotSupported, errNotImplemented},
	{engine.ErrTimeout, errTimeout},
	{engine.ErrCanceled, errCanceled},
	{engine.ErrClosed, errClosed},
	{errPanic, errInternal},
	{errors.New("something else"), errInvalidArgument},
}

// TestTRTCodes checks trtCode: every case maps to its code, wrapped or not.
func TestTRTCodes(t *testing.T) {
	for _, c := range trtCodeCases {
		name := "nil"
		if c.err != nil {
			name = c.err.Error()
		}
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, trtCode(c.err), c.want)
			if c.err != nil {
				assert.Equal(t, trtCode(fmt.Errorf("agent %q: %w", "x", c.err)), c.want)
			}
		})
	}
}

// TestTRTCodesBothWays checks the table from the other side: each sentinel
// of agent/trtllm has its own code (none is the generic -1), which is also
// the code of the engine class it belongs to; and every code the agent's
// calls document is the answer for some error.
func TestTRTCodesBothWays(t *testing.T) {
	for _, c := range []struct{ sentinel, class error }{
		{trtllm.ErrNotLoaded, engine.ErrUnknownSegment},
		{trtllm.ErrQueueFull, engine.ErrTooManyRequests},
		{trtllm.ErrMemoryType, engine.ErrNotSupported},
		{trtllm.ErrHIPMemory, engine.ErrNotSupported},
	} {
		assert.Assert(t, trtCode(c.sentinel) != errInvalidArgument, "%v has no code", c.sentinel)
		assert.Assert(t, errors.Is(c.sentinel, c.class), "%v is not a member of %v", c.sentinel, c.class)
		assert.Equal(t, trtCode(c.sentinel), trtCode(c.class), "%v", c.sentinel)
	}
	produced := map[int]bool{}
	for _, c := range trtCodeCases {
		produced[trtCode(c.err)] = true
	}
	for _, code := range []int{0, errInvalidArgument, errTooManyRequests, errAddressNotReg, errAddressOverlapped,
		errMetadata, errNotImplemented, errTimeout, errCanceled, errClosed, errInternal} {
		assert.Assert(t, produced[code], "no error maps to %d", code)
	}
}
