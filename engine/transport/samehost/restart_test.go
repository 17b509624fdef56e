package samehost_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	mdhttp "github.com/kvferry/kvferry/engine/metadata/http"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/engine/transport/samehost"
)

// TestRestartedPeerOnSameHostPath: a same-host peer process is killed and
// started again under its segment name (a metadata service), its buffer
// at the address its previous incarnation had (so the survivor's cached
// descriptor still holds the request's range and nothing else refreshes
// it). The survivor's next request reaches the new process on the
// same-host path, not over TCP: the dial to the dead owner's socket re-reads
// the descriptor (issue 35, item 6). Before, it went to TCP, at the dead
// incarnation's data port.
func TestRestartedPeerOnSameHostPath(t *testing.T) {
	srv, err := mdhttp.NewServer(mdhttp.ServerConfig{})
	assert.NilError(t, err)
	hs := httptest.NewServer(srv)
	defer hs.Close()
	defer srv.Close()
	url := hs.URL + "/metadata"
	e, err := stack.New(context.Background(), stack.Config{AutoDiscover: true,
		Engine: engine.Config{MetadataConn: url, LocalServerName: "survivor", BindAddress: "127.0.0.1", TransferTimeout: 5 * time.Second}})
	assert.NilError(t, err)
	defer e.Close()
	src := newBuf(t, e, 1<<20)
	ctx := context.Background()
	const name = "restarting-owner"
	env := []string{metadataEnv + "=" + url, nameEnv + "=" + name}
	var seg engine.SegmentID = -1
	var at string
	for i := range 3 {
		c := startChild(t, childOpts{role: "owner", bufBytes: 4 << 20, env: env})
		if at == "" {
			at = c.ready[1]
			env = append(env, atEnv+"="+at)
		}
		assert.Equal(t, c.ready[1], at, "incarnation %d", i)
		waitPublished(t, url, name, at)
		if seg < 0 {
			seg, err = e.OpenSegment(ctx, name)
			assert.NilError(t, err)
		}
		before, rereads := e.Metrics().SlicesByTransport, e.Transport(samehost.NameCMA).(*samehost.CMA).Rereads()
		req := engine.Request{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: atou(at), Length: 1 << 20}
		assert.NilError(t, e.Transfer(ctx, []engine.Request{req}), "incarnation %d", i)
		after := e.Metrics().SlicesByTransport
		assert.Equal(t, after["tcp"], before["tcp"], "incarnation %d: %v", i, after)
		assert.Assert(t, after["cma"] > before["cma"], "incarnation %d: %v", i, after)
		if i > 0 {
			assert.Equal(t, e.Transport(samehost.NameCMA).(*samehost.CMA).Rereads(), rereads+1, "incarnation %d", i)
		}
		c.kill()
		// A killed engine leaves its rpc_meta key, which keeps a new
		// engine from its name (a service TTL drops it in time).
		r, err := http.NewRequest(http.MethodDelete, url+"?key=mooncake/rpc_meta/"+name, nil)
		assert.NilError(t, err)
		resp, err := http.DefaultClient.Do(r)
		assert.NilError(t, err)
		resp.Body.Close()
	}
}

// waitPublished waits until the metadata service at url lists a buffer at
// addr (decimal) in the descriptor of segment name.
func waitPublished(t *testing.T, url, name, addr string) {
	t.Helper()
	end := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(url + "?key=mooncake/ram/" + name)
		assert.NilError(t, err)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.NilError(t, err)
		if strings.Contains(string(b), `"addr":`+addr+`,`) {
			return
		}
		assert.Assert(t, time.Now().Before(end), "segment %q never published a buffer at %s: %s", name, addr, b)
		time.Sleep(20 * time.Millisecond)
	}
}
