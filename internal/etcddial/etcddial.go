// Package etcddial holds the gRPC connection parameters of every etcd
// client kvferry makes (the metadata KV, the store's HA leader election and
// leader discovery, and the tests' clients).
//
// etcd's client keeps reconnecting to its endpoints in the background with
// gRPC's default backoff, which grows to two minutes: after etcd was away
// for a minute, a client could wait most of another minute before it tries
// again, its calls blocked or failing meanwhile although etcd is back.
// Options bounds that wait to about two seconds, however long the outage.
package etcddial

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// MaxBackoff is the longest a client waits between connection attempts
// (before jitter of ±20%).
const MaxBackoff = 2 * time.Second

// Options returns the dial options for clientv3.Config.DialOptions;
// connectTimeout bounds one connection attempt (at least 1 s).
func Options(connectTimeout time.Duration) []grpc.DialOption {
	return []grpc.DialOption{grpc.WithConnectParams(Params(connectTimeout))}
}

// Params returns the connection parameters Options uses.
func Params(connectTimeout time.Duration) grpc.ConnectParams {
	return grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: MaxBackoff},
		MinConnectTimeout: max(connectTimeout, time.Second),
	}
}
