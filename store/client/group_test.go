package client_test

import (
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/store/client"
	"github.com/kvferry/kvferry/store/master"
	"github.com/kvferry/kvferry/store/wire"
)

// TestGroupIDs: ReplicateConfig.GroupIDs reach the master on every put path
// (put grants, PutStart, batches): a read of one member leases its group,
// membership is fixed, and lists of the wrong length fail.
func TestGroupIDs(t *testing.T) {
	for _, grants := range []bool{true, false} {
		name := "grants"
		if !grants {
			name = "put-start"
		}
		t.Run(name, func(t *testing.T) { groupIDs(t, grants) })
	}
}

func groupIDs(t *testing.T, grants bool) {
	ctx := ctxT(t, 60*time.Second)
	srv := startMaster(t, master.Config{DefaultKVLeaseTTL: 30 * time.Second})
	c := newClient(t, client.Config{MasterServerAddr: srv.Addr(), GlobalSegmentSize: 16 << 20, NoPutGrants: !grants})
	in := func(g ...string) client.ReplicateConfig { return client.ReplicateConfig{GroupIDs: g} }

	assert.NilError(t, c.Put(ctx, "a", pattern(100, 1), in("req1")))
	src := cbuf(t, 4096)
	assert.NilError(t, c.RegisterBuffer(src.Addr(), src.Len()))
	for _, err := range c.BatchPutFrom(ctx, []string{"b", "solo"}, []uintptr{src.Addr(), src.Addr() + 1024},
		[]uint64{1024, 1024}, in("req1", "")) {
		assert.NilError(t, err)
	}
	// Reading a leases b too, not solo.
	_, err := c.Get(ctx, "a")
	assert.NilError(t, err)
	assert.Equal(t, code(c.Remove(ctx, "b", false)), wire.ErrObjectHasLease)
	assert.NilError(t, c.Remove(ctx, "solo", false))

	// Membership is fixed while the object exists.
	assert.Equal(t, code(c.Upsert(ctx, "a", pattern(50, 2), in("req2"))), wire.ErrInvalidParams)
	assert.NilError(t, c.Upsert(ctx, "a", pattern(50, 2), client.ReplicateConfig{}))
	assert.NilError(t, c.Upsert(ctx, "a", pattern(50, 3), in("req1")))

	// One id per key, or the call fails as a whole.
	assert.Equal(t, code(c.Put(ctx, "x", pattern(10, 1), in("g1", "g2"))), wire.ErrInvalidParams)
	assert.Equal(t, code(c.Put(ctx, "x", pattern(10, 1), client.ReplicateConfig{GroupIDs: []string{}})), wire.ErrInvalidParams)
	for _, err := range c.BatchPutFrom(ctx, []string{"y", "z"}, []uintptr{src.Addr(), src.Addr()}, []uint64{8, 8}, in("g")) {
		assert.Equal(t, code(err), wire.ErrInvalidParams)
	}
	// Ids stay with their keys when a batch drops bad keys before the
	// master: here "" (bad key) and "w" in group g9.
	errs := c.BatchPutFrom(ctx, []string{"", "w"}, []uintptr{src.Addr(), src.Addr()}, []uint64{8, 8}, in("g8", "g9"))
	assert.Equal(t, code(errs[0]), wire.ErrInvalidParams)
	assert.NilError(t, errs[1])
	assert.Equal(t, code(c.Upsert(ctx, "w", pattern(8, 1), in("g8"))), wire.ErrInvalidParams)
	assert.NilError(t, c.Upsert(ctx, "w", pattern(8, 1), in("g9")))
}
