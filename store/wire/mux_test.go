package wire

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"gotest.tools/v3/assert"
)

// TestMuxHeaderGolden checks the header layout against bytes written by
// hand from the format in mux.go, not from our encoder.
func TestMuxHeaderGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    MuxHeader
		b    []byte
	}{
		{"request", MuxHeader{BodyBytes: 5, ID: 0x01020304, Method: MuxPutStart},
			[]byte{0x05, 0, 0, 0, 0x04, 0x03, 0x02, 0x01, 0x09, 0, 0, 0}},
		{"failed answer", MuxHeader{BodyBytes: 0x0100, ID: 7, Method: MuxGetReplicaList, Status: uint16(codes.NotFound)},
			[]byte{0, 0x01, 0, 0, 7, 0, 0, 0, 7, 0, 5, 0}},
		{"largest body", MuxHeader{BodyBytes: MaxMuxBody, ID: 0xffffffff, Method: MuxListKeys},
			[]byte{0, 0, 0, 0x04, 0xff, 0xff, 0xff, 0xff, 18, 0, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b [MuxHeaderBytes]byte
			PutMuxHeader(b[:], tc.h)
			assert.DeepEqual(t, b[:], tc.b)
			h, err := ParseMuxHeader(tc.b)
			assert.NilError(t, err)
			assert.Equal(t, h, tc.h)
		})
	}
	assert.DeepEqual(t, MuxHello[:], []byte("KVFMUX\x00\x01"))
	// The HTTP/2 client preface (RFC 9113 §3.4) never looks like our hello.
	assert.Assert(t, !bytes.HasPrefix([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), MuxHello[:]))
}

// TestMuxMethodValues is the known-answer table of method numbers: they are
// protocol, in the order of the rpcs in wire.proto.
func TestMuxMethodValues(t *testing.T) {
	names := []string{"Ping", "MountSegment", "ReMountSegments", "UnmountSegment", "ExistKey", "BatchExistKey",
		"GetReplicaList", "BatchGetReplicaList", "PutStart", "BatchPutStart", "PutEnd", "BatchPutEnd", "Remove",
		"BatchRemove", "RemoveByRegex", "RemoveAll", "ListSegments", "ListKeys", "AcquireGrants", "PutCommit",
		"ReturnGrants", "MountDiskSegment", "FetchTasks", "PromoteObject", "CreateTask", "QueryTask", "WaitObject",
		"GetReplicaListByRegex", "BatchQueryIp", "CalcCacheStats", "CreateDrainJob", "QueryDrainJob", "CancelDrainJob",
		"BatchReplicaClear"}
	assert.Equal(t, len(names), len(Master_ServiceDesc.Methods))
	for i, n := range names {
		m := MuxMethod(i + 1)
		assert.Equal(t, m.Name(), "/kvferry.store.v1.Master/"+n)
		assert.Equal(t, Master_ServiceDesc.Methods[i].MethodName, n)
	}
	assert.Equal(t, MuxMethod(0).Name(), "")
	assert.Equal(t, MuxMethod(35).Name(), "")
}

func TestParseMuxHeaderErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    MuxHeader
	}{
		{"body too large", MuxHeader{BodyBytes: MaxMuxBody + 1, Method: MuxPing}},
		{"method 0", MuxHeader{Method: 0}},
		{"method past the end", MuxHeader{Method: muxMethodEnd}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b [MuxHeaderBytes]byte
			PutMuxHeader(b[:], tc.h)
			_, err := ParseMuxHeader(b[:])
			assert.Assert(t, errors.Is(err, ErrMuxFrame), "got %v", err)
		})
	}
	_, err := ParseMuxHeader(make([]byte, 11))
	assert.Assert(t, errors.Is(err, ErrMuxFrame))
}

