package client

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/metadata/connstr"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/store/ha"
	"github.com/kvferry/kvferry/store/wire"
)

// Defaults (Mooncake's where one exists, specs/mooncake.md §6.2, §7.6-7.8).
const (
	// DefaultMasterAddr is used when MasterServerAddr is "" in the C API
	// (Go: "" means the embedded master).
	DefaultMasterAddr = "127.0.0.1:50051"
	// DefaultLocalBufferSize is the registered staging buffer (16 MiB).
	DefaultLocalBufferSize = 16 << 20
	// DefaultDiskServeBufferSize is the registered buffer a client with a
	// disk tier serves other clients' reads of its files from (64 MiB).
	DefaultDiskServeBufferSize = 64 << 20
	// DefaultPingInterval is the heartbeat period (Mooncake: 1 s).
	DefaultPingInterval = time.Second
	// DefaultPingFailures is how many missed heartbeats make the client
	// re-resolve the master (Mooncake: 3).
	DefaultPingFailures = 3
	// DefaultRPCTimeout bounds one master call (MC_RPC_TIMEOUT_MS).
	DefaultRPCTimeout = 10 * time.Second
	// EmbeddedMaster is the MasterServerAddr that asks for an in-process
	// master (as does "").
	EmbeddedMaster = "embedded"
)

// Values of Config.MasterRPC.
const (
	// MasterRPCAuto first calls the kvferry-only coro_rpc function
	// kvferry_master_info: a master answering "function not registered"
	// (mooncake_master) is called with Mooncake's master protocol; any
	// other, including one that answers it or not in time, with mux,
	// falling back to gRPC. kvferry-master speaks mux and coro_rpc on one
	// port, and gets mux: its own protocol is preferred.
	MasterRPCAuto = "auto"
	// MasterRPCKvferry uses only kvferry's own protocols: mux, falling
	// back to gRPC.
	MasterRPCKvferry = "kvferry"
	// MasterRPCMooncake uses only Mooncake's master protocol (coro_rpc with
	// struct_pack bodies), for mooncake_master; the calls it lacks fail
	// with ErrNotSupportedByMooncakeMaster.
	MasterRPCMooncake = "mooncake"
	// MasterRPCMux uses only the mux protocol.
	MasterRPCMux = "mux"
	// MasterRPCGRPC uses only gRPC.
	MasterRPCGRPC = "grpc"
)

// InProcessMaster is a master running in this process.
type InProcessMaster struct {
	// Addr is its gRPC address (loopback), for other processes and tools.
	Addr string
	// Client, when set, reaches it without gRPC (direct calls); nil means
	// the client dials Addr.
	Client wire.MasterClient
	// Stop stops it; the client calls it on Close.
	Stop io.Closer
}

// EmbeddedMasterFunc starts an in-process master. store/embedded provides
// one (the client never imports store/master).
type EmbeddedMasterFunc func() (InProcessMaster, error)

