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

// TestGroupsSurviveRestart: a restarted master restores each object's group
// (with snapshots and with the log alone): a read of one member leases the
// others again.
func TestGroupsSurviveRestart(t *testing.T) {
	for _, snap := range []int{1 << 30, 2} {
		clock := newFakeClock()
		dir := t.TempDir()
		svc, be := openPersisted(t, dir, clock, snap)
		seg := segInfo("sa", "hostA:1", 1<<30)
		assert.NilError(t, svc.MountSegment("ca", seg))
		in := func(g string) ReplicateConfig { return ReplicateConfig{GroupIDs: []string{g}} }
		mustPut(t, svc, "ca", "a", 100, in("g"), false)
		mustPut(t, svc, "ca", "b", 100, in("g"), false)
		mustPut(t, svc, "ca", "solo", 100, in(""), false)
		mustPutIn(t, svc, "ca", "t2", "c", 100, in("g"), false) // tenant t2's group g
		assert.NilError(t, be.Close())

		svc, be = openPersisted(t, be.Path(), clock, snap)
		assert.NilError(t, svc.ReMountSegments("ca", []SegmentInfo{seg}))
		_, err := svc.GetReplicaList("", "a")
		assert.NilError(t, err)
		assert.Equal(t, wire.CodeOf(svc.Remove("", "b", false)), wire.ErrObjectHasLease)
		assert.NilError(t, svc.Remove("", "solo", false))
		assert.NilError(t, svc.Remove("t2", "c", false))
		// Membership is still fixed.
		_, err = svc.PutStart("ca", "", "a", 10, in("other"), true)
		assert.Equal(t, wire.CodeOf(err), wire.ErrInvalidParams)
		assert.NilError(t, be.Close())
	}
}
