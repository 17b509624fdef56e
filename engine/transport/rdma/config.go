package rdma

import (
	"io/fs"
	"os"
	"time"

	"github.com/kvferry/kvferry/engine/gpu"
	"github.com/kvferry/kvferry/engine/transport/rdma/ibv"
)

// Mooncake's defaults (specs/mooncake.md §2.6; Mooncake's config.h and
// rdma_endpoint.cpp): resources, addressing and QP timers.
const (
	DefaultPort         = 1
	DefaultQPsPerEP     = 2
	DefaultMaxWR        = 256
	DefaultMaxSGE       = 4
	DefaultMaxInline    = 64
	DefaultMaxCQE       = 4096
	DefaultSliceSize    = 64 << 10
	DefaultRetryCount   = 9
	DefaultMaxEPPerCtx  = 65536
	DefaultSignalEvery  = 16
	DefaultPollSpin     = 50 * time.Microsecond
	DefaultHandshakeTTL = 10 * time.Second
	DefaultAutoGIDRetry = 2

	// QP attributes Mooncake sets (rdma_endpoint.cpp): RTR hop limit, ACK
	// timeout exponent, retry counts, RNR timer, outstanding reads.
	qpHopLimit    = 16
	qpTimeout     = 14
	qpRetryCount  = 7
	qpRNRRetry    = 7
	qpMinRNRTimer = 12
	qpMaxRdAtomic = 16
)

// Config configures the RDMA transport. The zero value works (Mooncake's
// defaults); ConfigFromEnv fills it from the MC_* variables.
type Config struct {
	// Library is the libibverbs to open (KVFERRY_IBVERBS_LIB; default
	// libibverbs.so.1).
	Library string
	// Devices, when set, limits the NICs used to these (Mooncake's
	// MC_TE_FILTERS and the Python device_name list): RDMA device names
	// (mlx5_0), and, beyond Mooncake, network interfaces (ens1f0, ib0)
	// and PCI addresses (0000:18:00.0), resolved through Class.
	Devices []string
	// Matrix is a NIC priority matrix in Mooncake's JSON form
	// (installTransport("rdma", args[0]); MC_CUSTOM_TOPO_JSON); empty means
	// discover it from sysfs.
	Matrix string
	// SysFS is /sys (tests give fake trees); default os.DirFS("/sys").
	SysFS fs.FS
	// Class maps network interfaces and PCI functions to RDMA devices and
	// reads the ports' counters; default RdmamapClass{} (this host's
	// /sys, through rdmamap), or SysfsClass over SysFS when SysFS is set.
	Class SysClass
	// GPUs lists the GPUs for the "cuda:N" rows of a discovered matrix;
	// nil reads NVIDIA devices from sysfs.
	GPUs []GPU
	// Port is the IB port (MC_IB_PORT, default 1).
	Port uint8
	// GIDIndex is the GID index when FixedGID is set (MC_GID_INDEX /
	// NCCL_IB_GID_INDEX); otherwise one is selected as Mooncake's auto
	// selection does (routable RoCE v2 or IB GIDs with a network device
	// first, never a null GID).
	GIDIndex int
	FixedGID bool
	// MTU caps the path MTU (MC_MTU: 512, 1024, 2048, 4096; default 4096).
	MTU ibv.MTU
	// QPsPerEP is the QPs per endpoint (MC_NUM_QP_PER_EP, default 2).
	QPsPerEP int
	// MaxWR, MaxSGE, MaxInline size each QP (MC_MAX_WR 256, MC_MAX_SGE 4,
	// MC_MAX_INLINE 64; a negative MaxInline asks for none).
	MaxWR, MaxSGE, MaxInline int
	// MaxCQE is the CQ size per NIC (MC_MAX_CQE_PER_CTX, default 4096); it
	// also bounds the work requests in flight on a NIC.
	MaxCQE int
	// MaxEndpoints bounds the endpoints per NIC (MC_MAX_EP_PER_CTX).
	MaxEndpoints int
	// TrafficClass and ServiceLevel set the GRH traffic class and the SL
	// (MC_IB_TC, MC_IB_SL); -1 leaves the default.
	TrafficClass, ServiceLevel int
	// PKeyIndex is the partition key index (MC_PKEY_INDEX, default 0).
	PKeyIndex uint16
	// SliceSize is the size requests are cut into and striped over the NICs
	// (MC_SLICE_SIZE, default 64 KiB).
	SliceSize uint64
	// RetryCount bounds how often a failed slice is retried on another
	// path (MC_RETRY_CNT, default 9).
	RetryCount int
	// RoundRobin picks NICs round-robin instead of at random
	// (MC_PATH_ROUNDROBIN).
	RoundRobin bool
	// ServerName is the RDMA-reachable host (MC_RDMA_BIND_ADDRESS); the NIC
	// paths and rdma_server_name then use it instead of the segment name.
	ServerName string
	// SignalEvery asks a completion for every n-th work request of a chain
	// besides its last one (selective signalling; default 16).
	SignalEvery int
	// PollSpin is how long a NIC's completion poller spins on an empty CQ
	// while work is in flight before it parks on the completion channel
	// (KVFERRY_RDMA_POLL_SPIN_US, default 50 µs; 0 parks at once).
	PollSpin time.Duration
	// HandshakeTimeout bounds one Connection exchange with a peer (default
	// 10 s, also Mooncake's wait for a ready ACK).
	HandshakeTimeout time.Duration
	// GPU is the process's GPU runtime (engine/gpu), which exports device
	// memory as dma-bufs for the NICs; nil: GPU memory is not registered
	// with the NICs (other transports carry it).
	GPU *gpu.Runtime
	// GPUDirect says how GPU memory is registered: GPUDirectAuto (default),
	// GPUDirectDmaBuf, GPUDirectPeerMem or GPUDirectOff
	// (KVFERRY_RDMA_GPUDIRECT; Mooncake's WITH_NVIDIA_PEERMEM=0/1 read as
	// dmabuf/peermem).
	GPUDirect string
	// MaxMRSize caps one memory region (MC_MAX_MR_SIZE, default 1 TiB, and
	// never above a NIC's max_mr_size): larger registrations become several
	// memory regions, published as several buffers (Mooncake#2017).
	MaxMRSize uint64
	// EndpointStore is how endpoints beyond MaxEndpoints are evicted:
	// "SIEVE" (default) or "FIFO" (MC_ENDPOINT_STORE_TYPE).
	EndpointStore string
	// AutoGIDRetries bounds the handshakes retried with another GID after
	// the QP's INIT->RTR failed with EINVAL while the GID is auto-selected
	// (MC_AUTO_GID_MAX_RETRIES; 0 means the default 2, negative none).
	AutoGIDRetries int
}

