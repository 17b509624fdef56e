package hostile_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	mdhttp "github.com/kvferry/kvferry/engine/metadata/http"
	"github.com/kvferry/kvferry/engine/peerauth"
	"github.com/kvferry/kvferry/engine/rpc"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/engine/transport/samehost"
	"github.com/kvferry/kvferry/engine/transport/tcp"
	"github.com/kvferry/kvferry/store/client"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// roundTrip writes a pattern from a to b's work region and reads it back.
func roundTrip(t *testing.T, a, b *node) error {
	t.Helper()
	seg, err := a.e.OpenSegment(ctxT(t), b.e.SegmentName())
	if err != nil {
		return err
	}
	const n = 256 << 10
	src := a.work.Bytes()[:n]
	fill(src, 77)
	if err := a.e.Transfer(ctxT(t), []engine.Request{{Op: engine.OpWrite, Source: a.work.Addr(), Target: seg,
		TargetOffset: uint64(b.work.Addr()), Length: n}}); err != nil {
		return err
	}
	if err := a.e.Transfer(ctxT(t), []engine.Request{{Op: engine.OpRead, Source: a.work.Addr() + n, Target: seg,
		TargetOffset: uint64(b.work.Addr()), Length: n}}); err != nil {
		return err
	}
	if !bytes.Equal(src, a.work.Bytes()[n:2*n]) {
		return errors.New("bytes differ")
	}
	return nil
}

