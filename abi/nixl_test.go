package abi

import (
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"
	"unsafe"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/agent/nixl"
	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/transport/samehost"
)

// The NIXL agent's logic is tested in agent/nixl; here are the layouts, the
// code table and the conversion of creation options.

// TestNixlLayout compares the Go mirror of kvferry_nixl_desc_t with the C
// compiler's layout of kvferry.h, and the header's status values with
// nixl_status_t as specs/nixl.md §2.4 gives them.
func TestNixlLayout(t *testing.T) {
	c := nixlCLayout()
	var d nixl.Desc
	assert.Equal(t, int(unsafe.Sizeof(d)), c["sizeof(kvferry_nixl_desc_t)"])
	assert.Equal(t, int(unsafe.Sizeof(d)), 32)
	assert.Equal(t, int(unsafe.Offsetof(d.Len)), c["offsetof(len)"])
	assert.Equal(t, int(unsafe.Offsetof(d.DevID)), c["offsetof(dev_id)"])
	assert.Equal(t, int(unsafe.Offsetof(d.MD)), c["offsetof(md)"])
	assert.Equal(t, c["sizeof(kvferry_nixl_notif_t)"], 32)
	assert.Equal(t, c["offsetof(msg)"], 16)
	spec := map[string]int{
		"IN_PROG": 1, "SUCCESS": 0, "ERR_NOT_POSTED": -1, "ERR_INVALID_PARAM": -2, "ERR_BACKEND": -3,
		"ERR_NOT_FOUND": -4, "ERR_MISMATCH": -5, "ERR_NOT_ALLOWED": -6, "ERR_REPOST_ACTIVE": -7,
		"ERR_UNKNOWN": -8, "ERR_NOT_SUPPORTED": -9, "ERR_REMOTE_DISCONNECT": -10, "ERR_CANCELED": -11,
		"DRAM": 0, "VRAM": 1, "READ": 0, "WRITE": 1,
	}
	for k, v := range spec {
		assert.Equal(t, c[k], v, k)
	}
	goConst := map[string]int{
		"IN_PROG": nixlInProg, "SUCCESS": nixlSuccess, "ERR_NOT_POSTED": nixlErrNotPosted,
		"ERR_INVALID_PARAM": nixlErrInvalidParam, "ERR_BACKEND": nixlErrBackend, "ERR_NOT_FOUND": nixlErrNotFound,
		"ERR_MISMATCH": nixlErrMismatch, "ERR_NOT_ALLOWED": nixlErrNotAllowed,
		"ERR_REPOST_ACTIVE": nixlErrRepostActive, "ERR_UNKNOWN": nixlErrUnknown,
		"ERR_NOT_SUPPORTED": nixlErrNotSupported, "ERR_REMOTE_DISCONNECT": nixlErrRemoteDisconnect,
		"ERR_CANCELED": nixlErrCanceled, "DRAM": int(nixl.DRAM), "VRAM": int(nixl.VRAM), "READ": int(nixl.Read), "WRITE": int(nixl.Write),
	}
	for k, v := range goConst {
		assert.Equal(t, c[k], v, k)
	}
}

