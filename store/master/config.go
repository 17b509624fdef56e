package master

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/kvferry/kvferry/engine/peerauth"
	"github.com/kvferry/kvferry/engine/tlsconf"
)

// Defaults of mooncake_master (specs/mooncake.md §7.4-7.8).
const (
	DefaultRPCPort                    = 50051
	DefaultMetricsPort                = 9003
	DefaultKVLeaseTTL                 = 10 * time.Second
	DefaultKVSoftPinTTL               = 30 * time.Minute
	DefaultMaxKVSoftPinTTL            = 24 * time.Hour
	DefaultEvictionRatio              = 0.05
	DefaultEvictionHighWatermarkRatio = 0.90
	DefaultClientTTL                  = 10 * time.Second
	DefaultPutStartDiscardTimeout     = 30 * time.Second
	DefaultPutStartReleaseTimeout     = 600 * time.Second
	DefaultAllocationStrategy         = StrategyRandom
	DefaultClusterID                  = "mooncake_cluster"
	// DefaultMasterViewLeaseTTL is the TTL of the etcd lease under which the
	// HA leader publishes its address (Mooncake's 5 s).
	DefaultMasterViewLeaseTTL = 5 * time.Second
)

// Implementation tunables.
const (
	// DefaultMaintenanceInterval is how often the server expires clients,
	// releases zombie puts and checks the eviction watermark.
	DefaultMaintenanceInterval = 100 * time.Millisecond
	// DefaultGrantBytes is the size of a put grant (grants.go), capped at
	// an eighth of the segment it is carved from.
	DefaultGrantBytes = 64 << 20
	// DefaultGrantLease is how long after its last confirmation a client
	// may still write into a grant. It bounds how long a master that took
	// grants back (or a new HA leader) keeps their space out of use.
	DefaultGrantLease = 3 * time.Second
	// DefaultMaxGrantsPerClient caps the grants one client holds.
	DefaultMaxGrantsPerClient = 8
)

// Allocation strategies (--allocation_strategy).
const (
	// StrategyRandom tries the preferred segments first, then scans all
	// segments from a random start (Mooncake's default).
	StrategyRandom = "random"
	// StrategyFreeRatioFirst tries the preferred segments first, then the
	// segments with the largest free fraction.
	StrategyFreeRatioFirst = "free_ratio_first"
)

