package metadata

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/kvferry/kvferry/engine/descriptor"
	"github.com/kvferry/kvferry/engine/rpc"
)

// P2P is the Backend of the P2P handshake mode: a segment's name is
// "<host>:<rpc port>", and its descriptor is fetched with a Metadata request
// to that port (specs/mooncake.md §2.1, §3.6).
type P2P struct {
	cfg    rpc.ClientConfig
	local  atomic.Pointer[descriptor.Segment]
	closed atomic.Bool
}

var _ Backend = (*P2P)(nil)

// NewP2P returns a P2P backend whose RPC calls use cfg.
func NewP2P(cfg rpc.ClientConfig) *P2P {
	return &P2P{cfg: cfg}
}

// P2P reports true.
func (p *P2P) P2P() bool { return true }

// Publish keeps seg as the descriptor sent along with Metadata requests.
func (p *P2P) Publish(_ context.Context, seg *descriptor.Segment, _ descriptor.RPCMeta) error {
	if p.closed.Load() {
		return ErrClosed
	}
	p.local.Store(seg.Clone())
	return nil
}

// Unpublish does nothing: P2P mode stores nothing.
func (p *P2P) Unpublish(context.Context, string) error { return nil }

// Endpoint parses the segment name.
func (p *P2P) Endpoint(_ context.Context, name string) (descriptor.RPCMeta, error) {
	if p.closed.Load() {
		return descriptor.RPCMeta{}, ErrClosed
	}
	return descriptor.ParseP2PName(name)
}

// Fetch asks the peer named name for its descriptor.
func (p *P2P) Fetch(ctx context.Context, name string) (*descriptor.Segment, error) {
	if p.closed.Load() {
		return nil, ErrClosed
	}
	ep, err := descriptor.ParseP2PName(name)
	if err != nil {
		return nil, err
	}
	body := []byte("{}")
	if l := p.local.Load(); l != nil {
		if b, err := descriptor.Marshal(l); err == nil {
			body = b
		}
	}
	reply, err := rpc.Call(ctx, ep.Addr(), rpc.TypeMetadata, body, p.cfg)
	if err != nil {
		return nil, fmt.Errorf("fetch segment %q: %w: %w", name, ErrUnavailable, err)
	}
	seg, err := descriptor.Unmarshal(reply)
	if err != nil {
		return nil, fmt.Errorf("fetch segment %q: %w", name, err)
	}
	return seg, nil
}

// Close marks the backend closed.
func (p *P2P) Close() error {
	p.closed.Store(true)
	return nil
}
