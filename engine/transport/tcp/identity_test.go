package tcp_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	mdhttp "github.com/kvferry/kvferry/engine/metadata/http"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/engine/transport/tcp"
	"github.com/kvferry/kvferry/engine/transport/tcp/tcpwire"
	"github.com/kvferry/kvferry/internal/cmem"
)

// metadataService starts an HTTP metadata service; it returns its
// connection string.
func metadataService(t *testing.T) string {
	t.Helper()
	srv, err := mdhttp.NewServer(mdhttp.ServerConfig{})
	assert.NilError(t, err)
	hs := httptest.NewServer(srv)
	t.Cleanup(func() { hs.Close(); srv.Close() })
	return hs.URL + "/metadata"
}

// namedEngine starts an engine called name on the metadata service url
// with only the TCP transport, listening on port (0: any), with mem
// registered (when not nil) and published.
func namedEngine(t *testing.T, url, name string, port int, mem *cmem.Map) *engine.Engine {
	t.Helper()
	e, err := stack.New(context.Background(), stack.Config{
		Engine: engine.Config{MetadataConn: url, LocalServerName: name, BindAddress: "127.0.0.1", Transports: []string{"tcp"},
			TransferTimeout: 10 * time.Second},
		TCP: tcp.Config{Port: port},
	})
	assert.NilError(t, err)
	if mem != nil {
		assert.NilError(t, e.RegisterMemory(mem.Addr(), mem.Len(), "*", true))
		assert.NilError(t, e.Publish(context.Background())) // no publication delay: the test reads it at once
	}
	return e
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*31) + seed
	}
}

// TestStaleIncarnation: the peer an initiator writes to goes away and a
// new engine listens on its old data port, while the initiator still holds
// the old descriptor and connections. When the new engine is the peer
// restarted (same segment name), the next request re-reads the descriptor
// and lands in the new incarnation; when it is another segment, the
// request fails with ErrStaleIncarnation and the other engine's memory is
// not written (issue 35, item 5).
func TestStaleIncarnation(t *testing.T) {
	url := metadataService(t)
	const n = 1 << 20
	mem, err := cmem.MapAnon(n) // registered by each incarnation in turn
	assert.NilError(t, err)
	defer mem.Close()
	src, err := cmem.MapAnon(n)
	assert.NilError(t, err)
	defer src.Close()

	a1 := namedEngine(t, url, "ident-target", 0, mem)
	port := a1.Transport(tcp.Name).(*tcp.Transport).Port()
	b := namedEngine(t, url, "ident-initiator", 0, nil)
	defer b.Close()
	assert.NilError(t, b.RegisterMemory(src.Addr(), n, "*", true))
	bt := b.Transport(tcp.Name).(*tcp.Transport)
	ctx := context.Background()
	seg, err := b.OpenSegment(ctx, "ident-target")
	assert.NilError(t, err)
	write := func(seed byte) error {
		fill(src.Bytes(), seed)
		return b.Transfer(ctx, []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: uint64(mem.Addr()), Length: n}})
	}
	assert.NilError(t, write(1))
	assert.Assert(t, bytes.Equal(mem.Bytes(), src.Bytes()))
	d, err := b.SegmentDescriptor(seg)
	assert.NilError(t, err)
	assert.Equal(t, d.Incarnation, a1.Incarnation())
	assert.Assert(t, bt.Stats().Conns > 0)
	assert.NilError(t, a1.Close())

	t.Run("restarted", func(t *testing.T) {
		a2 := namedEngine(t, url, "ident-target", port, mem)
		defer a2.Close()
		assert.Assert(t, a2.Incarnation() != a1.Incarnation())
		before := bt.Stats()
		assert.NilError(t, write(2))
		assert.Assert(t, bytes.Equal(mem.Bytes(), src.Bytes()))
		d, err := b.SegmentDescriptor(seg)
		assert.NilError(t, err)
		assert.Equal(t, d.Incarnation, a2.Incarnation())
		after := bt.Stats()
		assert.Assert(t, after.StaleDials > before.StaleDials, "%+v", after)
		assert.Equal(t, after.Rereads, before.Rereads+1, "%+v", after)
		assert.Assert(t, a2.Transport(tcp.Name).(*tcp.Transport).Stats().StaleRefused > 0)
		assert.NilError(t, write(3)) // bound to the new incarnation now
	})

	t.Run("another segment on the port", func(t *testing.T) {
		// The initiator holds the restarted incarnation's descriptor; it
		// is gone, and another segment's engine took the port.
		other := namedEngine(t, url, "ident-other", port, mem)
		defer other.Close()
		clear(mem.Bytes())
		err := write(4)
		assert.Assert(t, errors.Is(err, tcp.ErrStaleIncarnation), "%v", err)
		assert.Assert(t, errors.Is(err, engine.ErrPeerGone), "%v", err)
		assert.Assert(t, bytes.Equal(mem.Bytes(), make([]byte, n)), "the other engine's memory was written")
		assert.Assert(t, other.Transport(tcp.Name).(*tcp.Transport).Stats().StaleRefused > 0)
		assert.Equal(t, other.Transport(tcp.Name).(*tcp.Transport).Stats().Served, uint64(0))
	})
}

