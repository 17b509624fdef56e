// Command kvferry-master is the kvferry store master, with the flags and
// defaults of Mooncake's mooncake_master where they apply
// (specs/mooncake.md §7.8). Flags take one or two dashes:
//
//	kvferry-master --rpc_port=50051 --metrics_port=9003 \
//	    --default_kv_lease_ttl=10000 --eviction_high_watermark_ratio=0.9
//
// HA: several masters with --enable_ha --etcd_endpoints="h1:2379;h2:2379"
// (or --ha_backend_connstring) elect a leader in etcd; the leader publishes
// its address at mooncake-store/<cluster_id>/master_view, where clients
// with master_server_addr "etcd://h1:2379;h2:2379" find it.
//
// Beyond mooncake_master: --put_grant_bytes and --put_grant_lease tune the
// put grants that let clients put with one master round trip instead of
// two (store/master grants.go).
//
// Persistence: --oplog_dir=DIR keeps the metadata (an operation log and
// snapshots) in DIR, so a restarted master serves every committed object
// once its holders remount (store/master persist.go); --oplog_fsync syncs
// each write to the device. With --enable_ha, --enable_oplog keeps it in
// etcd instead, so a new leader does.
//
// With --enable_http_metadata_server it also serves Mooncake's HTTP
// metadata protocol on --http_metadata_server_port (8080), so transfer
// engines can use "http://<master>:8080/metadata".
//
// It prints "listening on <addr>" on stdout once it accepts RPCs (useful
// with --port=0, which picks a free port), "metrics on <addr>" for the admin
// HTTP server, and logs to stderr. SIGINT or SIGTERM stops it (an HA leader
// gives up its leadership first).
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"log/slog"
	"net"
	nethttp "net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	mdhttp "github.com/kvferry/kvferry/engine/metadata/http"
	"github.com/kvferry/kvferry/engine/peerauth"
	"github.com/kvferry/kvferry/engine/tlsconf"
	"github.com/kvferry/kvferry/internal/hostenv"
	"github.com/kvferry/kvferry/internal/ratelog"
	"github.com/kvferry/kvferry/internal/spin"
	"github.com/kvferry/kvferry/store/ha"
	"github.com/kvferry/kvferry/store/master"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "kvferry-master:", err)
		os.Exit(1)
	}
}

// msDuration is a duration flag that takes Mooncake's integer milliseconds
// ("10000") or a Go duration ("10s").
type msDuration struct{ d *time.Duration }

func (m msDuration) String() string {
	if m.d == nil {
		return ""
	}
	return strconv.FormatInt(m.d.Milliseconds(), 10)
}

func (m msDuration) Set(s string) error { return setDuration(m.d, s, time.Millisecond) }

// secDuration takes integer seconds or a Go duration.
type secDuration struct{ d *time.Duration }

func (m secDuration) String() string {
	if m.d == nil {
		return ""
	}
	return strconv.FormatInt(int64(m.d.Seconds()), 10)
}

func (m secDuration) Set(s string) error { return setDuration(m.d, s, time.Second) }

func setDuration(d *time.Duration, s string, unit time.Duration) error {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n < 0 {
			return fmt.Errorf("negative duration %q", s)
		}
		*d = time.Duration(n) * unit
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	if v < 0 {
		return fmt.Errorf("negative duration %q", s)
	}
	*d = v
	return nil
}

// ignoredFlags are mooncake_master flags that have no meaning here; they are
// accepted (so existing command lines work) and logged.
var ignoredFlags = []string{
	"max_threads", "rpc_thread_num", "rpc_conn_timeout_seconds", "rpc_enable_tcp_no_delay",
	"rpc_interface", "root_fs_dir", "enable_offload", "enable_cxl",
	"global_file_segment_size", "enable_disk_eviction", "quota_bytes",
}

// options is the parsed command line.
type options struct {
	cfg            master.Config
	enableHTTPMeta bool
	httpMetaAddr   string
	log            *slog.Logger
}

