package hostenv

import (
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/kvferry/kvferry/engine/gpu"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/engine/tlsconf"
	"github.com/kvferry/kvferry/internal/ratelog"
)

// Lookup reads an environment variable; tests replace it.
var Lookup = Getenv

func str(names ...string) (string, bool) {
	for _, n := range names {
		if v, ok := Lookup(n); ok && v != "" {
			return v, true
		}
	}
	return "", false
}

func integer(names ...string) (int64, bool) {
	v, ok := str(names...)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil {
		return 0, false
	}
	return n, true
}

func flag(names ...string) bool {
	v, ok := str(names...)
	if !ok {
		return false
	}
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "0", "false", "no", "off":
		return false
	}
	return true
}

// Set reports whether the variable is set at all (even empty), as Mooncake
// tests MC_FORCE_TCP.
func Set(name string) bool {
	_, ok := Lookup(name)
	return ok
}

// StackConfig builds an engine stack configuration from the environment:
//
//	MC_FORCE_TCP (any value)          use only the TCP transport
//	MC_FORCE_HCA (any value)          auto-discovery installs RDMA even with MC_FORCE_TCP
//	KVFERRY_TRANSPORT                 force one transport by name (local, cma, nvlink, shm, rdma, tcp; "auto" = selector)
//	KVFERRY_GPU_HOST_PATH             host memory <-> another process's GPU memory: map (nvlink), stage (shm), auto (measured)
//	(RDMA: see RDMAConfig)
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
//	MC_METADATA_CLUSTER_ID            metadata key prefix mooncake/<id>/
//	KVFERRY_METADATA_REPUBLISH_SEC    how often http/etcd entries are written again
//	KVFERRY_ETCD_LEASE_TTL_SEC        etcd lease TTL of an engine's entries
//	KVFERRY_CUDA_LIB                  CUDA driver to load (default libcuda.so.1)
//	KVFERRY_CUDA                      "0" turns GPU memory support off
//	KVFERRY_CUDA_STREAMS              streams of each device's copier
//	KVFERRY_GPU_STAGE_BYTES           pinned bounce buffer size (4 KiB - 64 MiB)
//	KVFERRY_GPU_STAGE_DEPTH           pinned bounce buffers per stager (1-64)
//	KVFERRY_METRICS=off               no per-request metrics (counters, latency histograms)
//	KVFERRY_SPIN_US                   how long a wait polls before it parks (default 50; 0 never polls)
func StackConfig() stack.Config {
	var c stack.Config
	c.Engine.Logger = Logger()
	if Set("MC_FORCE_TCP") {
		c.Engine.ForceTransport = "tcp"
	}
	c.RDMA = RDMAConfig()
	c.ForceRDMA = Set("MC_FORCE_HCA")
	if v, ok := str("KVFERRY_TRANSPORT"); ok && v != "auto" {
		c.Engine.ForceTransport = strings.ToLower(v)
	}
	if v, ok := str("KVFERRY_GPU_HOST_PATH"); ok {
		c.Engine.PathChoice = GPUHostPath(v)
	}
	if v, ok := str("MC_TCP_BIND_ADDRESS"); ok {
		c.Engine.BindAddress = v
	}
	if v, ok := str("KVFERRY_BIND_ADDR"); ok {
		c.Engine.ListenIP = strings.TrimSpace(v)
	}
	if v, ok := str("KVFERRY_AUTH_KEY_FILE"); ok {
		c.Engine.AuthKeyFile = strings.TrimSpace(v)
	}
	c.Engine.TLSFiles = TLSFiles()
	if n, ok := integer("MC_MIN_RPC_PORT", "MC_MIN_PRC_PORT"); ok && n > 0 && n < 65536 {
		c.Engine.MinRPCPort = int(n)
	}
	if n, ok := integer("MC_MAX_RPC_PORT", "MC_MAX_PRC_PORT"); ok && n > 0 && n < 65536 {
		c.Engine.MaxRPCPort = int(n)
	}
	if n, ok := integer("MC_HANDSHAKE_CONNECT_TIMEOUT"); ok && n > 0 {
		c.Engine.ConnectTimeout = time.Duration(n) * time.Second
	}
	if n, ok := integer("MC_HANDSHAKE_MAX_LENGTH"); ok && n >= 1<<20 && n <= 128<<20 {
		c.Engine.HandshakeMaxLength = uint64(n)
	}
	if n, ok := integer("MC_TRANSFER_TIMEOUT"); ok && n > 0 {
		c.Engine.TransferTimeout = time.Duration(max(n, 5)) * time.Second
	}
	if n, ok := integer("MC_TCP_LANES_PER_PEER", "MC_TCP_MAX_CONNECTIONS_PER_PEER"); ok && n >= 1 && n <= 16 {
		c.TCP.Lanes = int(n)
	}
	if n, ok := integer("KVFERRY_TCP_STRIPE_SIZE", "MC_SLICE_SIZE"); ok && n >= 4096 {
		c.TCP.StripeSize = uint64(n)
	}
	if n, ok := integer("MC_TCP_STATUS_TIMEOUT_SEC"); ok && n > 0 {
		c.TCP.StatusTimeout = time.Duration(n) * time.Second
	}
	if v, ok := str("MC_TCP_PROTO"); ok && strings.TrimSpace(v) == "1" {
		c.TCP.ProtoVersion = 1
	}
	if n, ok := integer("KVFERRY_TCP_MAX_POLLED_CONNS"); ok && n > 0 && n <= 1<<20 {
		c.TCP.MaxPolledConns = int(n)
	}
	c.Engine.AllowUnregisteredSource = flag("KVFERRY_ALLOW_UNREGISTERED")
	c.Engine.NoRequestMetrics = !RequestMetrics()
	c.Engine.SpinWait = SpinWait()
	if n, ok := integer("KVFERRY_LOCAL_WORKERS"); ok && n > 0 && n <= 64 {
		c.Local.Workers = int(n)
	}
	if n, ok := integer("KVFERRY_SAMEHOST_WORKERS"); ok && n > 0 && n <= 64 {
		c.SameHost.Workers = int(n)
	}
	if n, ok := integer("KVFERRY_SHM_CHUNK_BYTES"); ok && n >= 64<<10 && n <= 64<<20 {
		c.SameHost.ShmChunkBytes = uint64(n)
	}
	if n, ok := integer("KVFERRY_SHM_CHUNKS"); ok && n > 0 && n <= 64 {
		c.SameHost.ShmChunks = int(n)
	}
	c.SameHost.AllowAnyPtracer = flag("KVFERRY_CMA_ALLOW_PTRACER")
	c.SameHost.MooncakeNVLinkIPC = Set("MC_USE_NVLINK_IPC")
	c.SameHost.NoMap = Set("KVFERRY_CMA_MAP") && !flag("KVFERRY_CMA_MAP")
	c.SameHost.NoNotifyRing = Set("KVFERRY_NOTIFY_RING") && !flag("KVFERRY_NOTIFY_RING")
	if n, ok := integer("KVFERRY_CMA_INLINE_BYTES"); ok && n >= 0 && n <= 1<<30 {
		c.SameHost.CMAInlineBytes = n
		if n == 0 {
			c.SameHost.CMAInlineBytes = -1
		}
	}
	if v, ok := str("MC_METADATA_CLUSTER_ID"); ok {
		c.Metadata.KV.ClusterID = strings.TrimSpace(v)
	}
	if n, ok := integer("KVFERRY_METADATA_REPUBLISH_SEC"); ok && n > 0 {
		c.Metadata.KV.RepublishInterval = time.Duration(n) * time.Second
	}
	if n, ok := integer("KVFERRY_ETCD_LEASE_TTL_SEC"); ok && n > 0 {
		c.Metadata.Etcd.LeaseTTL = time.Duration(n) * time.Second
	}
	c.GPU = GPUConfig()
	return c
}