// TestAsStatusError: the mux and in-process paths give exactly what a gRPC
// client gets after FromStatus, for every code.
func TestAsStatusError(t *testing.T) {
	errs := []error{errors.New("plain"), context.DeadlineExceeded, fmt.Errorf("put %q: %w", "k", context.Canceled)}
	for _, c := range Codes() {
		if c != OK {
			errs = append(errs, fmt.Errorf("op %q: %w", "key", c))
		}
	}
	for _, err := range errs {
		t.Run(err.Error(), func(t *testing.T) {
			want := FromStatus(ToStatus(err))
			got := AsStatusError(err)
			assert.DeepEqual(t, error(got), want)
			// Over the mux error body.
			body, st := AppendMuxError(nil, err)
			assert.DeepEqual(t, ParseMuxError(st, body), want)
		})
	}
	// A status error and a *StatusError pass through.
	se := &StatusError{Code: ErrObjectNotFound, GRPC: codes.NotFound, Message: "m"}
	assert.Equal(t, AsStatusError(fmt.Errorf("x: %w", se)), se)
	st := ToStatus(ErrObjectHasLease)
	assert.DeepEqual(t, error(AsStatusError(st)), FromStatus(st))
	assert.Assert(t, AsStatusError(nil) == nil)
	// A short error body is RPC_FAIL, an unknown code INTERNAL.
	assert.Equal(t, CodeOf(ParseMuxError(13, []byte{1})), ErrRPCFail)
	assert.Equal(t, CodeOf(ParseMuxError(2, []byte{0xff, 0xff, 0, 0, 'x'})), ErrInternal)
}

// fakeMaster answers a few calls, for the protocol tests.
type fakeMaster struct {
	UnimplementedMasterServer
	block   chan struct{} // ExistKey of "block" waits for it
	slow    chan struct{} // ExistKey of "slow" waits for one value of it
	pings   atomic.Int64
	started chan struct{} // gets a value when ExistKey("block") starts
}

func (f *fakeMaster) Ping(_ context.Context, req *PingRequest) (*PingResponse, error) {
	f.pings.Add(1)
	return &PingResponse{Status: ClientStatus_CLIENT_STATUS_OK, ViewVersion: uint64(len(req.GetClientId()))}, nil
}

func (f *fakeMaster) ExistKey(_ context.Context, req *KeyRequest) (*ExistKeyResponse, error) {
	switch req.GetKey() {
	case "block":
		if f.block != nil {
			f.started <- struct{}{}
			<-f.block
		}
	case "slow":
		f.started <- struct{}{}
		<-f.slow
	case "missing":
		return nil, fmt.Errorf("exist %q: %w", req.GetKey(), ErrObjectNotFound)
	case "status":
		return nil, ToStatus(fmt.Errorf("exist: %w", ErrObjectHasLease))
	}
	return &ExistKeyResponse{Exists: true}, nil
}

// The fake master's ListKeys answer: listKeysCount keys of listKeyBytes
// each, listKey(i) the i-th. Its body (about 1.6 MiB) is larger than the
// mux read buffer many times over and larger than the largest pooled
// buffer, which is what the test of a large answer needs; it is made of
// long keys rather than many short ones (once 200,000 of 12 bytes), so
// that building, encoding and decoding it under -race on a loaded 2-core
// machine costs a fraction of a second, not most of a 10 s deadline.
const (
	listKeyBytes  = 100
	listKeysCount = (muxPoolMaxBytes + muxPoolMaxBytes/2) / listKeyBytes
)

// listKey is the fake master's i-th key: "key-%08d" padded with 'x' to
// listKeyBytes.
func listKey(i int) string {
	k := fmt.Sprintf("key-%08d", i)
	return k + strings.Repeat("x", listKeyBytes-len(k))
}

func (f *fakeMaster) ListKeys(context.Context, *ListKeysRequest) (*ListKeysResponse, error) {
	keys := make([]string, listKeysCount)
	for i := range keys {
		keys[i] = listKey(i)
	}
	return &ListKeysResponse{Keys: keys}, nil
}

// muxServer serves fakeMaster over mux on a loopback port.
type muxServer struct {
	lis   net.Listener
	f     *fakeMaster
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

func startMuxServer(t *testing.T, addr string) *muxServer {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	assert.NilError(t, err)
	s := &muxServer{lis: lis, f: &fakeMaster{block: make(chan struct{}), slow: make(chan struct{}), started: make(chan struct{}, 16)}}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				var hello [8]byte
				if _, err := io.ReadFull(c, hello[:]); err != nil || hello != MuxHello {
					return
				}
				_ = ServeMuxConn(context.Background(), c, s.f)
			}()
		}
	}()
	t.Cleanup(s.stop)
	return s
}

func (s *muxServer) addr() string { return s.lis.Addr().String() }