// nixlCodeCases is the Go -> nixl_status_t table as known answers: every
// sentinel of agent/nixl, the engine errors the agent passes on, and the
// abi's own.
var nixlCodeCases = []struct {
	err  error
	want int
}{
	{nil, nixlSuccess},
	{nixl.ErrInProgress, nixlInProg},
	{errPanic, nixlErrUnknown},
	{nixl.ErrUnknownAgent, nixlErrNotFound},
	{engine.ErrUnknownSegment, nixlErrNotFound},
	{nixl.ErrMismatch, nixlErrMismatch},
	{nixl.ErrNotAllowed, nixlErrNotAllowed},
	{nixl.ErrRepostActive, nixlErrRepostActive},
	{nixl.ErrNotPosted, nixlErrNotPosted},
	{nixl.ErrNotSupported, nixlErrNotSupported},
	{engine.ErrNotSupported, nixlErrNotSupported},
	{engine.ErrCanceled, nixlErrCanceled},
	{syscall.ECONNREFUSED, nixlErrRemoteDisconnect},
	{syscall.ECONNRESET, nixlErrRemoteDisconnect},
	{syscall.EPIPE, nixlErrRemoteDisconnect},
	{io.EOF, nixlErrRemoteDisconnect},
	{syscall.ESRCH, nixlErrRemoteDisconnect},
	{samehost.ErrPeerGone, nixlErrRemoteDisconnect},
	{&engine.TransferError{Peer: "p", Err: fmt.Errorf("read: %w", io.ErrUnexpectedEOF)}, nixlErrRemoteDisconnect},
	{engine.ErrInvalidArgument, nixlErrInvalidParam},
	{engine.ErrAddressNotRegistered, nixlErrInvalidParam},
	{engine.ErrAddressOverlapped, nixlErrInvalidParam},
	{engine.ErrTooManyRequests, nixlErrInvalidParam},
	{nixl.ErrReleased, nixlErrInvalidParam},
	{errNULL, nixlErrInvalidParam},
	{engine.ErrTimeout, nixlErrBackend},
	{engine.ErrRejected, nixlErrBackend},
	{engine.ErrMetadata, nixlErrBackend},
	{errors.New("something else"), nixlErrBackend},
}

// TestNixlCodes checks the Go -> nixl_status_t table: every sentinel maps to
// its code, wrapped or not, and unknown errors map to ERR_BACKEND.
func TestNixlCodes(t *testing.T) {
	for _, c := range nixlCodeCases {
		name := "nil"
		if c.err != nil {
			name = c.err.Error()
		}
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, nixlCode(c.err), c.want)
			if c.err != nil {
				assert.Equal(t, nixlCode(fmt.Errorf("op %q: %w", "x", c.err)), c.want)
			}
		})
	}
}

// TestNixlCodesBothWays checks the table from the other side: every status
// code of the header is the answer for some error, and every sentinel of
// agent/nixl has its own code (none falls through to ERR_BACKEND).
func TestNixlCodesBothWays(t *testing.T) {
	produced := map[int]bool{}
	for _, c := range nixlCodeCases {
		produced[nixlCode(c.err)] = true
	}
	layout := nixlCLayout()
	for _, k := range []string{"IN_PROG", "SUCCESS", "ERR_NOT_POSTED", "ERR_INVALID_PARAM", "ERR_BACKEND",
		"ERR_NOT_FOUND", "ERR_MISMATCH", "ERR_NOT_ALLOWED", "ERR_REPOST_ACTIVE", "ERR_UNKNOWN",
		"ERR_NOT_SUPPORTED", "ERR_REMOTE_DISCONNECT", "ERR_CANCELED"} {
		assert.Assert(t, produced[layout[k]], "no error maps to KVFERRY_NIXL_%s", k)
	}
	for _, err := range []error{nixl.ErrUnknownAgent, nixl.ErrMismatch, nixl.ErrNotAllowed, nixl.ErrRepostActive,
		nixl.ErrNotSupported, nixl.ErrReleased, nixl.ErrNotPosted, nixl.ErrInProgress} {
		assert.Assert(t, nixlCode(err) != nixlErrBackend, "%v has no code", err)
	}
}

// TestNixlCreateOptions checks the conversion of kvferry_nixl_create's
// options: keys of other backends are ignored, an empty name and malformed
// values of kvferry's keys are refused before an engine starts.
func TestNixlCreateOptions(t *testing.T) {
	live := len(engines.all())
	a, err := newNixlAgent("x", map[string]string{"num_workers": "1", "ucx_error_handling_mode": "none", "local_server_name": "127.0.0.1"}, false)
	assert.NilError(t, err)
	a.close()
	_, err = newNixlAgent("", nil, false)
	assert.Assert(t, errors.Is(err, engine.ErrInvalidArgument), "%v", err)
	for k, v := range map[string]string{"tcp_lanes": "99", "timeout_ms": "soon", "transport": "bogus"} {
		_, err = newNixlAgent("x", map[string]string{k: v}, false)
		assert.Assert(t, err != nil)
		assert.Equal(t, nixlCode(err), nixlErrInvalidParam, "%s=%s: %v", k, v, err)
	}
	assert.Equal(t, len(engines.all()), live, "no engine left behind")
}
