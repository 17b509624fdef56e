package http_test

import (
	"context"
	"errors"
	"net"
	nethttp "net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine/metadata"
	mdhttp "github.com/kvferry/kvferry/engine/metadata/http"
)

// TestEscapeKey pins curl_easy_escape's output: everything but RFC 3986
// unreserved characters is %XX with upper-case hex.
func TestEscapeKey(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"mooncake/ram/node1", "mooncake%2Fram%2Fnode1"},
		{"mooncake/rpc_meta/10.0.0.1:15001", "mooncake%2Frpc_meta%2F10.0.0.1%3A15001"},
		{"a b+c~d-e_f.g", "a%20b%2Bc~d-e_f.g"},
		{"[::1]:80", "%5B%3A%3A1%5D%3A80"},
		{"\x00\xff", "%00%FF"},
		{"é", "%C3%A9"},
	} {
		assert.Equal(t, mdhttp.EscapeKey(tc.in), tc.want, tc.in)
	}
}

func newClient(t *testing.T, url string) *mdhttp.Client {
	t.Helper()
	c, err := mdhttp.NewClient(mdhttp.Config{URL: url})
	assert.NilError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

func TestClientRoundTrip(t *testing.T) {
	s := startInProcess(t, mdhttp.ServerConfig{})
	c := newClient(t, s.URL())
	ctx := context.Background()

	_, err := c.Get(ctx, "mooncake/ram/x")
	assert.Assert(t, errors.Is(err, metadata.ErrNotFound), "got %v", err)
	var se *mdhttp.StatusError
	assert.Assert(t, errors.As(err, &se))
	assert.Equal(t, se.Code, 404)

	assert.NilError(t, c.Put(ctx, "mooncake/ram/x", []byte(`{"a":1}`)))
	v, err := c.Get(ctx, "mooncake/ram/x")
	assert.NilError(t, err)
	assert.Equal(t, string(v), `{"a":1}`)

	assert.NilError(t, c.Put(ctx, "mooncake/rpc_meta/x", []byte(`1`)))
	assert.NilError(t, c.Put(ctx, "mooncake/rpc_meta/x", []byte(`1`)))
	err = c.Put(ctx, "mooncake/rpc_meta/x", []byte(`2`))
	assert.Assert(t, errors.Is(err, metadata.ErrConflict), "got %v", err)
	assert.Assert(t, !errors.Is(err, metadata.ErrUnavailable))

	assert.NilError(t, c.Delete(ctx, "mooncake/ram/x"))
	err = c.Delete(ctx, "mooncake/ram/x")
	assert.Assert(t, errors.Is(err, metadata.ErrNotFound), "got %v", err)

	assert.NilError(t, c.Probe(ctx))
	_, err = c.Get(ctx, "")
	assert.ErrorContains(t, err, "empty key")
	assert.NilError(t, c.Close())
	assert.NilError(t, c.Close())
}

func TestClientURLWithQuery(t *testing.T) {
	var got string
	hs := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		got = r.URL.RawQuery
		_, _ = w.Write([]byte("v"))
	}))
	defer hs.Close()
	c := newClient(t, hs.URL+"/m?tenant=a")
	_, err := c.Get(context.Background(), "mooncake/ram/x")
	assert.NilError(t, err)
	assert.Equal(t, got, "tenant=a&key=mooncake%2Fram%2Fx")
}

func TestClientStatusClasses(t *testing.T) {
	code := 503
	hs := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		w.WriteHeader(code)
		_, _ = w.Write([]byte(strings.Repeat("e", 1000)))
	}))
	defer hs.Close()
	c := newClient(t, hs.URL+"/metadata")
	for _, tc := range []struct {
		code                     int
		unavailable, notFound, c bool
	}{
		{503, true, false, false},
		{502, true, false, false},
		{500, false, false, false},
		{201, false, false, false}, // only 200 is success
		{400, false, false, true},  // PUT to an rpc_meta key
	} {
		code = tc.code
		err := c.Put(context.Background(), "mooncake/rpc_meta/a", []byte("1"))
		assert.Assert(t, err != nil, "status %d accepted", tc.code)
		assert.Equal(t, errors.Is(err, metadata.ErrUnavailable), tc.unavailable, "status %d: %v", tc.code, err)
		assert.Equal(t, errors.Is(err, metadata.ErrNotFound), tc.notFound, "status %d", tc.code)
		assert.Equal(t, errors.Is(err, metadata.ErrConflict), tc.c, "status %d", tc.code)
		assert.Assert(t, len(err.Error()) < 400, "error text not capped: %d", len(err.Error()))
	}
}

