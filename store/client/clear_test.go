package client_test

import (
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/store/client"
	"github.com/kvferry/kvferry/store/master"
	"github.com/kvferry/kvferry/store/wire"
)

// TestBatchReplicaClear: a client clears what it wrote and nobody reads,
// whole or one segment's replicas at a time, and nothing of another
// client's or of a leased object (Mooncake's batch_replica_clear).
func TestBatchReplicaClear(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	srv := startMaster(t, master.Config{})
	h1 := newClient(t, client.Config{MasterServerAddr: srv.Addr(), GlobalSegmentSize: 16 << 20})
	h2 := newClient(t, client.Config{MasterServerAddr: srv.Addr(), GlobalSegmentSize: 16 << 20})
	user := newClient(t, client.Config{MasterServerAddr: srv.Addr(), LocalBufferSize: 1 << 20})
	two := client.ReplicateConfig{ReplicaNum: 2}
	for _, k := range []string{"a", "b", "c"} {
		assert.NilError(t, user.Put(ctx, k, pattern(5000, 1), two))
	}
	segs := func(key string) []string {
		t.Helper()
		d, err := user.ReplicaDescs(ctx, []string{key})
		assert.NilError(t, err)
		var out []string
		for _, r := range d[0].Replicas {
			out = append(out, r.SegmentName)
		}
		return out
	}

	// Another client's objects are not cleared.
	got, err := h1.BatchReplicaClear(ctx, []string{"a", "b"}, "")
	assert.NilError(t, err)
	assert.Equal(t, len(got), 0)

	// c is leased by a read; absent and empty keys are skipped.
	_, err = user.Get(ctx, "c")
	assert.NilError(t, err)
	got, err = user.BatchReplicaClear(ctx, []string{"a", "c", "missing", ""}, "")
	assert.NilError(t, err)
	assert.DeepEqual(t, got, []string{"a"})
	_, err = user.Get(ctx, "a")
	assert.Equal(t, code(err), wire.ErrObjectNotFound)

	// One segment's replica, then the other's: the object goes with the last.
	got, err = user.BatchReplicaClear(ctx, []string{"b"}, "no-such-segment")
	assert.NilError(t, err)
	assert.Equal(t, len(got), 0)
	got, err = user.BatchReplicaClear(ctx, []string{"b"}, h1.Hostname())
	assert.NilError(t, err)
	assert.DeepEqual(t, got, []string{"b"})
	assert.DeepEqual(t, segs("b"), []string{h2.Hostname()})
	v, err := h1.Get(ctx, "b")
	assert.NilError(t, err)
	assert.Equal(t, len(v), 5000)
	// b is leased now (the reads above); a fresh key, never read, goes
	// segment by segment.
	assert.NilError(t, user.Put(ctx, "d", pattern(100, 2), two))
	for _, h := range []*client.Client{h1, h2} {
		got, err = user.BatchReplicaClear(ctx, []string{"d"}, h.Hostname())
		assert.NilError(t, err)
		assert.DeepEqual(t, got, []string{"d"})
	}
	_, err = user.Get(ctx, "d")
	assert.Equal(t, code(err), wire.ErrObjectNotFound)
}
