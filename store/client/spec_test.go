package client_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/store/client"
	"github.com/kvferry/kvferry/store/master"
	"github.com/kvferry/kvferry/store/wire"
)

// specSetup is a master, a holder lending memory and a user lending none
// with a registered source and destination buffer.
type specSetup struct {
	ctx            context.Context
	holder, writer *client.Client
	user           *client.Client
	src, dst       []byte
	srcAddr        uintptr
	dstAddr        uintptr
}

func newSpecSetup(t *testing.T, userCfg client.Config) *specSetup {
	t.Helper()
	s := &specSetup{ctx: ctxT(t, 60*time.Second)}
	srv := startMaster(t, master.Config{})
	s.holder = newClient(t, client.Config{MasterServerAddr: srv.Addr(), GlobalSegmentSize: 16 << 20})
	s.writer = newClient(t, client.Config{MasterServerAddr: srv.Addr()})
	userCfg.MasterServerAddr = srv.Addr()
	s.user = newClient(t, userCfg)
	src, dst := cbuf(t, 1<<20), cbuf(t, 1<<20)
	assert.NilError(t, s.user.RegisterBuffer(src.Addr(), src.Len()))
	assert.NilError(t, s.user.RegisterBuffer(dst.Addr(), dst.Len()))
	s.src, s.dst, s.srcAddr, s.dstAddr = src.Bytes(), dst.Bytes(), src.Addr(), dst.Addr()
	return s
}

// put puts v under key from the user's registered source buffer.
func (s *specSetup) put(t *testing.T, key string, v []byte) {
	t.Helper()
	copy(s.src, v)
	assert.NilError(t, s.user.PutFrom(s.ctx, key, s.srcAddr, uint64(len(v)), client.ReplicateConfig{}))
}

// get reads key into the registered destination and checks it is want.
func (s *specSetup) get(t *testing.T, key string, want []byte) {
	t.Helper()
	clear(s.dst)
	n, err := s.user.GetInto(s.ctx, key, s.dstAddr, uint64(len(s.dst)))
	assert.NilError(t, err)
	assert.Equal(t, n, uint64(len(want)))
	assert.Assert(t, bytes.Equal(s.dst[:n], want), "%s: wrong bytes", key)
}

func specCounts(c *client.Client) [3]uint64 {
	m := c.Metrics()
	return [3]uint64{m.SpecReads, m.SpecHits, m.SpecMisses}
}

// TestSpeculativeGet: a get of a key the client put, or read before, reads
// its replica during the master round trip and keeps the bytes when the
// master names that replica; a get after another client changed the key
// (upsert, remove and put again: new incarnations, often at the very same
// address) reads the new value, never the one the hint pointed at.
func TestSpeculativeGet(t *testing.T) {
	s := newSpecSetup(t, client.Config{})
	v1, v2, v3 := pattern(64<<10, 1), pattern(64<<10, 2), pattern(64<<10, 3)

	s.put(t, "k", v1) // through a grant: the commit names the replica
	assert.Equal(t, s.user.Metrics().GrantPuts, uint64(1))
	s.get(t, "k", v1)
	assert.Equal(t, specCounts(s.user), [3]uint64{1, 1, 0})
	s.get(t, "k", v1)
	assert.Equal(t, specCounts(s.user), [3]uint64{2, 2, 0})

	// Another client's upsert: the hint names the old incarnation.
	assert.NilError(t, s.writer.Upsert(s.ctx, "k", v2, client.ReplicateConfig{}))
	s.get(t, "k", v2)
	assert.Equal(t, specCounts(s.user), [3]uint64{3, 2, 1})
	s.get(t, "k", v2) // the read after the answer hinted the new one
	assert.Equal(t, specCounts(s.user), [3]uint64{4, 3, 1})

	// Removed and put again with the same size (the allocator tends to
	// place it where the old one was): another uid and another tag.
	assert.NilError(t, s.writer.Remove(s.ctx, "k", true))
	assert.NilError(t, s.writer.Put(s.ctx, "k", v3, client.ReplicateConfig{}))
	s.get(t, "k", v3)
	assert.Equal(t, specCounts(s.user), [3]uint64{5, 3, 2})

	// Removed: not found, and the hint goes with it.
	assert.NilError(t, s.writer.Remove(s.ctx, "k", true))
	_, err := s.user.GetInto(s.ctx, "k", s.dstAddr, uint64(len(s.dst)))
	assert.Equal(t, code(err), wire.ErrObjectNotFound)
	assert.Equal(t, specCounts(s.user), [3]uint64{6, 3, 3})
	_, err = s.user.GetInto(s.ctx, "k", s.dstAddr, uint64(len(s.dst)))
	assert.Equal(t, code(err), wire.ErrObjectNotFound)
	assert.Equal(t, specCounts(s.user), [3]uint64{6, 3, 3})

	// The user's own remove drops its hint at once.
	s.put(t, "own", v1)
	assert.NilError(t, s.user.Remove(s.ctx, "own", true))
	assert.NilError(t, s.writer.Put(s.ctx, "own", v2, client.ReplicateConfig{}))
	s.get(t, "own", v2)
	assert.Equal(t, specCounts(s.user), [3]uint64{6, 3, 3})
}

// TestSpeculativeGetSkipped: values over a configured limit, reads into
// Go memory and a client with speculation off read after the answer only.
func TestSpeculativeGetSkipped(t *testing.T) {
	s := newSpecSetup(t, client.Config{SpeculativeGetMax: 32 << 10})
	big, small := pattern(64<<10, 4), pattern(32<<10, 5)
	s.put(t, "big", big)
	s.get(t, "big", big)
	s.get(t, "big", big)
	assert.Equal(t, specCounts(s.user), [3]uint64{0, 0, 0})
	s.put(t, "small", small)
	got, err := s.user.Get(s.ctx, "small") // Go memory: nothing to guess into
	assert.NilError(t, err)
	assert.Assert(t, bytes.Equal(got, small))
	assert.Equal(t, specCounts(s.user), [3]uint64{0, 0, 0})
	s.get(t, "small", small)
	assert.Equal(t, specCounts(s.user), [3]uint64{1, 1, 0})

	off := newSpecSetup(t, client.Config{NoSpeculativeGets: true})
	off.put(t, "k", small)
	off.get(t, "k", small)
	off.get(t, "k", small)
	assert.Equal(t, specCounts(off.user), [3]uint64{0, 0, 0})
}
