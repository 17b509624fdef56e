package trtllm

import (
	"fmt"
	"structs"
	"time"

	"github.com/kvferry/kvferry/engine"
)

// State is a transfer state; the values are TensorRT-LLM's TransferState
// (kvferry.h KVFERRY_XFER_*).
type State int

// Transfer states.
const (
	// InProgress: the transfer still runs.
	InProgress State = 0
	// Success: every byte arrived.
	Success State = 1
	// Failure: the transfer failed, was canceled, or is unknown.
	Failure State = 2
)

// MemType is a TensorRT-LLM memory type (MemoryType, kvferry.h
// KVFERRY_TRTLLM_*).
type MemType int

// Memory types.
const (
	// DRAM is host memory.
	DRAM MemType = 0
	// VRAM is GPU memory, registered at location "cuda:<DeviceID>": the
	// engine classifies it with the CUDA driver (without one it is refused
	// with engine.ErrNotSupported; memory the driver knows as host memory
	// with engine.ErrInvalidArgument).
	VRAM MemType = 1
)

// String returns TensorRT-LLM's name of the type ("kDRAM", ...).
func (t MemType) String() string {
	switch t {
	case DRAM:
		return "kDRAM"
	case VRAM:
		return "kVRAM"
	case 2:
		return "kBLK"
	case 3:
		return "kOBJ"
	case 4:
		return "kFILE"
	}
	return "unknown"
}

// Desc is one memory range: Len bytes at Addr on device DeviceID. It
// mirrors kvferry_trtllm_desc_t and TensorRT-LLM's MemoryDesc, field for
// field (24 bytes; layout tested in abi/).
type Desc struct {
	_ structs.HostLayout
	// Addr is the range's address (in the remote agent's memory for a
	// remote range).
	Addr uint64
	// Len is the range's length in bytes.
	Len uint64
	// DeviceID is the device the memory belongs to.
	DeviceID uint32
	_        uint32 // reserved
}

// MaxQueued bounds the messages waiting for agents not loaded yet.
const MaxQueued = 4096

// DefaultNotifyWait is how long Notifications waits for a message when none
// is queued (option notify_wait_us, KVFERRY_TRTLLM_NOTIFY_WAIT_US).
// TensorRT-LLM calls getNotifiedSyncMessages in tight loops from several
// threads (specs/tensorrt-llm.md §4.2); waiting on arrival instead of
// returning at once keeps those threads off the CPU and adds no latency,
// since an arriving message ends the wait.
const DefaultNotifyWait = time.Millisecond

// Sentinel errors of the agent. Each belongs to an engine error class (it
// matches that sentinel under errors.Is too); abi/ maps them to KVFERRY_ERR_*
// codes. Other failures wrap engine sentinels.
var (
	// ErrNotLoaded: a transfer to an agent that was not loaded (or was
	// invalidated). A member of engine.ErrUnknownSegment.
	ErrNotLoaded = fmt.Errorf("not loaded: %w", engine.ErrUnknownSegment)
	// ErrQueueFull: MaxQueued messages already wait for agents not loaded.
	// A member of engine.ErrTooManyRequests.
	ErrQueueFull = fmt.Errorf("message queue full: %w", engine.ErrTooManyRequests)
	// ErrMemoryType: memory other than host (kDRAM) and GPU (kVRAM)
	// memory. A member of engine.ErrNotSupported.
	ErrMemoryType = fmt.Errorf("only host (kDRAM) and GPU (kVRAM) memory are supported: %w", engine.ErrNotSupported)
	// ErrHIPMemory: kVRAM in a process whose GPU runtime is HIP (ROCm).
	// TensorRT-LLM runs on CUDA only, so its agent takes CUDA memory only
	// (the engine, the C API, Python and NIXL take HIP memory). A member
	// of engine.ErrNotSupported.
	ErrHIPMemory = fmt.Errorf("kVRAM is CUDA memory only (TensorRT-LLM is CUDA-only), and this process's GPU runtime is HIP: %w", engine.ErrNotSupported)
)
