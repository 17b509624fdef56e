package efa

import (
	"context"
	"fmt"

	"github.com/kvferry/kvferry/engine"
)

// Warmup does what Mooncake's warmupEfaSegment does before the first
// transfer: it opens the segment called name and puts every peer device's
// endpoint address into every local device's address vector, so that the
// first batch does not pay for them. Connection-oriented providers (rxm)
// still connect on first use. A second call does nothing new.
func (t *Transport) Warmup(ctx context.Context, name string) error {
	t.life.RLock()
	defer t.life.RUnlock()
	if t.closed.Load() {
		return engine.ErrClosed
	}
	id, err := t.e.OpenSegment(ctx, name)
	if err != nil {
		return fmt.Errorf("efa warmup %q: %w", name, err)
	}
	d, err := t.e.SegmentDescriptor(id)
	if err != nil {
		return fmt.Errorf("efa warmup %q: %w", name, err)
	}
	pi := t.peerInfo(t.e.Peer(id), d)
	if err := waitReady(ctx, pi); err != nil {
		return fmt.Errorf("efa warmup %q: %w", name, err)
	}
	for _, dev := range t.devs {
		for _, a := range pi.addrs {
			if _, err := dev.fiAddr(a); err != nil {
				return fmt.Errorf("efa warmup %q: %w", name, err)
			}
		}
	}
	return nil
}
