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

// TestRanges: ranged reads (GetRanges), get sessions and put sessions over
// a remote holder (the engine, registered and staged memory) and over the
// reader's own segment, with every byte checked.
func TestRanges(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	srv := startMaster(t, master.Config{})
	holder := newClient(t, client.Config{MasterServerAddr: srv.Addr(), GlobalSegmentSize: 32 << 20, LocalBufferSize: 1 << 20})
	holder2 := newClient(t, client.Config{MasterServerAddr: srv.Addr(), GlobalSegmentSize: 32 << 20})
	user := newClient(t, client.Config{MasterServerAddr: srv.Addr(), LocalBufferSize: 1 << 20})

	obj := pattern(3<<20+17, 3) // more than the staging buffer
	assert.NilError(t, holder.Put(ctx, "obj", obj, client.ReplicateConfig{}))

	for _, tc := range []struct {
		name string
		c    *client.Client
	}{{"remote", user}, {"local", holder}} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.c
			dst := cbuf(t, 4<<20)
			assert.NilError(t, c.RegisterBuffer(dst.Addr(), dst.Len()))
			t.Cleanup(func() { _ = c.UnregisterBuffer(dst.Addr()) })
			a := dst.Addr()

			// GetRanges: two entries for one key, a missing key, bad ranges.
			errs := c.GetRanges(ctx, []string{"obj", "none", "obj"}, [][]client.Range{
				{{Addr: a, Offset: 0, Size: 4096}, {Addr: a + 8192, Offset: 3 << 20, Size: 17}, {Addr: a + 9000, Offset: 1, Size: uint64(len(obj))}},
				{{Addr: a, Offset: 0, Size: 1}},
				{{Addr: a + 1<<20, Offset: 1000, Size: 2 << 20}},
			})
			assert.NilError(t, errs[0][0])
			assert.NilError(t, errs[0][1])
			assert.Equal(t, code(errs[0][2]), wire.ErrInvalidParams)
			assert.Equal(t, code(errs[1][0]), wire.ErrObjectNotFound)
			assert.NilError(t, errs[2][0])
			b := dst.Bytes()
			assert.Assert(t, bytes.Equal(b[:4096], obj[:4096]))
			assert.Assert(t, bytes.Equal(b[8192:8192+17], obj[3<<20:]))
			assert.Assert(t, bytes.Equal(b[1<<20:3<<20], obj[1000:1000+2<<20]))
			// Memory that is not registered is refused.
			other := cbuf(t, 4096)
			errs = c.GetRanges(ctx, []string{"obj"}, [][]client.Range{{{Addr: other.Addr(), Size: 16}}})
			assert.Equal(t, code(errs[0][0]), wire.ErrInvalidParams)

			// A get session: one lookup, then reads that ask the master nothing.
			clear(b)
			assert.DeepEqual(t, codes(c.StartGetSession(ctx, []string{"obj", "none"})), []wire.Code{0, wire.ErrObjectNotFound})
			n, serrs := c.GetSessionRanges(ctx, []string{"obj", "none"}, [][]client.Range{
				{{Addr: a + 100, Offset: 2 << 20, Size: 5000}, {Addr: other.Addr(), Offset: 7, Size: 4096}},
				{{Addr: a, Size: 1}},
			})
			assert.NilError(t, serrs[0])
			assert.Equal(t, n[0], uint64(5000+4096))
			assert.Equal(t, code(serrs[1]), wire.ErrInvalidParams)
			assert.Assert(t, bytes.Equal(b[100:5100], obj[2<<20:2<<20+5000]))
			assert.Assert(t, bytes.Equal(other.Bytes(), obj[7:7+4096]), "unregistered memory is staged")
			_, serrs = c.GetSessionRanges(ctx, []string{"obj"}, [][]client.Range{{{Addr: a, Offset: uint64(len(obj)), Size: 1}}})
			assert.Equal(t, code(serrs[0]), wire.ErrInvalidParams)
			c.EndGetSession([]string{"obj"})
			_, serrs = c.GetSessionRanges(ctx, []string{"obj"}, [][]client.Range{{{Addr: a, Size: 1}}})
			assert.Equal(t, code(serrs[0]), wire.ErrInvalidParams)
		})
	}

	// A put session with two replicas, written in ranges out of order
	// from registered and unregistered memory.
	src := cbuf(t, 1<<20)
	copy(src.Bytes(), pattern(1<<20, 9))
	assert.NilError(t, user.RegisterBuffer(src.Addr(), src.Len()))
	loose := cbuf(t, 4096)
	copy(loose.Bytes(), pattern(4096, 11))
	cfg := client.ReplicateConfig{ReplicaNum: 2}
	assert.DeepEqual(t, codes(user.StartPutSession(ctx, []string{"p", "obj", "p"}, []uint64{300000, 10, 300000}, cfg)),
		[]wire.Code{0, wire.ErrObjectAlreadyExists, wire.ErrInvalidParams})
	ok, err := user.IsExist(ctx, "p")
	assert.NilError(t, err)
	assert.Assert(t, !ok, "a put in a session is not readable before it ends")
	n, perrs := user.PutSessionRanges(ctx, []string{"p"}, [][]client.Range{{
		{Addr: src.Addr() + 200000, Offset: 200000, Size: 100000 - 4096},
		{Addr: loose.Addr(), Offset: 300000 - 4096, Size: 4096},
		{Addr: src.Addr(), Offset: 0, Size: 200000},
	}})
	assert.NilError(t, perrs[0])
	assert.Equal(t, n[0], uint64(300000))
	_, perrs = user.PutSessionRanges(ctx, []string{"p", "q"}, [][]client.Range{{{Addr: src.Addr(), Offset: 299999, Size: 2}}, {}})
	assert.Equal(t, code(perrs[0]), wire.ErrInvalidParams)
	assert.Equal(t, code(perrs[1]), wire.ErrInvalidParams)
	assert.DeepEqual(t, codes(user.EndPutSession(ctx, []string{"p", "q"})), []wire.Code{0, wire.ErrInvalidParams})
	want := append(append([]byte{}, src.Bytes()[:300000-4096]...), loose.Bytes()...)
	for _, c := range []*client.Client{user, holder, holder2} {
		got, err := c.Get(ctx, "p")
		assert.NilError(t, err)
		assert.Assert(t, bytes.Equal(got, want))
	}
	descs, err := user.ReplicaDescs(ctx, []string{"p"})
	assert.NilError(t, err)
	assert.Equal(t, len(descs[0].Replicas), 2)

	// A revoked session leaves nothing, and the key is free again.
	assert.DeepEqual(t, codes(user.StartPutSession(ctx, []string{"r"}, []uint64{4096}, client.ReplicateConfig{})), []wire.Code{0})
	assert.DeepEqual(t, codes(user.RevokePutSession(ctx, []string{"r"})), []wire.Code{0})
	assert.DeepEqual(t, codes(user.RevokePutSession(ctx, []string{"r"})), []wire.Code{wire.ErrInvalidParams})
	_, err = user.Get(ctx, "r")
	assert.Equal(t, code(err), wire.ErrObjectNotFound)
	assert.NilError(t, user.Put(ctx, "r", []byte("again"), client.ReplicateConfig{}))
}

// codes returns the wire code of each error.
func codes(errs []error) []wire.Code {
	out := make([]wire.Code, len(errs))
	for i, e := range errs {
		out[i] = code(e)
	}
	return out
}
