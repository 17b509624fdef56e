package samehost

import (
	"time"

	"github.com/kvferry/kvferry/engine"
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
}

func (c Config) withDefaults(e *engine.Engine) Config {
	if c.Workers <= 0 {
		c.Workers = DefaultWorkers
	}
	c.Workers = min(c.Workers, maxSlots)
	if c.CMASliceSize == 0 {
		c.CMASliceSize = DefaultCMASliceSize
	}
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

// clampChunkBytes keeps a chunk size within limits, in whole pages.
func clampChunkBytes(n uint64) uint64 {
	n = min(max(n, minChunkBytes), maxChunkBytes)
	return n &^ 4095
}
