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
)

// TestRestartedPeerOnSameHostPath: a same-host peer restarts under the
// same segment name (a metadata service); the survivor's next request
// after the restart reaches the new process on the same-host path, not
// over TCP (issue 35, item 6).
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
	env := []string{metadataEnv + "=" + url, nameEnv + "=restarting-owner"}
	var seg engine.SegmentID = -1
	for i := range 3 {
		c := startChild(t, childOpts{role: "owner", bufBytes: 4 << 20, env: env})
		if seg < 0 {
			seg, err = e.OpenSegment(ctx, "restarting-owner")
			assert.NilError(t, err)
		}
		req := engine.Request{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: atou(c.ready[1]), Length: 1 << 20}
		for k := 0; ; k++ {
			err := e.Transfer(ctx, []engine.Request{req})
			if err == nil {
				t.Logf("incarnation %d: ok after %d tries, %v", i, k, e.Metrics().SlicesByTransport)
				break
			}
			t.Logf("incarnation %d: %v", i, err)
			time.Sleep(10 * time.Millisecond)
		}
		before := e.Metrics().SlicesByTransport
		assert.NilError(t, e.Transfer(ctx, []engine.Request{req}), "incarnation %d", i)
		after := e.Metrics().SlicesByTransport
		assert.Equal(t, after["tcp"], before["tcp"], "incarnation %d: %v", i, after)
		assert.Assert(t, after["cma"] > before["cma"], "incarnation %d: %v", i, after)
		assert.Equal(t, e.ChooseTransport(seg), "cma", "incarnation %d", i)
		c.kill()
		// A killed engine leaves its rpc_meta key, which keeps its name
		// from a new engine (a service TTL would drop it in time).
		r, err := http.NewRequest(http.MethodDelete, url+"?key=mooncake/rpc_meta/restarting-owner", nil)
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
