// Package open turns a Mooncake metadata connection string into a
// metadata.Backend (specs/mooncake.md §3.1): "P2PHANDSHAKE" is the P2P
// handshake, "http://…" and "https://…" the HTTP metadata protocol,
// "etcd://h:p[,h:p]" and a bare "h:p[,h:p]" etcd,
// "redis://[user:password@]h[:p][/db]" and "rediss://…" Redis. It lives apart from
// package metadata so that metadata does not import its backends.
package open

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"

	"github.com/kvferry/kvferry/engine/metadata"
	"github.com/kvferry/kvferry/engine/metadata/connstr"
	"github.com/kvferry/kvferry/engine/metadata/etcd"
	mdhttp "github.com/kvferry/kvferry/engine/metadata/http"
	"github.com/kvferry/kvferry/engine/metadata/redis"
	"github.com/kvferry/kvferry/engine/peerauth"
	"github.com/kvferry/kvferry/engine/rpc"
)

// ErrBadConn is returned (wrapped) for a connection string that cannot be
// used: empty, malformed, or naming an unsupported service.
var ErrBadConn = connstr.ErrBadConn

// Kind names a metadata service type (connstr.Kind).
type Kind = connstr.Kind

// Service kinds.
const (
	KindP2P   = connstr.KindP2P
	KindHTTP  = connstr.KindHTTP
	KindEtcd  = connstr.KindEtcd
	KindRedis = connstr.KindRedis
)

// Conn is a parsed connection string (connstr.Conn).
type Conn = connstr.Conn

// Parse parses a connection string as Mooncake does (connstr.Parse).
func Parse(conn string) (Conn, error) { return connstr.Parse(conn) }

// Options configures Open. The zero value works.
type Options struct {
	// KV configures the key layout (ClusterID, from MC_METADATA_CLUSTER_ID)
	// and re-publishing of the http, etcd and redis backends.
	KV metadata.KVConfig
	// HTTP configures the HTTP client; its URL is taken from the
	// connection string.
	HTTP mdhttp.Config
	// Etcd configures the etcd client; its Endpoints are taken from the
	// connection string.
	Etcd etcd.Config
	// Redis configures the Redis client; its Addr, TLS on or off, and
	// (when the URL has them) credentials and database index are taken
	// from the connection string.
	Redis redis.Config
	// RPC configures the P2P backend's socket RPC calls.
	RPC rpc.ClientConfig
	// Auth is the cluster key: it authenticates the P2P RPC calls and the
	// connections to an HTTP metadata server (it fills RPC.Auth and
	// HTTP.Auth where they are nil). etcd and Redis have their own
	// authentication (etcd users, Redis AUTH); the cluster key does not
	// reach them.
	Auth *peerauth.Keys
	// TLS is the client TLS configuration of the control plane: it fills
	// RPC.TLS, HTTP.TLS (https URLs), Etcd.TLS and, for rediss:// URLs,
	// Redis.TLS where they are nil.
	TLS *tls.Config
	// Logger is used by every backend whose own Logger is nil; nil
	// discards.
	Logger *slog.Logger
}

// Open parses conn and returns its backend. For http, etcd and redis it
// contacts the service first, so an unreachable service fails here, within
// the configured timeouts (HTTP: Timeout; etcd and Redis: DialTimeout),
// with an error matching metadata.ErrUnavailable. A malformed conn matches
// ErrBadConn. Errors show conn without its password.
func Open(ctx context.Context, conn string, opts Options) (metadata.Backend, error) {
	c, err := Parse(conn)
	if err != nil {
		return nil, err
	}
	conn = c.String() // for errors: canonical, without a password
	if opts.KV.Logger == nil {
		opts.KV.Logger = opts.Logger
	}
	if c.Kind != KindP2P {
		if err := opts.KV.Validate(); err != nil {
			return nil, fmt.Errorf("open metadata %s: %w", conn, err)
		}
	}
	if opts.RPC.Auth == nil {
		opts.RPC.Auth = opts.Auth
	}
	if opts.HTTP.Auth == nil {
		opts.HTTP.Auth = opts.Auth
	}
	if opts.TLS != nil {
		if opts.RPC.TLS == nil {
			opts.RPC.TLS = opts.TLS
		}
		if opts.HTTP.TLS == nil {
			opts.HTTP.TLS = opts.TLS
		}
		if opts.Etcd.TLS == nil {
			opts.Etcd.TLS = opts.TLS
		}
	}
	switch c.Kind {
	case KindP2P:
		return metadata.NewP2P(opts.RPC), nil
	case KindHTTP:
		cfg := opts.HTTP
		cfg.URL = c.URL
		if cfg.Logger == nil {
			cfg.Logger = opts.Logger
		}
		cl, err := mdhttp.NewClient(cfg)
		if err != nil {
			return nil, fmt.Errorf("open metadata %s: %w", conn, err)
		}
		if err := cl.Probe(ctx); err != nil {
			_ = cl.Close()
			return nil, fmt.Errorf("open metadata %s: %w", conn, err)
		}
		b, err := metadata.NewKVBackend(cl, opts.KV)
		if err != nil {
			_ = cl.Close()
			return nil, fmt.Errorf("open metadata %s: %w", conn, err)
		}
		return b, nil
	case KindEtcd:
		cfg := opts.Etcd
		cfg.Endpoints = c.Endpoints
		if cfg.Logger == nil {
			cfg.Logger = opts.Logger
		}
		kv, err := etcd.New(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("open metadata %s: %w", conn, err)
		}
		b, err := metadata.NewKVBackend(kv, opts.KV)
		if err != nil {
			_ = kv.Close()
			return nil, fmt.Errorf("open metadata %s: %w", conn, err)
		}
		return b, nil
	case KindRedis:
		cfg := RedisConfig(c.Redis, opts.Redis, opts.TLS)
		if cfg.Logger == nil {
			cfg.Logger = opts.Logger
		}
		if err := cfg.Validate(); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrBadConn, conn, err)
		}
		kv, err := redis.New(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("open metadata %s: %w", conn, err)
		}
		b, err := metadata.NewKVBackend(kv, opts.KV)
		if err != nil {
			_ = kv.Close()
			return nil, fmt.Errorf("open metadata %s: %w", conn, err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("%w: %q", ErrBadConn, conn)
}

// RedisConfig returns the Redis client configuration of a parsed Redis
// URL u over base (from the environment: MC_REDIS_USERNAME,
// MC_REDIS_PASSWORD, MC_REDIS_DB_INDEX): the URL's address, its user
// information when it has any (else base's credentials), its database
// index when it has one (else base.DB), and for rediss:// base.TLS, else
// tlsConf (the control plane's), else TLS with the system's roots.
func RedisConfig(u connstr.Redis, base redis.Config, tlsConf *tls.Config) redis.Config {
	cfg := base
	cfg.Addr = u.Addr
	if u.Password != "" {
		cfg.Username, cfg.Password = u.Username, u.Password
	}
	if u.HasDB {
		cfg.DB = u.DB
	}
	switch {
	case !u.TLS:
		cfg.TLS = nil
	case cfg.TLS != nil:
	case tlsConf != nil:
		cfg.TLS = tlsConf
	default:
		cfg.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	return cfg
}