// stop closes the listener and every connection and waits.
func (s *muxServer) stop() {
	s.lis.Close()
	s.mu.Lock()
	for _, c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	select {
	case <-s.f.block:
	default:
		close(s.f.block)
	}
	s.wg.Wait()
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestMuxClientCalls(t *testing.T) {
	s := startMuxServer(t, "127.0.0.1:0")
	c := NewMuxClient(MuxClientConfig{Addr: s.addr()})
	defer c.Close()
	// A bound for a hung call, not a speed check: a loaded 2-core
	// machine under -race needs seconds for what takes milliseconds idle.
	ctx := ctxFor(t, 30*time.Second)
	assert.NilError(t, c.Connect(ctx))
	p, err := c.Ping(ctx, &PingRequest{ClientId: "abc"})
	assert.NilError(t, err)
	assert.Equal(t, p.GetViewVersion(), uint64(3))

	_, err = c.ExistKey(ctx, &KeyRequest{Key: "missing"})
	assert.DeepEqual(t, err, FromStatus(ToStatus(fmt.Errorf("exist %q: %w", "missing", ErrObjectNotFound))))
	_, err = c.ExistKey(ctx, &KeyRequest{Key: "status"})
	assert.Equal(t, CodeOf(err), ErrObjectHasLease)
	// A method the server does not implement: gRPC's Unimplemented.
	_, err = c.Remove(ctx, &RemoveRequest{Key: "k"})
	assert.Equal(t, CodeOf(err), ErrNotSupported)
	// A large answer (more than the largest pooled buffer, many read
	// buffers), every key in its place.
	keys, err := c.ListKeys(ctx, &ListKeysRequest{})
	assert.NilError(t, err)
	assert.Assert(t, listKeysCount*listKeyBytes > muxPoolMaxBytes && listKeysCount*listKeyBytes > 8*muxBufBytes)
	assert.Equal(t, len(keys.GetKeys()), listKeysCount)
	for i, k := range keys.GetKeys() {
		if k != listKey(i) {
			t.Fatalf("key %d: got %q, want %q", i, k, listKey(i))
		}
	}
}

// TestMuxClientConcurrent: many goroutines share the connection; each
// gets its own answer whichever goroutine reads it.
func TestMuxClientConcurrent(t *testing.T) {
	s := startMuxServer(t, "127.0.0.1:0")
	c := NewMuxClient(MuxClientConfig{Addr: s.addr()})
	defer c.Close()
	ctx := ctxFor(t, 30*time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				id := fmt.Sprintf("%d-%d%s", g, i, bytes.Repeat([]byte("x"), (g*i)%50))
				p, err := c.Ping(ctx, &PingRequest{ClientId: id})
				if err == nil && p.GetViewVersion() != uint64(len(id)) {
					err = fmt.Errorf("answer of another call: %d for %q", p.GetViewVersion(), id)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	assert.Equal(t, s.f.pings.Load(), int64(16*300))
}

// TestMuxClientTimeout: a call whose master does not answer ends at its
// deadline with RPC_TIMEOUT while other calls go on; a cancelled call ends
// with RPC_FAIL.
func TestMuxClientTimeout(t *testing.T) {
	s := startMuxServer(t, "127.0.0.1:0")
	c := NewMuxClient(MuxClientConfig{Addr: s.addr()})
	defer c.Close()
	ctx := ctxFor(t, 20*time.Second)
	assert.NilError(t, c.Connect(ctx))

	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err := c.ExistKey(short, &KeyRequest{Key: "block"})
	assert.Equal(t, CodeOf(err), ErrRPCTimeout, "got %v", err)
	var se *StatusError
	assert.Assert(t, errors.As(err, &se))
	assert.Equal(t, se.GRPC, codes.DeadlineExceeded)

	<-s.f.started
	// The master is stuck in the first call; a second one waits, reading
	// (no deadline), until cancelled.
	cctx, ccancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.ExistKey(cctx, &KeyRequest{Key: "other"})
		done <- err
	}()
	waitPending(t, c, 1)
	ccancel()
	select {
	case err := <-done:
		assert.Equal(t, CodeOf(err), ErrRPCFail, "got %v", err)
	case <-ctx.Done():
		t.Fatal("cancelled call did not return")
	}
	// The server is still busy with the first "block"; release it. The
	// connection works and the late answers are dropped.
	close(s.f.block)
	for range 3 {
		_, err = c.Ping(ctx, &PingRequest{ClientId: "x"})
		assert.NilError(t, err)
	}
}

// TestMuxClientReconnect: a lost connection fails the calls in flight with
// RPC_FAIL, calls while the master is away fail with RPC_FAIL, and the
// first call after it listens again dials and succeeds: however many dials
// failed before, none holds a later call back.
func TestMuxClientReconnect(t *testing.T) {
	s := startMuxServer(t, "127.0.0.1:0")
	addr := s.addr()
	c := NewMuxClient(MuxClientConfig{Addr: addr, DialTimeout: time.Second})
	defer c.Close()
	ctx := ctxFor(t, 20*time.Second)

	done := make(chan error, 1)
	go func() {
		_, err := c.ExistKey(ctx, &KeyRequest{Key: "block"})
		done <- err
	}()
	<-s.f.started
	s.stop()
	select {
	case err := <-done:
		assert.Equal(t, CodeOf(err), ErrRPCFail, "got %v", err)
	case <-ctx.Done():
		t.Fatal("call on a lost connection did not return")
	}
	var err error
	for range 8 {
		_, err = c.Ping(ctx, &PingRequest{ClientId: "x"})
		assert.Equal(t, CodeOf(err), ErrRPCFail)
	}

	s2 := startMuxServer(t, addr)
	_, err = c.Ping(ctx, &PingRequest{ClientId: "x"})
	assert.NilError(t, err, "first call after the master came back")
	assert.Equal(t, s2.f.pings.Load(), int64(1))

	assert.NilError(t, c.Close())
	assert.NilError(t, c.Close())
	_, err = c.Ping(ctx, &PingRequest{ClientId: "x"})
	assert.Equal(t, CodeOf(err), ErrRPCFail)
}

// TestMuxSession: Session numbers the connections and sees, without a
// call, that the master closed the one in use (what lets store/client drop
// put grants of a master that went away before it writes into them).
func TestMuxSession(t *testing.T) {
	s := startMuxServer(t, "127.0.0.1:0")
	addr := s.addr()
	c := NewMuxClient(MuxClientConfig{Addr: addr, DialTimeout: time.Second})
	defer c.Close()
	ctx := ctxFor(t, 20*time.Second)
	id, ok := c.Session()
	assert.Assert(t, id == 0 && !ok, "before any call: %d %v", id, ok)
	_, err := c.Ping(ctx, &PingRequest{ClientId: "x"})
	assert.NilError(t, err)
	id1, ok := c.Session()
	assert.Assert(t, id1 == 1 && ok, "connected: %d %v", id1, ok)
	// Answers waiting in the socket do not make it look closed.
	for range 3 {
		id, ok = c.Session()
		assert.Assert(t, id == id1 && ok)
	}

	id, ok = c.SessionKnown()
	assert.Assert(t, id == id1 && ok, "SessionKnown while up: %d %v", id, ok)

	s.stop()
	// SessionKnown does not look at the socket: the close is news to it
	// until a Session (or a call) finds it.
	time.Sleep(50 * time.Millisecond)
	id, ok = c.SessionKnown()
	assert.Assert(t, id == id1 && ok, "SessionKnown peeked: %d %v", id, ok)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, ok = c.Session(); !ok || time.Now().After(deadline) {
			break
		}
		select {
		case <-time.After(5 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	assert.Assert(t, !ok, "the master closed the connection, Session still says it is up")
	id, ok = c.SessionKnown()
	assert.Assert(t, id == id1 && !ok, "after Session found it closed, SessionKnown: %d %v", id, ok)

	startMuxServer(t, addr)
	deadline = time.Now().Add(10 * time.Second)
	for {
		if _, err = c.Ping(ctx, &PingRequest{ClientId: "x"}); err == nil || time.Now().After(deadline) {
			break
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	assert.NilError(t, err)
	id2, ok := c.Session()
	assert.Assert(t, id2 > id1 && ok, "reconnected: %d %v (was %d)", id2, ok, id1)
	assert.NilError(t, c.Close())
	_, ok = c.Session()
	assert.Assert(t, !ok)
}

// TestMuxRefusedByGRPC: a master that only speaks gRPC refuses the hello,
// and the client says so (the store client then uses gRPC).
func TestMuxRefusedByGRPC(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	gs := grpc.NewServer()
	RegisterMasterServer(gs, &fakeMaster{})
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = gs.Serve(lis)
	}()
	defer func() {
		gs.Stop()
		<-served
	}()
	c := NewMuxClient(MuxClientConfig{Addr: lis.Addr().String()})
	defer c.Close()
	err = c.Connect(ctxFor(t, 10*time.Second))
	assert.Assert(t, errors.Is(err, ErrMuxRefused), "got %v", err)
	_, err = c.Ping(ctxFor(t, 10*time.Second), &PingRequest{})
	assert.Equal(t, CodeOf(err), ErrRPCFail)

	// Nobody listening: RPC_FAIL, not refused.
	c2 := NewMuxClient(MuxClientConfig{Addr: "127.0.0.1:1"})
	defer c2.Close()
	err = c2.Connect(ctxFor(t, 10*time.Second))
	assert.Assert(t, !errors.Is(err, ErrMuxRefused))
	assert.Equal(t, CodeOf(err), ErrRPCFail)
}

// TestServeMuxConnMalformed: a bad frame ends the connection with
// ErrMuxFrame; an undecodable request is answered INVALID_PARAMS.
func TestServeMuxConnMalformed(t *testing.T) {
	for _, tc := range []struct {
		name    string
		frames  []byte
		wantErr error
		answers int
	}{
		{"bad method", frame(MuxHeader{Method: 99}, nil), ErrMuxFrame, 0},
		{"status in request", frame(MuxHeader{Method: MuxPing, Status: 3}, nil), ErrMuxFrame, 0},
		{"undecodable body", append(frame(MuxHeader{Method: MuxPing, ID: 4}, []byte{0xff, 0xff}),
			frame(MuxHeader{Method: MuxPing, ID: 5}, nil)...), nil, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, sv := net.Pipe()
			errc := make(chan error, 1)
			go func() { errc <- ServeMuxConn(context.Background(), sv, &fakeMaster{}) }()
			var hello [8]byte
			_, err := io.ReadFull(cl, hello[:])
			assert.NilError(t, err)
			go func() { _, _ = cl.Write(tc.frames) }()
			for range tc.answers {
				var hdr [MuxHeaderBytes]byte
				_, err := io.ReadFull(cl, hdr[:])
				assert.NilError(t, err)
				h, err := ParseMuxHeader(hdr[:])
				assert.NilError(t, err)
				body := make([]byte, h.BodyBytes)
				_, err = io.ReadFull(cl, body)
				assert.NilError(t, err)
				if h.ID == 4 {
					assert.Equal(t, CodeOf(ParseMuxError(h.Status, body)), ErrInvalidParams)
				} else {
					assert.Equal(t, h.Status, uint16(0))
				}
			}
			if tc.wantErr == nil {
				cl.Close()
			}
			select {
			case err = <-errc:
			case <-time.After(10 * time.Second):
				t.Fatal("ServeMuxConn did not return")
			}
			if tc.wantErr == nil {
				assert.NilError(t, err)
			} else {
				assert.Assert(t, errors.Is(err, tc.wantErr), "got %v", err)
			}
			cl.Close()
			sv.Close()
		})
	}
}

func frame(h MuxHeader, body []byte) []byte {
	b := make([]byte, MuxHeaderBytes, MuxHeaderBytes+len(body))
	h.BodyBytes = uint32(len(body))
	PutMuxHeader(b, h)
	return append(b, body...)
}

// FuzzServeMuxConn feeds arbitrary bytes after the hello: no panic, and
// the answers are whole, well-formed frames.
func FuzzServeMuxConn(f *testing.F) {
	ping, _ := proto.Marshal(&PingRequest{ClientId: "c"})
	f.Add(frame(MuxHeader{Method: MuxPing, ID: 1}, ping))
	f.Add(frame(MuxHeader{Method: MuxExistKey, ID: 2}, []byte{0x0a, 0x01, 'k'}))
	f.Add(frame(MuxHeader{Method: MuxRemove, ID: 3}, nil))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0, 1, 0, 0, 0})
	f.Add([]byte{})
	get, _ := proto.Marshal(&KeyRequest{Key: "c", TenantId: "t1"})
	f.Add(append(frame(MuxHeader{Method: MuxGetReplicaList, ID: 4}, get),
		frame(MuxHeader{Method: MuxGetReplicaList, ID: 5}, []byte{0x0a, 0x01, 0xff})...))
	for i, m := range putCommitRequestCases()[1:3] {
		b, _ := proto.Marshal(m)
		f.Add(frame(MuxHeader{Method: MuxPutCommit, ID: uint32(6 + i)}, b))
	}
	exists, _ := proto.Marshal(&PutCommitRequest{Key: "exists"})
	f.Add(frame(MuxHeader{Method: MuxPutCommit, ID: 8}, exists))
	lists := map[string]*GetReplicaListResponse{}
	for i, m := range replicaListCases() {
		lists[[]string{"/a", "/b", "t1/c", "t2/d"}[i]] = m
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		serve := func(srv MasterServer) []muxFrame {
			c := &memConn{r: bytes.NewReader(in)}
			_ = ServeMuxConn(context.Background(), c, srv)
			out := c.w.Bytes()
			if !bytes.HasPrefix(out, MuxHello[:]) {
				t.Fatalf("no hello")
			}
			out = out[len(MuxHello):]
			var frames []muxFrame
			for len(out) >= MuxHeaderBytes {
				h, err := ParseMuxHeader(out)
				if err != nil {
					t.Fatalf("server sent a bad header: %v", err)
				}
				if int(h.BodyBytes) > len(out)-MuxHeaderBytes {
					t.Fatalf("server sent a short frame")
				}
				frames = append(frames, muxFrame{h, out[MuxHeaderBytes : MuxHeaderBytes+int(h.BodyBytes)]})
				out = out[MuxHeaderBytes+int(h.BodyBytes):]
			}
			if len(out) != 0 {
				t.Fatalf("server sent %d trailing bytes", len(out))
			}
			return frames
		}
		// The hand paths of GetReplicaList and PutCommit answer what the
		// generic ones do: the same frames, the same bytes or the same error code.
		// Slow calls are answered from goroutines of their own, in any
		// order: they are compared by header, apart from the others.
		fast, fastSlow := splitSlow(serve(&listerMaster{lists: lists}))
		generic, genericSlow := splitSlow(serve(genericOnly{&listerMaster{lists: lists}}))
		if len(fast) != len(generic) {
			t.Fatalf("%d answers with the hand path, %d without", len(fast), len(generic))
		}
		if !maps.Equal(fastSlow, genericSlow) {
			t.Fatalf("slow calls' answers: %v with the hand path, %v without", fastSlow, genericSlow)
		}
		for i, a := range fast {
			b := generic[i]
			if a.h.ID != b.h.ID || a.h.Method != b.h.Method || a.h.Status != b.h.Status {
				t.Fatalf("answer %d: %+v with the hand path, %+v without", i, a.h, b.h)
			}
			if a.h.Status == 0 && !bytes.Equal(a.body, b.body) {
				t.Fatalf("answer %d: %x with the hand path, %x without", i, a.body, b.body)
			}
			if a.h.Status != 0 && CodeOf(ParseMuxError(a.h.Status, a.body)) != CodeOf(ParseMuxError(b.h.Status, b.body)) {
				t.Fatalf("answer %d: %v with the hand path, %v without", i,
					ParseMuxError(a.h.Status, a.body), ParseMuxError(b.h.Status, b.body))
			}
		}
	})
}

// splitSlow returns the answers to calls that are not slow, in order, and
// a count of the slow calls' answer headers.
func splitSlow(frames []muxFrame) ([]muxFrame, map[MuxHeader]int) {
	var inOrder []muxFrame
	slow := map[MuxHeader]int{}
	for _, f := range frames {
		if f.h.Method > 0 && f.h.Method < muxMethodEnd && muxCalls[f.h.Method].slow {
			slow[f.h]++
			continue
		}
		inOrder = append(inOrder, f)
	}
	return inOrder, slow
}

// muxFrame is one frame a server sent.
type muxFrame struct {
	h    MuxHeader
	body []byte
}

// genericOnly hides a server's MuxReplicaLister and MuxPutCommitter.
type genericOnly struct{ MasterServer }

// memConn reads from r and writes to w.
type memConn struct {
	net.Conn // nil: only Read, Write and the deadline setters are used
	r        *bytes.Reader
	w        bytes.Buffer
}

func (c *memConn) Read(b []byte) (int, error)       { return c.r.Read(b) }
func (c *memConn) Write(b []byte) (int, error)      { return c.w.Write(b) }
func (c *memConn) SetReadDeadline(time.Time) error  { return nil }
func (c *memConn) SetWriteDeadline(time.Time) error { return nil }

// waitPending waits until n calls of c are in flight.
func waitPending(t *testing.T, c *MuxClient, n int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		c.mu.Lock()
		mc := c.mu.conn
		c.mu.Unlock()
		if mc != nil {
			mc.mu.Lock()
			k := len(mc.mu.pending)
			mc.mu.Unlock()
			if k == n {
				return
			}
		}
		select {
		case <-deadline:
			t.Fatalf("%d calls never in flight", n)
		case <-time.After(time.Millisecond):
		}
	}
}

