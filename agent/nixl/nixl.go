package nixl

import (
	"errors"
	"structs"

	"github.com/kvferry/kvferry/engine"
)

// MemType is a NIXL memory type (nixl_mem_t, specs/nixl.md §2.4).
type MemType int

// Memory types; the values are NIXL's.
const (
	// DRAM is host memory.
	DRAM MemType = 0
	// VRAM is GPU memory: registered at location "cuda:<devId>" (the
	// engine classifies it with the process's GPU runtime, CUDA or HIP, as
	// a ROCm NIXL hands HIP memory over as VRAM_SEG; without one it is
	// refused with engine.ErrNotSupported).
	VRAM MemType = 1
)

// Op is a NIXL transfer operation (nixl_xfer_op_t, specs/nixl.md §2.4).
type Op int

// Operations; the values are NIXL's.
const (
	// Read copies the remote descriptors into the local ones.
	Read Op = 0
	// Write copies the local descriptors into the remote ones.
	Write Op = 1
)

// engineOp returns the engine opcode of a valid op.
func (o Op) engineOp() engine.OpCode {
	if o == Read {
		return engine.OpRead
	}
	return engine.OpWrite
}

// MD is the handle of a memory descriptor: a local registration (Register)
// or a loaded buffer of an agent (LoadRemoteMD, LoadLocalMD). It is an
// opaque, never reused value, never 0.
type MD uint64

// Xfer is the handle of a reusable transfer request (PrepXfer). It is an
// opaque, never reused value, never 0.
type Xfer uint64

// Desc is one buffer of a transfer: Len bytes at Addr on device DevID,
// inside the memory descriptor MD (0: look the range up instead). It mirrors
// kvferry_nixl_desc_t in kvferry.h, field for field (layout tested in abi/).
type Desc struct {
	_ structs.HostLayout
	// Addr is the buffer's address (in the remote agent's memory for a
	// remote descriptor).
	Addr uint64
	// Len is the buffer's length in bytes.
	Len uint64
	// DevID is NIXL's device id of the buffer.
	DevID uint64
	// MD is the memory descriptor the buffer lies in, or 0.
	MD MD
}

// Sentinel errors of the agent. abi/ maps each (and the engine's) to a
// nixl_status_t; every error an Agent returns wraps one of them or an
// engine sentinel.
var (
	// ErrUnknownAgent: no agent of that name was loaded (or it was
	// disconnected). NIXL_ERR_NOT_FOUND.
	ErrUnknownAgent = errors.New("unknown agent")
	// ErrMismatch: a buffer description disagrees with its public data or
	// the agent's connection info. NIXL_ERR_MISMATCH.
	ErrMismatch = errors.New("metadata mismatch")
	// ErrNotAllowed: an agent's connection info changed, or the agent's own
	// name came with another agent's info. NIXL_ERR_NOT_ALLOWED.
	ErrNotAllowed = errors.New("not allowed")
	// ErrRepostActive: a request was posted again while its previous post
	// still runs. NIXL_ERR_REPOST_ACTIVE.
	ErrRepostActive = errors.New("previous post still in progress")
	// ErrNotSupported: a memory type this build does not handle.
	// NIXL_ERR_NOT_SUPPORTED.
	ErrNotSupported = errors.New("not supported")
	// ErrReleased: the request was released. NIXL_ERR_INVALID_PARAM.
	ErrReleased = errors.New("request released")
	// ErrNotPosted: Check of a request never posted. NIXL_ERR_NOT_POSTED.
	ErrNotPosted = errors.New("request not posted")
	// ErrInProgress: Check of a request whose post still runs; not a
	// failure. NIXL_IN_PROG.
	ErrInProgress = errors.New("transfer in progress")
)

// BackendName is the name NIXL knows this backend by: the NAME of its
// plugin file libplugin_NAME.so.
const BackendName = "KVFERRY"
