package stack

import (
	"strings"
	"time"

	"github.com/kvferry/kvferry/engine/gpu"
	"github.com/kvferry/kvferry/engine/tlsconf"
	"github.com/kvferry/kvferry/engine/transport/efa"
	"github.com/kvferry/kvferry/engine/transport/rdma"
	"github.com/kvferry/kvferry/internal/hostenv"
)

// ConfigFromEnv builds an engine stack configuration from the environment
// env (hostenv.Lookup in the library, the C getenv):
//
//	MC_FORCE_TCP (any value)          use only the TCP transport
//	MC_FORCE_HCA (any value)          auto-discovery installs RDMA even with MC_FORCE_TCP
//	KVFERRY_TRANSPORT                 force one transport by name (local, cma, nvlink, shm, rdma, tcp; "auto" = selector)
//	KVFERRY_FAILOVER                  "off": a slice failing on its transport's path fails, no failover to the next transport
//	KVFERRY_GPU_HOST_PATH             host memory <-> another process's GPU memory: map (nvlink), stage (shm), auto (measured)
//	(RDMA: see rdma.ConfigFromEnv; libfabric, transport "efa": efa.ConfigFromEnv)
//	MC_TCP_BIND_ADDRESS               address to bind and advertise
//	KVFERRY_BIND_ADDR                 address to bind (not advertised), e.g. 0.0.0.0
//	KVFERRY_AUTH_KEY_FILE             cluster key file: authenticate every peer (engine/peerauth)
//	KVFERRY_TLS_CERT_FILE, KVFERRY_TLS_KEY_FILE, KVFERRY_TLS_CA_FILE  control-plane TLS (engine/tlsconf)
//	MC_MIN_RPC_PORT, MC_MAX_RPC_PORT  port range (aliases MC_MIN_PRC_PORT, MC_MAX_PRC_PORT)
//	MC_HANDSHAKE_CONNECT_TIMEOUT      seconds
//	MC_HANDSHAKE_MAX_LENGTH           bytes, 1 MiB - 128 MiB
//	MC_TRANSFER_TIMEOUT               seconds (minimum 5)
//	MC_TCP_LANES_PER_PEER             connections per peer, 1-16 (alias MC_TCP_MAX_CONNECTIONS_PER_PEER)
//	KVFERRY_TCP_STRIPE_SIZE, MC_SLICE_SIZE  stripe size in bytes
//	MC_TCP_STATUS_TIMEOUT_SEC         seconds to wait for a status frame
//	MC_TCP_PROTO                      "1" forces legacy framing
//	KVFERRY_TCP_MAX_POLLED_CONNS      server connections outside the network poller (each holds a thread waiting)
//	KVFERRY_ALLOW_UNREGISTERED        accept unregistered local sources
//	KVFERRY_LOCAL_WORKERS             copy goroutines of the same-process transport
//	KVFERRY_SAMEHOST_WORKERS          copy goroutines of each same-host transport (cma, shm)
//	KVFERRY_SHM_CHUNK_BYTES           shm staging chunk size in bytes (64 KiB - 64 MiB)
//	KVFERRY_SHM_CHUNKS                shm staging chunks per session (1-64)
//	KVFERRY_CMA_ALLOW_PTRACER         owner lets any same-user process ptrace it (yama ptrace_scope=1)
//	KVFERRY_CMA_INLINE_BYTES          largest cma submission copied by the submitting thread (0 = never)
//	KVFERRY_CMA_MAP                   "0": no memfd-backed memory mapped by same-host peers (cma copies with process_vm_*)
//	KVFERRY_NOTIFY_RING               "0": no same-host notification rings (every notification by RPC)
//	MC_USE_NVLINK_IPC (any value)     Mooncake nvlink peers publish legacy IPC handles, not fabric handles
//	MC_METADATA_CLUSTER_ID            metadata key prefix mooncake/<id>/
//	KVFERRY_METADATA_REPUBLISH_SEC    how often http/etcd entries are written again
//	KVFERRY_ETCD_LEASE_TTL_SEC        etcd lease TTL of an engine's entries
//	MC_REDIS_USERNAME, MC_REDIS_PASSWORD  Redis AUTH when the redis:// URL has no user information
//	MC_REDIS_DB_INDEX                 Redis database when the URL has no /db (0-255, as Mooncake)
//	KVFERRY_REDIS_KEY_TTL_SEC         TTL of an engine's Redis keys (renewed while it lives)
//	KVFERRY_CUDA_LIB                  CUDA driver to load (default libcuda.so.1)
//	KVFERRY_CUDA                      "0" turns GPU memory support off
//	KVFERRY_CUDA_STREAMS              streams of each device's copier
//	KVFERRY_GPU_STAGE_BYTES           pinned bounce buffer size (4 KiB - 64 MiB)
//	KVFERRY_GPU_STAGE_DEPTH           pinned bounce buffers per stager (1-64)
//	KVFERRY_METRICS=off               no per-request metrics (counters, latency histograms)
//	KVFERRY_SPIN_US                   how long a wait polls before it parks (default 50; 0 never polls)
func ConfigFromEnv(env hostenv.Env) Config {
	var c Config
	c.Engine.Logger = env.Logger()
	if env.Set("MC_FORCE_TCP") {
		c.Engine.ForceTransport = "tcp"
	}
	c.RDMA = rdma.ConfigFromEnv(env)
	c.EFA = efa.ConfigFromEnv(env)
	c.ForceRDMA = env.Set("MC_FORCE_HCA")
	if v, ok := env.Str("KVFERRY_TRANSPORT"); ok && v != "auto" {
		c.Engine.ForceTransport = strings.ToLower(v)
	}
	if v, ok := env.Str("KVFERRY_FAILOVER"); ok && (strings.EqualFold(v, "off") || v == "0") {
		c.Engine.NoFailover = true
	}
	if v, ok := env.Str("KVFERRY_GPU_HOST_PATH"); ok {
		c.Engine.PathChoice = gpuHostPath(v)
	}
	if v, ok := env.Str("MC_TCP_BIND_ADDRESS"); ok {
		c.Engine.BindAddress = v
	}
	if v, ok := env.Str("KVFERRY_BIND_ADDR"); ok {
		c.Engine.ListenIP = strings.TrimSpace(v)
	}
	if v, ok := env.Str("KVFERRY_AUTH_KEY_FILE"); ok {
		c.Engine.AuthKeyFile = strings.TrimSpace(v)
	}
	c.Engine.TLSFiles = tlsconf.FilesFromEnv(env)
	if n, ok := env.Int("MC_MIN_RPC_PORT", "MC_MIN_PRC_PORT"); ok && n > 0 && n < 65536 {
		c.Engine.MinRPCPort = int(n)
	}
	if n, ok := env.Int("MC_MAX_RPC_PORT", "MC_MAX_PRC_PORT"); ok && n > 0 && n < 65536 {
		c.Engine.MaxRPCPort = int(n)
	}
	if n, ok := env.Int("MC_HANDSHAKE_CONNECT_TIMEOUT"); ok && n > 0 {
		c.Engine.ConnectTimeout = time.Duration(n) * time.Second
	}
	if n, ok := env.Int("MC_HANDSHAKE_MAX_LENGTH"); ok && n >= 1<<20 && n <= 128<<20 {
		c.Engine.HandshakeMaxLength = uint64(n)
	}
	if n, ok := env.Int("MC_TRANSFER_TIMEOUT"); ok && n > 0 {
		c.Engine.TransferTimeout = time.Duration(max(n, 5)) * time.Second
	}
	if n, ok := env.Int("MC_TCP_LANES_PER_PEER", "MC_TCP_MAX_CONNECTIONS_PER_PEER"); ok && n >= 1 && n <= 16 {
		c.TCP.Lanes = int(n)
	}
	if n, ok := env.Int("KVFERRY_TCP_STRIPE_SIZE", "MC_SLICE_SIZE"); ok && n >= 4096 {
		c.TCP.StripeSize = uint64(n)
	}
	if n, ok := env.Int("MC_TCP_STATUS_TIMEOUT_SEC"); ok && n > 0 {
		c.TCP.StatusTimeout = time.Duration(n) * time.Second
	}
	if v, ok := env.Str("MC_TCP_PROTO"); ok && strings.TrimSpace(v) == "1" {
		c.TCP.ProtoVersion = 1
	}
	if n, ok := env.Int("KVFERRY_TCP_MAX_POLLED_CONNS"); ok && n > 0 && n <= 1<<20 {
		c.TCP.MaxPolledConns = int(n)
	}
	c.Engine.AllowUnregisteredSource = env.Flag("KVFERRY_ALLOW_UNREGISTERED")
	c.Engine.NoRequestMetrics = !env.RequestMetrics()
	c.Engine.SpinWait = env.SpinWait()
	if n, ok := env.Int("KVFERRY_LOCAL_WORKERS"); ok && n > 0 && n <= 64 {
		c.Local.Workers = int(n)
	}
	if n, ok := env.Int("KVFERRY_SAMEHOST_WORKERS"); ok && n > 0 && n <= 64 {
		c.SameHost.Workers = int(n)
	}
	if n, ok := env.Int("KVFERRY_SHM_CHUNK_BYTES"); ok && n >= 64<<10 && n <= 64<<20 {
		c.SameHost.ShmChunkBytes = uint64(n)
	}
	if n, ok := env.Int("KVFERRY_SHM_CHUNKS"); ok && n > 0 && n <= 64 {
		c.SameHost.ShmChunks = int(n)
	}
	c.SameHost.AllowAnyPtracer = env.Flag("KVFERRY_CMA_ALLOW_PTRACER")
	c.SameHost.MooncakeNVLinkIPC = env.Set("MC_USE_NVLINK_IPC")
	c.SameHost.NoMap = env.Set("KVFERRY_CMA_MAP") && !env.Flag("KVFERRY_CMA_MAP")
	c.SameHost.NoNotifyRing = env.Set("KVFERRY_NOTIFY_RING") && !env.Flag("KVFERRY_NOTIFY_RING")
	if n, ok := env.Int("KVFERRY_CMA_INLINE_BYTES"); ok && n >= 0 && n <= 1<<30 {
		c.SameHost.CMAInlineBytes = n
		if n == 0 {
			c.SameHost.CMAInlineBytes = -1
		}
	}
	if v, ok := env.Str("MC_METADATA_CLUSTER_ID"); ok {
		c.Metadata.KV.ClusterID = strings.TrimSpace(v)
	}
	if n, ok := env.Int("KVFERRY_METADATA_REPUBLISH_SEC"); ok && n > 0 {
		c.Metadata.KV.RepublishInterval = time.Duration(n) * time.Second
	}
	if n, ok := env.Int("KVFERRY_ETCD_LEASE_TTL_SEC"); ok && n > 0 {
		c.Metadata.Etcd.LeaseTTL = time.Duration(n) * time.Second
	}
	if v, ok := env.Str("MC_REDIS_USERNAME"); ok {
		c.Metadata.Redis.Username = v
	}
	if v, ok := env.Str("MC_REDIS_PASSWORD"); ok {
		c.Metadata.Redis.Password = v
	}
	if n, ok := env.Int("MC_REDIS_DB_INDEX"); ok && n >= 0 && n <= 255 {
		c.Metadata.Redis.DB = int(n)
	}
	if n, ok := env.Int("KVFERRY_REDIS_KEY_TTL_SEC"); ok && n > 0 {
		c.Metadata.Redis.KeyTTL = time.Duration(n) * time.Second
	}
	c.GPU = gpu.ConfigFromEnv(env)
	return c
}

// gpuHostPath maps a KVFERRY_GPU_HOST_PATH value to the transport it pins
// (engine.Config.PathChoice): "map" or "nvlink" maps the GPU memory,
// "stage" or "shm" stages it through shared memory; anything else
// ("auto") leaves the choice to the engine's measurement.
func gpuHostPath(v string) string {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "map", "nvlink":
		return "nvlink"
	case "stage", "shm":
		return "shm"
	}
	return ""
}