// TestMuxSlowAnswerKeepsConnection: a master slow to answer (stuck in one
// call) makes a short-deadline call (the heartbeat's Ping) time out, and
// that alone must not take the connection for dead: the call in flight
// with a long deadline gets its answer when the master gets to it. (The
// soak saw a put fail with "connection lost: no answer for 1.027s" on a
// loaded machine.)
func TestMuxSlowAnswerKeepsConnection(t *testing.T) {
	s := startMuxServer(t, "127.0.0.1:0")
	c := NewMuxClient(MuxClientConfig{Addr: s.addr()})
	defer c.Close()
	ctx := ctxFor(t, 20*time.Second)
	assert.NilError(t, c.Connect(ctx))

	long := make(chan error, 1)
	go func() {
		_, err := c.ExistKey(ctx, &KeyRequest{Key: "block"})
		long <- err
	}()
	<-s.f.started
	// Longer than a heartbeat's deadline (1 s at Mooncake's default
	// interval), shorter than the stall bound.
	wait := 1500 * time.Millisecond
	assert.Assert(t, wait < DefaultMuxStall)
	short, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	_, err := c.Ping(short, &PingRequest{ClientId: "x"})
	assert.Equal(t, CodeOf(err), ErrRPCTimeout, "got %v", err)
	select {
	case err := <-long:
		t.Fatalf("the long call ended when a short one timed out: %v", err)
	default:
	}
	close(s.f.block)
	assert.NilError(t, <-long)
	_, err = c.Ping(ctx, &PingRequest{ClientId: "x"})
	assert.NilError(t, err)
}

