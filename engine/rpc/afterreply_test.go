package rpc

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

// Work a handler leaves with AfterReply runs after its reply is written:
// here it waits until the client has read the reply, which it could never
// do if the work ran first (the select's deadline would end the test). It
// runs once per request, on every keep-alive request, and after a refused
// request too; outside a handler AfterReply keeps nothing.
func TestAfterReplyRunsAfterTheReply(t *testing.T) {
	read := make(chan struct{}, 1)
	var ran, order atomic.Int32 // order: how many runs saw the reply read first
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	srv := NewServer(ln, func(ctx context.Context, t Type, body []byte, _ net.Addr) ([]byte, error) {
		refuse := string(body) == "refuse"
		ok := AfterReply(ctx, func() {
			ran.Add(1)
			if refuse {
				return // no reply to wait for: the connection closes after this
			}
			select {
			case <-read:
				order.Add(1)
			case <-time.After(10 * time.Second):
			}
		})
		if !ok {
			return nil, errors.New("no AfterReply in a handler's context")
		}
		if refuse {
			return nil, errors.New("refused")
		}
		return []byte(`{"status":"success"}`), nil
	}, ServerConfig{RecvTimeout: 10 * time.Second})
	defer srv.Close()
	addr := srv.Addr().String()

	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	assert.NilError(t, err)
	defer c.Close()
	assert.NilError(t, c.SetDeadline(time.Now().Add(20*time.Second)))
	for range 3 {
		assert.NilError(t, WriteFrame(c, TypeProbe|KeepAlive, []byte("{}")))
		rt, reply, err := ReadFrame(c, DefaultMaxMessage)
		assert.NilError(t, err)
		assert.Equal(t, rt, TypeProbe|KeepAlive)
		assert.Equal(t, string(reply), `{"status":"success"}`)
		read <- struct{}{}
	}
	// A refused request closes the connection; the work still runs.
	assert.NilError(t, WriteFrame(c, TypeProbe|KeepAlive, []byte("refuse")))
	_, _, err = ReadFrame(c, DefaultMaxMessage)
	assert.Assert(t, err != nil)
	srv.Close() // waits for the connection's goroutine, and so for the work
	assert.Equal(t, ran.Load(), int32(4))
	assert.Equal(t, order.Load(), int32(3))

	assert.Assert(t, !AfterReply(context.Background(), func() {}))
}
