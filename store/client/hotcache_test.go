package client_test

import (
	"bytes"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/store/client"
	"github.com/kvferry/kvferry/store/master"
	"github.com/kvferry/kvferry/store/wire"
)

// TestHotCache: a reader with the hot cache on serves a key from its own
// memory from the admission-th read on, and never serves a stale copy:
// another client's upsert or remove is seen at the next read.
func TestHotCache(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	srv := startMaster(t, master.Config{})
	holder := newClient(t, client.Config{MasterServerAddr: srv.Addr(), GlobalSegmentSize: 8 << 20})
	writer := newClient(t, client.Config{MasterServerAddr: srv.Addr()})
	reader := newClient(t, client.Config{MasterServerAddr: srv.Addr(), HotCacheBytes: 4 << 20})
	off := newClient(t, client.Config{MasterServerAddr: srv.Addr()})
	v1, v2 := pattern(200<<10, 1), pattern(200<<10, 2)
	assert.NilError(t, writer.Put(ctx, "k", v1, client.ReplicateConfig{}))
	_ = holder

	read := func(c *client.Client, want []byte) {
		t.Helper()
		got, err := c.Get(ctx, "k")
		assert.NilError(t, err)
		assert.Assert(t, bytes.Equal(got, want))
	}
	read(reader, v1) // counted
	read(reader, v1) // admitted: cached
	assert.Equal(t, reader.HotCache().Entries, 1)
	assert.Equal(t, reader.HotCache().Hits, uint64(0))
	read(reader, v1)
	read(reader, v1)
	assert.Equal(t, reader.HotCache().Hits, uint64(2))

	// Another client's upsert: a new incarnation, never the stale copy.
	assert.NilError(t, writer.Upsert(ctx, "k", v2, client.ReplicateConfig{}))
	read(reader, v2) // a miss; the key is hot already, so cached again
	assert.Equal(t, reader.HotCache().Hits, uint64(2))
	read(reader, v2)
	assert.Equal(t, reader.HotCache().Hits, uint64(3))

	// Another client's remove.
	assert.NilError(t, writer.Remove(ctx, "k", true))
	_, err := reader.Get(ctx, "k")
	assert.Equal(t, code(err), wire.ErrObjectNotFound)

	// A put under the same key is another incarnation too.
	assert.NilError(t, writer.Put(ctx, "k", v1, client.ReplicateConfig{}))
	read(reader, v1)
	assert.Equal(t, reader.HotCache().Hits, uint64(3))

	// Bounded: objects over a quarter of the cache are not kept; old
	// entries go first.
	for i := range 20 {
		key := string(rune('a' + i))
		assert.NilError(t, writer.Put(ctx, key, pattern(300<<10, byte(i)), client.ReplicateConfig{}))
		for range 2 {
			_, err := reader.Get(ctx, key)
			assert.NilError(t, err)
		}
	}
	st := reader.HotCache()
	assert.Assert(t, st.Bytes <= 4<<20 && st.Entries > 0, "%+v", st)

	// Off by default.
	read(off, v1)
	read(off, v1)
	read(off, v1)
	assert.Equal(t, off.HotCache(), client.HotCacheStats{})
}
