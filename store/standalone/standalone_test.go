package standalone

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/rpc"
	"os"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/internal/testutil"
	"github.com/kvferry/kvferry/store/client"
	"github.com/kvferry/kvferry/store/embedded"
	"github.com/kvferry/kvferry/store/wire"
)

func TestMain(m *testing.M) {
	os.Exit(testutil.VerifyNoLeaks(m))
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// realClient starts a store client with an embedded master and a segment,
// served to dummies on a free port.
func realClient(t *testing.T) (*client.Client, *Server, int) {
	t.Helper()
	c, err := embedded.NewClient(ctxT(t), client.Config{LocalHostname: "127.0.0.1", MasterServerAddr: "embedded",
		GlobalSegmentSize: 32 << 20, LocalBufferSize: 4 << 20})
	assert.NilError(t, err)
	t.Cleanup(func() { c.Close() })
	port := 20000 + rand.IntN(40000)
	srv, err := Serve(c, ServerConfig{Port: port})
	assert.NilError(t, err)
	t.Cleanup(func() { srv.Close() })
	return c, srv, port
}

func shm(t *testing.T, n uint64) (uintptr, []byte) {
	t.Helper()
	a, err := ProcessHostMem().Alloc(n)
	assert.NilError(t, err)
	t.Cleanup(func() { ProcessHostMem().Free(a) })
	return a, cmem.Bytes(a, n)
}

func fillPattern(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*7) + seed
	}
}

