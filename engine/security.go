package engine

import (
	"log/slog"
	"net"
	"sync"

	"github.com/kvferry/kvferry/engine/peerauth"
	"github.com/kvferry/kvferry/engine/rpc"
	"github.com/kvferry/kvferry/engine/tlsconf"
)

// RPCClientConfig is how this engine calls peers' RPC ports: its connect
// timeout, frame cap and cluster key.
func (e *Engine) RPCClientConfig() rpc.ClientConfig {
	return rpc.ClientConfig{ConnectTimeout: e.cfg.ConnectTimeout, MaxMessage: e.cfg.HandshakeMaxLength, Auth: e.cfg.Auth,
		TLS: e.cfg.TLS.ClientConfig()}
}

// TLS returns the control plane's TLS configuration, or nil.
func (e *Engine) TLS() *tlsconf.Pair { return e.cfg.TLS }

// Auth returns the cluster key, or nil when authentication is off.
func (e *Engine) Auth() *peerauth.Keys { return e.cfg.Auth }

// RemoteServable reports whether r may be served to a remote peer: always
// without a cluster key (as Mooncake, which ignores the flag for TCP);
// with one, only memory registered as remotely accessible.
func (e *Engine) RemoteServable(r *Region) bool { return e.cfg.Auth == nil || r.RemoteAccessible }

// PinRemote is Pin for a request of a remote peer: with a cluster key,
// memory registered as not remotely accessible is refused (nil).
func (e *Engine) PinRemote(addr, length uint64) *Region {
	r := e.Pin(addr, length)
	if r != nil && !e.RemoteServable(r) {
		r.Release()
		return nil
	}
	return r
}

var openListenWarning sync.Once

// warnOpenListeners logs once per process when listeners bind to every
// interface without authentication: anyone who can reach the host can then
// read and write the registered memory.
func warnOpenListeners(log *slog.Logger, bindIP string, auth *peerauth.Keys) {
	if auth != nil {
		return
	}
	if ip := net.ParseIP(bindIP); bindIP != "" && (ip == nil || !ip.IsUnspecified()) {
		return
	}
	openListenWarning.Do(func() {
		log.Warn(peerauth.OpenListenWarning, "listener", "engine (rpc, data)", "addr", bindIP,
			"note", "any host that reaches these ports can read and write registered memory; bind with MC_TCP_BIND_ADDRESS or KVFERRY_BIND_ADDR")
	})
}
