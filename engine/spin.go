package engine

import (
	"context"
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

// notified reports whether a received notification waits to be drained.
func (e *Engine) notified() bool {
	e.inbox.Lock()
	defer e.inbox.Unlock()
	return len(e.inbox.q) > 0 || e.sourcesPendingLocked()
}
