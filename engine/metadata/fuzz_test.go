package metadata_test

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine/descriptor"
	"github.com/kvferry/kvferry/engine/metadata"
	mdhttp "github.com/kvferry/kvferry/engine/metadata/http"
)

// FuzzFetch stores arbitrary bytes where a peer's descriptor and rpc_meta
// live and reads them through a real HTTP server and the backend.
// Properties: no panic; a descriptor exactly when there is no error; a
// decoded descriptor survives Marshal/Unmarshal unchanged, and every buffer
// in it is well formed.
func FuzzFetch(f *testing.F) {
	for _, name := range []string{"mooncake_tcp_segment.json", "mooncake_tcp_segment_v1_empty.json", "mooncake_rdma_segment.json"} {
		v, err := os.ReadFile(filepath.Join("testdata", name))
		assert.NilError(f, err)
		f.Add(v, []byte(`{"ip_or_host_name":"10.1.2.3","rpc_port":15123}`))
	}
	f.Add([]byte(`{"name":"x","protocol":["tcp","rdma"],"buffers":[]}`), []byte(`{}`))
	f.Add([]byte(`{"name":"x","protocol":"tcp","buffers":[{"name":"x","addr":1,"length":18446744073709551615}]}`), []byte(`x`))
	srv, err := mdhttp.NewServer(mdhttp.ServerConfig{})
	assert.NilError(f, err)
	defer srv.Close()
	s := startFuzzServer(f, srv)
	raw, err := mdhttp.NewClient(mdhttp.Config{URL: s})
	assert.NilError(f, err)
	defer raw.Close()
	cl, err := mdhttp.NewClient(mdhttp.Config{URL: s})
	assert.NilError(f, err)
	b, err := metadata.NewKVBackend(cl, metadata.KVConfig{})
	assert.NilError(f, err)
	defer b.Close()
	f.Fuzz(func(t *testing.T, segJSON, rpcJSON []byte) {
		ctx := context.Background()
		_ = raw.Delete(ctx, metadata.RPCMetaKey("", "peer"))
		assert.NilError(t, raw.Put(ctx, metadata.SegmentKey("", "peer"), segJSON))
		assert.NilError(t, raw.Put(ctx, metadata.RPCMetaKey("", "peer"), rpcJSON))
		seg, err := b.Fetch(ctx, "peer")
		assert.Assert(t, (seg == nil) == (err != nil), "result %v with error %v", seg, err)
		if err == nil {
			for _, buf := range seg.Buffers {
				assert.Assert(t, buf.Addr != 0 && buf.Length != 0 && buf.Addr+buf.Length > buf.Addr, "%+v", buf)
			}
			again, err := descriptor.Marshal(seg)
			assert.NilError(t, err)
			seg2, err := descriptor.Unmarshal(again)
			assert.NilError(t, err, "re-decode %s", again)
			again2, err := descriptor.Marshal(seg2)
			assert.NilError(t, err)
			assert.Equal(t, string(again), string(again2))
		}
		ep, err := b.Endpoint(ctx, "peer")
		if err == nil {
			assert.Assert(t, ep.IPOrHostName != "" && ep.RPCPort > 0 && ep.RPCPort <= 65535)
		}
	})
}

func startFuzzServer(f *testing.F, srv *mdhttp.Server) string {
	hs := httptest.NewServer(srv)
	f.Cleanup(hs.Close)
	return hs.URL + "/metadata"
}