// TestMuxStallTakesConnectionForDead: a connection on which requests wait
// the stall bound with no answer arriving is taken for dead, also when every
// call that gives up is a short one started after the wait began (only
// heartbeats): the calls in flight fail with RPC_FAIL, and the next call
// dials a new connection.
func TestMuxStallTakesConnectionForDead(t *testing.T) {
	s := startMuxServer(t, "127.0.0.1:0")
	const muxStall = 3 * time.Second // the floor; the answers seen before are fast
	c := NewMuxClient(MuxClientConfig{Addr: s.addr(), StallTimeout: muxStall})
	defer c.Close()
	ctx := ctxFor(t, 30*time.Second)
	assert.NilError(t, c.Connect(ctx))

	start := time.Now()
	long := make(chan error, 1)
	go func() {
		_, err := c.ExistKey(ctx, &KeyRequest{Key: "block"})
		long <- err
	}()
	<-s.f.started
	var lerr error
	for done := false; !done; {
		short, cancel := context.WithTimeout(ctx, muxStall/3)
		_, err := c.Ping(short, &PingRequest{ClientId: "x"})
		cancel()
		if err == nil {
			// Answered: only a new connection can answer, dialed once the
			// stuck one was taken for dead, whose calls then fail at once
			// (the long call's error may not have reached us yet).
			select {
			case lerr = <-long:
			case <-time.After(time.Second):
				t.Fatal("a ping was answered by a master stuck in a call")
			}
			break
		}
		select {
		case lerr = <-long:
			done = true
		default:
			assert.Assert(t, time.Since(start) < 4*muxStall, "the connection was never taken for dead")
		}
	}
	assert.Equal(t, CodeOf(lerr), ErrRPCFail, "got %v", lerr)
	assert.ErrorContains(t, lerr, "no answer for")
	assert.Assert(t, time.Since(start) >= muxStall, "taken for dead after %v", time.Since(start))
	close(s.f.block)
	_, err := c.Ping(ctx, &PingRequest{ClientId: "x"})
	assert.NilError(t, err)
}

