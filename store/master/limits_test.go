package master

import (
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/store/wire"
)

// rawMux opens a mux connection by hand and exchanges the hello.
func rawMux(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	assert.NilError(t, err)
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	_, err = c.Write(wire.MuxHello[:])
	assert.NilError(t, err)
	var hello [len(wire.MuxHello)]byte
	_, err = io.ReadFull(c, hello[:])
	assert.NilError(t, err)
	return c
}

// muxCall sends one request and returns the answer's status and body.
func muxCall(t *testing.T, c net.Conn, m wire.MuxMethod, body []byte) (uint16, []byte, error) {
	t.Helper()
	var hdr [wire.MuxHeaderBytes]byte
	wire.PutMuxHeader(hdr[:], wire.MuxHeader{BodyBytes: uint32(len(body)), ID: 7, Method: m})
	if _, err := c.Write(append(hdr[:], body...)); err != nil {
		return 0, nil, err
	}
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return 0, nil, err
	}
	h, err := wire.ParseMuxHeader(hdr[:])
	assert.NilError(t, err)
	out := make([]byte, h.BodyBytes)
	_, err = io.ReadFull(c, out)
	return h.Status, out, err
}

func TestRequestLimits(t *testing.T) {
	srv, err := StartEmbedded(Config{MaxBatchKeys: 1000, MaxKeyBytes: 256})
	assert.NilError(t, err)
	defer srv.Close()
	c := rawMux(t, srv.Addr())

	// A batch of many empty keys (two bytes each on the wire) is refused
	// before it is decoded.
	body, err := proto.Marshal(&wire.BatchKeyRequest{Keys: make([]string, 200000)})
	assert.NilError(t, err)
	st, ans, err := muxCall(t, c, wire.MuxBatchExistKey, body)
	assert.NilError(t, err)
	assert.Assert(t, st != 0)
	assert.Assert(t, errors.Is(wire.ParseMuxError(st, ans), wire.ErrInvalidParams), "%v", wire.ParseMuxError(st, ans))

	// Over the batch cap, and a key over the key cap.
	body, _ = proto.Marshal(&wire.BatchKeyRequest{Keys: make([]string, 1001)})
	st, ans, err = muxCall(t, c, wire.MuxBatchExistKey, body)
	assert.NilError(t, err)
	assert.Assert(t, strings.Contains(wire.ParseMuxError(st, ans).Error(), "batch of 1001 keys"), "%v", wire.ParseMuxError(st, ans))
	body, _ = proto.Marshal(&wire.PutStartRequest{ClientId: "c", Key: strings.Repeat("k", 257), Size: 1})
	st, ans, err = muxCall(t, c, wire.MuxPutStart, body)
	assert.NilError(t, err)
	assert.Assert(t, strings.Contains(wire.ParseMuxError(st, ans).Error(), "key of 257 bytes"), "%v", wire.ParseMuxError(st, ans))

	// Within the limits the connection still works.
	body, _ = proto.Marshal(&wire.BatchKeyRequest{Keys: []string{"a", "b"}})
	st, _, err = muxCall(t, c, wire.MuxBatchExistKey, body)
	assert.NilError(t, err)
	assert.Equal(t, st, uint16(0))

	// A body over the request cap closes the connection without it being
	// read.
	var hdr [wire.MuxHeaderBytes]byte
	wire.PutMuxHeader(hdr[:], wire.MuxHeader{BodyBytes: wire.MaxMuxBody, ID: 1, Method: wire.MuxBatchExistKey})
	_, _ = c.Write(hdr[:])
	_, err = c.Read(make([]byte, 1))
	assert.Assert(t, err != nil)

	// gRPC: the same batch is refused (before decoding, by the codec).
	g := dial(t, srv.Addr())
	_, err = g.BatchExistKey(ctxT(t), &wire.BatchKeyRequest{Keys: make([]string, 200000)})
	assert.Assert(t, err != nil)
	_, err = g.ExistKey(ctxT(t), &wire.KeyRequest{Key: strings.Repeat("k", 257)})
	assert.Equal(t, status.Code(err), codes.InvalidArgument, "%v", err)
	_, err = g.BatchExistKey(ctxT(t), &wire.BatchKeyRequest{Keys: []string{"a"}})
	assert.NilError(t, err)
}

// A body that stalls is cut at the request deadline, an idle connection
// at the idle deadline.
func TestMuxDeadlines(t *testing.T) {
	srv, err := StartEmbedded(Config{})
	assert.NilError(t, err)
	defer srv.Close()
	cfg := wire.MuxServerConfig{RequestTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond,
		Budget: srv.budget}
	for _, tc := range []struct {
		name string
		send func(c net.Conn)
	}{
		{"idle", func(net.Conn) {}},
		{"stalled body", func(c net.Conn) {
			var hdr [wire.MuxHeaderBytes]byte
			wire.PutMuxHeader(hdr[:], wire.MuxHeader{BodyBytes: 4 << 20, ID: 1, Method: wire.MuxBatchExistKey})
			_, _ = c.Write(append(hdr[:], make([]byte, 2<<20)...))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, server := net.Pipe()
			defer client.Close()
			done := make(chan error, 1)
			go func() { done <- wire.ServeMuxConnConfig(ctxT(t), server, &handlers{s: srv}, cfg) }()
			var hello [len(wire.MuxHello)]byte
			_, err := io.ReadFull(client, hello[:])
			assert.NilError(t, err)
			tc.send(client)
			select {
			case err := <-done:
				var ne net.Error
				assert.Assert(t, errors.As(err, &ne) && ne.Timeout(), "%v", err)
			case <-time.After(10 * time.Second):
				t.Fatal("mux connection not cut")
			}
			server.Close()
			assert.Equal(t, srv.budget.Used(), int64(0), "budget given back")
		})
	}
}