// Logger returns the library's logger: text to stderr (or KVFERRY_LOG_FILE)
// at the level of KVFERRY_LOG_LEVEL (debug, info, warn, error, off) or
// MC_LOG_LEVEL (TRACE, INFO, WARNING, ERROR). Unset means warn: refusals
// of hostile or broken peers and other warnings reach the log, and nothing
// else is printed. Warnings and errors are limited to one line per message
// every few seconds (ratelog), with the count of lines held back.
func Logger() *slog.Logger {
	v, ok := str("KVFERRY_LOG_LEVEL", "MC_LOG_LEVEL")
	if !ok {
		return textLogger(slog.LevelWarn)
	}
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "off", "none", "silent":
		return slog.New(slog.DiscardHandler)
	}
	return textLogger(parseLevel(v))
}

// NIXLLogger returns the logger of the NIXL backend: Logger's when
// KVFERRY_LOG_LEVEL or MC_LOG_LEVEL is set, else one at the level of the
// host's NIXL_LOG_LEVEL (TRACE, DEBUG, INFO, WARN, ERROR, FATAL), whose
// default is NIXL's own, WARN: inside a NIXL program the backend logs as
// NIXL's own plugins do, so a failed createBackend says why by default.
func NIXLLogger() *slog.Logger {
	if _, ok := str("KVFERRY_LOG_LEVEL", "MC_LOG_LEVEL"); ok {
		return Logger()
	}
	lvl := slog.LevelWarn
	if v, ok := str("NIXL_LOG_LEVEL"); ok {
		lvl = parseLevel(v)
	}
	return textLogger(lvl)
}