// TestClientUnreachable: a refused connection and a server that never
// answers both fail within the per-request timeout with ErrUnavailable.
func TestClientUnreachable(t *testing.T) {
	t.Run("refused", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		assert.NilError(t, err)
		addr := ln.Addr().String()
		ln.Close()
		c := newClient(t, "http://"+addr+"/metadata")
		start := time.Now()
		_, err = c.Get(context.Background(), "k")
		assert.Assert(t, errors.Is(err, metadata.ErrUnavailable), "got %v", err)
		assert.Assert(t, time.Since(start) < mdhttp.DefaultTimeout)
		assert.ErrorContains(t, err, addr)
	})
	t.Run("silent", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		assert.NilError(t, err)
		defer ln.Close()
		conns := make(chan net.Conn, 4)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					close(conns)
					return
				}
				conns <- c // hold it open, never answer
			}
		}()
		defer func() {
			ln.Close()
			for c := range conns {
				c.Close()
			}
		}()
		c, err := mdhttp.NewClient(mdhttp.Config{URL: "http://" + ln.Addr().String() + "/metadata", Timeout: 500 * time.Millisecond})
		assert.NilError(t, err)
		defer c.Close()
		start := time.Now()
		err = c.Put(context.Background(), "k", []byte("v"))
		took := time.Since(start)
		assert.Assert(t, errors.Is(err, metadata.ErrUnavailable), "got %v", err)
		assert.Assert(t, took >= 400*time.Millisecond && took < 2*time.Second, "took %v", took)
	})
	t.Run("cancelled", func(t *testing.T) {
		s := startInProcess(t, mdhttp.ServerConfig{})
		c := newClient(t, s.URL())
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := c.Get(ctx, "k")
		assert.Assert(t, errors.Is(err, context.Canceled), "got %v", err)
		assert.Assert(t, !errors.Is(err, metadata.ErrUnavailable))
	})
}

// TestClientIdleGap: the server drops idle keep-alive connections; the
// next request after the gap succeeds on the first call (Mooncake#4209).
func TestClientIdleGap(t *testing.T) {
	srv, err := mdhttp.NewServer(mdhttp.ServerConfig{})
	assert.NilError(t, err)
	defer srv.Close()
	hs := httptest.NewUnstartedServer(srv)
	hs.Config.IdleTimeout = 100 * time.Millisecond
	hs.Start()
	defer hs.Close()
	c := newClient(t, hs.URL+"/metadata")
	ctx := context.Background()
	for i := range 3 {
		assert.NilError(t, c.Put(ctx, "k", []byte{byte('a' + i)}), "round %d", i)
		time.Sleep(300 * time.Millisecond) // the idle gap under test
		_, err := c.Get(ctx, "k")
		assert.NilError(t, err, "round %d", i)
		time.Sleep(300 * time.Millisecond)
		assert.NilError(t, c.Delete(ctx, "k"), "round %d", i)
	}
}

// TestClientKillsIdleConnection: the server process side closes the
// connection abruptly between requests (as a restarted server does).
func TestClientServerRestart(t *testing.T) {
	s := startInProcess(t, mdhttp.ServerConfig{})
	c := newClient(t, s.URL())
	ctx := context.Background()
	assert.NilError(t, c.Put(ctx, "k", []byte("v")))
	s.Restart(t)
	_, err := c.Get(ctx, "k") // new server, empty, same address
	assert.Assert(t, errors.Is(err, metadata.ErrNotFound), "got %v", err)
	assert.NilError(t, c.Put(ctx, "k", []byte("v")))
}

func TestClientConfig(t *testing.T) {
	for _, url := range []string{
		"", "metadata", "ftp://h/metadata", "http:///metadata", "http://h:0/m", "http://h:70000/m",
		"http://h:x/m", "http://u:p@h:1/m", "http://h:1/m#frag", "http://[::1/m",
	} {
		_, err := mdhttp.NewClient(mdhttp.Config{URL: url})
		assert.Assert(t, err != nil, "%q accepted", url)
	}
	for _, url := range []string{"http://h/m", "https://h:443/m", "http://[::1]:8080/metadata", "http://h:1"} {
		_, err := mdhttp.NewClient(mdhttp.Config{URL: url})
		assert.NilError(t, err, url)
	}
	_, err := mdhttp.NewClient(mdhttp.Config{URL: "http://h/m", Timeout: -1})
	assert.Assert(t, err != nil)
}

func TestClientValueCap(t *testing.T) {
	s := startInProcess(t, mdhttp.ServerConfig{})
	c, err := mdhttp.NewClient(mdhttp.Config{URL: s.URL(), MaxValueBytes: 4})
	assert.NilError(t, err)
	defer c.Close()
	assert.ErrorContains(t, c.Put(context.Background(), "k", []byte("12345")), "exceeds")
	big := newClient(t, s.URL())
	assert.NilError(t, big.Put(context.Background(), "k", []byte("12345")))
	_, err = c.Get(context.Background(), "k")
	assert.ErrorContains(t, err, "exceeds")
}
