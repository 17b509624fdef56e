// Package metadata is how a transfer engine publishes its segment descriptor
// and finds its peers' descriptors and RPC endpoints. Backend is the
// interface the engine consumes; this package implements it for the P2P
// handshake (no server: descriptors are fetched live from the peer's RPC
// port) and, over any KV store, for Mooncake's key layout
// (specs/mooncake.md §3). KV stores live in subpackages (http, etcd, redis).
package metadata

import (
	"context"
	"errors"

	"github.com/kvferry/kvferry/engine/descriptor"
	"github.com/kvferry/kvferry/engine/metadata/connstr"
)

// Sentinel errors.
var (
	// ErrNotFound means the key or segment does not exist.
	ErrNotFound = errors.New("metadata not found")
	// ErrClosed means the backend was closed.
	ErrClosed = errors.New("metadata backend closed")
	// ErrUnavailable means the metadata service could not be reached.
	ErrUnavailable = errors.New("metadata service unavailable")
)

// P2PHandshake is the connection string of the P2P mode.
const P2PHandshake = connstr.P2PHandshake

// Backend publishes the local segment and resolves remote ones. All methods
// are safe for concurrent use; every call that can block honours ctx and
// returns an error once ctx is done. After Close every call returns
// ErrClosed.
type Backend interface {
	// P2P reports whether this is the P2P mode, in which the engine names its
	// segment "<host>:<rpc port>" and nothing is stored.
	P2P() bool
	// Publish stores the local segment descriptor and RPC endpoint under the
	// descriptor's name (a no-op in P2P mode).
	Publish(ctx context.Context, seg *descriptor.Segment, rpc descriptor.RPCMeta) error
	// Unpublish removes what Publish stored for name.
	Unpublish(ctx context.Context, name string) error
	// Fetch returns a remote segment's descriptor.
	Fetch(ctx context.Context, name string) (*descriptor.Segment, error)
	// Endpoint returns a remote segment's RPC endpoint.
	Endpoint(ctx context.Context, name string) (descriptor.RPCMeta, error)
	// Close releases the backend; a second Close is harmless.
	Close() error
}

// KV is a key-value store holding metadata values (Mooncake's HTTP metadata
// server, etcd, Redis). Get returns ErrNotFound (wrapped) for a missing key. Safe
// for concurrent use.
type KV interface {
	Get(ctx context.Context, key string) ([]byte, error)
	Put(ctx context.Context, key string, value []byte) error
	Delete(ctx context.Context, key string) error
	Close() error
}
