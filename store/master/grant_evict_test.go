package master

import (
	"fmt"
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

// TestGrantsDoNotEvictObjects is tests/kill's "replica holder" finding: a
// holder died, its grants went with it, the client asked for new ones and
// the master evicted committed objects (the only copies left) to make
// room for empty reservations; the tick did the same when grants pushed
// the segment over the high watermark. Objects are evicted only for space
// that holds data.
func TestGrantsDoNotEvictObjects(t *testing.T) {
	clock := newFakeClock()
	svc, err := newService(Config{Clock: clock, Seed: 1, ClientTTL: 30 * time.Second, GrantBytes: 8 << 20}, 1, fenceNone)
	assert.NilError(t, err)
	assert.NilError(t, svc.MountSegment("h", SegmentInfo{ID: "s", Name: "h:1", Protocol: "tcp", Base: 1 << 30, Size: 64 << 20, ClientID: "h"}))
	assert.NilError(t, svc.ReMountSegments("c", nil)) // a client that lends nothing
	for i := range 12 {
		mustPut(t, svc, "c", fmt.Sprint("k", i), 1<<20, ReplicateConfig{}, false)
	}
	gs, _, err := svc.AcquireGrants("c", 8, 4096, nil, nil) // room for 6 of 8
	assert.NilError(t, err)
	assert.Assert(t, len(gs) < 8, "%d grants", len(gs))
	for i := range 12 {
		ok, err := svc.ExistKey("", fmt.Sprint("k", i))
		assert.NilError(t, err)
		assert.Assert(t, ok, "k%d evicted to make room for grants", i)
	}
	// Real pressure still evicts: fill the grants' space with objects.
	_, _, _ = svc.AcquireGrants("c", 1, 4096, nil, gsIDs(gs))
	for i := 12; i < 64; i++ {
		_, _ = svc.PutStart("c", "", fmt.Sprint("k", i), 1<<20, ReplicateConfig{}, false)
		_ = svc.PutEnd("c", "", fmt.Sprint("k", i))
	}
	clock.Advance(time.Second)
	svc.Tick()
	svc.mu.Lock()
	evicted := svc.mu.counters.evictedObjects
	svc.mu.Unlock()
	assert.Assert(t, evicted > 0, "a full segment evicts nothing")
}

// TestTickSparesObjectsForGrantSpace: grants that push a segment over the
// high watermark make the master ask for idle grants back, not evict.
func TestTickSparesObjectsForGrantSpace(t *testing.T) {
	clock := newFakeClock()
	svc, err := newService(Config{Clock: clock, Seed: 1, ClientTTL: 30 * time.Second, GrantBytes: 8 << 20}, 1, fenceNone)
	assert.NilError(t, err)
	assert.NilError(t, svc.MountSegment("h", SegmentInfo{ID: "s", Name: "h:1", Protocol: "tcp", Base: 1 << 30, Size: 16 << 20, ClientID: "h"}))
	assert.NilError(t, svc.ReMountSegments("c", nil))
	for i := range 6 {
		mustPut(t, svc, "c", fmt.Sprint("k", i), 1<<20, ReplicateConfig{}, false)
	}
	for range 5 { // 2 MiB each: the segment is full
		_, _, err := svc.AcquireGrants("c", 1, 4096, nil, nil)
		assert.NilError(t, err)
	}
	svc.mu.Lock()
	used, capacity := svc.mu.used, svc.mu.capacity
	svc.mu.Unlock()
	assert.Assert(t, float64(used) > 0.9*float64(capacity), "%d of %d bytes held: under the high watermark", used, capacity)
	clock.Advance(time.Second)
	svc.Tick()
	for i := range 6 {
		ok, _ := svc.ExistKey("", fmt.Sprint("k", i))
		assert.Assert(t, ok, "k%d evicted by the tick for grant space", i)
	}
	p, err := svc.Heartbeat("c")
	assert.NilError(t, err)
	assert.Assert(t, p.ReturnGrants, "the client is not asked to return idle grants")
}

func gsIDs(gs []GrantInfo) []uint64 {
	var ids []uint64
	for _, g := range gs {
		ids = append(ids, g.ID)
	}
	return ids
}

// TestExcludedGrantEvictsNothing: a client holding a grant on the one
// segment left (its second replica's holder died) asks for a grant
// elsewhere; nothing can be granted, and nothing is evicted for it.
func TestExcludedGrantEvictsNothing(t *testing.T) {
	clock := newFakeClock()
	svc, err := newService(Config{Clock: clock, Seed: 1, ClientTTL: 30 * time.Second, GrantBytes: 8 << 20}, 1, fenceNone)
	assert.NilError(t, err)
	assert.NilError(t, svc.MountSegment("h", SegmentInfo{ID: "s", Name: "h:1", Protocol: "tcp", Base: 1 << 30, Size: 64 << 20, ClientID: "h"}))
	assert.NilError(t, svc.ReMountSegments("c", nil))
	for i := range 12 {
		mustPut(t, svc, "c", fmt.Sprint("k", i), 1<<20, ReplicateConfig{}, false)
	}
	_, _, err = svc.AcquireGrants("c", 1, 4096, []string{"h:1"}, nil)
	assert.Assert(t, err != nil, "a grant on an excluded segment")
	for i := range 12 {
		ok, _ := svc.ExistKey("", fmt.Sprint("k", i))
		assert.Assert(t, ok, "k%d evicted for a grant that could not be made", i)
	}
}