// Config configures a Client. The zero value works for a single process:
// an embedded master (given EmbeddedMaster), P2P metadata, TCP, a 16 MiB
// staging buffer and no mounted segment.
type Config struct {
	// LocalHostname is the transfer engine's local server name: the host
	// (P2P mode; a ":port" suffix is ignored) or the segment name. Default:
	// the first non-loopback IPv4 address, else 127.0.0.1.
	LocalHostname string
	// MetadataServer is the transfer-engine metadata connection string
	// (default "P2PHANDSHAKE").
	MetadataServer string
	// GlobalSegmentSize is the memory this client lends to the store, in
	// bytes: mapped, registered and mounted at New. 0 means none (a pure
	// client).
	GlobalSegmentSize uint64
	// LazySegment leaves the lent memory unfaulted until first use. By
	// default New faults it in (MAP_POPULATE), so the first puts into it
	// pay no page faults (about 4 ms per MiB here otherwise);
	// KVFERRY_STORE_LAZY_SEGMENT=1 sets it.
	LazySegment bool
	// NoHugePages keeps the lent memory on 4 KiB pages. By default it is
	// advised for transparent huge pages (MADV_HUGEPAGE), which makes
	// cross-process copies into and out of it (process_vm_readv/writev,
	// the cma transport) markedly faster: a 1 MiB copy here takes about
	// 110 us instead of 170 us. KVFERRY_STORE_HUGEPAGES=0 sets it.
	NoHugePages bool
	// LocalBufferSize is the registered staging buffer for Put and Get of
	// memory that is not registered, in bytes (default 16 MiB). Objects
	// larger than it are staged in chunks.
	LocalBufferSize uint64
	// NoLocalBuffer disables the staging buffer (Mooncake's
	// local_buffer_size = 0): Put and Get then need registered memory or a
	// replica in this process.
	NoLocalBuffer bool
	// Protocol is the transport this client offers ("tcp", default).
	Protocol string
	// DeviceName lists RDMA devices (unused by TCP).
	DeviceName string
	// MasterServerAddr is "host:port", "etcd://h1:2379;h2:2379" (HA: follow
	// the leader), or "" / "embedded" (an in-process master started with
	// StartEmbeddedMaster).
	MasterServerAddr string
	// ClusterID is the HA cluster whose leader an etcd:// address names
	// (default "mooncake_cluster"; MC_STORE_CLUSTER_ID).
	ClusterID string
	// StartEmbeddedMaster starts the embedded master; required when
	// MasterServerAddr is "" or "embedded".
	StartEmbeddedMaster EmbeddedMasterFunc
	// Engine is a transfer engine to share; nil means New creates one from
	// Stack (and Close closes it).
	Engine *engine.Engine
	// Stack is the base configuration of a created engine; LocalHostname,
	// MetadataServer and Protocol override its fields.
	Stack stack.Config
	// MasterRPC is how a remote master is called: MasterRPCAuto (default,
	// also ""), MasterRPCKvferry, MasterRPCMux, MasterRPCGRPC or
	// MasterRPCMooncake (KVFERRY_MASTER_PROTOCOL in the C API). Mux carries the same
	// messages as gRPC over one persistent connection per client, with a
	// round trip several times cheaper (store/wire, mux.go); every kvferry
	// master serves both on its one port.
	MasterRPC string
	// NoPutGrants makes every put take two master round trips (PutStart,
	// PutEnd). By default a master that offers put grants gets one round
	// trip per put that fits (PutCommit; store/client grants.go).
	NoPutGrants bool
	// RPCTimeout bounds one master call (default 10 s; MC_RPC_TIMEOUT_MS).
	RPCTimeout time.Duration
	// MasterStallTimeout is the floor of the liveness bound of the mux
	// connection to the master: a connection on which requests have waited
	// this long with no answer arriving is taken for dead, and the calls
	// in flight fail (the next call dials again). The bound rises above it
	// to 4 times the longest answerless wait the client saw end in an
	// answer (a slow, loaded machine raises it by itself), up to a minute.
	// Zero means wire.DefaultMuxStall (5 s); KVFERRY_STORE_MASTER_STALL_MS.
	MasterStallTimeout time.Duration
	// PingInterval is the heartbeat period (default 1 s).
	PingInterval time.Duration
	// PingFailures is the number of consecutive failed heartbeats after
	// which the client re-resolves the master (default 3).
	PingFailures int
	// HotCacheBytes turns the local hot cache on (Mooncake's
	// MC_STORE_LOCAL_HOT_CACHE_SIZE; hotcache.go): up to this many bytes
	// of objects read from other clients' segments are kept in this
	// client's memory and served from there while the master names the
	// same incarnation of the key. 0 (the default): off.
	HotCacheBytes uint64
	// NoSpeculativeGets turns speculative gets off (spec.go): by default a
	// get of a key this client put or read before reads the replica it
	// knows of while the master answers, and keeps the bytes when the
	// master names that same replica. KVFERRY_STORE_SPECULATIVE_GETS=0
	// sets it.
	NoSpeculativeGets bool
	// SpeculativeGetMax, when not 0, is the largest value a get reads
	// speculatively (KVFERRY_STORE_SPECULATIVE_GET_MAX, bytes).
	SpeculativeGetMax uint64
	// HotCacheAdmission is the number of remote reads of a key that
	// admits it (MC_STORE_LOCAL_HOT_ADMISSION_THRESHOLD, default 2).
	HotCacheAdmission int
	// SSDOffloadPath turns the disk tier on (Mooncake's
	// enable_ssd_offload with ssd_offload_path): objects in this client's
	// segment are written to checksummed files in this directory before
	// the master evicts them from memory, and read back on get (store/ssd,
	// tier.go). Files that survive a restart of the client intact are
	// announced again. Empty: no disk tier.
	SSDOffloadPath string
	// SSDCapacity bounds the bytes the disk tier takes (0: 90% of the
	// directory's free space).
	SSDCapacity uint64
	// DiskServeBufferSize is the registered memory a client with a disk
	// tier reads its files into when other clients read them
	// (diskserve.go; Mooncake's client buffer of the offload RPC). 0 means
	// DefaultDiskServeBufferSize; it is mapped when the tier opens and
	// fills only as reads come. An object larger than it is read through
	// a promotion into the holder's memory instead.
	DiskServeBufferSize uint64
	// DrainOnClose, when positive, makes Close unmount gracefully: the
	// master moves the objects of this client's segment to other segments
	// first, waiting up to this long (rolling restarts keep their KV
	// cache). KVFERRY_STORE_DRAIN_ON_CLOSE_MS.
	DrainOnClose time.Duration
	// TenantID is the namespace of every key this client puts, reads and
	// removes (Mooncake's tenant_id; "" is "default"): clients of different
	// tenants on one master never see each other's objects (wire.TenantID
	// says which ids are valid).
	TenantID string
	// Logger receives state changes (connect, remount, failover); nil
	// discards.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.MetadataServer == "" {
		c.MetadataServer = "P2PHANDSHAKE"
	}
	if c.LocalHostname == "" {
		c.LocalHostname = engine.FirstNonLoopbackIPv4()
	}
	if c.LocalBufferSize == 0 {
		c.LocalBufferSize = DefaultLocalBufferSize
	}
	if c.DiskServeBufferSize == 0 {
		c.DiskServeBufferSize = DefaultDiskServeBufferSize
	}
	if c.Protocol == "" {
		c.Protocol = "tcp"
	}
	if c.ClusterID == "" {
		c.ClusterID = ha.DefaultClusterID
	}
	if c.MasterRPC == "" {
		c.MasterRPC = MasterRPCAuto
	}
	if c.RPCTimeout == 0 {
		c.RPCTimeout = DefaultRPCTimeout
	}
	if c.PingInterval == 0 {
		c.PingInterval = DefaultPingInterval
	}
	if c.PingFailures == 0 {
		c.PingFailures = DefaultPingFailures
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.TenantID == "" {
		c.TenantID = wire.DefaultTenant
	}
	if c.MasterStallTimeout == 0 {
		c.MasterStallTimeout = wire.DefaultMuxStall
	}
	return c
}

