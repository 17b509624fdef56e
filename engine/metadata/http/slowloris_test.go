package http_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	nethttp "net/http"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	mdhttp "github.com/kvferry/kvferry/engine/metadata/http"
	"github.com/kvferry/kvferry/internal/testutil"
)

// TestSlowlorisSameAddress: 200 connections from 127.0.0.1 that send the
// start of a request line and stall, reconnecting when cut, beside a
// metadata server behind GuardListener (64 per address); honest clients
// from the same address still store and read entries, each on a new
// connection (issue 35).
func TestSlowlorisSameAddress(t *testing.T) {
	srv, err := mdhttp.NewServer(mdhttp.ServerConfig{})
	assert.NilError(t, err)
	defer srv.Close()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	hs := mdhttp.HTTPServer(srv, 0, nil)
	served := make(chan error, 1)
	go func() { served <- hs.Serve(mdhttp.GuardListener(raw, "metadata", nil)) }()
	defer func() {
		hs.Close()
		assert.Assert(t, errors.Is(<-served, nethttp.ErrServerClosed))
	}()
	addr := raw.Addr().String()
	attack := testutil.StartSlowloris(addr, 200, []byte("GET /"))
	defer attack.Stop()
	deadline := time.Now().Add(30 * time.Second)
	for attack.Dials() < 200 {
		assert.Assert(t, time.Now().Before(deadline), "attack did not build up: %d connections", attack.Dials())
		time.Sleep(10 * time.Millisecond)
	}
	client := &nethttp.Client{Timeout: 20 * time.Second, Transport: &nethttp.Transport{DisableKeepAlives: true}}
	defer client.CloseIdleConnections()
	u := "http://" + addr + "/metadata?key=" + mdhttp.EscapeKey("mooncake/ram/a")
	for i := range 5 {
		body := `{"name":"a","v":` + string(rune('0'+i)) + `}`
		req, err := nethttp.NewRequest(nethttp.MethodPut, u, strings.NewReader(body))
		assert.NilError(t, err)
		resp, err := client.Do(req)
		assert.NilError(t, err, "put %d", i)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		assert.Equal(t, resp.StatusCode, nethttp.StatusOK)
		resp, err = client.Get(u)
		assert.NilError(t, err, "get %d", i)
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.NilError(t, err)
		assert.Assert(t, bytes.Equal(got, []byte(body)), "get %d: %q", i, got)
	}
	t.Logf("%d attack connections made", attack.Dials())
}
