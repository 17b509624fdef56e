package engine_test

import (
	"context"
	"testing"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
)

// TestSyncSegmentCacheManyPeers: every cached peer is refreshed (the
// refreshes run concurrently), and a peer that cannot be reached makes the
// call fail without keeping the others stale.
func TestSyncSegmentCacheManyPeers(t *testing.T) {
	a := newEngine(t, "tcp")
	const n = 12
	peers := make([]*engine.Engine, n)
	ids := make([]engine.SegmentID, n)
	for i := range peers {
		peers[i] = newEngine(t, "tcp")
		id, err := a.OpenSegment(context.Background(), peers[i].SegmentName())
		assert.NilError(t, err)
		ids[i] = id
	}
	// Each peer registers a buffer after a cached its descriptor.
	addrs := make([]uint64, n)
	for i, p := range peers {
		m := newBuf(t, p, 1<<16)
		addrs[i] = uint64(m.Addr())
		d, err := a.SegmentDescriptor(ids[i])
		assert.NilError(t, err)
		_, ok := d.Find(addrs[i], 1<<16)
		assert.Assert(t, !ok, "peer %d: not in the cached descriptor yet", i)
	}
	assert.NilError(t, a.SyncSegmentCache(context.Background()))
	for i := range peers {
		d, err := a.SegmentDescriptor(ids[i])
		assert.NilError(t, err)
		_, ok := d.Find(addrs[i], 1<<16)
		assert.Assert(t, ok, "peer %d: refreshed", i)
	}

	// One peer gone: an error, and the others are still refreshed.
	assert.NilError(t, peers[5].Close())
	for i, p := range peers {
		if i != 5 {
			m := newBuf(t, p, 1<<16)
			addrs[i] = uint64(m.Addr())
		}
	}
	assert.Assert(t, a.SyncSegmentCache(context.Background()) != nil)
	for i := range peers {
		if i == 5 {
			continue
		}
		d, err := a.SegmentDescriptor(ids[i])
		assert.NilError(t, err)
		_, ok := d.Find(addrs[i], 1<<16)
		assert.Assert(t, ok, "peer %d: refreshed despite peer 5", i)
	}
}
