package http_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	nethttp "net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine/metadata"
	mdhttp "github.com/kvferry/kvferry/engine/metadata/http"
)

// roundTripFunc is a nethttp.RoundTripper.
type roundTripFunc func(*nethttp.Request) (*nethttp.Response, error)

func (f roundTripFunc) RoundTrip(r *nethttp.Request) (*nethttp.Response, error) { return f(r) }

// FuzzClientReply feeds arbitrary replies (status, body) to the client.
// Property: no panic; a result exactly when the status is 200; the result
// is the body byte for byte.
func FuzzClientReply(f *testing.F) {
	f.Add(200, []byte(`{"name":"a"}`))
	f.Add(404, []byte("metadata not found"))
	f.Add(400, []byte("Duplicate rpc_meta key not allowed"))
	f.Add(200, []byte{})
	f.Add(204, []byte{0xff, 0x00})
	var mu sync.Mutex
	var code int
	var body []byte
	// The replies come from memory: the client's handling of a status
	// and body is what is fuzzed, not a socket round trip per input.
	c, err := mdhttp.NewClient(mdhttp.Config{URL: "http://metadata.invalid/metadata", MaxValueBytes: 1 << 16})
	assert.NilError(f, err)
	defer c.Close()
	mdhttp.SetRoundTripper(c, roundTripFunc(func(r *nethttp.Request) (*nethttp.Response, error) {
		mu.Lock()
		defer mu.Unlock()
		return &nethttp.Response{StatusCode: code, Status: nethttp.StatusText(code), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: nethttp.Header{}, Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)), Request: r}, nil
	}))
	f.Fuzz(func(t *testing.T, status int, reply []byte) {
		if status < 200 || status > 599 || status == 204 || status == 304 {
			status = 200 + (status%400+400)%400
			if status == 204 || status == 304 {
				status = 500
			}
		}
		mu.Lock()
		code, body = status, reply
		mu.Unlock()
		got, err := c.Get(context.Background(), "mooncake/ram/fuzz")
		tooBig := len(reply) > 1<<16
		if status == 200 && !tooBig {
			assert.NilError(t, err)
			assert.Assert(t, bytes.Equal(got, reply))
			return
		}
		assert.Assert(t, err != nil && got == nil, "status %d accepted", status)
		assert.Equal(t, errors.Is(err, metadata.ErrNotFound), status == 404)
	})
}

// FuzzServerRoundTrip stores arbitrary keys and values through the client
// and the server. Property: no panic; what was stored is read back exactly.
func FuzzServerRoundTrip(f *testing.F) {
	f.Add("mooncake/ram/a", []byte(`{"name":"a"}`))
	f.Add("mooncake/c 1/ram/x:1?&=#%", []byte{})
	f.Add("\x00\xff/é", []byte{0, 1, 2})
	srv, err := mdhttp.NewServer(mdhttp.ServerConfig{})
	assert.NilError(f, err)
	defer srv.Close()
	hs := httptest.NewServer(srv)
	defer hs.Close()
	c, err := mdhttp.NewClient(mdhttp.Config{URL: hs.URL + "/metadata"})
	assert.NilError(f, err)
	defer c.Close()
	f.Fuzz(func(t *testing.T, key string, value []byte) {
		ctx := context.Background()
		err := c.Put(ctx, key, value)
		if key == "" {
			assert.Assert(t, err != nil)
			return
		}
		if err != nil {
			// Keys with "rpc_meta" conflict with an earlier value.
			assert.Assert(t, errors.Is(err, metadata.ErrConflict), "put %q: %v", key, err)
			assert.NilError(t, c.Delete(ctx, key))
			assert.NilError(t, c.Put(ctx, key, value))
		}
		got, err := c.Get(ctx, key)
		assert.NilError(t, err)
		assert.Assert(t, bytes.Equal(got, value))
		assert.NilError(t, c.Delete(ctx, key))
	})
}