func TestDummyForwardsToRealClient(t *testing.T) {
	ctx := ctxT(t)
	real, srv, port := realClient(t)
	_, err := Dial(ctx, DummyConfig{ServerAddress: fmt.Sprintf("127.0.0.1:%d", port+1)})
	assert.Equal(t, wire.CodeOf(err), wire.ErrRPCFail)

	d, err := Dial(ctx, DummyConfig{ServerAddress: fmt.Sprintf("127.0.0.1:%d", port), LocalBufferSize: 1 << 20})
	assert.NilError(t, err)
	defer d.Close()
	assert.Equal(t, d.Hostname(), real.Hostname())
	assert.Equal(t, srv.Sessions(), 1)
	assert.NilError(t, d.HealthCheck(ctx))

	// Shared memory: the real client moves the bytes itself.
	const n = 64 << 10
	src, sb := shm(t, 4*n)
	dst, db := shm(t, 4*n)
	fillPattern(sb, 3)
	assert.NilError(t, d.RegisterBuffer(src, 4*n))
	assert.NilError(t, d.RegisterBuffer(dst+100, 10)) // any range inside: the whole buffer
	for i, err := range d.BatchPutFrom(ctx, []string{"a", "b"}, []uintptr{src, src + n}, []uint64{n, n}, client.ReplicateConfig{}) {
		assert.NilError(t, err, "key %d", i)
	}
	got, errs := d.BatchGetInto(ctx, []string{"b", "a", "nope"}, []uintptr{dst, dst + n, dst}, []uint64{n, n, n})
	assert.NilError(t, errs[0])
	assert.NilError(t, errs[1])
	assert.Equal(t, wire.CodeOf(errs[2]), wire.ErrObjectNotFound)
	assert.DeepEqual(t, got[:2], []uint64{n, n})
	assert.Assert(t, bytes.Equal(db[:n], sb[n:2*n]) && bytes.Equal(db[n:2*n], sb[:n]))
	// Other processes (here: the real client itself) see the objects.
	v, err := real.Get(ctx, "a")
	assert.NilError(t, err)
	assert.Assert(t, bytes.Equal(v, sb[:n]))

	// Multi-buffer, with groups.
	errs = d.BatchPutFromMulti(ctx, []string{"m"}, [][]client.Buffer{{{Addr: src + 3*n, Size: 100}, {Addr: src, Size: 50}}},
		client.ReplicateConfig{GroupIDs: []string{"g"}})
	assert.NilError(t, errs[0])
	clear(db)
	sizes, errs := d.BatchGetIntoMulti(ctx, []string{"m"}, [][]client.Buffer{{{Addr: dst, Size: 120}, {Addr: dst + n, Size: 30}}})
	assert.NilError(t, errs[0])
	assert.Equal(t, sizes[0], uint64(150))
	assert.Assert(t, bytes.Equal(db[:100], sb[3*n:3*n+100]) && bytes.Equal(db[100:120], sb[:20]) && bytes.Equal(db[n:n+30], sb[20:50]))
	errs = d.BatchPutFrom(ctx, []string{"x", "y"}, []uintptr{src, src}, []uint64{8, 8}, client.ReplicateConfig{GroupIDs: []string{}})
	assert.Equal(t, wire.CodeOf(errs[0]), wire.ErrInvalidParams)

	// Memory that is not shared: through the local buffer, or as bytes.
	plain, err := cmem.MapAnon(3 << 20)
	assert.NilError(t, err)
	defer plain.Close()
	fillPattern(plain.Bytes(), 9)
	assert.NilError(t, d.PutFrom(ctx, "small", plain.Addr(), 1000, client.ReplicateConfig{}))
	assert.NilError(t, d.PutFrom(ctx, "big", plain.Addr(), 3<<20, client.ReplicateConfig{}))
	out, err := cmem.MapAnon(3 << 20)
	assert.NilError(t, err)
	defer out.Close()
	m, err := d.GetInto(ctx, "big", out.Addr(), 3<<20)
	assert.NilError(t, err)
	assert.Equal(t, m, uint64(3<<20))
	assert.Assert(t, bytes.Equal(out.Bytes(), plain.Bytes()))
	m, err = d.GetInto(ctx, "small", out.Addr(), 1<<20)
	assert.NilError(t, err)
	assert.Equal(t, m, uint64(1000))
	_, err = d.GetInto(ctx, "big", out.Addr(), 100)
	assert.Equal(t, wire.CodeOf(err), wire.ErrInvalidParams)

	// Existence, sizes, replicas, removal.
	ok, err := d.IsExist(ctx, "a")
	assert.NilError(t, err)
	assert.Assert(t, ok)
	ex, err := d.BatchIsExist(ctx, []string{"a", "nope"})
	assert.NilError(t, err)
	assert.DeepEqual(t, ex, []bool{true, false})
	sz, err := d.GetSize(ctx, "big")
	assert.NilError(t, err)
	assert.Equal(t, sz, uint64(3<<20))
	descs, err := d.ReplicaDescs(ctx, []string{"a", "nope"})
	assert.NilError(t, err)
	assert.Equal(t, descs[0].Replicas[0].SegmentName, real.Hostname())
	assert.Equal(t, wire.CodeOf(descs[1].Err), wire.ErrObjectNotFound)
	assert.Equal(t, wire.CodeOf(d.Remove(ctx, "a", false)), wire.ErrObjectHasLease)
	rerrs, err := d.BatchRemove(ctx, []string{"a", "nope"}, true)
	assert.NilError(t, err)
	assert.NilError(t, rerrs[0])
	assert.Equal(t, wire.CodeOf(rerrs[1]), wire.ErrObjectNotFound)
	cnt, err := d.RemoveByRegex(ctx, "^(b|m)$", true)
	assert.NilError(t, err)
	assert.Equal(t, cnt, int64(2))
	cnt, err = d.RemoveAll(ctx, true)
	assert.NilError(t, err)
	assert.Equal(t, cnt, int64(2))

	// Bad registrations.
	assert.Equal(t, wire.CodeOf(d.RegisterBuffer(plain.Addr(), 100)), wire.ErrInternal)
	assert.Equal(t, wire.CodeOf(d.UnregisterBuffer(plain.Addr())), wire.ErrInternal)
	assert.NilError(t, d.UnregisterBuffer(dst))

	assert.NilError(t, d.Close())
	assert.NilError(t, d.Close())
	waitFor(t, func() bool { return srv.Sessions() == 0 })
	assert.Equal(t, wire.CodeOf(d.HealthCheck(ctx)), wire.CodeOf(errClosed))
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDummyRedialsRestartedRealClient: after the real client's service
// restarts, the next call opens a new session and shares the buffers again.
func TestDummyRedialsRestartedRealClient(t *testing.T) {
	ctx := ctxT(t)
	real, srv, port := realClient(t)
	d, err := Dial(ctx, DummyConfig{ServerAddress: fmt.Sprint(port), Timeout: 5 * time.Second})
	assert.NilError(t, err)
	defer d.Close()
	src, sb := shm(t, 4096)
	fillPattern(sb, 1)
	assert.NilError(t, d.RegisterBuffer(src, 4096))
	assert.NilError(t, d.PutFrom(ctx, "k1", src, 4096, client.ReplicateConfig{}))

	assert.NilError(t, srv.Close())
	assert.Equal(t, wire.CodeOf(d.PutFrom(ctx, "k2", src, 4096, client.ReplicateConfig{})), wire.ErrRPCFail)
	srv2, err := Serve(real, ServerConfig{Port: port})
	assert.NilError(t, err)
	defer srv2.Close()
	assert.NilError(t, d.PutFrom(ctx, "k2", src, 4096, client.ReplicateConfig{}))
	assert.Equal(t, srv2.Sessions(), 1)
	v, err := real.Get(ctx, "k2")
	assert.NilError(t, err)
	assert.Assert(t, bytes.Equal(v, sb))
}

// TestServerRefusesForeignAddresses: the real client touches only memory a
// session shared with it, and fds only for a session's token.
func TestServerRefusesForeignAddresses(t *testing.T) {
	ctx := ctxT(t)
	_, srv, port := realClient(t)
	conn, err := net.Dial("unix", socketAddr(port).Name)
	assert.NilError(t, err)
	_, err = conn.Write([]byte{connRPC})
	assert.NilError(t, err)
	rc := rpc.NewClient(conn)
	defer rc.Close()
	var pr PutReply
	assert.NilError(t, rc.Call(service+".Put", &PutArgs{Items: []PutItem{{Key: "x", Pieces: []Piece{{Addr: 0x1000, Size: 8}}}}}, &pr))
	assert.Equal(t, wire.CodeOf(pr.Errs[0].err()), wire.ErrIllegalClient) // no session yet
	var or OpenReply
	assert.NilError(t, rc.Call(service+".Open", &OpenArgs{PID: 1}, &or))
	assert.NilError(t, rc.Call(service+".Put", &PutArgs{Items: []PutItem{{Key: "x", Pieces: []Piece{{Addr: 0x1000, Size: 8}}}}}, &pr))
	assert.Equal(t, wire.CodeOf(pr.Errs[0].err()), wire.ErrInvalidParams)
	var gr GetReply
	assert.NilError(t, rc.Call(service+".Get", &GetArgs{Items: []GetItem{{Key: "x", Pieces: []Piece{{Addr: 0x1000, Size: 8}}}}}, &gr))
	assert.Equal(t, wire.CodeOf(gr.Errs[0].err()), wire.ErrInvalidParams)
	assert.NilError(t, rc.Call(service+".Open", &OpenArgs{PID: 1}, &or))
	assert.Equal(t, wire.CodeOf(or.Err.err()), wire.ErrInvalidParams)

	// An fd for a token no session holds is refused.
	b, _ := shm(t, 4096)
	d := &Dummy{port: port, cfg: DummyConfig{Timeout: time.Second}}
	err = d.sendFD(ctx, [tokenBytes]byte{1, 2, 3}, ProcessHostMem().find(b, 1))
	assert.Equal(t, wire.CodeOf(err), wire.ErrIllegalClient)
	assert.Equal(t, srv.Sessions(), 1)

	// A connection of no known kind is closed.
	c2, err := net.Dial("unix", socketAddr(port).Name)
	assert.NilError(t, err)
	defer c2.Close()
	_, _ = c2.Write([]byte("?"))
	_ = c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = c2.Read(make([]byte, 1))
	assert.Assert(t, err != nil)
}

func TestHostMem(t *testing.T) {
	h := ProcessHostMem()
	a, err := h.Alloc(10000)
	assert.NilError(t, err)
	b := cmem.Bytes(a, 10000)
	b[9999] = 7
	assert.Assert(t, h.find(a+100, 9900) != nil)
	assert.Assert(t, h.find(a+100, 9901) == nil)
	assert.NilError(t, h.Free(a))
	assert.ErrorIs(t, h.Free(a), ErrNotShared)
	_, err = h.Alloc(0)
	assert.Assert(t, err != nil)
	_, err = PortOf("host:notaport")
	assert.Equal(t, wire.CodeOf(err), wire.ErrInvalidParams)
	p, err := PortOf("10.0.0.1:50052")
	assert.NilError(t, err)
	assert.Equal(t, p, 50052)
}
