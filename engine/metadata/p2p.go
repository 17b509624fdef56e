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
	hello  atomic.Pointer[[]byte] // the Metadata request body
	closed atomic.Bool
}

var _ Backend = (*P2P)(nil)

// NewP2P returns a P2P backend whose RPC calls use cfg.
func NewP2P(cfg rpc.ClientConfig) *P2P {
	return &P2P{cfg: cfg}
}

// P2P reports true.
func (p *P2P) P2P() bool { return true }

// Publish keeps seg, without its buffers, as the body of Metadata
// requests: Mooncake sends the caller's descriptor there and ignores it on
// receipt (specs/mooncake.md §3.6), so the buffer list, which can be
// megabytes and over a peer's frame limit, is left out. The cost does not
// grow with the number of registered buffers.
func (p *P2P) Publish(_ context.Context, seg *descriptor.Segment, _ descriptor.RPCMeta) error {
	if p.closed.Load() {
		return ErrClosed
	}
	hello := *seg
	hello.Buffers = nil
	b, err := descriptor.Marshal(&hello)
	if err != nil {
		return err
	}
	p.hello.Store(&b)
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
	if b := p.hello.Load(); b != nil {
		body = *b
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