// parse turns the command line into options; it logs nothing but the
// warnings about ignored flags.
func parse(args []string) (*options, error) {
	fs := flag.NewFlagSet("kvferry-master", flag.ContinueOnError)
	cfg := master.Config{
		DefaultKVLeaseTTL:      master.DefaultKVLeaseTTL,
		DefaultKVSoftPinTTL:    master.DefaultKVSoftPinTTL,
		MaxKVSoftPinTTL:        master.DefaultMaxKVSoftPinTTL,
		ClientTTL:              master.DefaultClientTTL,
		PutStartDiscardTimeout: master.DefaultPutStartDiscardTimeout,
		PutStartReleaseTimeout: master.DefaultPutStartReleaseTimeout,
	}
	port := fs.Int("port", master.DefaultRPCPort, "RPC port (deprecated: use --rpc_port)")
	rpcPort := fs.Int("rpc_port", 0, "RPC port (0: use --port, default 50051)")
	rpcAddress := fs.String("rpc_address", "0.0.0.0", "RPC bind address")
	advertise := fs.String("advertise_address", "", "address published as HA leader (default: bind address, or first non-loopback IPv4)")
	metricsPort := fs.Int("metrics_port", master.DefaultMetricsPort, "admin HTTP port (/metrics, /health, /get_all_segments, ...)")
	metricsHost := fs.String("metrics_host", "127.0.0.1", "admin HTTP bind address (kvferry: loopback by default; mooncake_master binds 0.0.0.0)")
	enableMetrics := fs.Bool("enable_metric_reporting", true, "serve the admin HTTP endpoints")
	fs.Var(msDuration{&cfg.DefaultKVLeaseTTL}, "default_kv_lease_ttl", "read lease in ms (or a duration like 10s)")
	fs.Var(msDuration{&cfg.DefaultKVSoftPinTTL}, "default_kv_soft_pin_ttl", "soft-pin TTL in ms (or a duration)")
	fs.Var(msDuration{&cfg.MaxKVSoftPinTTL}, "max_kv_soft_pin_ttl", "largest per-put soft-pin TTL in ms (or a duration)")
	allowEvictSoft := fs.Bool("allow_evict_soft_pinned_objects", true, "evict soft-pinned objects (last) when needed")
	fs.Float64Var(&cfg.EvictionRatio, "eviction_ratio", master.DefaultEvictionRatio, "fraction of capacity freed by one eviction round")
	fs.Float64Var(&cfg.EvictionHighWatermarkRatio, "eviction_high_watermark_ratio", master.DefaultEvictionHighWatermarkRatio, "usage above which eviction starts")
	fs.Var(secDuration{&cfg.ClientTTL}, "client_ttl", "seconds without ping before a client's segments are unmounted")
	fs.Var(secDuration{&cfg.PutStartDiscardTimeout}, "put_start_discard_timeout_sec", "seconds after which an unfinished put may be preempted")
	fs.Var(secDuration{&cfg.PutStartReleaseTimeout}, "put_start_release_timeout_sec", "seconds after which an unfinished put's space is reclaimed")
	fs.StringVar(&cfg.AllocationStrategy, "allocation_strategy", master.DefaultAllocationStrategy, "random or free_ratio_first")
	memAlloc := fs.String("memory_allocator", "offset", "allocator inside a segment (offset)")
	grantBytes := fs.Uint64("put_grant_bytes", master.DefaultGrantBytes,
		"size of the put grants that give clients one-round-trip puts (kvferry; 0: none, every put is PutStart and PutEnd)")
	fs.Var(msDuration{&cfg.GrantLease}, "put_grant_lease",
		"how long a client may write into a put grant after its last confirmation, in ms or a duration (kvferry; default 3 s, at most half of --client_ttl)")
	fs.BoolVar(&cfg.EnableHA, "enable_ha", false, "elect a leader among masters through etcd")
	haType := fs.String("ha_backend_type", "etcd", "HA backend (etcd)")
	haConn := fs.String("ha_backend_connstring", "", "HA backend endpoints, e.g. \"h1:2379;h2:2379\"")
	etcdEndpoints := fs.String("etcd_endpoints", "", "etcd endpoints for HA (legacy form of --ha_backend_connstring)")
	fs.StringVar(&cfg.ClusterID, "cluster_id", "", "HA cluster id (default MC_STORE_CLUSTER_ID, else mooncake_cluster)")
	enableHTTPMeta := fs.Bool("enable_http_metadata_server", false, "also serve the HTTP metadata protocol")
	httpMetaPort := fs.Int("http_metadata_server_port", 8080, "HTTP metadata server port")
	httpMetaHost := fs.String("http_metadata_server_host", "0.0.0.0", "HTTP metadata server bind address")
	fs.StringVar(&cfg.OplogDir, "oplog_dir", "",
		"keep the metadata (operation log and snapshots) in this directory: a restarted master serves every committed object (kvferry)")
	fs.BoolVar(&cfg.OplogFsync, "oplog_fsync", false, "sync each oplog write to the device before answering (survives machine crashes)")
	fs.BoolVar(&cfg.EnableOplog, "enable_oplog", false, "with --enable_ha: keep the metadata in etcd, so a new leader serves every committed object")
	fs.Var(secDuration{&cfg.RestoreWindow}, "restore_window", "seconds a restored master waits for logged segments to be remounted (default 2 x --client_ttl)")
	fs.IntVar(&cfg.SnapshotRecords, "snapshot_records", master.DefaultSnapshotRecords, "write a metadata snapshot after this many oplog records")
	fs.Var(secDuration{&cfg.SnapshotInterval}, "snapshot_interval_sec", "write a metadata snapshot at least this often while the oplog grows (default 300)")
	defKey, _ := hostenv.Getenv("KVFERRY_AUTH_KEY_FILE")
	fs.StringVar(&cfg.AuthKeyFile, "auth_key_file", defKey,
		"cluster key file: every client (and HTTP metadata peer) must prove it holds the key (kvferry; default KVFERRY_AUTH_KEY_FILE)")
	envTLS := tlsconf.FilesFromEnv(hostenv.Lookup)
	fs.StringVar(&cfg.TLSFiles.Cert, "tls_cert_file", envTLS.Cert, "TLS certificate of the RPC and HTTP metadata ports (kvferry; default KVFERRY_TLS_CERT_FILE)")
	fs.StringVar(&cfg.TLSFiles.Key, "tls_key_file", envTLS.Key, "TLS private key (kvferry; default KVFERRY_TLS_KEY_FILE)")
	fs.StringVar(&cfg.TLSFiles.CA, "tls_ca_file", envTLS.CA, "CA that signs client certificates; required with TLS (kvferry; default KVFERRY_TLS_CA_FILE)")
	fs.IntVar(&cfg.MaxKeyBytes, "max_key_bytes", 0, "largest object key in bytes (kvferry; default 4096)")
	fs.IntVar(&cfg.MaxBatchKeys, "max_batch_keys", 0, "most keys in one batch call (kvferry; default 65536)")
	fs.Float64Var(&cfg.OffloadWatermark, "ssd_offload_watermark", master.DefaultOffloadWatermark,
		"segment usage above which objects go to their client's disk tier (clients with ssd_offload_path)")
	tenantQuota := fs.String("tenant_quota", "", "tenant quotas, \"tenant=bytes[:objects],...\" (bytes may end in k, m, g or t; 0: no limit)")
	spinUS := fs.Int("spin_us", spinDefaultUS(), "microseconds a connection polls for the next request before it blocks (kvferry; 0: never; default KVFERRY_SPIN_US, else 50)")
	level := fs.String("log_level", "info", "log level: debug, info, warn or error")
	ignored := map[string]*string{}
	for _, name := range ignoredFlags {
		ignored[name] = fs.String(name, "", "accepted for mooncake_master compatibility; ignored")
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() != 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		return nil, fmt.Errorf("--log_level %q: %w", *level, err)
	}
	log := slog.New(ratelog.NewHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}), 0))
	cfg.Logger = log
	cfg.SpinWait = time.Duration(*spinUS) * time.Microsecond
	if *spinUS <= 0 {
		cfg.SpinWait = -1
	}
	cfg.KeepSoftPinned = !*allowEvictSoft
	cfg.GrantBytes, cfg.DisableGrants = *grantBytes, *grantBytes == 0
	fs.Visit(func(f *flag.Flag) {
		if _, ok := ignored[f.Name]; ok {
			log.Warn("flag ignored", "flag", f.Name, "value", f.Value.String())
		}
	})

	if *tenantQuota != "" {
		q, err := master.ParseTenantQuotas(*tenantQuota)
		if err != nil {
			return nil, fmt.Errorf("--tenant_quota: %w", err)
		}
		cfg.TenantQuotas = q
	}
	if *memAlloc != "offset" {
		return nil, fmt.Errorf("--memory_allocator %q: only offset is supported", *memAlloc)
	}
	p := *port
	if *rpcPort != 0 {
		p = *rpcPort
	}
	if p < 0 || p > 65535 {
		return nil, fmt.Errorf("--rpc_port %d out of range", p)
	}
	cfg.RPCAddr = net.JoinHostPort(*rpcAddress, strconv.Itoa(p))
	cfg.AdvertiseAddr = *advertise
	if *enableMetrics {
		cfg.MetricsAddr = net.JoinHostPort(*metricsHost, strconv.Itoa(*metricsPort))
	}
	if cfg.ClusterID == "" {
		if v, ok := hostenv.Getenv("MC_STORE_CLUSTER_ID"); ok && v != "" {
			cfg.ClusterID = v
		}
	}
	if cfg.EnableHA {
		if *haType != "etcd" {
			return nil, fmt.Errorf("--ha_backend_type %q: only etcd is supported", *haType)
		}
		conn := *haConn
		if conn == "" {
			conn = *etcdEndpoints
		}
		eps, err := ha.ParseEndpoints(conn)
		if err != nil {
			return nil, fmt.Errorf("--enable_ha needs --ha_backend_connstring or --etcd_endpoints: %w", err)
		}
		cfg.EtcdEndpoints = eps
	}

	return &options{
		cfg:            cfg,
		enableHTTPMeta: *enableHTTPMeta,
		httpMetaAddr:   net.JoinHostPort(*httpMetaHost, strconv.Itoa(*httpMetaPort)),
		log:            log,
	}, nil
}