// TestStallRule: the liveness bound is the floor until a wait that ended
// in an answer says the master can be slower; then stallFactor times that
// wait, capped; the wait's weight halves every stallMemory after the first.
func TestStallRule(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name  string
		floor time.Duration
		waits []time.Duration // observed at t0, t0+1s, ...
		at    time.Duration   // bound asked at t0+at
		want  time.Duration
	}{
		{name: "nothing seen", floor: 5 * time.Second, want: 5 * time.Second},
		{name: "fast answers", floor: 5 * time.Second, waits: []time.Duration{50 * time.Microsecond, time.Millisecond}, at: 2 * time.Second, want: 5 * time.Second},
		{name: "one slow spell", floor: 5 * time.Second, waits: []time.Duration{time.Millisecond, 2 * time.Second, 10 * time.Millisecond}, at: 3 * time.Second, want: 8 * time.Second},
		{name: "the longest counts", floor: time.Second, waits: []time.Duration{900 * time.Millisecond, 300 * time.Millisecond}, at: 2 * time.Second, want: 3600 * time.Millisecond},
		{name: "capped", floor: 5 * time.Second, waits: []time.Duration{40 * time.Second}, at: time.Second, want: MaxMuxStall},
		{name: "a floor above the cap", floor: 2 * time.Minute, waits: []time.Duration{time.Minute}, at: time.Second, want: 2 * time.Minute},
		{name: "halved after stallMemory", floor: time.Second, waits: []time.Duration{2 * time.Second}, at: stallMemory + time.Second, want: 4 * time.Second},
		{name: "quartered after two", floor: time.Second, waits: []time.Duration{2 * time.Second}, at: 2*stallMemory + time.Second, want: 2 * time.Second},
		{name: "forgotten", floor: time.Second, waits: []time.Duration{2 * time.Second}, at: 10 * stallMemory, want: time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := stallRule{floor: tc.floor}
			for i, w := range tc.waits {
				r.observe(w, t0.Add(time.Duration(i)*time.Second))
			}
			assert.Equal(t, r.bound(t0.Add(tc.at)), tc.want)
		})
	}
	// A wait seen after the longest faded replaces it.
	r := stallRule{floor: time.Second}
	r.observe(2*time.Second, t0)
	later := t0.Add(3 * stallMemory) // 2 s weighs 250 ms now
	r.observe(500*time.Millisecond, later)
	assert.Equal(t, r.bound(later), 2*time.Second)
	assert.Equal(t, r.bound(later.Add(stallMemory+time.Second)), time.Second)
}

