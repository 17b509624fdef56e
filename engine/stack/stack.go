// Package stack assembles a ready transfer engine: it opens the metadata
// backend named by the connection string and gives the engine a factory for
// every transport kvferry ships. engine itself imports no transport, so this
// package is where they meet.
package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/gpu"
	"github.com/kvferry/kvferry/engine/metadata"
	"github.com/kvferry/kvferry/engine/metadata/open"
	"github.com/kvferry/kvferry/engine/rpc"
	"github.com/kvferry/kvferry/engine/transport/efa"
	"github.com/kvferry/kvferry/engine/transport/local"
	"github.com/kvferry/kvferry/engine/transport/rdma"
	"github.com/kvferry/kvferry/engine/transport/samehost"
	"github.com/kvferry/kvferry/engine/transport/tcp"
)

// Config configures an engine and its transports.
type Config struct {
	// Engine configures the engine; Metadata and NewTransport are filled
	// in by New when nil.
	Engine engine.Config
	// TCP configures the TCP transport.
	TCP tcp.Config
	// Local configures the same-process transport.
	Local local.Config
	// SameHost configures the cma and shm transports (other processes of
	// this host).
	SameHost samehost.Config
	// RDMA configures the RDMA transport (NIC filter, priority matrix,
	// Mooncake's MC_* resources and addressing).
	RDMA rdma.Config
	// EFA configures the libfabric transport "efa" (library, provider,
	// domains); installed when asked for by name (protocol "efa").
	EFA efa.Config
	// Metadata configures the backend opened from Engine.MetadataConn:
	// cluster id (MC_METADATA_CLUSTER_ID), re-publish interval, HTTP
	// timeouts, etcd lease TTL, Redis credentials, database and key TTL.
	// Its RPC and Logger default to the engine's.
	Metadata open.Options
	// AutoDiscover installs DefaultTransports at start (Mooncake's
	// auto_discover = 1) unless Engine.Transports names others, and the
	// RDMA transport too when an RDMA NIC is usable and TCP is not forced
	// (MC_FORCE_TCP; MC_FORCE_HCA installs it even then).
	AutoDiscover bool
	// ForceRDMA is MC_FORCE_HCA: auto-discovery installs RDMA even when TCP
	// is forced.
	ForceRDMA bool
	// GPU configures GPU memory support (the CUDA driver, loaded lazily):
	// New makes the engine classify registrations with it unless
	// Engine.Memory is set.
	GPU gpu.Config
	// Protocol is the transport the caller asked for (the protocol
	// argument of Mooncake's initialize and setup: "rdma", "tcp", ...).
	// New installs it when it can run here; when it cannot, the engine
	// works with the transports it has, as Mooncake users rely on, and New
	// logs once, at warning level, which transport is used and why.
	Protocol string
}

// protoHIP is Mooncake's protocol of its ROCm build's same-host GPU
// transport (specs/mooncake.md §1.7).
const protoHIP = "hip"

// DefaultTransports are installed by AutoDiscover, best first.
var DefaultTransports = []string{local.Name, samehost.NameCMA, samehost.NameNVLink, samehost.NameShm, tcp.Name}

// GPURuntime returns the process's GPU runtime for cfg.GPU (its logger
// defaults to the engine's).
func GPURuntime(cfg Config) *gpu.Runtime {
	g := cfg.GPU
	if g.Logger == nil {
		g.Logger = cfg.Engine.Logger
	}
	return gpu.Shared(g)
}

func sameHostConfig(cfg Config) samehost.Config {
	sc := cfg.SameHost
	if sc.GPU == nil {
		sc.GPU = GPURuntime(cfg)
	}
	return sc
}

// Factory returns the transport factory for cfg.
func Factory(cfg Config) engine.TransportFactory {
	return func(name string, e *engine.Engine) (engine.Transport, error) {
		switch strings.ToLower(name) {
		case tcp.Name:
			tc := cfg.TCP
			if tc.GPU == nil {
				tc.GPU = GPURuntime(cfg)
			}
			return tcp.New(e, tc)
		case local.Name:
			lc := cfg.Local
			if lc.GPU == nil {
				lc.GPU = GPURuntime(cfg)
			}
			return local.New(e, lc), nil
		case samehost.NameCMA:
			return samehost.NewCMA(e, sameHostConfig(cfg)), nil
		case samehost.NameShm:
			return samehost.NewShm(e, sameHostConfig(cfg)), nil
		case samehost.NameNVLink:
			sc := sameHostConfig(cfg)
			if strings.EqualFold(strings.TrimSpace(cfg.Protocol), protoHIP) && sc.MooncakeProtocol == "" {
				sc.MooncakeProtocol = protoHIP // Mooncake's ROCm peers map our device memory
			}
			return samehost.NewNVLink(e, sc), nil
		case rdma.Name:
			rc := cfg.RDMA
			if args := e.TransportArgs(rdma.Name); len(args) > 0 && args[0] != "" {
				rc.Matrix = args[0] // installTransport("rdma", args): the priority matrix
			}
			if rc.GPU == nil {
				rc.GPU = GPURuntime(cfg)
			}
			return rdma.New(e, rc)
		case efa.Name:
			return efa.New(e, cfg.EFA)
		}
		return nil, fmt.Errorf("transport %q: %w", name, engine.ErrNotSupported)
	}
}