// With a cluster key every path works between holders of the key, and
// nothing works for a peer without it or with another key.
func TestAuthenticatedCluster(t *testing.T) {
	t.Run("tcp and rpc", func(t *testing.T) {
		a, b := newNode(t, keyA), newNode(t, keyA)
		assert.NilError(t, roundTrip(t, a, b))
		seg, err := a.e.OpenSegment(ctxT(t), b.e.SegmentName())
		assert.NilError(t, err)
		assert.NilError(t, a.e.Notify(ctxT(t), seg, engine.Notification{Name: "a", Msg: "hello"}))
		assert.NilError(t, a.e.Probe(ctxT(t), b.e.SegmentName()))
		deadline := time.Now().Add(10 * time.Second)
		var got []engine.Notification
		for len(got) == 0 && time.Now().Before(deadline) {
			got = b.e.Notifications()
			time.Sleep(5 * time.Millisecond)
		}
		assert.Equal(t, len(got), 1)
		assert.Equal(t, got[0].Msg, "hello")

		for _, other := range []string{"", keyB} {
			c := newNode(t, other)
			err := roundTrip(t, c, b)
			assert.Assert(t, err != nil, "a peer with key %q reached a keyed node", other)
			assert.Assert(t, b.intact())
			err = roundTrip(t, b, c)
			assert.Assert(t, err != nil, "a keyed node reached a peer with key %q", other)
		}
	})
	t.Run("one handshake per connection, none per request", func(t *testing.T) {
		a, b := newNode(t, keyA), newNode(t, keyA)
		assert.NilError(t, roundTrip(t, a, b)) // lanes connected
		before := peerauth.Accepts(peerauth.RoleData)
		seg, err := a.e.OpenSegment(ctxT(t), b.e.SegmentName())
		assert.NilError(t, err)
		for i := range 200 {
			assert.NilError(t, a.e.Transfer(ctxT(t), []engine.Request{{Op: engine.OpCode(i % 2), Source: a.work.Addr(), Target: seg,
				TargetOffset: uint64(b.work.Addr()), Length: 4096}}))
		}
		got := peerauth.Accepts(peerauth.RoleData) - before
		assert.Assert(t, got <= tcp.DefaultLanes, "200 requests ran %d data handshakes (one per lane at most)", got)
	})
	t.Run("rotation", func(t *testing.T) {
		old, both, swapped, fresh := newNode(t, keyA), newNode(t, keyA+"\n"+keyB), newNode(t, keyB+"\n"+keyA), newNode(t, keyB)
		assert.NilError(t, roundTrip(t, old, both))
		assert.NilError(t, roundTrip(t, both, swapped))
		assert.NilError(t, roundTrip(t, swapped, both))
		assert.NilError(t, roundTrip(t, swapped, fresh))
		assert.Assert(t, roundTrip(t, old, fresh) != nil)
	})
	t.Run("same host", func(t *testing.T) {
		for _, tr := range []string{samehost.NameCMA, samehost.NameShm} {
			a, b := newNode(t, keyA, tr, "tcp"), newNode(t, keyA, tr, "tcp")
			seg, err := a.e.OpenSegment(ctxT(t), b.e.SegmentName())
			assert.NilError(t, err)
			if got := a.e.ChooseTransport(seg); got != tr {
				t.Skipf("%s not available here (chose %q)", tr, got)
			}
			assert.NilError(t, roundTrip(t, a, b))
			m := a.e.Metrics()
			assert.Assert(t, m.SlicesByTransport[tr] > 0, "%s carried nothing: %+v", tr, m.SlicesByTransport)
			// A peer with another key gets no session and falls back to
			// TCP, which refuses it too.
			c := newNode(t, keyB, tr, "tcp")
			assert.Assert(t, roundTrip(t, c, b) != nil)
			assert.Assert(t, b.intact())
		}
	})
	t.Run("store master", func(t *testing.T) {
		srv := startMaster(t, keyA)
		mk := func(key string, seg uint64, rpcMode string) (*client.Client, error) {
			ec := engine.Config{}
			if key != "" {
				ec.AuthKeyFile = keyFile(t, key)
			}
			return client.New(ctxT(t), client.Config{LocalHostname: "127.0.0.1", MasterServerAddr: srv.Addr(),
				GlobalSegmentSize: seg, MasterRPC: rpcMode, RPCTimeout: 5 * time.Second, Stack: stack.Config{Engine: ec}})
		}
		for _, mode := range []string{client.MasterRPCMux, client.MasterRPCGRPC} {
			holder, err := mk(keyA, 16<<20, mode)
			assert.NilError(t, err, mode)
			user, err := mk(keyA, 0, mode)
			assert.NilError(t, err, mode)
			val := bytes.Repeat([]byte("kv"), 1000)
			assert.NilError(t, user.Put(ctxT(t), "k-"+mode, val, client.ReplicateConfig{}))
			got, err := holder.Get(ctxT(t), "k-"+mode)
			assert.NilError(t, err)
			assert.Assert(t, bytes.Equal(got, val))
			user.Close()
			holder.Close()
			for _, other := range []string{"", keyB} {
				c, err := mk(other, 0, mode)
				if err == nil {
					c.Close()
				}
				assert.Assert(t, err != nil, "%s client with key %q admitted", mode, other)
			}
		}
		assert.Assert(t, peerauth.Refusals(peerauth.RoleMaster) >= 4)
	})
	t.Run("http metadata", func(t *testing.T) {
		conn := startMetadata(t, keyA, mdhttp.ServerConfig{})
		names := 0
		mk := func(key string) (*engine.Engine, error) {
			names++
			ec := engine.Config{LocalServerName: "seg-" + strconv.Itoa(names), MetadataConn: conn, Transports: []string{"tcp"},
				BindAddress: "127.0.0.1"}
			if key != "" {
				ec.AuthKeyFile = keyFile(t, key)
			}
			e, err := stack.New(ctxT(t), stack.Config{Engine: ec})
			if err == nil {
				t.Cleanup(func() { e.Close() })
			}
			return e, err
		}
		e1, err := mk(keyA)
		assert.NilError(t, err)
		e2, err := mk(keyA + "\n" + keyB)
		assert.NilError(t, err)
		_, err = e2.OpenSegment(ctxT(t), e1.SegmentName())
		assert.NilError(t, err)
		_, err = mk("")
		assert.Assert(t, err != nil, "an engine without the key used the metadata server")
		// A forged descriptor cannot be planted without the key.
		put, _ := http.NewRequest(http.MethodPut, conn+"?key=mooncake/ram/"+e1.SegmentName(), strings.NewReader(`{"name":"forged"}`))
		resp, err := httpClient(nil).Do(put)
		if err == nil {
			resp.Body.Close()
		}
		assert.Assert(t, err != nil, "unauthenticated PUT accepted")
		resp, err = httpClient(mustKeys(t, keyB)).Get(strings.Replace(conn, "/metadata", "/health", 1))
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		assert.Assert(t, err != nil, "wrong key reached the metadata server")
		resp, err = httpClient(mustKeys(t, keyA)).Get(strings.Replace(conn, "/metadata", "/health", 1))
		assert.NilError(t, err)
		resp.Body.Close()
		assert.Equal(t, resp.StatusCode, 200)
	})
	t.Run("remote_accessible = 0", func(t *testing.T) {
		a, b := newNode(t, keyA), newNode(t, keyA)
		seg, err := a.e.OpenSegment(ctxT(t), b.e.SegmentName())
		assert.NilError(t, err)
		d, err := a.e.SegmentDescriptor(seg)
		assert.NilError(t, err)
		_, listed := d.Find(uint64(b.private.Addr()), 1)
		assert.Assert(t, !listed, "private region published")
		err = a.e.Transfer(ctxT(t), []engine.Request{{Op: engine.OpRead, Source: a.work.Addr(), Target: seg,
			TargetOffset: uint64(b.private.Addr()), Length: 4096}})
		assert.Assert(t, errors.Is(err, engine.ErrAddressNotRegistered), "%v", err)
		// Without a key Mooncake's behaviour stays: the flag is ignored.
		c, e := newNode(t, ""), newNode(t, "")
		seg, err = c.e.OpenSegment(ctxT(t), e.e.SegmentName())
		assert.NilError(t, err)
		assert.NilError(t, c.e.Transfer(ctxT(t), []engine.Request{{Op: engine.OpRead, Source: c.work.Addr(), Target: seg,
			TargetOffset: uint64(e.private.Addr()), Length: 4096}}))
		assert.Assert(t, bytes.Equal(c.work.Bytes()[:4096], e.private.Bytes()[:4096]))
	})
	t.Run("no key: the wire is Mooncake's", func(t *testing.T) {
		b := newNode(t, "")
		reply, err := rpc.Call(ctxT(t), b.rpcAddr(), rpc.TypeProbe, []byte("{}"), rpc.ClientConfig{})
		assert.NilError(t, err)
		assert.Equal(t, strings.TrimSpace(string(reply)), `{"status":"success"}`)
		// A keyed client meets an unkeyed node: a clear error.
		_, err = rpc.Call(ctxT(t), b.rpcAddr(), rpc.TypeProbe, []byte("{}"), rpc.ClientConfig{Auth: mustKeys(t, keyA), Timeout: 5 * time.Second})
		assert.Assert(t, errors.Is(err, peerauth.ErrNoHandshake), "%v", err)
	})
}