func run(args []string) error {
	o, err := parse(args)
	if err != nil {
		return err
	}
	cfg, log := o.cfg, o.log
	var metaSrv *mdhttp.Server
	var metaHTTP *nethttp.Server
	if o.enableHTTPMeta {
		metaSrv, err = mdhttp.NewServer(mdhttp.ServerConfig{Logger: log})
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", o.httpMetaAddr)
		if err != nil {
			_ = metaSrv.Close()
			return fmt.Errorf("http metadata server listen: %w", err)
		}
		guard, err := metadataGuard(cfg.AuthKeyFile, log)
		if err != nil {
			_ = metaSrv.Close()
			ln.Close()
			return err
		}
		metaHTTP = mdhttp.HTTPServer(metaSrv, 0, log)
		l := peerauth.Listen(mdhttp.GuardListener(ln, "metadata", log), guard)
		if cfg.TLSFiles.Enabled() {
			p, err := tlsconf.Load(cfg.TLSFiles)
			if err != nil || p.Server == nil {
				_ = metaSrv.Close()
				ln.Close()
				return fmt.Errorf("http metadata server TLS: %w (a certificate and key are needed)", err)
			}
			l = tls.NewListener(l, p.Server)
		}
		go func() { _ = metaHTTP.Serve(l) }() // stopped by Shutdown below
		fmt.Printf("metadata on %s\n", ln.Addr())
	}

	if cfg.AuthKeyFile == "" {
		peerauth.WarnIfOpen(log, "store master", cfg.RPCAddr, nil)
		if o.enableHTTPMeta {
			peerauth.WarnIfOpen(log, "http metadata", o.httpMetaAddr, nil)
		}
	}
	srv, err := master.NewServer(cfg)
	if err != nil {
		if metaHTTP != nil {
			_ = metaHTTP.Close()
			_ = metaSrv.Close()
		}
		return err
	}
	fmt.Printf("listening on %s\n", srv.Addr())
	if a := srv.MetricsAddr(); a != "" {
		fmt.Printf("metrics on %s\n", a)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	log.Info("store master stopping")
	err = srv.Close()
	if metaHTTP != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = metaHTTP.Shutdown(sctx)
		cancel()
		_ = metaSrv.Close()
	}
	return err
}

// metadataGuard authenticates the HTTP metadata server's peers with the
// cluster key in path (nil guard: no key).
func metadataGuard(path string, log *slog.Logger) (*peerauth.Guard, error) {
	if path == "" {
		return nil, nil
	}
	ks, err := peerauth.LoadKeyFile(path)
	if err != nil {
		return nil, err
	}
	return peerauth.NewGuard(ks, peerauth.RoleMetadata, 0, log), nil
}

// spinDefaultUS is --spin_us's default: KVFERRY_SPIN_US, else spin.Default.
func spinDefaultUS() int {
	d := spin.Budget(hostenv.SpinWait())
	return int(d / time.Microsecond)
}
