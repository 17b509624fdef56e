package client_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/store/client"
	"github.com/kvferry/kvferry/store/master"
	"github.com/kvferry/kvferry/store/wire"
)

// TestMultiBuffers: objects gathered from several buffers and scattered
// into several, between processes' worth of clients (remote holder: the
// engine moves each buffer, or staging for unregistered memory) and into
// the client's own segment (memcpy).
func TestMultiBuffers(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	srv := startMaster(t, master.Config{})
	holder := newClient(t, client.Config{MasterServerAddr: srv.Addr(), GlobalSegmentSize: 64 << 20})
	user := newClient(t, client.Config{MasterServerAddr: srv.Addr(), LocalBufferSize: 1 << 20})

	const pieces, piece = 6, 100 << 10
	src, dst := cbuf(t, pieces*piece), cbuf(t, 4<<20)
	plain := cbuf(t, pieces*piece) // never registered
	copy(src.Bytes(), pattern(pieces*piece, 3))
	copy(plain.Bytes(), pattern(pieces*piece, 4))
	assert.NilError(t, user.RegisterBuffer(src.Addr(), src.Len()))
	assert.NilError(t, user.RegisterBuffer(dst.Addr(), dst.Len()))
	assert.NilError(t, holder.RegisterBuffer(src.Addr(), src.Len()))

	// Key i is made of pieces taken in reverse order, with an empty one.
	layout := func(base uintptr) []client.Buffer {
		var bufs []client.Buffer
		for j := pieces - 1; j >= 0; j-- {
			bufs = append(bufs, client.Buffer{Addr: base + uintptr(j*piece), Size: piece})
		}
		return append(bufs, client.Buffer{Addr: 0, Size: 0})
	}
	want := func(m []byte) []byte {
		var b []byte
		for j := pieces - 1; j >= 0; j-- {
			b = append(b, m[j*piece:(j+1)*piece]...)
		}
		return b
	}
	for _, tc := range []struct {
		name   string
		c      *client.Client
		bufs   []client.Buffer
		data   []byte
		staged uint64 // bytes of the put the user's staging buffer copies
	}{
		{"registered, remote", user, layout(src.Addr()), want(src.Bytes()), 0},
		{"unregistered, staged", user, layout(plain.Addr()), want(plain.Bytes()), pieces * piece},
		{"own segment", holder, layout(src.Addr()), want(src.Bytes()), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "m-" + tc.name
			staged := user.Metrics().StagedBytes
			for _, err := range tc.c.BatchPutFromMulti(ctx, []string{key}, [][]client.Buffer{tc.bufs}, client.ReplicateConfig{}) {
				assert.NilError(t, err)
			}
			// Registered buffers go to the holder with no copy.
			assert.Equal(t, user.Metrics().StagedBytes-staged, tc.staged)
			got, err := user.Get(ctx, key)
			assert.NilError(t, err)
			assert.Assert(t, bytes.Equal(got, tc.data))
			staged = user.Metrics().StagedBytes
			// Scatter into 3 pieces, the last larger than what is left.
			clear(dst.Bytes())
			a := dst.Addr()
			out := []client.Buffer{{Addr: a, Size: 1000}, {Addr: a + 4096, Size: 0}, {Addr: a + 8192, Size: 200 << 10},
				{Addr: a + 1<<20, Size: 1 << 20}}
			for _, c := range []*client.Client{user, holder} {
				n, errs := c.BatchGetIntoMulti(ctx, []string{key}, [][]client.Buffer{out})
				assert.NilError(t, errs[0])
				assert.Equal(t, n[0], uint64(pieces*piece))
				b := dst.Bytes()
				joined := append(append(append([]byte(nil), b[:1000]...), b[8192:8192+200<<10]...),
					b[1<<20:1<<20+pieces*piece-1000-200<<10]...)
				assert.Assert(t, bytes.Equal(joined, tc.data), "read by %s", c.Hostname())
			}
			assert.Equal(t, user.Metrics().StagedBytes, staged, "scattered without a copy")
		})
	}

	// Buffers that hold less than the object: INVALID_PARAMS, nothing read.
	clear(dst.Bytes())
	n, errs := user.BatchGetIntoMulti(ctx, []string{"m-own segment", "missing"},
		[][]client.Buffer{{{Addr: dst.Addr(), Size: 1000}}, {{Addr: dst.Addr(), Size: 1000}}})
	assert.Equal(t, code(errs[0]), wire.ErrInvalidParams)
	assert.Equal(t, code(errs[1]), wire.ErrObjectNotFound)
	assert.Equal(t, n[0], uint64(0))
	assert.Assert(t, bytes.Equal(dst.Bytes()[:1000], make([]byte, 1000)))

	// Bad lists: a NULL buffer with a size, an empty object, a count that
	// does not match.
	errs = user.BatchPutFromMulti(ctx, []string{"bad1", "bad2", "ok"}, [][]client.Buffer{
		{{Addr: src.Addr(), Size: 10}, {Addr: 0, Size: 10}}, {}, {{Addr: src.Addr(), Size: 10}}}, client.ReplicateConfig{})
	assert.Equal(t, code(errs[0]), wire.ErrInvalidParams)
	assert.Equal(t, code(errs[1]), wire.ErrInvalidParams)
	assert.NilError(t, errs[2])
	for _, err := range user.BatchPutFromMulti(ctx, []string{"a", "b"}, [][]client.Buffer{{}}, client.ReplicateConfig{}) {
		assert.Equal(t, code(err), wire.ErrInvalidParams)
	}
	_, errs = user.BatchGetIntoMulti(ctx, []string{"ok"}, [][]client.Buffer{{{Addr: 0, Size: 100}}})
	assert.Equal(t, code(errs[0]), wire.ErrInvalidParams)

	// Many keys of many pieces in one batch, with upsert.
	const keys = 16
	names := make([]string, keys)
	lists := make([][]client.Buffer, keys)
	for i := range keys {
		names[i] = fmt.Sprint("many", i)
		for j := range 4 {
			lists[i] = append(lists[i], client.Buffer{Addr: src.Addr() + uintptr((i*4+j)*4096%(pieces*piece-4096)), Size: 4096})
		}
	}
	for _, err := range user.BatchUpsertFromMulti(ctx, names, lists, client.ReplicateConfig{ReplicaNum: 2}) {
		assert.NilError(t, err)
	}
	outs := make([][]client.Buffer, keys)
	for i := range keys {
		for j := range 4 {
			outs[i] = append(outs[i], client.Buffer{Addr: dst.Addr() + uintptr((i*4+j)*4096), Size: 4096})
		}
	}
	clear(dst.Bytes())
	got, errs := user.BatchGetIntoMulti(ctx, names, outs)
	for i := range keys {
		assert.NilError(t, errs[i])
		assert.Equal(t, got[i], uint64(4*4096))
		for j, b := range lists[i] {
			o := outs[i][j]
			assert.Assert(t, bytes.Equal(dst.Bytes()[o.Addr-dst.Addr():][:4096], src.Bytes()[b.Addr-src.Addr():][:4096]))
		}
	}
}
