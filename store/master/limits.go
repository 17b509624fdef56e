package master

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/kvferry/kvferry/internal/netguard"
	"github.com/kvferry/kvferry/internal/spin"
	"github.com/kvferry/kvferry/store/wire"
)

// Connection and work limits of the master's RPC port (Config).
const (
	// DefaultMaxConnsPerIP leaves room for many client processes per host.
	DefaultMaxConnsPerIP = 256
	// DefaultMaxInflightBytes bounds the bytes of large requests (over
	// 64 KiB) being read or served at once, over all connections.
	DefaultMaxInflightBytes = 256 << 20
	// maxStreamsPerConn bounds the gRPC calls one connection runs at once.
	maxStreamsPerConn = 32
)

func (c Config) limitDefaults() Config {
	if c.MaxKeyBytes <= 0 {
		c.MaxKeyBytes = wire.DefaultMaxKeyBytes
	}
	if c.MaxBatchKeys <= 0 {
		c.MaxBatchKeys = wire.DefaultMaxBatchKeys
	}
	if c.MaxConns <= 0 {
		c.MaxConns = netguard.DefaultMaxConns()
	}
	if c.MaxConnsPerIP <= 0 {
		c.MaxConnsPerIP = DefaultMaxConnsPerIP
	}
	if c.MaxInflightBytes <= 0 {
		c.MaxInflightBytes = DefaultMaxInflightBytes
	}
	return c
}

// requestLimits returns the per-request limits of cfg.
func (c Config) requestLimits() wire.RequestLimits {
	return wire.RequestLimits{MaxKeyBytes: c.MaxKeyBytes, MaxBatchKeys: c.MaxBatchKeys}
}

// grpcLimitOptions are the gRPC server options that bound a client: the
// shape of each request is checked before it is decoded, its keys and
// lists after, and a connection runs a bounded number of calls at once.
func (s *Server) grpcLimitOptions() []grpc.ServerOption {
	lim := s.cfg.requestLimits()
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(wire.ShapeCodec{MaxElements: 4 * s.cfg.MaxBatchKeys}),
		grpc.MaxConcurrentStreams(maxStreamsPerConn),
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if m, ok := req.(proto.Message); ok {
				if err := lim.Check(m); err != nil {
					return nil, wire.ToStatus(err)
				}
			}
			return h(ctx, req)
		}),
	}
}

// muxConfig is the mux server configuration of s.
func (s *Server) muxConfig() wire.MuxServerConfig {
	return wire.MuxServerConfig{Limits: s.cfg.requestLimits(), Budget: s.budget, SpinWait: spin.Budget(s.cfg.SpinWait)}
}
