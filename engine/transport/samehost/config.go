package samehost

import (
	"time"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/gpu"
)

// Names of the transports.
const (
	// NameCMA is the cross-memory-attach transport (process_vm_readv/writev).
	NameCMA = "cma"
	// NameShm is the shared-memory staging transport.
	NameShm = "shm"
)

// Defaults.
const (
	// DefaultWorkers is the number of copy goroutines of each transport.
	DefaultWorkers = 2
	// DefaultCMASliceSize is the slice size of cma: large requests are cut
	// so that the workers copy them in parallel.
	DefaultCMASliceSize = 4 << 20
	// DefaultCMAInlineBytes is the largest submission that the submitting
	// goroutine copies itself over cma.
	DefaultCMAInlineBytes = 2 << 20
	// DefaultCMAInlineSlots is how many goroutines may copy inline at once
	// over cma.
	DefaultCMAInlineSlots = 4
	// DefaultShmChunkBytes is the size of one staging chunk of shm.
	DefaultShmChunkBytes = 2 << 20
	// DefaultShmChunks is the number of staging chunks per shm session.
	DefaultShmChunks = 8
	// DefaultMaxSessions caps the sessions an owner serves at once.
	DefaultMaxSessions = 256

	maxChunks     = 64
	minChunkBytes = 64 << 10
	maxChunkBytes = 64 << 20
	// iovMax is the kernel's limit of iovecs per process_vm_* call.
	iovMax = 1024
	// inlineMaxSlices caps the slices of a submission that cma copies
	// inline (one process_vm_* call per direction).
	inlineMaxSlices = iovMax
	// callBytes is about the most one process_vm_* call moves, so that an
	// owner's death is noticed after at most this much copying.
	callBytes = 16 << 20
)

// Config configures the same-host transports. The zero value works.
type Config struct {
	// Workers is the number of copy goroutines of each transport
	// (default 2, at most 64; KVFERRY_SAMEHOST_WORKERS).
	Workers int
	// CMASliceSize is the slice size of cma (default 4 MiB).
	CMASliceSize uint64
	// CMAInlineBytes is the largest submission (its slices' bytes
	// together, at most 1024 slices) that cma copies in the submitting
	// goroutine instead of handing it to a worker, which costs two thread
	// switches (default 2 MiB; a negative value turns the inline path off;
	// KVFERRY_CMA_INLINE_BYTES, where 0 turns it off).
	CMAInlineBytes int64
	// CMAInlineSlots is how many goroutines may copy inline at once; each
	// holds an epoch slot of its own in every cma session, beside the
	// workers' (default 4, at most 64 minus Workers; a negative value turns
	// the inline path off). A submission finding every inline slot busy
	// goes to the workers.
	CMAInlineSlots int
	// ShmChunkBytes is the staging chunk size an shm initiator asks for
	// (default 2 MiB, 64 KiB - 64 MiB; KVFERRY_SHM_CHUNK_BYTES).
	ShmChunkBytes uint64
	// ShmChunks is the number of staging chunks an shm initiator asks for
	// (default 8, at most 64; KVFERRY_SHM_CHUNKS). Each shm session keeps
	// ShmChunks*ShmChunkBytes of shared memory resident once used.
	ShmChunks int
	// Timeout bounds a wait for the owner's answer, and how long an owner
	// waits for cma initiators to leave an old registration epoch
	// (default: the engine's TransferTimeout).
	Timeout time.Duration
	// MaxSessions caps the sessions an owner serves at once (default 256).
	MaxSessions int
	// AllowAnyPtracer makes the owner call prctl(PR_SET_PTRACER,
	// PR_SET_PTRACER_ANY), so that cma works between sibling processes
	// under yama ptrace_scope=1. It lets any process of the same user
	// ptrace this one; off by default (KVFERRY_CMA_ALLOW_PTRACER=1).
	AllowAnyPtracer bool
	// NoMap turns off mapping: an owner offers no memfd-backed memory to
	// its cma initiators, and an initiator asks for none, copying every
	// byte with process_vm_readv/writev (KVFERRY_CMA_MAP=0; a store client
	// then lends anonymous memory).
	NoMap bool
	// NoNotifyRing turns off notification rings (notify.go): an owner
	// offers none and an initiator asks for none, so every notification
	// goes by the notify RPC (KVFERRY_NOTIFY_RING=0).
	NoNotifyRing bool
	// MooncakeNVLinkIPC says that peers of Mooncake's nvlink transport
	// publish legacy IPC handles even where every GPU supports fabric
	// handles, as Mooncake does with MC_USE_NVLINK_IPC set.
	MooncakeNVLinkIPC bool
	// MooncakeProtocol is the protocol nvlink publishes in the segment
	// descriptor when no transport described before it set one and a
	// network transport after it does not replace it (rdma does, tcp does
	// not): "hip" (Mooncake's initialize protocol "hip", what a ROCm
	// build of Mooncake publishes) makes a same-host Mooncake hip peer
	// choose its hip transport for our segment and map the buffers' IPC
	// handles. Empty: nvlink publishes none.
	MooncakeProtocol string
	// GPU moves device memory: shm stages it through the session's
	// shared memory on either side, nvlink maps the owner's device memory
	// (CUDA IPC). Nil: host memory only.
	GPU *gpu.Runtime
}

func (c Config) withDefaults(e *engine.Engine) Config {
	if c.Workers <= 0 {
		c.Workers = DefaultWorkers
	}
	c.Workers = min(c.Workers, maxSlots)
	if c.CMASliceSize == 0 {
		c.CMASliceSize = DefaultCMASliceSize
	}
	if c.CMAInlineBytes == 0 {
		c.CMAInlineBytes = DefaultCMAInlineBytes
	}
	if c.CMAInlineSlots == 0 {
		c.CMAInlineSlots = DefaultCMAInlineSlots
	}
	if c.CMAInlineBytes < 0 || c.CMAInlineSlots < 0 {
		c.CMAInlineBytes, c.CMAInlineSlots = -1, -1
	}
	c.CMAInlineSlots = min(c.CMAInlineSlots, maxSlots-c.Workers)
	if c.ShmChunkBytes == 0 {
		c.ShmChunkBytes = DefaultShmChunkBytes
	}
	c.ShmChunkBytes = clampChunkBytes(c.ShmChunkBytes)
	if c.ShmChunks <= 0 {
		c.ShmChunks = DefaultShmChunks
	}
	c.ShmChunks = min(c.ShmChunks, maxChunks)
	if c.Timeout <= 0 {
		c.Timeout = e.Config().TransferTimeout
	}
	if c.MaxSessions <= 0 {
		c.MaxSessions = DefaultMaxSessions
	}
	return c
}

// inlineSlots returns the number of inline copiers of cma (0 when off).
func (c Config) inlineSlots() int { return max(c.CMAInlineSlots, 0) }

// cmaSlots returns the epoch slots a cma initiator asks of every owner:
// one per worker, then one per inline copier.
func (c Config) cmaSlots() int { return c.Workers + c.inlineSlots() }

// clampChunkBytes keeps a chunk size within limits, in whole pages.
func clampChunkBytes(n uint64) uint64 {
	n = min(max(n, minChunkBytes), maxChunkBytes)
	return n &^ 4095
}