// parseLevel maps a level name of kvferry, Mooncake or NIXL to a slog
// level; unknown names mean info.
func parseLevel(v string) slog.Level {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "trace", "debug":
		return slog.LevelDebug
	case "warn", "warning":
		return slog.LevelWarn
	case "error", "fatal":
		return slog.LevelError
	}
	return slog.LevelInfo
}

// textLogger logs text at lvl to stderr, or to KVFERRY_LOG_FILE.
func textLogger(lvl slog.Level) *slog.Logger {
	var w io.Writer = os.Stderr
	if p, ok := str("KVFERRY_LOG_FILE"); ok {
		if f, err := os.OpenFile(p, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err == nil {
			w = f
		}
	}
	h := slog.NewTextHandler(w, &slog.HandlerOptions{Level: lvl})
	return slog.New(ratelog.NewHandler(h, 0)).With("lib", "kvferry")
}

// MaxProcs returns the GOMAXPROCS cap (KVFERRY_MAX_PROCS, default 4).
func MaxProcs() int {
	if n, ok := integer("KVFERRY_MAX_PROCS"); ok && n > 0 {
		return int(n)
	}
	return 4
}

// MetricsAddr returns KVFERRY_METRICS_ADDR ("" = no HTTP listener; a
// bare port or ":port" binds loopback).
func MetricsAddr() string {
	v, _ := str("KVFERRY_METRICS_ADDR")
	return v
}

// GPUConfig reads GPU support's settings (see StackConfig).
func GPUConfig() gpu.Config {
	var g gpu.Config
	if v, ok := str("KVFERRY_CUDA_LIB"); ok {
		g.Library = v
	}
	if _, ok := str("KVFERRY_CUDA"); ok && !flag("KVFERRY_CUDA") {
		g.Disabled = true
	}
	if n, ok := integer("KVFERRY_CUDA_STREAMS"); ok && n > 0 && n <= 64 {
		g.Streams = int(n)
	}
	if n, ok := integer("KVFERRY_GPU_STAGE_BYTES"); ok && n >= 4096 && n <= 64<<20 {
		g.StagePieceBytes = uint64(n)
	}
	if n, ok := integer("KVFERRY_GPU_STAGE_DEPTH"); ok && n > 0 && n <= 64 {
		g.StageDepth = int(n)
	}
	return g
}

// MetricsPprof reports KVFERRY_METRICS_PPROF: serve /debug/pprof/ beside
// /metrics on the metrics listener.
func MetricsPprof() bool { return flag("KVFERRY_METRICS_PPROF") }

// RequestMetrics reports whether per-request metrics are on (default;
// KVFERRY_METRICS=off, 0 or false turns them off).
func RequestMetrics() bool {
	v, ok := str("KVFERRY_METRICS")
	if !ok {
		return true
	}
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "0", "off", "false", "no":
		return false
	}
	return true
}

// MetricsMaxPeers returns KVFERRY_METRICS_MAX_PEERS (distinct peer labels
// before "other"; 0 = the default).
func MetricsMaxPeers() int {
	if n, ok := integer("KVFERRY_METRICS_MAX_PEERS"); ok && n > 0 && n <= 100000 {
		return int(n)
	}
	return 0
}

// TLSFiles returns the control plane's TLS files (KVFERRY_TLS_CERT_FILE,
// KVFERRY_TLS_KEY_FILE, KVFERRY_TLS_CA_FILE).
func TLSFiles() tlsconf.Files {
	var f tlsconf.Files
	f.Cert, _ = str("KVFERRY_TLS_CERT_FILE")
	f.Key, _ = str("KVFERRY_TLS_KEY_FILE")
	f.CA, _ = str("KVFERRY_TLS_CA_FILE")
	return f
}

// GPUHostPath maps a KVFERRY_GPU_HOST_PATH value to the transport it pins
// (engine.Config.PathChoice): "map" or "nvlink" maps the GPU memory,
// "stage" or "shm" stages it through shared memory; anything else
// ("auto") leaves the choice to the engine's measurement.
func GPUHostPath(v string) string {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "map", "nvlink":
		return "nvlink"
	case "stage", "shm":
		return "shm"
	}
	return ""
}

// SpinWait reads KVFERRY_SPIN_US: how long a wait polls before it parks,
// in microseconds (0: never; unset: the default, internal/spin). It is
// the engine's Config.SpinWait (negative for off) and the store's.
func SpinWait() time.Duration {
	n, ok := integer("KVFERRY_SPIN_US")
	switch {
	case !ok || n < 0:
		return 0
	case n == 0:
		return -1
	}
	return time.Duration(min(n, 10_000)) * time.Microsecond
}