// OpenMetadata opens the metadata backend for a connection string
// (engine/metadata/open): P2PHANDSHAKE, http(s)://…, etcd://… or
// redis(s)://…. A
// malformed string wraps engine.ErrInvalidArgument, an unreachable service
// engine.ErrMetadata.
func OpenMetadata(ctx context.Context, conn string, ec engine.Config, mo open.Options) (metadata.Backend, error) {
	if conn == "" {
		conn = metadata.P2PHandshake
	}
	if mo.RPC == (rpc.ClientConfig{}) {
		mo.RPC = rpc.ClientConfig{ConnectTimeout: ec.ConnectTimeout, MaxMessage: ec.HandshakeMaxLength}
	}
	if mo.Auth == nil {
		mo.Auth = ec.Auth
	}
	if mo.TLS == nil {
		mo.TLS = ec.TLS.ClientConfig()
	}
	if mo.Logger == nil {
		mo.Logger = ec.Logger
	}
	m, err := open.Open(ctx, conn, mo)
	if errors.Is(err, open.ErrBadConn) {
		return nil, fmt.Errorf("%w: %w", engine.ErrInvalidArgument, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", engine.ErrMetadata, err)
	}
	return m, nil
}

// New opens the metadata backend and starts an engine.
func New(ctx context.Context, cfg Config) (*engine.Engine, error) {
	ec := cfg.Engine
	if ec.MetadataConn == "" {
		ec.MetadataConn = metadata.P2PHandshake
	}
	if err := ec.LoadSecurity(); err != nil { // the metadata backend needs the key too
		return nil, err
	}
	if ec.Metadata == nil {
		m, err := OpenMetadata(ctx, ec.MetadataConn, ec, cfg.Metadata)
		if err != nil {
			return nil, err
		}
		ec.Metadata = m
	}
	if ec.NewTransport == nil {
		ec.NewTransport = Factory(cfg)
	}
	if ec.Memory == nil {
		ec.Memory = GPURuntime(cfg)
	}
	lg := ec.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	withRDMA := false
	if cfg.AutoDiscover && len(ec.Transports) == 0 {
		ec.Transports = DefaultTransports
		if ec.ForceTransport != tcp.Name || cfg.ForceRDMA {
			if devs, err := rdma.Available(cfg.RDMA); err == nil {
				withRDMA = true
				ec.Transports = append(append([]string(nil), DefaultTransports[:len(DefaultTransports)-1]...), rdma.Name, tcp.Name)
				lg.Info("rdma devices found", "devices", devs)
			} else {
				lg.Info("rdma not installed", "reason", err)
			}
		}
	}
	e, err := engine.New(ctx, ec)
	if err != nil && withRDMA && cfg.Engine.Metadata == nil {
		// The NICs were listed but could not be used: run without them
		// (the failed engine closed its metadata backend; open another).
		lg.Warn("rdma transport could not start; continuing without it", "err", err)
		ec.Transports = DefaultTransports
		if ec.Metadata, err = OpenMetadata(ctx, ec.MetadataConn, ec, cfg.Metadata); err != nil {
			return nil, err
		}
		e, err = engine.New(ctx, ec)
	}
	if err != nil {
		ec.Metadata.Close()
		return nil, err
	}
	open.LogStart(e.Logger(), ec.MetadataConn, open.Advertised{Segment: e.SegmentName(), Host: e.Host(), RPCPort: e.RPCPort()})
	installProtocol(e, lg, cfg.Protocol)
	return e, nil
}

// protocolLogged holds the requested protocols whose outcome was logged, so
// that each is logged once per process.
var protocolLogged sync.Map

// installProtocol installs the requested transport p (when it is one and
// not installed yet) and logs once which transport requests to remote
// peers use, and why when it is not p.
func installProtocol(e *engine.Engine, lg *slog.Logger, p string) {
	p = strings.ToLower(strings.TrimSpace(p))
	if p == "" {
		return
	}
	var why error
	switch p {
	case tcp.Name:
	case protoHIP:
		// Mooncake's same-host GPU transport of its ROCm build: ours is
		// nvlink, which then publishes "hip" (Factory).
		_, why = e.InstallTransport(samehost.NameNVLink)
	default:
		_, why = e.InstallTransport(p)
	}
	network := networkTransport(e)
	if _, seen := protocolLogged.LoadOrStore(p+"\x00"+network, true); seen {
		return
	}
	if why != nil || network != p {
		if why == nil {
			why = fmt.Errorf("installed, but %q ranks first for remote peers", network)
		}
		lg.Warn(fmt.Sprintf("protocol %q requested; transfers to other hosts use %s", p, network),
			"requested", p, "using", network, "why", why.Error(), "transports", e.Transports())
		return
	}
	lg.Info(fmt.Sprintf("protocol %q requested and used", p), "transports", e.Transports())
}

// networkTransport names the best installed transport that reaches other
// hosts ("none" when there is none).
func networkTransport(e *engine.Engine) string {
	for _, t := range e.Transports() {
		switch t {
		case local.Name, samehost.NameCMA, samehost.NameNVLink, samehost.NameShm:
			continue
		}
		return t
	}
	return "none"
}
