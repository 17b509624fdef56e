package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/kvferry/kvferry/engine/rpc"
)

// RPCHandler answers one type of socket-RPC request on the engine's RPC port
// for a transport (the RDMA transport's Connection handshake, for one). It
// returns the reply body; an error drops the connection without a reply.
type RPCHandler func(ctx context.Context, body []byte, peer net.Addr) ([]byte, error)

// ErrRPCDeclined, returned by a handler added with HandleRPCFirst, passes
// the request on to the type's handler added with HandleRPC (or to the
// engine's own answer): two transports share the Connection handshake so.
var ErrRPCDeclined = errors.New("rpc request declined by its first handler")

// rpcHooks holds the transports' RPC handlers by message type.
type rpcHooks struct {
	mu    sync.RWMutex
	m     map[rpc.Type]RPCHandler
	first map[rpc.Type]RPCHandler
}

func (h *rpcHooks) getFirst(t rpc.Type) RPCHandler {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.first[t]
}

// HandleRPCFirst makes h look at requests of type t before the handler
// added with HandleRPC and the engine's own answer; h returns an error
// wrapping ErrRPCDeclined for a request that is not its own (the efa
// transport answers the Connection handshakes that carry an efa_addr and
// leaves the others to the rdma transport). The returned function removes
// the handler. A second first handler for the same type is an error.
func (e *Engine) HandleRPCFirst(t rpc.Type, h RPCHandler) (remove func(), err error) {
	e.hooks.mu.Lock()
	defer e.hooks.mu.Unlock()
	if e.hooks.first == nil {
		e.hooks.first = make(map[rpc.Type]RPCHandler)
	}
	if e.hooks.first[t] != nil {
		return nil, fmt.Errorf("rpc type %s already has a first handler: %w", t, ErrInvalidArgument)
	}
	e.hooks.first[t] = h
	var once sync.Once
	return func() {
		once.Do(func() {
			e.hooks.mu.Lock()
			delete(e.hooks.first, t)
			e.hooks.mu.Unlock()
		})
	}, nil
}

func (h *rpcHooks) get(t rpc.Type) RPCHandler {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.m[t]
}

// HandleRPC makes h answer requests of type t on the RPC port, in place of
// the engine's own answer (the engine answers Metadata, Notify and Probe,
// and refuses Connection requests while no transport handles them). The
// returned function removes the handler. A second handler for the same
// type is an error.
func (e *Engine) HandleRPC(t rpc.Type, h RPCHandler) (remove func(), err error) {
	e.hooks.mu.Lock()
	defer e.hooks.mu.Unlock()
	if e.hooks.m == nil {
		e.hooks.m = make(map[rpc.Type]RPCHandler)
	}
	if e.hooks.m[t] != nil {
		return nil, fmt.Errorf("rpc type %s already has a handler: %w", t, ErrInvalidArgument)
	}
	e.hooks.m[t] = h
	var once sync.Once
	return func() {
		once.Do(func() {
			e.hooks.mu.Lock()
			delete(e.hooks.m, t)
			e.hooks.mu.Unlock()
		})
	}, nil
}

// MemoryRegistrar is implemented by transports that register memory with
// hardware (RDMA NICs) before peers may reach it. The engine calls
// RegisterRegions for every registration before it publishes the
// descriptor (all or nothing: an error fails the registration), and
// UnregisterRegions once an unregistered region is no longer used by local
// transfers. At installation a registrar registers the regions that exist
// already (Engine.Regions); the engine holds registrations back meanwhile.
type MemoryRegistrar interface {
	RegisterRegions(rs []*Region) error
	UnregisterRegions(rs []*Region)
}

// registrars returns the installed transports that register memory.
func (e *Engine) registrars() []MemoryRegistrar {
	e.transports.RLock()
	defer e.transports.RUnlock()
	var out []MemoryRegistrar
	for _, in := range e.transports.list {
		if r, ok := in.t.(MemoryRegistrar); ok {
			out = append(out, r)
		}
	}
	return out
}

// registerWithTransports hands rs to every registrar, undoing the earlier
// ones when one fails.
func (e *Engine) registerWithTransports(rs []*Region) error {
	regs := e.registrars()
	for i, r := range regs {
		if err := r.RegisterRegions(rs); err != nil {
			for _, done := range regs[:i] {
				done.UnregisterRegions(rs)
			}
			return err
		}
	}
	return nil
}

// TransportArgs returns the arguments given to InstallTransportWith for the
// transport called name (a transport factory reads them), or nil.
func (e *Engine) TransportArgs(name string) []string {
	e.installArgs.Lock()
	defer e.installArgs.Unlock()
	return e.installArgs.m[name]
}

// InstallTransportWith is InstallTransport with arguments for the
// transport's factory (Mooncake's installTransport args: for "rdma",
// args[0] is a NIC priority matrix). The arguments are kept for the
// factory only when the transport is not installed yet.
func (e *Engine) InstallTransportWith(name string, args []string) (Transport, error) {
	if t := e.Transport(name); t != nil {
		return t, nil
	}
	e.installArgs.Lock()
	if e.installArgs.m == nil {
		e.installArgs.m = make(map[string][]string)
	}
	e.installArgs.m[name] = append([]string(nil), args...)
	e.installArgs.Unlock()
	return e.InstallTransport(name)
}

// Aborter is implemented by transports whose in-flight I/O can outlast a
// cancellation (a peer that stalls an answer the transport's reader waits
// for). Cancel calls AbortCanceled on every installed one after marking
// its batch canceled: the transport then stops, without waiting for a
// peer, the I/O of every slice whose batch is canceled (Slice.Canceled),
// and completes those slices once nothing it runs touches their memory
// any more. Other slices caught in that I/O are retried or failed as
// after a lost connection. AbortCanceled must not block on a peer.
type Aborter interface {
	AbortCanceled()
}

// abortCanceled asks every installed Aborter to stop canceled I/O.
func (e *Engine) abortCanceled() {
	e.transports.RLock()
	var out []Aborter
	for _, in := range e.transports.list {
		if a, ok := in.t.(Aborter); ok {
			out = append(out, a)
		}
	}
	e.transports.RUnlock()
	for _, a := range out {
		a.AbortCanceled()
	}
}
