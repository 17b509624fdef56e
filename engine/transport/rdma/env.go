package rdma

import (
	"os"
	"strings"
	"time"

	"github.com/kvferry/kvferry/engine/transport/rdma/ibv"
	"github.com/kvferry/kvferry/internal/hostenv"
)

// ConfigFromEnv reads the RDMA transport's configuration from env
// (hostenv.Lookup in the library, the C getenv), with Mooncake's names
// where they exist (specs/mooncake.md §2.6):
//
//	KVFERRY_IBVERBS_LIB          libibverbs to open (default libibverbs.so.1)
//	MC_TE_FILTERS                comma list of the NICs to use
//	MC_CUSTOM_TOPO_JSON          file with a NIC priority matrix (else discovered)
//	MC_IB_PORT                   IB port, 1-255 (default 1)
//	MC_GID_INDEX, NCCL_IB_GID_INDEX  GID index 0-255 (default: auto)
//	MC_MTU                       512, 1024, 2048 or 4096 (default 4096)
//	MC_NUM_QP_PER_EP             QPs per endpoint, 1-255 (default 2)
//	MC_MAX_WR, MC_MAX_SGE        per-QP work requests (256) and SGEs (4)
//	MC_MAX_INLINE                inline bytes (64)
//	MC_MAX_CQE_PER_CTX           CQ entries per NIC (4096)
//	MC_MAX_EP_PER_CTX            endpoints per NIC (65536)
//	MC_IB_TC, MC_IB_SL           traffic class (0-255), service level (0-15)
//	MC_PKEY_INDEX                partition key index (0)
//	MC_SLICE_SIZE                slice size in bytes (65536)
//	MC_RETRY_CNT                 retries of a failed slice (9)
//	MC_PATH_ROUNDROBIN           1/true: NICs round-robin instead of random
//	MC_RDMA_BIND_ADDRESS         RDMA-reachable host for NIC paths (rdma_server_name)
//	KVFERRY_RDMA_POLL_SPIN_US    poller spin before parking (50; 0 parks at once)
//	KVFERRY_RDMA_SIGNAL_EVERY    signal every n-th work request of a chain (16)
//	MC_MAX_MR_SIZE               largest memory region, bytes (1 TiB; never above the NIC's)
//	MC_ENDPOINT_STORE_TYPE       SIEVE (default) or FIFO endpoint eviction
//	MC_AUTO_GID_MAX_RETRIES      handshakes retried with another auto-selected GID after RTR fails (2; 0-16)
//	KVFERRY_RDMA_GPUDIRECT       GPU memory registration: auto, dmabuf, peermem, off
//	WITH_NVIDIA_PEERMEM          Mooncake's switch when KVFERRY_RDMA_GPUDIRECT is unset: 0 dmabuf, 1 peermem
func ConfigFromEnv(env hostenv.Env) Config {
	var c Config
	if v, ok := env.Str("KVFERRY_IBVERBS_LIB"); ok {
		c.Library = v
	}
	if v, ok := env.Str("MC_TE_FILTERS"); ok {
		c.Devices = splitList(v)
	}
	if p, ok := env.Str("MC_CUSTOM_TOPO_JSON"); ok {
		if b, err := os.ReadFile(strings.TrimSpace(p)); err == nil {
			c.Matrix = string(b)
		} else {
			env.Logger().Warn("MC_CUSTOM_TOPO_JSON unreadable; discovering the topology", "path", p, "err", err)
		}
	}
	if n, ok := env.Int("MC_IB_PORT"); ok && n > 0 && n < 256 {
		c.Port = uint8(n)
	}
	if n, ok := env.Int("MC_GID_INDEX", "NCCL_IB_GID_INDEX"); ok && n >= 0 && n < 256 {
		c.GIDIndex, c.FixedGID = int(n), true
	}
	if n, ok := env.Int("MC_MTU"); ok {
		switch n {
		case 512:
			c.MTU = ibv.MTU512
		case 1024:
			c.MTU = ibv.MTU1024
		case 2048:
			c.MTU = ibv.MTU2048
		case 4096:
			c.MTU = ibv.MTU4096
		}
	}
	if n, ok := env.Int("MC_NUM_QP_PER_EP"); ok && n > 0 && n < 256 {
		c.QPsPerEP = int(n)
	}
	if n, ok := env.Int("MC_MAX_WR"); ok && n > 0 && n <= 65535 {
		c.MaxWR = int(n)
	}
	if n, ok := env.Int("MC_MAX_SGE"); ok && n > 0 && n <= 65535 {
		c.MaxSGE = int(n)
	}
	if n, ok := env.Int("MC_MAX_INLINE"); ok && n >= 0 && n <= 65535 {
		c.MaxInline = int(n)
		if n == 0 {
			c.MaxInline = -1
		}
	}
	if n, ok := env.Int("MC_MAX_CQE_PER_CTX"); ok && n > 0 && n <= 65535 {
		c.MaxCQE = int(n)
	}
	if n, ok := env.Int("MC_MAX_EP_PER_CTX"); ok && n > 0 && n <= 65535 {
		c.MaxEndpoints = int(n)
	}
	c.TrafficClass, c.ServiceLevel = -1, -1
	if n, ok := env.Int("MC_IB_TC"); ok && n >= 0 && n <= 255 {
		c.TrafficClass = int(n)
	}
	if n, ok := env.Int("MC_IB_SL"); ok && n >= 0 && n <= 15 {
		c.ServiceLevel = int(n)
	}
	if n, ok := env.Int("MC_PKEY_INDEX"); ok && n >= 0 && n <= 65535 {
		c.PKeyIndex = uint16(n)
	}
	if n, ok := env.Int("MC_SLICE_SIZE"); ok && n > 0 {
		c.SliceSize = uint64(n)
	}
	if n, ok := env.Int("MC_RETRY_CNT"); ok && n > 0 && n < 256 {
		c.RetryCount = int(n)
	}
	c.RoundRobin = env.Flag("MC_PATH_ROUNDROBIN")
	if v, ok := env.Str("MC_RDMA_BIND_ADDRESS"); ok {
		c.ServerName = strings.TrimSpace(v)
	}
	if n, ok := env.Int("KVFERRY_RDMA_POLL_SPIN_US"); ok && n >= 0 && n <= 1_000_000 {
		c.PollSpin = time.Duration(n) * time.Microsecond
		if n == 0 {
			c.PollSpin = -1
		}
	}
	if n, ok := env.Int("KVFERRY_RDMA_SIGNAL_EVERY"); ok && n > 0 && n <= 4096 {
		c.SignalEvery = int(n)
	}
	if n, ok := env.Int("MC_MAX_MR_SIZE"); ok && n > 0 {
		c.MaxMRSize = uint64(n)
	}
	if v, ok := env.Str("MC_ENDPOINT_STORE_TYPE"); ok {
		switch v = strings.TrimSpace(v); v {
		case EndpointStoreFIFO, EndpointStoreSIEVE:
			c.EndpointStore = v
		default:
			env.Logger().Warn("MC_ENDPOINT_STORE_TYPE should be FIFO or SIEVE; using SIEVE", "value", v)
		}
	}
	if n, ok := env.Int("MC_AUTO_GID_MAX_RETRIES"); ok && n >= 0 && n <= 16 {
		c.AutoGIDRetries = int(n)
		if n == 0 {
			c.AutoGIDRetries = -1
		}
	}
	if v, ok := env.Str("KVFERRY_RDMA_GPUDIRECT"); ok {
		switch v = strings.ToLower(strings.TrimSpace(v)); v {
		case GPUDirectAuto, GPUDirectDmaBuf, GPUDirectPeerMem, GPUDirectOff:
			c.GPUDirect = v
		default:
			env.Logger().Warn("KVFERRY_RDMA_GPUDIRECT should be auto, dmabuf, peermem or off; using auto", "value", v)
		}
	} else if _, ok := env.Str("WITH_NVIDIA_PEERMEM"); ok {
		c.GPUDirect = GPUDirectDmaBuf
		if env.Flag("WITH_NVIDIA_PEERMEM") {
			c.GPUDirect = GPUDirectPeerMem
		}
	}
	return c
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
