package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/kvferry/kvferry/engine/descriptor"
	"github.com/kvferry/kvferry/engine/rpc"
	"github.com/kvferry/kvferry/internal/spin"
)

// SpinBudget is how long a wait polls before it parks (Config.SpinWait
// normalised: 0 means never poll).
func (e *Engine) SpinBudget() time.Duration { return spin.Budget(e.cfg.SpinWait) }

// callRPC sends one socket RPC to p: over a kept connection when p
// announces keep-alive (kvferry peers), else on a connection of its own,
// as Mooncake does.
func (e *Engine) callRPC(ctx context.Context, p *Peer, t rpc.Type, body []byte) ([]byte, error) {
	cfg := e.RPCClientConfig()
	cfg.SpinWait = e.SpinBudget()
	if d := p.Descriptor(); d != nil && d.Has(descriptor.FeatureRPCKeepAlive) {
		return e.rpcPool.Call(ctx, p.Endpoint.Addr(), t, body, cfg)
	}
	return rpc.Call(ctx, p.Endpoint.Addr(), t, body, cfg)
}

// CallPeer sends one socket-RPC request of type t to the RPC port of the
// opened segment id and returns the reply body, bounded by ctx and the
// engine's RPC settings (the cluster key, TLS, keep-alive where the peer
// announces it). A store client uses it for TypeStore requests (HandleRPC
// on the peer's side).
func (e *Engine) CallPeer(ctx context.Context, id SegmentID, t rpc.Type, body []byte) ([]byte, error) {
	p := e.peer(id)
	if p == nil || id == LocalSegment {
		return nil, fmt.Errorf("rpc %s to segment %d: not an opened remote segment: %w", t, id, ErrInvalidArgument)
	}
	return e.callRPC(ctx, p, t, body)
}

// notified reports whether a received notification waits to be drained.
func (e *Engine) notified() bool {
	e.inbox.Lock()
	defer e.inbox.Unlock()
	return len(e.inbox.q) > 0 || e.sourcesPendingLocked()
}

// PollBatchStatus is BatchStatus for a caller that polls it in a loop (C
// callers of getTransferStatus, NIXL's checkXfer): while the batch waits,
// the call gives the thread's CPU away once (sched_yield), so that on a
// host whose every CPU polls the threads that move the data and deliver
// the notification still run. It costs a system call per poll that finds
// the batch running, and nothing otherwise.
func (e *Engine) PollBatchStatus(id BatchID) (BatchStatus, error) {
	bs, err := e.BatchStatus(id)
	if err == nil && bs.State == StateWaiting {
		spin.YieldThread()
	}
	return bs, err
}

// PollTaskStatus is TaskStatus as PollBatchStatus is BatchStatus: a task
// not yet terminal yields the thread's CPU once.
func (e *Engine) PollTaskStatus(id BatchID, i int) (TaskStatus, error) {
	st, err := e.TaskStatus(id, i)
	if err == nil && !st.State.Terminal() {
		spin.YieldThread()
	}
	return st, err
}
