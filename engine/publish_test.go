package engine_test

import (
	"context"
	"fmt"
	nethttp "net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	mdhttp "github.com/kvferry/kvferry/engine/metadata/http"
	"github.com/kvferry/kvferry/engine/metadata/open"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/internal/cmem"
)

// metaServer is Mooncake's HTTP metadata protocol served in memory,
// counting the descriptor writes it receives.
type metaServer struct {
	url  string
	puts atomic.Int64
}

func newMetaServer(t *testing.T) *metaServer {
	t.Helper()
	srv, err := mdhttp.NewServer(mdhttp.ServerConfig{})
	assert.NilError(t, err)
	m := &metaServer{}
	hs := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		if r.Method == nethttp.MethodPut && strings.Contains(r.URL.RawQuery, "ram") {
			m.puts.Add(1)
		}
		srv.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { hs.Close(); _ = srv.Close() })
	m.url = hs.URL + "/metadata"
	return m
}

func newEngineMeta(t *testing.T, conn, name string, delay time.Duration) *engine.Engine {
	t.Helper()
	e, err := stack.New(context.Background(), stack.Config{Engine: engine.Config{MetadataConn: conn, LocalServerName: name,
		BindAddress: "127.0.0.1", Transports: []string{"tcp"}, TransferTimeout: 5 * time.Second, PublishDelay: delay}})
	assert.NilError(t, err)
	t.Cleanup(func() { e.Close() })
	return e
}

// TestNewBuffersVisibleAtOnce: a buffer registered a moment ago is usable
// by a peer that opens the segment right away, and by one that had opened
// it before (refresh on a miss), although the metadata service learns of
// it only with the next publication (here: an hour later, so only the live
// paths can serve it): P2P peers fetch the owner's current descriptor, and
// with a metadata service a peer asks the owner itself when the service
// does not list the range yet.
func TestNewBuffersVisibleAtOnce(t *testing.T) {
	meta := newMetaServer(t)
	for _, mode := range []string{"P2PHANDSHAKE", meta.url} {
		t.Run(strings.SplitN(mode, ":", 2)[0], func(t *testing.T) {
			name := func(s string) string {
				if mode == "P2PHANDSHAKE" {
					return "127.0.0.1"
				}
				return s
			}
			owner := newEngineMeta(t, mode, name("owner"), time.Hour)
			early := newEngineMeta(t, mode, name("early"), time.Hour)
			write := func(e *engine.Engine, m *cmem.Map) error {
				seg, err := e.OpenSegment(context.Background(), owner.SegmentName())
				if err != nil {
					return err
				}
				src := newBuf(t, e, 1<<16)
				fill(src.Bytes(), 7)
				return e.Transfer(context.Background(), []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: uint64(m.Addr()), Length: 1 << 16}})
			}
			first := newBuf(t, owner, 1<<16)
			assert.NilError(t, write(early, first))
			for i := range 3 {
				m := newBuf(t, owner, 1<<16)
				assert.NilError(t, write(early, m), "buffer %d, registered after the peer opened the segment", i)
				late := newEngineMeta(t, mode, name(fmt.Sprintf("late-%d", i)), time.Hour)
				assert.NilError(t, write(late, m), "buffer %d, registered just before the peer opened the segment", i)
			}
		})
	}
}

// TestPublicationCoalesced: registrations in a row are published together,
// within a bounded delay, not once each.
func TestPublicationCoalesced(t *testing.T) {
	meta := newMetaServer(t)
	owner := newEngineMeta(t, meta.url, "coalesced", 0)
	const n = 500
	area, err := cmem.MapAnon(n << 12)
	assert.NilError(t, err)
	t.Cleanup(func() { area.Close() })
	before := meta.puts.Load()
	for i := range n {
		assert.NilError(t, owner.RegisterMemory(area.Addr()+uintptr(i)<<12, 4096, "cpu:0", true))
	}
	// The metadata service lists them all soon (generous deadline for a
	// loaded machine).
	kv, err := open.Open(context.Background(), meta.url, open.Options{})
	assert.NilError(t, err)
	defer kv.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		d, err := kv.Fetch(context.Background(), "coalesced")
		assert.NilError(t, err)
		if len(d.Buffers) == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("published descriptor lists %d of %d buffers", len(d.Buffers), n)
		}
		time.Sleep(time.Millisecond)
	}
	puts := meta.puts.Load() - before
	t.Logf("%d registrations, %d publications", n, puts)
	assert.Assert(t, puts < n/2, "%d publications for %d registrations", puts, n)
}