func (c Config) withDefaults() Config {
	if c.Class == nil {
		if c.SysFS == nil {
			c.Class = RdmamapClass{}
		} else {
			c.Class = SysfsClass{FS: c.SysFS}
		}
	}
	if c.SysFS == nil {
		c.SysFS = os.DirFS("/sys")
	}
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if c.MTU == 0 {
		c.MTU = ibv.MTU4096
	}
	if c.QPsPerEP <= 0 {
		c.QPsPerEP = DefaultQPsPerEP
	}
	if c.MaxWR <= 0 {
		c.MaxWR = DefaultMaxWR
	}
	if c.MaxSGE <= 0 {
		c.MaxSGE = DefaultMaxSGE
	}
	if c.MaxInline == 0 {
		c.MaxInline = DefaultMaxInline
	} else if c.MaxInline < 0 {
		c.MaxInline = 0
	}
	if c.MaxCQE <= 0 {
		c.MaxCQE = DefaultMaxCQE
	}
	if c.MaxEndpoints <= 0 {
		c.MaxEndpoints = DefaultMaxEPPerCtx
	}
	if c.SliceSize == 0 {
		c.SliceSize = DefaultSliceSize
	}
	if c.RetryCount <= 0 {
		c.RetryCount = DefaultRetryCount
	}
	if c.SignalEvery <= 0 {
		c.SignalEvery = DefaultSignalEvery
	}
	if c.PollSpin < 0 {
		c.PollSpin = 0
	} else if c.PollSpin == 0 {
		c.PollSpin = DefaultPollSpin
	}
	if c.HandshakeTimeout <= 0 {
		c.HandshakeTimeout = DefaultHandshakeTTL
	}
	switch c.GPUDirect {
	case GPUDirectDmaBuf, GPUDirectPeerMem, GPUDirectOff:
	default:
		c.GPUDirect = GPUDirectAuto
	}
	if c.MaxMRSize == 0 {
		c.MaxMRSize = DefaultMaxMRSize
	}
	if c.EndpointStore != EndpointStoreFIFO {
		c.EndpointStore = EndpointStoreSIEVE
	}
	if c.AutoGIDRetries == 0 {
		c.AutoGIDRetries = DefaultAutoGIDRetry
	} else if c.AutoGIDRetries < 0 {
		c.AutoGIDRetries = 0
	}
	return c
}