// mooncakeServer is a data port that speaks only Mooncake's wire
// (specs/mooncake.md §4.3): it answers v2 requests with status frames,
// refusing size 0, and records the headers it got.
type mooncakeServer struct {
	ln      net.Listener
	headers chan tcpwire.Header
}

func newMooncakeServer(t *testing.T) *mooncakeServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	m := &mooncakeServer{ln: ln, headers: make(chan tcpwire.Header, 64)}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			m.serve(c)
		}
	}()
	return m
}

func (m *mooncakeServer) serve(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	var hb [tcpwire.HeaderSize]byte
	for {
		if _, err := io.ReadFull(c, hb[:]); err != nil {
			return
		}
		h, err := tcpwire.DecodeHeader(hb[:])
		if err != nil {
			return
		}
		m.headers <- h
		var st [tcpwire.StatusSize]byte
		if h.Size == 0 {
			tcpwire.EncodeStatus(st[:], tcpwire.StatusRejected)
			_, _ = c.Write(st[:])
			return
		}
		if h.Write {
			if _, err := io.CopyN(io.Discard, c, int64(h.Size)); err != nil {
				return
			}
		}
		tcpwire.EncodeStatus(st[:], tcpwire.StatusOK)
		_, _ = c.Write(st[:])
		if !h.Write {
			_, _ = c.Write(make([]byte, h.Size))
		}
	}
}

func (m *mooncakeServer) port() int { return m.ln.Addr().(*net.TCPAddr).Port }

// TestMooncakePeerWithoutHello: a descriptor without an incarnation (as
// Mooncake publishes it) is reached as Mooncake expects, its first bytes a
// request header; a descriptor that claims an incarnation and the hello
// but whose port a Mooncake-only server holds fails with
// ErrStaleIncarnation, that server seeing the hello only (a request of
// size 0 at address 0, which it refuses).
func TestMooncakePeerWithoutHello(t *testing.T) {
	url := metadataService(t)
	srv := newMooncakeServer(t)
	put := func(key, value string) {
		req, err := http.NewRequest(http.MethodPut, url+"?key="+key, strings.NewReader(value))
		assert.NilError(t, err)
		resp, err := http.DefaultClient.Do(req)
		assert.NilError(t, err)
		resp.Body.Close()
		assert.Equal(t, resp.StatusCode, http.StatusOK)
	}
	const addr, n = 0x7f0000000000, 64 << 10
	for _, name := range []string{"mooncake-peer", "claims-identity"} {
		extra := ""
		if name == "claims-identity" {
			extra = `,"kvferry_features":["data_hello"],"kvferry_incarnation":"000102030405060708090a0b0c0d0e0f"`
		}
		put("mooncake/ram/"+name, fmt.Sprintf(`{"name":%q,"protocol":"tcp","tcp_data_port":%d,"tcp_proto_version":2,`+
			`"buffers":[{"name":%q,"addr":%d,"length":%d}]%s}`, name, srv.port(), name, addr, n, extra))
		put("mooncake/rpc_meta/"+name, `{"ip_or_host_name":"127.0.0.1","rpc_port":9}`) // never dialled: the descriptor is cached
	}
	src, err := cmem.MapAnon(n)
	assert.NilError(t, err)
	defer src.Close()
	b := namedEngine(t, url, "ident-mc-initiator", 0, nil)
	defer b.Close()
	assert.NilError(t, b.RegisterMemory(src.Addr(), n, "*", true))
	ctx := context.Background()

	seg, err := b.OpenSegment(ctx, "mooncake-peer")
	assert.NilError(t, err)
	assert.NilError(t, b.Transfer(ctx, []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: addr, Length: n}}))
	h := <-srv.headers
	assert.Equal(t, h, tcpwire.Header{Size: n, Addr: addr, Write: true, V2: true})

	seg, err = b.OpenSegment(ctx, "claims-identity")
	assert.NilError(t, err)
	err = b.Transfer(ctx, []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: addr, Length: n}})
	assert.Assert(t, errors.Is(err, tcp.ErrStaleIncarnation), "%v", err)
	// Every connection (the first try, and the one after the re-read,
	// which found the same incarnation) began with the hello and nothing
	// else reached the server.
	for {
		select {
		case h := <-srv.headers:
			assert.Equal(t, h, tcpwire.Header{V2: true}, "a request reached the server: %+v", h)
			continue
		default:
		}
		break
	}
}
