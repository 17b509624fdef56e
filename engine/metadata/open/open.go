// Package open turns a Mooncake metadata connection string into a
// metadata.Backend (specs/mooncake.md §3.1): "P2PHANDSHAKE" is the P2P
// handshake, "http://…" and "https://…" the HTTP metadata protocol,
// "etcd://h:p[,h:p]" and a bare "h:p[,h:p]" etcd. It lives apart from
// package metadata so that metadata does not import its backends.
package open

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"

	"github.com/kvferry/kvferry/engine/metadata"
	"github.com/kvferry/kvferry/engine/metadata/etcd"
	mdhttp "github.com/kvferry/kvferry/engine/metadata/http"
	"github.com/kvferry/kvferry/engine/peerauth"
	"github.com/kvferry/kvferry/engine/rpc"
)

// ErrBadConn is returned (wrapped) for a connection string that cannot be
// used: empty, malformed, or naming an unsupported service.
var ErrBadConn = errors.New("bad metadata connection string")

// Kind names a metadata service type.
type Kind string

// Service kinds.
const (
	KindP2P  Kind = "p2p"
	KindHTTP Kind = "http"
	KindEtcd Kind = "etcd"
)

// Conn is a parsed connection string.
type Conn struct {
	// Kind is the service type.
	Kind Kind
	// URL is the endpoint URL (KindHTTP).
	URL string
	// Endpoints lists etcd "host:port" endpoints (KindEtcd).
	Endpoints []string
}

// Hosts returns the hosts the connection reaches (none for P2P).
func (c Conn) Hosts() []string {
	switch c.Kind {
	case KindHTTP:
		if u, err := mdhttp.ParseURL(c.URL); err == nil {
			return []string{u.Hostname()}
		}
	case KindEtcd:
		hosts := make([]string, 0, len(c.Endpoints))
		for _, ep := range c.Endpoints {
			ep = strings.TrimPrefix(strings.TrimPrefix(ep, "http://"), "https://")
			if h, _, err := net.SplitHostPort(ep); err == nil {
				hosts = append(hosts, h)
			}
		}
		return hosts
	}
	return nil
}

// Remote reports whether the metadata service may be on another machine:
// it has a host that is not loopback. The engine warns when it advertises
// a loopback or link-local address while Remote is true.
func (c Conn) Remote() bool {
	for _, h := range c.Hosts() {
		if !metadata.IsLoopbackOrLinkLocal(h) {
			return true
		}
	}
	return false
}

// String returns the connection in its canonical form.
func (c Conn) String() string {
	switch c.Kind {
	case KindP2P:
		return metadata.P2PHandshake
	case KindHTTP:
		return c.URL
	case KindEtcd:
		return etcd.Scheme + strings.Join(c.Endpoints, ",")
	}
	return "<invalid>"
}

// Parse parses a connection string as Mooncake does: exactly
// "P2PHANDSHAKE"; a "<scheme>://" prefix selects http, https or etcd; no
// scheme means etcd. redis is recognised and refused (not implemented).
func Parse(conn string) (Conn, error) {
	s := strings.TrimSpace(conn)
	if s == "" {
		return Conn{}, fmt.Errorf("%w: empty (want %s, http://host:port/path or etcd://host:port)", ErrBadConn, metadata.P2PHandshake)
	}
	if s == metadata.P2PHandshake {
		return Conn{Kind: KindP2P}, nil
	}
	if len(s) >= len(metadata.P2PHandshake) && strings.EqualFold(s[:len(metadata.P2PHandshake)], metadata.P2PHandshake) {
		return Conn{}, fmt.Errorf("%w: %q: the P2P mode is spelled exactly %s", ErrBadConn, conn, metadata.P2PHandshake)
	}
	scheme, _, hasScheme := strings.Cut(s, "://")
	if !hasScheme {
		eps, err := etcd.ParseEndpoints(s)
		if err != nil {
			return Conn{}, fmt.Errorf("%w: %w", ErrBadConn, err)
		}
		return Conn{Kind: KindEtcd, Endpoints: eps}, nil
	}
	switch strings.ToLower(scheme) {
	case "http", "https":
		if scheme != "http" && scheme != "https" {
			return Conn{}, fmt.Errorf("%w: %q: scheme must be lower case", ErrBadConn, conn)
		}
		if _, err := mdhttp.ParseURL(s); err != nil {
			return Conn{}, fmt.Errorf("%w: %w", ErrBadConn, err)
		}
		return Conn{Kind: KindHTTP, URL: s}, nil
	case "etcd":
		if scheme != "etcd" {
			return Conn{}, fmt.Errorf("%w: %q: scheme must be lower case", ErrBadConn, conn)
		}
		eps, err := etcd.ParseEndpoints(s)
		if err != nil {
			return Conn{}, fmt.Errorf("%w: %w", ErrBadConn, err)
		}
		return Conn{Kind: KindEtcd, Endpoints: eps}, nil
	case "redis":
		return Conn{}, fmt.Errorf("%w: %q: redis metadata is not supported (use etcd or http)", ErrBadConn, conn)
	}
	return Conn{}, fmt.Errorf("%w: %q: unknown scheme %q (want http, https or etcd)", ErrBadConn, conn, scheme)
}

// Options configures Open. The zero value works.
type Options struct {
	// KV configures the key layout (ClusterID, from MC_METADATA_CLUSTER_ID)
	// and re-publishing of the http and etcd backends.
	KV metadata.KVConfig
	// HTTP configures the HTTP client; its URL is taken from the
	// connection string.
	HTTP mdhttp.Config
	// Etcd configures the etcd client; its Endpoints are taken from the
	// connection string.
	Etcd etcd.Config
	// RPC configures the P2P backend's socket RPC calls.
	RPC rpc.ClientConfig
	// Auth is the cluster key: it authenticates the P2P RPC calls and the
	// connections to an HTTP metadata server (it fills RPC.Auth and
	// HTTP.Auth where they are nil). etcd has its own authentication.
	Auth *peerauth.Keys
	// TLS is the client TLS configuration of the control plane: it fills
	// RPC.TLS, HTTP.TLS (https URLs) and Etcd.TLS where they are nil.
	TLS *tls.Config
	// Logger is used by every backend whose own Logger is nil; nil
	// discards.
	Logger *slog.Logger
}

// Open parses conn and returns its backend. For http and etcd it contacts
// the service first, so an unreachable service fails here, within the
// configured timeouts (HTTP: Timeout; etcd: DialTimeout), with an error
// matching metadata.ErrUnavailable. A malformed conn matches ErrBadConn.
func Open(ctx context.Context, conn string, opts Options) (metadata.Backend, error) {
	c, err := Parse(conn)
	if err != nil {
		return nil, err
	}
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
	}
	return nil, fmt.Errorf("%w: %q", ErrBadConn, conn)
}