// Clock is the master's source of time; tests use a fake one so nothing
// sleeps. Now must be safe for concurrent use.
type Clock interface {
	Now() time.Time
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// Config configures a Service (the master state machine). The zero value
// works: withDefaults fills every zero field with its Default… constant.
type Config struct {
	// DefaultKVLeaseTTL is the read lease granted by ExistKey and
	// GetReplicaList (--default_kv_lease_ttl, default 10 s).
	DefaultKVLeaseTTL time.Duration
	// DefaultKVSoftPinTTL is the soft-pin lifetime of an object put with
	// soft pin enabled (--default_kv_soft_pin_ttl, default 30 min).
	DefaultKVSoftPinTTL time.Duration
	// MaxKVSoftPinTTL caps a per-put soft-pin TTL (--max_kv_soft_pin_ttl,
	// default 24 h).
	MaxKVSoftPinTTL time.Duration
	// KeepSoftPinned, when true, never evicts a soft-pinned object (Mooncake
	// --allow_evict_soft_pinned_objects=false). Default false: soft-pinned
	// objects are evicted last.
	KeepSoftPinned bool
	// EvictionRatio is the fraction of capacity freed by one eviction round
	// (--eviction_ratio, default 0.05). Must be in (0, 1].
	EvictionRatio float64
	// EvictionHighWatermarkRatio is the usage above which eviction starts
	// (--eviction_high_watermark_ratio, default 0.90). Must be in (0, 1].
	EvictionHighWatermarkRatio float64
	// ClientTTL is how long a client may go without Ping before the master
	// unmounts its segments (--client_ttl, default 10 s).
	ClientTTL time.Duration
	// PutStartDiscardTimeout is the age after which an unfinished put may be
	// preempted by a new PutStart of the same key
	// (--put_start_discard_timeout_sec, default 30 s).
	PutStartDiscardTimeout time.Duration
	// PutStartReleaseTimeout is the age after which the space of an
	// unfinished put is reclaimed (--put_start_release_timeout_sec,
	// default 600 s). Must not be shorter than PutStartDiscardTimeout.
	PutStartReleaseTimeout time.Duration
	// AllocationStrategy is StrategyRandom (default) or
	// StrategyFreeRatioFirst (--allocation_strategy).
	AllocationStrategy string
	// Seed seeds the random strategy; 0 means a seed from the clock.
	Seed uint64
	// GrantBytes is the size of the put grants handed to clients for
	// one-round-trip puts (default DefaultGrantBytes, 64 MiB; a grant never
	// takes more than an eighth of its segment). --put_grant_bytes.
	GrantBytes uint64
	// GrantLease is how long after the last confirmation of its grants a
	// client may write into them (default DefaultGrantLease, 3 s, or half
	// of ClientTTL when that is shorter). Space
	// the master takes back from a client that did not return it stays
	// out of use this long, and so does every allocation of a new HA
	// leader's first GrantLease. Must be shorter than ClientTTL.
	// --put_grant_lease.
	GrantLease time.Duration
	// MaxGrantsPerClient caps the grants one client holds (default
	// DefaultMaxGrantsPerClient, 8).
	MaxGrantsPerClient int
	// DisableGrants turns put grants off: clients put with PutStart and
	// PutEnd only (--put_grant_bytes=0).
	DisableGrants bool
	// RestoreWindow is how long a master that restored its state from
	// the operation log waits for the logged segments to be remounted;
	// those that did not come back are then dropped with their replicas
	// (default 2 x ClientTTL). --restore_window.
	RestoreWindow time.Duration
	// SnapshotRecords and SnapshotInterval: a snapshot of the state is
	// written after that many log records, or that long after the last
	// one while records were added (defaults 100000, 5 min).
	// --snapshot_records, --snapshot_interval_sec.
	SnapshotRecords  int
	SnapshotInterval time.Duration
	// PersistTimeout bounds one write of the operation log (default 10 s).
	PersistTimeout time.Duration
	// OffloadWatermark is the usage of a memory segment above which its
	// objects are written to its client's disk tier, least recently used
	// first (default 0.7; tier.go). --ssd_offload_watermark.
	OffloadWatermark float64
	// TenantQuotas limits tenants' objects and bytes (quota.go);
	// --tenant_quota=tenant=bytes[:objects],...
	TenantQuotas map[string]Quota
	// TaskTimeout is how long a client has to finish a task (offload,
	// load, copy; default 30 s).
	TaskTimeout time.Duration
	// DrainStallTimeout ends a drain job (drain.go) as FAILED once it has
	// had nothing in flight and moved nothing for this long, while replicas
	// remain that it cannot move (no room on the targets, puts in
	// progress); default 1 min.
	DrainStallTimeout time.Duration
	// Clock is the time source; nil means the real clock.
	Clock Clock
	// Logger receives state changes (mounts, expiries, evictions); nil
	// discards.
	Logger *slog.Logger

	// Server fields (ignored by NewService).

	// RPCAddr is the gRPC listen address (--rpc_address:--rpc_port, default
	// "0.0.0.0:50051"). Port 0 picks a free port.
	RPCAddr string
	// AdvertiseAddr is the address published as the HA leader; empty means
	// the listen address, with an unspecified host replaced by the first
	// non-loopback IPv4 address.
	AdvertiseAddr string
	// MetricsAddr is the admin HTTP listen address serving /metrics,
	// /health, /role, /get_all_segments, /get_all_keys and /query_key
	// (--metrics_port 9003 in kvferry-master). Empty means no HTTP server.
	MetricsAddr string
	// MaintenanceInterval is how often Tick runs (default 100 ms).
	MaintenanceInterval time.Duration
	// EnableHA makes the server campaign for leadership in etcd and serve
	// only while it leads (--enable_ha).
	EnableHA bool
	// EtcdEndpoints are the etcd endpoints for HA (--etcd_endpoints or
	// --ha_backend_connstring).
	EtcdEndpoints []string
	// ClusterID names the HA cluster (--cluster_id, default
	// "mooncake_cluster"; MC_STORE_CLUSTER_ID in kvferry-master).
	ClusterID string
	// MasterViewLeaseTTL is the TTL of the leader's etcd lease (default 5 s).
	MasterViewLeaseTTL time.Duration
	// OplogDir keeps the master's metadata (operation log and snapshots)
	// in this local directory, so a restarted master serves every
	// committed object (persist.go). Empty: nothing is kept. Not with
	// EnableHA (use EnableOplog). --oplog_dir.
	OplogDir string
	// OplogFsync syncs every log write to the device before the master
	// answers (survives a machine crash; without it a write survives the
	// master process). --oplog_fsync.
	OplogFsync bool
	// EnableOplog, with EnableHA, keeps the metadata in etcd, so a new
	// leader serves every committed object. --enable_oplog.
	EnableOplog bool

	// Limits on what clients may send (limits.go): key size and batch
	// size (--max_key_bytes, --max_batch_keys; defaults
	// wire.DefaultMaxKeyBytes, wire.DefaultMaxBatchKeys), connections in
	// total and per client IP (defaults netguard.DefaultMaxConns and
	// DefaultMaxConnsPerIP), and the bytes of large requests in flight
	// over all connections (default DefaultMaxInflightBytes).
	MaxKeyBytes, MaxBatchKeys int
	MaxConns, MaxConnsPerIP   int
	MaxInflightBytes          int64

	// SpinWait is how long a mux connection polls its socket for the next
	// request before it blocks (--spin_us, KVFERRY_SPIN_US; default
	// spin.Default, 50 µs; negative: never poll).
	SpinWait time.Duration

	// AuthKeyFile names the cluster key file (--auth_key_file, default
	// KVFERRY_AUTH_KEY_FILE in kvferry-master): with a key, every
	// connection to the RPC port (gRPC and mux) proves it holds the key
	// before its first request (engine/peerauth). Auth is the key itself;
	// NewServer loads AuthKeyFile into it when nil.
	AuthKeyFile string
	Auth        *peerauth.Keys
	// TLSFiles name the PEM files of TLS on the RPC port (--tls_cert_file,
	// --tls_key_file, --tls_ca_file; defaults KVFERRY_TLS_* in
	// kvferry-master): gRPC and mux run over TLS 1.3, after the cluster
	// key's handshake when there is one; with a CA, clients need
	// certificates it signed. TLS is the loaded server configuration;
	// NewServer loads TLSFiles into it when nil.
	TLSFiles tlsconf.Files
	TLS      *tls.Config
}

func (c Config) withDefaults() Config {
	if c.DefaultKVLeaseTTL == 0 {
		c.DefaultKVLeaseTTL = DefaultKVLeaseTTL
	}
	if c.DefaultKVSoftPinTTL == 0 {
		c.DefaultKVSoftPinTTL = DefaultKVSoftPinTTL
	}
	if c.MaxKVSoftPinTTL == 0 {
		c.MaxKVSoftPinTTL = DefaultMaxKVSoftPinTTL
	}
	if c.EvictionRatio == 0 {
		c.EvictionRatio = DefaultEvictionRatio
	}
	if c.EvictionHighWatermarkRatio == 0 {
		c.EvictionHighWatermarkRatio = DefaultEvictionHighWatermarkRatio
	}
	if c.ClientTTL == 0 {
		c.ClientTTL = DefaultClientTTL
	}
	if c.PutStartDiscardTimeout == 0 {
		c.PutStartDiscardTimeout = DefaultPutStartDiscardTimeout
	}
	if c.PutStartReleaseTimeout == 0 {
		c.PutStartReleaseTimeout = DefaultPutStartReleaseTimeout
	}
	if c.AllocationStrategy == "" {
		c.AllocationStrategy = DefaultAllocationStrategy
	}
	if c.GrantBytes == 0 {
		c.GrantBytes = DefaultGrantBytes
	}
	if c.GrantLease == 0 {
		c.GrantLease = min(DefaultGrantLease, c.ClientTTL/2)
	}
	if c.MaxGrantsPerClient == 0 {
		c.MaxGrantsPerClient = DefaultMaxGrantsPerClient
	}
	if c.RPCAddr == "" {
		c.RPCAddr = fmt.Sprintf("0.0.0.0:%d", DefaultRPCPort)
	}
	if c.MaintenanceInterval == 0 {
		c.MaintenanceInterval = DefaultMaintenanceInterval
	}
	if c.ClusterID == "" {
		c.ClusterID = DefaultClusterID
	}
	if c.MasterViewLeaseTTL == 0 {
		c.MasterViewLeaseTTL = DefaultMasterViewLeaseTTL
	}
	if c.RestoreWindow == 0 {
		c.RestoreWindow = 2 * c.ClientTTL
	}
	if c.SnapshotRecords == 0 {
		c.SnapshotRecords = DefaultSnapshotRecords
	}
	if c.SnapshotInterval == 0 {
		c.SnapshotInterval = DefaultSnapshotInterval
	}
	if c.PersistTimeout == 0 {
		c.PersistTimeout = 10 * time.Second
	}
	if c.OffloadWatermark == 0 {
		c.OffloadWatermark = DefaultOffloadWatermark
	}
	if c.TaskTimeout == 0 {
		c.TaskTimeout = DefaultTaskTimeout
	}
	if c.DrainStallTimeout == 0 {
		c.DrainStallTimeout = DefaultDrainStallTimeout
	}
	if c.Clock == nil {
		c.Clock = realClock{}
	}
	c = c.limitDefaults()
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate names the first bad field of the effective configuration.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.DefaultKVLeaseTTL < 0:
		return errors.New("config: DefaultKVLeaseTTL must be positive")
	case c.DefaultKVSoftPinTTL < 0:
		return errors.New("config: DefaultKVSoftPinTTL must be positive")
	case c.MaxKVSoftPinTTL < c.DefaultKVSoftPinTTL:
		return errors.New("config: MaxKVSoftPinTTL must be at least DefaultKVSoftPinTTL")
	case !(c.EvictionRatio > 0 && c.EvictionRatio <= 1):
		return fmt.Errorf("config: EvictionRatio %v must be in (0, 1]", c.EvictionRatio)
	case !(c.EvictionHighWatermarkRatio > 0 && c.EvictionHighWatermarkRatio <= 1):
		return fmt.Errorf("config: EvictionHighWatermarkRatio %v must be in (0, 1]", c.EvictionHighWatermarkRatio)
	case c.ClientTTL < 0:
		return errors.New("config: ClientTTL must be positive")
	case c.PutStartDiscardTimeout < 0:
		return errors.New("config: PutStartDiscardTimeout must be positive")
	case c.PutStartReleaseTimeout < c.PutStartDiscardTimeout:
		return errors.New("config: PutStartReleaseTimeout must be at least PutStartDiscardTimeout")
	case c.GrantLease < 0 || c.MaxGrantsPerClient < 0:
		return errors.New("config: GrantLease and MaxGrantsPerClient must be positive")
	case !c.DisableGrants && c.GrantLease >= c.ClientTTL:
		return fmt.Errorf("config: GrantLease %v must be shorter than ClientTTL %v", c.GrantLease, c.ClientTTL)
	}
	if c.EnableHA && len(c.EtcdEndpoints) == 0 {
		return errors.New("config: EnableHA needs EtcdEndpoints")
	}
	if c.EnableHA && c.OplogDir != "" {
		return errors.New("config: OplogDir is for a single master; with EnableHA use EnableOplog (the log lives in etcd)")
	}
	if !(c.OffloadWatermark > 0 && c.OffloadWatermark <= 1) || c.TaskTimeout < 0 {
		return fmt.Errorf("config: OffloadWatermark %v must be in (0, 1], TaskTimeout positive", c.OffloadWatermark)
	}
	if c.RestoreWindow < 0 || c.SnapshotRecords < 0 || c.SnapshotInterval < 0 || c.PersistTimeout < 0 {
		return errors.New("config: RestoreWindow, SnapshotRecords, SnapshotInterval and PersistTimeout must be positive")
	}
	if c.MaintenanceInterval < 0 || c.DrainStallTimeout < 0 {
		return errors.New("config: MaintenanceInterval and DrainStallTimeout must be positive")
	}
	switch c.AllocationStrategy {
	case StrategyRandom, StrategyFreeRatioFirst:
	default:
		return fmt.Errorf("config: AllocationStrategy %q is not supported (use %q or %q)",
			c.AllocationStrategy, StrategyRandom, StrategyFreeRatioFirst)
	}
	return nil
}

