package coro_test

import (
	"context"
	"errors"
	"flag"
	"net"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/store/master"
	"github.com/kvferry/kvferry/store/wire/coro"
)

// TestClientAgainstKvferryMaster: the Go coro_rpc client drives
// kvferry-master's coro_rpc service (a put, a lookup, an unknown
// function), and a call past its deadline ends the connection.
func TestClientAgainstKvferryMaster(t *testing.T) {
	srv, err := master.StartEmbedded(master.Config{})
	assert.NilError(t, err)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := coro.Dial(ctx, srv.Addr())
	assert.NilError(t, err)
	defer c.Close()

	ver, err := coro.InvokeNoArgs(ctx, c, coro.MethodServiceReady, coro.ExpStringCodec)
	assert.NilError(t, err)
	assert.Equal(t, ver.Value, coro.StoreVersion)

	cid := coro.UUID{Hi: 9, Lo: 9}
	mount := coro.MountSegmentArgs{Segment: coro.Segment{ID: coro.UUID{Hi: 1}, Name: "127.0.0.1:1", Base: 1 << 40, Size: 1 << 20,
		TEEndpoint: "127.0.0.1:1", Protocol: "tcp"}, ClientID: cid}
	r, err := coro.Invoke(ctx, c, coro.MethodMountSegment, coro.MountSegmentArgsCodec, &mount, coro.ExpVoidCodec)
	assert.NilError(t, err)
	assert.Assert(t, r.OK)
	ps := coro.PutStartArgs{ClientID: cid, Key: "x", SliceLength: 4096, Config: coro.ReplicateConfig{ReplicaNum: 1}, TenantID: "default"}
	d, err := coro.Invoke(ctx, c, coro.MethodPutStart, coro.PutStartArgsCodec, &ps, coro.ExpDescriptorsCodec)
	assert.NilError(t, err)
	assert.Assert(t, d.OK)
	assert.Equal(t, d.Value[0].Buffer.BufferAddress, uint64(1<<40))

	_, err = c.Call(ctx, 12345, nil)
	var re *coro.RPCError
	assert.Assert(t, errors.As(err, &re), "%v", err)
	assert.Equal(t, re.Code, coro.ErrcFunctionNotRegistered)
	// Still usable after a coro_rpc failure answer.
	_, err = coro.InvokeNoArgs(ctx, c, coro.MethodServiceReady, coro.ExpStringCodec)
	assert.NilError(t, err)

	assert.NilError(t, c.Close())
	assert.NilError(t, c.Close())
	_, err = c.Call(ctx, coro.MethodServiceReady.ID, nil)
	assert.Assert(t, errors.Is(err, coro.ErrClosed))
}

func TestClientDeadline(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	defer lis.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		conn, err := lis.Accept()
		if err == nil {
			accepted <- conn // never answers
		}
	}()
	c, err := coro.Dial(context.Background(), lis.Addr().String())
	assert.NilError(t, err)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = c.Call(ctx, coro.MethodServiceReady.ID, nil)
	assert.Assert(t, err != nil)
	var ne net.Error
	assert.Assert(t, errors.As(err, &ne) && ne.Timeout(), "%v", err)
	_, err = c.Call(context.Background(), coro.MethodServiceReady.ID, nil)
	assert.Assert(t, err != nil, "the connection ended with the first failure")
	select {
	case conn := <-accepted:
		conn.Close()
	case <-time.After(10 * time.Second):
		t.Fatal("no connection accepted")
	}
}

var realServer = flag.String("coro.server", "", "a real coro_rpc server with Mooncake's master methods (mooncake_master, or a stand-in), for TestClientAgainstRealServer")