// Validate names the first bad field.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.RPCTimeout < 0 || c.PingInterval < 0 || c.MasterStallTimeout < 0:
		return errors.New("store client config: negative timeout")
	case c.PingFailures < 0:
		return errors.New("store client config: negative PingFailures")
	case c.MasterRPC != MasterRPCAuto && c.MasterRPC != MasterRPCKvferry && c.MasterRPC != MasterRPCMux &&
		c.MasterRPC != MasterRPCGRPC && c.MasterRPC != MasterRPCMooncake:
		return fmt.Errorf("store client config: MasterRPC %q: want %q, %q, %q, %q or %q", c.MasterRPC, MasterRPCAuto,
			MasterRPCKvferry, MasterRPCMux, MasterRPCGRPC, MasterRPCMooncake)
	case isEmbedded(c.MasterServerAddr) && c.StartEmbeddedMaster == nil:
		return errors.New("store client config: the embedded master needs StartEmbeddedMaster (use store/embedded)")
	}
	if _, err := wire.TenantID(c.TenantID); err != nil {
		return fmt.Errorf("store client config: TenantID: %w", err)
	}
	if strings.HasPrefix(c.MasterServerAddr, ha.Scheme) {
		if _, err := ha.ParseEndpoints(c.MasterServerAddr); err != nil {
			return fmt.Errorf("store client config: MasterServerAddr: %w", err)
		}
	}
	return nil
}

func isEmbedded(addr string) bool {
	return addr == "" || addr == EmbeddedMaster
}

// String returns the effective configuration for the start-up log.
func (c Config) String() string {
	c = c.withDefaults()
	return fmt.Sprintf("local_hostname=%s metadata=%s global_segment_size=%d lazy_segment=%v huge_pages=%v "+
		"local_buffer_size=%d no_local_buffer=%v "+
		"protocol=%s master=%q master_rpc=%s put_grants=%v cluster_id=%s tenant_id=%q rpc_timeout=%v ping_interval=%v master_stall=%v",
		c.LocalHostname, connstr.Redact(c.MetadataServer), c.GlobalSegmentSize, c.LazySegment, !c.NoHugePages, c.LocalBufferSize, c.NoLocalBuffer,
		c.Protocol, c.MasterServerAddr, c.MasterRPC, !c.NoPutGrants, c.ClusterID, c.TenantID, c.RPCTimeout, c.PingInterval, c.MasterStallTimeout)
}
