package master

import (
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/store/wire"
)

// TestBatchGroupIDs: a batch names one group id per key or fails as a
// whole; each key joins its own group.
func TestBatchGroupIDs(t *testing.T) {
	clock := newFakeClock()
	svc, err := NewService(Config{Clock: clock, DefaultKVLeaseTTL: time.Second}, 1)
	assert.NilError(t, err)
	assert.NilError(t, svc.MountSegment("c", SegmentInfo{ID: "s", Name: "n", Base: 0x1000, Size: 1 << 20}))

	_, errs := svc.BatchPutStart("c", "", []string{"a", "b"}, []uint64{64, 64}, ReplicateConfig{GroupIDs: []string{"g"}}, false)
	for _, e := range errs {
		assert.Equal(t, wire.CodeOf(e), wire.ErrInvalidParams)
	}
	_, errs = svc.BatchPutStart("c", "", []string{"a"}, []uint64{64}, ReplicateConfig{GroupIDs: []string{}}, false)
	assert.Equal(t, wire.CodeOf(errs[0]), wire.ErrInvalidParams)
	assert.Equal(t, svc.Metrics().Objects, 0)

	_, errs = svc.BatchPutStart("c", "", []string{"a", "b", "c"}, []uint64{64, 64, 64},
		ReplicateConfig{GroupIDs: []string{"g", "", "g"}}, false)
	for _, e := range svc.BatchPutEnd("c", "", []string{"a", "b", "c"}, false) {
		assert.NilError(t, e)
	}
	for _, e := range errs {
		assert.NilError(t, e)
	}
	_, err = svc.GetReplicaList("", "a")
	assert.NilError(t, err)
	// c shares a's lease; b is not grouped.
	assert.Equal(t, wire.CodeOf(svc.Remove("", "c", false)), wire.ErrObjectHasLease)
	assert.NilError(t, svc.Remove("", "b", false))
	clock.Advance(2 * time.Second)
	assert.NilError(t, svc.Remove("", "c", false))

	// A single-key call needs exactly one id.
	_, err = svc.PutStart("c", "", "z", 64, ReplicateConfig{GroupIDs: []string{"x", "y"}}, false)
	assert.Equal(t, wire.CodeOf(err), wire.ErrInvalidParams)
	_, err = svc.PutCommit("c", "", "z", 64, ReplicateConfig{GroupIDs: []string{}}, false, nil)
	assert.Equal(t, wire.CodeOf(err), wire.ErrInvalidParams)
	svc.mu.Lock()
	defer svc.mu.Unlock()
	assert.Equal(t, len(svc.mu.groups), 1) // g, with a
}
