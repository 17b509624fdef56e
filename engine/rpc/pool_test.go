package rpc

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

// The KeepAlive flag: kept on the wire and by ReadFrame, stripped by Base;
// legacy frames (JSON text, '{' included) stay legacy.
func TestKeepAliveType(t *testing.T) {
	kt := TypeNotify | KeepAlive
	want, _ := hex.DecodeString("0300000000000000" + "42" + "7b7d")
	assert.DeepEqual(t, AppendFrame(nil, kt, []byte("{}")), want)
	typ, body, err := ReadFrame(bytes.NewReader(want), DefaultMaxMessage)
	assert.NilError(t, err)
	assert.Equal(t, typ, kt)
	assert.Equal(t, typ.Base(), TypeNotify)
	assert.Equal(t, string(body), "{}")
	assert.Equal(t, kt.String(), "notify+keepalive")
	for _, b := range []Type{TypeConnection, TypeMetadata, TypeNotify, TypeProbe, TypeStore, TypeLegacy, '{', '[', 0x45} {
		assert.Equal(t, b.Base(), b)
	}
	legacy := AppendFrame(nil, TypeLegacy, []byte(`{"qp_num":[]}`))
	typ, body, err = ReadFrame(bytes.NewReader(legacy), DefaultMaxMessage)
	assert.NilError(t, err)
	assert.Equal(t, typ, TypeLegacy)
	assert.Equal(t, string(body), `{"qp_num":[]}`)
}

// countingListener counts accepted connections.
type countingListener struct {
	net.Listener
	n atomic.Int32
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

func echoServer(t *testing.T, cfg ServerConfig) (*Server, *countingListener) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	cl := &countingListener{Listener: ln}
	srv := NewServer(cl, func(_ context.Context, typ Type, body []byte, _ net.Addr) ([]byte, error) {
		if typ > TypeStore {
			return nil, errors.New("handler saw a flagged type")
		}
		return append([]byte(typ.String()+":"), body...), nil
	}, cfg)
	t.Cleanup(func() { srv.Close() })
	return srv, cl
}

// A Pool makes many calls over one connection; plain Calls still get one
// connection each, closed by the server's half-close as Mooncake's.
func TestPoolKeepsConnection(t *testing.T) {
	srv, ln := echoServer(t, ServerConfig{SpinWait: 20 * time.Microsecond})
	addr := srv.Addr().String()
	p := NewPool()
	defer p.Close()
	ctx := context.Background()
	for i := range 50 {
		r, err := p.Call(ctx, addr, TypeNotify, []byte{byte('a' + i%26)}, ClientConfig{Timeout: 5 * time.Second, SpinWait: 20 * time.Microsecond})
		assert.NilError(t, err)
		assert.Equal(t, string(r), "notify:"+string(rune('a'+i%26)))
	}
	assert.Equal(t, ln.n.Load(), int32(1))
	assert.Equal(t, srv.Stats().Served, uint64(50))
	for range 3 {
		r, err := Call(ctx, addr, TypeProbe, []byte("{}"), ClientConfig{Timeout: 5 * time.Second})
		assert.NilError(t, err)
		assert.Equal(t, string(r), "probe:{}")
	}
	assert.Equal(t, ln.n.Load(), int32(4))
	_, err := p.Call(ctx, addr, TypeLegacy, []byte("{}"), ClientConfig{})
	assert.Assert(t, errors.Is(err, ErrFrame))
}

// A kept connection that the server closed (idle too long, or a server
// that answers one request per connection) is replaced without the caller
// seeing an error.
func TestPoolRetriesClosedConnection(t *testing.T) {
	srv, ln := echoServer(t, ServerConfig{KeepAliveIdle: 50 * time.Millisecond})
	addr := srv.Addr().String()
	p := NewPool()
	defer p.Close()
	ctx := context.Background()
	_, err := p.Call(ctx, addr, TypeProbe, []byte("{}"), ClientConfig{Timeout: 5 * time.Second})
	assert.NilError(t, err)
	time.Sleep(300 * time.Millisecond) // the server closes the idle connection
	r, err := p.Call(ctx, addr, TypeProbe, []byte("{}"), ClientConfig{Timeout: 5 * time.Second})
	assert.NilError(t, err)
	assert.Equal(t, string(r), "probe:{}")
	assert.Equal(t, ln.n.Load(), int32(2))

	// A server of one request per connection (Mooncake's): every call
	// dials again, and none fails.
	one, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	defer one.Close()
	go func() {
		for {
			c, err := one.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				typ, body, err := ReadFrame(c, DefaultMaxMessage)
				if err == nil {
					_ = WriteFrame(c, typ, body)
				}
			}()
		}
	}()
	for range 5 {
		r, err := p.Call(ctx, one.Addr().String(), TypeNotify, []byte("x"), ClientConfig{Timeout: 5 * time.Second})
		assert.NilError(t, err)
		assert.Equal(t, string(r), "x")
	}
}

// The server closes a keep-alive connection after KeepAliveIdle without a
// request, and a client that closes it ends the server's side at once.
func TestServerKeepAliveIdle(t *testing.T) {
	srv, _ := echoServer(t, ServerConfig{KeepAliveIdle: 100 * time.Millisecond})
	c, err := net.Dial("tcp", srv.Addr().String())
	assert.NilError(t, err)
	defer c.Close()
	for range 2 {
		assert.NilError(t, WriteFrame(c, TypeProbe|KeepAlive, []byte("{}")))
		typ, body, err := ReadFrame(c, DefaultMaxMessage)
		assert.NilError(t, err)
		assert.Equal(t, typ, TypeProbe|KeepAlive)
		assert.Equal(t, string(body), "probe:{}")
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = c.Read(make([]byte, 1))
	assert.Assert(t, errors.Is(err, io.EOF), "%v", err)
	assert.Equal(t, srv.Stats().BadRequests, uint64(0))
}