// TestMuxStallBoundAdapts: once a master was seen to take a while to
// answer (the machine is loaded), a later answerless wait of that length
// no longer takes the connection for dead, while the floor alone would:
// the soak's "no answer for 1.008s" on a loaded 2-core machine, with the
// floor scaled down to keep the test short.
func TestMuxStallBoundAdapts(t *testing.T) {
	s := startMuxServer(t, "127.0.0.1:0")
	const floor = 200 * time.Millisecond
	const spell = 3 * floor // how long the master is slow, each time
	c := NewMuxClient(MuxClientConfig{Addr: s.addr(), StallTimeout: floor})
	defer c.Close()
	ctx := ctxFor(t, 30*time.Second)
	assert.NilError(t, c.Connect(ctx))
	session, _ := c.Session()

	// slowCall runs ExistKey("slow"), which the master answers a spell
	// after it starts.
	slowCall := func() chan error {
		done := make(chan error, 1)
		go func() {
			_, err := c.ExistKey(ctx, &KeyRequest{Key: "slow"})
			done <- err
		}()
		select {
		case <-s.f.started:
		case <-ctx.Done():
			t.Fatal("the slow call never reached the master")
		}
		time.AfterFunc(spell, func() { s.f.slow <- struct{}{} })
		return done
	}

	// First slow spell: nothing gives up meanwhile, the answer comes.
	assert.NilError(t, <-slowCall())
	bound := c.stall.bound(time.Now())
	assert.Assert(t, bound >= stallFactor*spell, "bound %v after a %v wait", bound, spell)

	// Second: heartbeats with short deadlines give up while the master is
	// slow again, each past the floor; the connection lives on.
	done := slowCall()
	var lerr error
	for answered := false; !answered; {
		short, cancel := context.WithTimeout(ctx, floor/2)
		_, err := c.Ping(short, &PingRequest{ClientId: "x"})
		cancel()
		if err == nil {
			// Answered after the slow call (the master serves in order):
			// its answer is on the way.
			select {
			case lerr = <-done:
			case <-ctx.Done():
				t.Fatal("a ping was answered, the slow call before it never")
			}
			break
		}
		select {
		case lerr = <-done:
			answered = true
		default:
		}
	}
	assert.NilError(t, lerr)
	now, up := c.Session()
	assert.Assert(t, up)
	assert.Equal(t, now, session, "the connection was taken for dead")
}
