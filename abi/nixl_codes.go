package abi

import (
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/kvferry/kvferry/agent/nixl"
	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/transport/samehost"
)

// NIXL status codes (nixl_status_t, specs/nixl.md §2.4; kvferry.h
// KVFERRY_NIXL_*).
const (
	nixlInProg              = 1
	nixlSuccess             = 0
	nixlErrNotPosted        = -1
	nixlErrInvalidParam     = -2
	nixlErrBackend          = -3
	nixlErrNotFound         = -4
	nixlErrMismatch         = -5
	nixlErrNotAllowed       = -6
	nixlErrRepostActive     = -7
	nixlErrUnknown          = -8
	nixlErrNotSupported     = -9
	nixlErrRemoteDisconnect = -10
	nixlErrCanceled         = -11
)

// nixlCode maps an error of agent/nixl (or of the engine under it) to a
// nixl_status_t; the one Go -> NIXL table. Unknown errors are ERR_BACKEND.
func nixlCode(err error) int {
	switch {
	case err == nil:
		return nixlSuccess
	case errors.Is(err, nixl.ErrInProgress):
		return nixlInProg
	case errors.Is(err, errPanic):
		return nixlErrUnknown
	case errors.Is(err, nixl.ErrUnknownAgent), errors.Is(err, engine.ErrUnknownSegment):
		return nixlErrNotFound
	case errors.Is(err, nixl.ErrMismatch):
		return nixlErrMismatch
	case errors.Is(err, nixl.ErrNotAllowed):
		return nixlErrNotAllowed
	case errors.Is(err, nixl.ErrRepostActive):
		return nixlErrRepostActive
	case errors.Is(err, nixl.ErrNotPosted):
		return nixlErrNotPosted
	case errors.Is(err, nixl.ErrNotSupported), errors.Is(err, engine.ErrNotSupported):
		return nixlErrNotSupported
	case errors.Is(err, engine.ErrCanceled):
		return nixlErrCanceled
	case disconnected(err):
		return nixlErrRemoteDisconnect
	case errors.Is(err, engine.ErrInvalidArgument), errors.Is(err, engine.ErrAddressNotRegistered),
		errors.Is(err, engine.ErrAddressOverlapped), errors.Is(err, engine.ErrTooManyRequests),
		errors.Is(err, nixl.ErrReleased), errors.Is(err, errNULL):
		return nixlErrInvalidParam
	}
	return nixlErrBackend
}

// disconnected reports whether err means the peer went away: its
// connections were refused, reset or closed, or its process is gone (the
// same-host transports).
func disconnected(err error) bool {
	for _, target := range []error{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.EPIPE,
		syscall.ECONNABORTED, syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.ESRCH,
		io.EOF, io.ErrUnexpectedEOF, net.ErrClosed, samehost.ErrPeerGone} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}