// TestClientAgainstRealServer runs the Go client against a real coro_rpc
// server, by hand: go test ./store/wire/coro -run TestClientAgainstRealServer
// -coro.server 127.0.0.1:50051.
func TestClientAgainstRealServer(t *testing.T) {
	if *realServer == "" {
		t.Skip("runs only with -coro.server")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := coro.Dial(ctx, *realServer)
	assert.NilError(t, err)
	defer c.Close()
	ver, err := coro.InvokeNoArgs(ctx, c, coro.MethodServiceReady, coro.ExpStringCodec)
	assert.NilError(t, err)
	assert.Equal(t, ver.Value, coro.StoreVersion)
	cid := coro.UUID{Hi: 7, Lo: 7}
	ping, err := coro.Invoke(ctx, c, coro.MethodPing, coro.UUIDCodec, &cid, coro.ExpPingCodec)
	assert.NilError(t, err)
	t.Logf("ping: %+v", ping)
	ka := coro.KeyArgs{Key: "golden-nope", TenantID: "default"}
	l, err := coro.Invoke(ctx, c, coro.MethodGetReplicaList, coro.KeyArgsCodec, &ka, coro.ExpReplicaListCodec)
	assert.NilError(t, err)
	assert.DeepEqual(t, l, coro.Fail[coro.GetReplicaListResponse](coro.CodeObjectNotFound))
	_, err = c.Call(ctx, 12345, nil)
	var re *coro.RPCError
	assert.Assert(t, errors.As(err, &re), "%v", err)
	assert.Equal(t, re.Code, coro.ErrcFunctionNotRegistered)
}

// TestClientSequenceAgainstRealServer makes, by hand, the calls a Mooncake
// store client makes for one object's life (the order of
// testdata/mooncake's frames), against a real server given with
// -coro.server, and logs every answer: go test ./store/wire/coro -run
// TestClientSequenceAgainstRealServer -v -coro.server 127.0.0.1:50061.
func TestClientSequenceAgainstRealServer(t *testing.T) {
	if *realServer == "" {
		t.Skip("runs only with -coro.server")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := coro.Dial(ctx, *realServer)
	assert.NilError(t, err)
	defer c.Close()
	ver, err := coro.InvokeNoArgs(ctx, c, coro.MethodServiceReady, coro.ExpStringCodec)
	assert.NilError(t, err)
	t.Logf("ServiceReady: %+v", ver)
	cid := coro.UUID{Hi: 0x1111, Lo: 0x2222}
	seg := coro.Segment{ID: coro.UUID{Hi: 0x3333, Lo: 0x4444}, Name: "127.0.0.1:17812", Base: 0x7f0000000000,
		Size: 64 << 20, TEEndpoint: "127.0.0.1:17812", Protocol: "tcp"}
	mount := coro.MountSegmentArgs{Segment: seg, ClientID: cid}
	mr, err := coro.Invoke(ctx, c, coro.MethodMountSegment, coro.MountSegmentArgsCodec, &mount, coro.ExpVoidCodec)
	assert.NilError(t, err)
	t.Logf("MountSegment: %+v", mr)
	ping, err := coro.Invoke(ctx, c, coro.MethodPing, coro.UUIDCodec, &cid, coro.ExpPingCodec)
	assert.NilError(t, err)
	t.Logf("Ping: %+v", ping)
	key := coro.KeyArgs{Key: "golden-k1", TenantID: "default"}
	ex, err := coro.Invoke(ctx, c, coro.MethodExistKey, coro.KeyArgsCodec, &key, coro.ExpBoolCodec)
	assert.NilError(t, err)
	t.Logf("ExistKey (before): %+v", ex)
	ps := coro.PutStartArgs{ClientID: cid, Key: key.Key, SliceLength: 1024, Config: coro.ReplicateConfig{ReplicaNum: 1}, TenantID: "default"}
	d, err := coro.Invoke(ctx, c, coro.MethodPutStart, coro.PutStartArgsCodec, &ps, coro.ExpDescriptorsCodec)
	assert.NilError(t, err)
	t.Logf("PutStart: %+v", d)
	pe := coro.PutEndArgs{ClientID: cid, Meta: coro.ObjectMeta{Key: key.Key}, ReplicaType: coro.ReplicaMemory, TenantID: "default"}
	er, err := coro.Invoke(ctx, c, coro.MethodPutEnd, coro.PutEndArgsCodec, &pe, coro.ExpVoidCodec)
	assert.NilError(t, err)
	t.Logf("PutEnd: %+v", er)
	ex, err = coro.Invoke(ctx, c, coro.MethodExistKey, coro.KeyArgsCodec, &key, coro.ExpBoolCodec)
	assert.NilError(t, err)
	t.Logf("ExistKey (after): %+v", ex)
	l, err := coro.Invoke(ctx, c, coro.MethodGetReplicaList, coro.KeyArgsCodec, &key, coro.ExpReplicaListCodec)
	assert.NilError(t, err)
	t.Logf("GetReplicaList: %+v", l)
	missing := coro.KeyArgs{Key: "golden-nope", TenantID: "default"}
	l, err = coro.Invoke(ctx, c, coro.MethodGetReplicaList, coro.KeyArgsCodec, &missing, coro.ExpReplicaListCodec)
	assert.NilError(t, err)
	t.Logf("GetReplicaList (missing): %+v", l)
	rm := coro.RemoveArgs{Key: key.Key, Force: true, TenantID: "default"}
	rr, err := coro.Invoke(ctx, c, coro.MethodRemove, coro.RemoveArgsCodec, &rm, coro.ExpVoidCodec)
	assert.NilError(t, err)
	t.Logf("Remove: %+v", rr)
	um := coro.UnmountSegmentArgs{SegmentID: seg.ID, ClientID: cid}
	ur, err := coro.Invoke(ctx, c, coro.MethodUnmountSegment, coro.UnmountSegmentArgsCodec, &um, coro.ExpVoidCodec)
	assert.NilError(t, err)
	t.Logf("UnmountSegment: %+v", ur)
	_, err = c.Call(ctx, 12345, nil)
	t.Logf("unregistered function: %v", err)
}
