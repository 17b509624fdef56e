package engine

import (
	"errors"
	"fmt"
)

// Sentinel errors. The C ABI maps each to Mooncake's codes (abi/codes.go).
var (
	// ErrInvalidArgument: a bad handle, id, opcode, range or string.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrTooManyRequests: a submit would exceed the batch capacity.
	ErrTooManyRequests = errors.New("batch capacity exceeded")
	// ErrAddressNotRegistered: an address is outside registered memory.
	ErrAddressNotRegistered = errors.New("address not registered")
	// ErrBatchBusy: a batch still has tasks not observed terminal.
	ErrBatchBusy = errors.New("batch busy")
	// ErrAddressOverlapped: a registration overlaps an existing one.
	ErrAddressOverlapped = errors.New("address overlapped")
	// ErrNotSupportedTransport: no installed transport reaches the target.
	ErrNotSupportedTransport = errors.New("transport not supported")
	// ErrUnknownSegment: no segment with that id or name.
	ErrUnknownSegment = errors.New("unknown segment")
	// ErrUnknownBatch: no live batch with that id.
	ErrUnknownBatch = errors.New("unknown batch")
	// ErrMetadata: the metadata service failed or a peer answered badly.
	ErrMetadata = errors.New("metadata error")
	// ErrRejected: the peer refused a request (outside its registered memory).
	ErrRejected = errors.New("request rejected by peer")
	// ErrCanceled: the batch was canceled.
	ErrCanceled = errors.New("canceled")
	// ErrTimeout: a deadline passed.
	ErrTimeout = errors.New("timeout")
	// ErrClosed: the engine was closed.
	ErrClosed = errors.New("engine closed")
	// ErrNotSupported: hardware or a system library is absent.
	ErrNotSupported = errors.New("not supported")
	// ErrPeerGone: the connection to a peer was lost or could not be made.
	ErrPeerGone = errors.New("connection lost")
	// ErrUnauthenticated: a peer failed (or refused) authentication.
	ErrUnauthenticated = errors.New("peer not authenticated")
)

// TransferError describes why one slice of a transfer failed.
type TransferError struct {
	Op        OpCode
	Peer      string // segment name
	Transport string
	Addr      uint64 // remote address
	Length    uint64
	Err       error
}

func (e *TransferError) Error() string {
	return fmt.Sprintf("%s %d bytes at %#x on segment %q over %s: %v", e.Op, e.Length, e.Addr, e.Peer, e.Transport, e.Err)
}

// Unwrap returns the cause.
func (e *TransferError) Unwrap() error { return e.Err }
