package abi

import (
	"context"
	"errors"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/metadata"
)

// Mooncake's negative ERR_* codes (include/error.h, specs/mooncake.md §1.3),
// returned by the "resource" calls, plus kvferry's additions (kvferry.h).
const (
	errInvalidArgument   = -1
	errTooManyRequests   = -2
	errAddressNotReg     = -3
	errBatchBusy         = -4
	errDeviceNotFound    = -6
	errAddressOverlapped = -7
	errDNS               = -101
	errSocket            = -102
	errMalformedJSON     = -103
	errRejectHandshake   = -104
	errMetadata          = -200
	errEndpoint          = -201
	errContext           = -202
	errNotImplemented    = -303
	errForked            = -10
	errTimeout           = -400
	errCanceled          = -401
	errTransfer          = -402
	errClosed            = -403
	errInternal          = -999
)

// Mooncake's positive Status::Code values, returned by submitTransfer*,
// getTransferStatus and freeBatchID.
const (
	stOK                    = 0
	stInvalidArgument       = 1
	stTooManyRequests       = 2
	stAddressNotRegistered  = 3
	stBatchBusy             = 4
	stNotSupportedTransport = 8
	stMetadata              = 200
	stContext               = 202
	stNotImplemented        = 999
)

// resourceCode maps an error to the negative code of a resource call. It is
// the one Go -> C translation table for those calls; unknown errors give
// errInvalidArgument's neighbour, the generic metadata code, only when the
// cause is metadata, else -1.
func resourceCode(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, engine.ErrAddressOverlapped):
		return errAddressOverlapped
	case errors.Is(err, engine.ErrAddressNotRegistered):
		return errAddressNotReg
	case errors.Is(err, engine.ErrBatchBusy):
		return errBatchBusy
	case errors.Is(err, engine.ErrTooManyRequests):
		return errTooManyRequests
	case errors.Is(err, engine.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return errTimeout
	case errors.Is(err, engine.ErrCanceled):
		return errCanceled
	case errors.Is(err, engine.ErrClosed):
		return errClosed
	case errors.Is(err, engine.ErrNotSupported), errors.Is(err, engine.ErrNotSupportedTransport):
		return errNotImplemented
	case errors.Is(err, engine.ErrUnknownSegment), errors.Is(err, engine.ErrMetadata),
		errors.Is(err, metadata.ErrNotFound), errors.Is(err, metadata.ErrUnavailable):
		return errMetadata
	case errors.Is(err, errPanic):
		return errInternal
	}
	return errInvalidArgument
}

// statusCode maps an error to the positive Status::Code of the batch calls.
func statusCode(err error) int {
	switch {
	case err == nil:
		return stOK
	case errors.Is(err, engine.ErrTooManyRequests):
		return stTooManyRequests
	case errors.Is(err, engine.ErrAddressNotRegistered):
		return stAddressNotRegistered
	case errors.Is(err, engine.ErrBatchBusy):
		return stBatchBusy
	case errors.Is(err, engine.ErrNotSupportedTransport):
		return stNotSupportedTransport
	case errors.Is(err, engine.ErrMetadata):
		return stMetadata
	case errors.Is(err, engine.ErrClosed), errors.Is(err, errPanic):
		return stContext
	}
	return stInvalidArgument
}

var errPanic = errors.New("internal error (recovered panic)")