// String returns the effective configuration, for the start-up log line.
func (c Config) String() string {
	c = c.withDefaults()
	return fmt.Sprintf("lease_ttl=%v soft_pin_ttl=%v max_soft_pin_ttl=%v keep_soft_pinned=%v "+
		"eviction_ratio=%v eviction_high_watermark_ratio=%v client_ttl=%v "+
		"put_start_discard_timeout=%v put_start_release_timeout=%v allocation_strategy=%s "+
		"put_grants=%v grant_bytes=%d grant_lease=%v max_grants_per_client=%d "+
		"rpc_addr=%s metrics_addr=%q enable_ha=%v etcd=%v cluster_id=%s "+
		"oplog_dir=%q oplog_fsync=%v enable_oplog=%v restore_window=%v snapshot_records=%d snapshot_interval=%v",
		c.DefaultKVLeaseTTL, c.DefaultKVSoftPinTTL, c.MaxKVSoftPinTTL, c.KeepSoftPinned,
		c.EvictionRatio, c.EvictionHighWatermarkRatio, c.ClientTTL,
		c.PutStartDiscardTimeout, c.PutStartReleaseTimeout, c.AllocationStrategy,
		!c.DisableGrants, c.GrantBytes, c.GrantLease, c.MaxGrantsPerClient,
		c.RPCAddr, c.MetricsAddr, c.EnableHA, c.EtcdEndpoints, c.ClusterID,
		c.OplogDir, c.OplogFsync, c.EnableOplog, c.RestoreWindow, c.SnapshotRecords, c.SnapshotInterval) +
		fmt.Sprintf(" max_key_bytes=%d max_batch_keys=%d auth=%v", c.MaxKeyBytes, c.MaxBatchKeys, c.Auth != nil || c.AuthKeyFile != "")
}
