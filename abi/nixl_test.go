package abi

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	mdhttp "github.com/kvferry/kvferry/engine/metadata/http"
	"github.com/kvferry/kvferry/engine/transport/samehost"
	"github.com/kvferry/kvferry/internal/cmem"
)

// TestNixlLayout compares the Go mirror of kvferry_nixl_desc_t with the C
// compiler's layout of kvferry.h, and the header's status values with
// nixl_status_t as specs/nixl.md §2.4 gives them.
func TestNixlLayout(t *testing.T) {
	c := nixlCLayout()
	var d nixlDesc
	assert.Equal(t, int(unsafe.Sizeof(d)), c["sizeof(kvferry_nixl_desc_t)"])
	assert.Equal(t, int(unsafe.Sizeof(d)), 32)
	assert.Equal(t, int(unsafe.Offsetof(d.Len)), c["offsetof(len)"])
	assert.Equal(t, int(unsafe.Offsetof(d.DevID)), c["offsetof(dev_id)"])
	assert.Equal(t, int(unsafe.Offsetof(d.Handle)), c["offsetof(md)"])
	assert.Equal(t, c["sizeof(kvferry_nixl_notif_t)"], 32)
	assert.Equal(t, c["offsetof(msg)"], 16)
	spec := map[string]int{
		"IN_PROG": 1, "SUCCESS": 0, "ERR_NOT_POSTED": -1, "ERR_INVALID_PARAM": -2, "ERR_BACKEND": -3,
		"ERR_NOT_FOUND": -4, "ERR_MISMATCH": -5, "ERR_NOT_ALLOWED": -6, "ERR_REPOST_ACTIVE": -7,
		"ERR_UNKNOWN": -8, "ERR_NOT_SUPPORTED": -9, "ERR_REMOTE_DISCONNECT": -10, "ERR_CANCELED": -11,
		"DRAM": 0, "VRAM": 1, "READ": 0, "WRITE": 1,
	}
	for k, v := range spec {
		assert.Equal(t, c[k], v, k)
	}
	goConst := map[string]int{
		"IN_PROG": nixlInProg, "SUCCESS": nixlSuccess, "ERR_NOT_POSTED": nixlErrNotPosted,
		"ERR_INVALID_PARAM": nixlErrInvalidParam, "ERR_BACKEND": nixlErrBackend, "ERR_NOT_FOUND": nixlErrNotFound,
		"ERR_MISMATCH": nixlErrMismatch, "ERR_NOT_ALLOWED": nixlErrNotAllowed,
		"ERR_REPOST_ACTIVE": nixlErrRepostActive, "ERR_UNKNOWN": nixlErrUnknown,
		"ERR_NOT_SUPPORTED": nixlErrNotSupported, "ERR_REMOTE_DISCONNECT": nixlErrRemoteDisconnect,
		"ERR_CANCELED": nixlErrCanceled, "DRAM": nixlDRAM, "VRAM": nixlVRAM, "READ": nixlRead, "WRITE": nixlWrite,
	}
	for k, v := range goConst {
		assert.Equal(t, c[k], v, k)
	}
}

// TestNixlCodes checks the Go -> nixl_status_t table: every sentinel maps to
// its code, wrapped or not, and unknown errors map to ERR_BACKEND.
func TestNixlCodes(t *testing.T) {
	cases := []struct {
		err  error
		want int
	}{
		{nil, nixlSuccess},
		{errPanic, nixlErrUnknown},
		{errNixlUnknownAgent, nixlErrNotFound},
		{engine.ErrUnknownSegment, nixlErrNotFound},
		{errNixlMismatch, nixlErrMismatch},
		{errNixlNotAllowed, nixlErrNotAllowed},
		{errNixlRepost, nixlErrRepostActive},
		{errNixlNotPosted, nixlErrNotPosted},
		{errNixlNotSupported, nixlErrNotSupported},
		{engine.ErrNotSupported, nixlErrNotSupported},
		{engine.ErrCanceled, nixlErrCanceled},
		{syscall.ECONNREFUSED, nixlErrRemoteDisconnect},
		{syscall.ECONNRESET, nixlErrRemoteDisconnect},
		{syscall.EPIPE, nixlErrRemoteDisconnect},
		{io.EOF, nixlErrRemoteDisconnect},
		{syscall.ESRCH, nixlErrRemoteDisconnect},
		{samehost.ErrPeerGone, nixlErrRemoteDisconnect},
		{&engine.TransferError{Peer: "p", Err: fmt.Errorf("read: %w", io.ErrUnexpectedEOF)}, nixlErrRemoteDisconnect},
		{engine.ErrInvalidArgument, nixlErrInvalidParam},
		{engine.ErrAddressNotRegistered, nixlErrInvalidParam},
		{engine.ErrAddressOverlapped, nixlErrInvalidParam},
		{engine.ErrTooManyRequests, nixlErrInvalidParam},
		{errNixlReleased, nixlErrInvalidParam},
		{errNULL, nixlErrInvalidParam},
		{engine.ErrTimeout, nixlErrBackend},
		{engine.ErrRejected, nixlErrBackend},
		{engine.ErrMetadata, nixlErrBackend},
		{errors.New("something else"), nixlErrBackend},
	}
	for _, c := range cases {
		name := "nil"
		if c.err != nil {
			name = c.err.Error()
		}
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, nixlCode(c.err), c.want)
			if c.err != nil {
				assert.Equal(t, nixlCode(fmt.Errorf("op %q: %w", "x", c.err)), c.want)
			}
		})
	}
}

func TestNixlPublicData(t *testing.T) {
	for _, c := range []struct {
		blob    string
		ok      bool
		addr, n uint64
		seg     string
	}{
		{"kvf1 7f0000001000 1048576 127.0.0.1:15001", true, 0x7f0000001000, 1 << 20, "127.0.0.1:15001"},
		{"kvf1 10 1 name with spaces", true, 0x10, 1, "name with spaces"},
		{"kvf1 10 0 seg", false, 0, 0, ""},
		{"kvf1 ffffffffffffffff 2 seg", false, 0, 0, ""},
		{"kvf1 10 1", false, 0, 0, ""},
		{"kvf1 10 1 ", false, 0, 0, ""},
		{"kvf2 10 1 seg", false, 0, 0, ""},
		{"", false, 0, 0, ""},
		{"\x00\x01garbage", false, 0, 0, ""},
	} {
		addr, n, seg, err := parsePublicData(c.blob)
		assert.Equal(t, err == nil, c.ok, "%q: %v", c.blob, err)
		assert.Equal(t, addr, c.addr, c.blob)
		assert.Equal(t, n, c.n, c.blob)
		assert.Equal(t, seg, c.seg, c.blob)
		if c.ok {
			assert.Equal(t, formatPublicData(addr, n, seg), c.blob)
		}
	}
}

// FuzzParsePublicData: no panic, an error gives no result, and what parses
// formats back into a blob that parses to the same values.
func FuzzParsePublicData(f *testing.F) {
	f.Add("kvf1 7f0000001000 1048576 127.0.0.1:15001")
	f.Add("kvf1 0 1 x")
	f.Add("kvf1 -1 1 x")
	f.Add("kvf1  1 x")
	f.Fuzz(func(t *testing.T, blob string) {
		addr, n, seg, err := parsePublicData(blob)
		if err != nil {
			if addr != 0 || n != 0 || seg != "" {
				t.Fatalf("error with a result: %v", err)
			}
			return
		}
		a2, n2, s2, err := parsePublicData(formatPublicData(addr, n, seg))
		if err != nil || a2 != addr || n2 != n || s2 != seg {
			t.Fatalf("round trip of %q: %v", blob, err)
		}
	})
}

func TestNixlNotifEncoding(t *testing.T) {
	a := &nixlAgent{name: "agent"}
	for _, msg := range []string{"", "0xBEEF", "with\x00nul", "\xff\xfe binary \x80", strings.Repeat("é", 100)} {
		n := a.encodeNotif(msg)
		assert.Equal(t, decodeNotif(n), engine.Notification{Name: "agent", Msg: msg})
	}
	// A peer's plain notification passes unchanged.
	assert.Equal(t, decodeNotif(engine.Notification{Name: "x", Msg: "y"}), engine.Notification{Name: "x", Msg: "y"})
}

func TestNixlOptions(t *testing.T) {
	opts := nixlOptions()
	keys := map[string]string{}
	for _, o := range opts {
		keys[o.key] = o.def
	}
	for _, k := range []string{"metadata", "local_server_name", "transport", "tcp_lanes", "slice_size", "timeout_ms"} {
		_, ok := keys[k]
		assert.Assert(t, ok, k)
	}
	assert.Equal(t, keys["metadata"], "P2PHANDSHAKE")
	_, err := newNixlAgent("x", map[string]string{"bogus": "1"}, false)
	assert.Assert(t, errors.Is(err, engine.ErrInvalidArgument), "%v", err)
	_, err = newNixlAgent("", nil, false)
	assert.Assert(t, errors.Is(err, engine.ErrInvalidArgument), "%v", err)
	_, err = newNixlAgent("x", map[string]string{"tcp_lanes": "99"}, false)
	assert.Assert(t, err != nil)
}

// nixlPair is two agents in this process, each with 8 x 1 MiB registered.
type nixlPair struct {
	a, b       *nixlAgent
	abuf, bbuf *cmem.Map
	amd, bmd   []uintptr // registrations
	arm, brm   []uintptr // a's handles of b's buffers, b's of a's
}

const nixlTestBlocks, nixlTestBlock = 8, 1 << 20

func newNixlPair(t *testing.T) *nixlPair {
	t.Helper()
	p := &nixlPair{}
	var err error
	opts := map[string]string{"local_server_name": "127.0.0.1"}
	p.a, err = newNixlAgent("alice", opts, true)
	assert.NilError(t, err)
	t.Cleanup(p.a.close)
	p.b, err = newNixlAgent("bob", opts, false)
	assert.NilError(t, err)
	t.Cleanup(p.b.close)
	p.abuf, err = cmem.MapAnon(nixlTestBlocks * nixlTestBlock)
	assert.NilError(t, err)
	t.Cleanup(func() { p.abuf.Close() })
	p.bbuf, err = cmem.MapAnon(nixlTestBlocks * nixlTestBlock)
	assert.NilError(t, err)
	t.Cleanup(func() { p.bbuf.Close() })
	for i := range nixlTestBlocks {
		off := uint64(i * nixlTestBlock)
		h, err := p.a.register(nixlDRAM, uint64(p.abuf.Addr())+off, nixlTestBlock, 0)
		assert.NilError(t, err)
		p.amd = append(p.amd, h)
		h, err = p.b.register(nixlDRAM, uint64(p.bbuf.Addr())+off, nixlTestBlock, 0)
		assert.NilError(t, err)
		p.bmd = append(p.bmd, h)
	}
	assert.NilError(t, p.a.loadConnInfo("bob", p.b.self.info))
	assert.NilError(t, p.b.loadConnInfo("alice", p.a.self.info))
	for i := range nixlTestBlocks {
		off := uint64(i * nixlTestBlock)
		blob, err := p.b.publicData(p.bmd[i])
		assert.NilError(t, err)
		h, err := p.a.loadRemoteMD("bob", nixlDRAM, uint64(p.bbuf.Addr())+off, nixlTestBlock, 0, blob)
		assert.NilError(t, err)
		p.arm = append(p.arm, h)
		blob, err = p.a.publicData(p.amd[i])
		assert.NilError(t, err)
		h, err = p.b.loadRemoteMD("alice", nixlDRAM, uint64(p.abuf.Addr())+off, nixlTestBlock, 0, blob)
		assert.NilError(t, err)
		p.brm = append(p.brm, h)
	}
	return p
}

func nixlDescsOf(buf *cmem.Map, mds []uintptr) []nixlDesc {
	d := make([]nixlDesc, len(mds))
	for i := range mds {
		d[i] = nixlDesc{Addr: uint64(buf.Addr()) + uint64(i*nixlTestBlock), Len: nixlTestBlock, Handle: uint64(mds[i])}
	}
	return d
}

func nixlFill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7)
	}
}

// nixlWaitXfer polls checkXfer (as NIXL does) until the post is done.
func nixlWaitXfer(t *testing.T, a *nixlAgent, x *nixlXfer) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if st := a.checkXfer(x); st != nixlInProg {
			return st
		}
		time.Sleep(100 * time.Microsecond)
	}
	t.Fatal("transfer did not finish in 30s")
	return 0
}

// nixlWaitNotifs collects notifications of a until want arrived or the
// timeout passed (for want 0, the time a stray one would take to come).
func nixlWaitNotifs(t *testing.T, a *nixlAgent, want int, timeout time.Duration) []engine.Notification {
	t.Helper()
	var got []engine.Notification
	deadline := time.Now().Add(timeout)
	for len(got) < want && time.Now().Before(deadline) {
		got = append(got, a.getNotifs()...)
		time.Sleep(time.Millisecond)
	}
	return got
}

func TestNixlTransfers(t *testing.T) {
	p := newNixlPair(t)
	for _, dir := range []struct {
		name       string
		src, dst   *nixlAgent
		sbuf, dbuf *cmem.Map
		smd, rmd   []uintptr
	}{
		{"alice-to-bob", p.a, p.b, p.abuf, p.bbuf, p.amd, p.arm},
		{"bob-to-alice", p.b, p.a, p.bbuf, p.abuf, p.bmd, p.brm},
	} {
		t.Run(dir.name, func(t *testing.T) {
			local, remote := nixlDescsOf(dir.sbuf, dir.smd), nixlDescsOf(dir.dbuf, dir.rmd)
			h, err := dir.src.prepXfer(nixlWrite, dir.dst.name, local, remote)
			assert.NilError(t, err)
			x, _ := dir.src.xfers.get(h)
			assert.Equal(t, dir.src.checkXfer(x), nixlErrNotPosted)
			for k := range 10 {
				nixlFill(dir.sbuf.Bytes(), byte(k))
				n := dir.src.encodeNotif("0xBEEF")
				st, err := dir.src.postXfer(x, nixlWrite, local, remote, &n)
				assert.NilError(t, err)
				assert.Equal(t, st, nixlInProg)
				assert.Equal(t, nixlWaitXfer(t, dir.src, x), nixlSuccess)
				assert.Assert(t, bytes.Equal(dir.dbuf.Bytes(), dir.sbuf.Bytes()), "data differs")
			}
			ns := nixlWaitNotifs(t, dir.dst, 10, 10*time.Second)
			assert.Equal(t, len(ns), 10)
			for _, n := range ns {
				assert.Equal(t, n, engine.Notification{Name: dir.src.name, Msg: "0xBEEF"})
			}
			// READ back into a cleared source, through the same handle.
			clear(dir.sbuf.Bytes())
			st, err := dir.src.postXfer(x, nixlRead, local, remote, nil)
			assert.NilError(t, err)
			assert.Equal(t, st, nixlInProg)
			assert.Equal(t, nixlWaitXfer(t, dir.src, x), nixlSuccess)
			assert.Assert(t, bytes.Equal(dir.dbuf.Bytes(), dir.sbuf.Bytes()), "data differs")
			assert.NilError(t, dir.src.releaseXfer(x))
			assert.Assert(t, errors.Is(dir.src.releaseXfer(x), errNixlReleased))
			assert.Equal(t, len(nixlWaitNotifs(t, dir.dst, 1, 300*time.Millisecond)), 0)
		})
	}
	t.Run("intra-agent", func(t *testing.T) {
		self := make([]uintptr, 4)
		for i := range self {
			h, err := p.a.loadLocalMD(p.amd[4+i])
			assert.NilError(t, err)
			self[i] = h
		}
		local := nixlDescsOf(p.abuf, p.amd[:4])
		remote := nixlDescsOf(p.abuf, p.amd[:4])
		for i := range remote {
			remote[i].Addr += 4 * nixlTestBlock
			remote[i].Handle = uint64(self[i])
		}
		nixlFill(p.abuf.Bytes()[:4*nixlTestBlock], 42)
		h, err := p.a.prepXfer(nixlWrite, "alice", local, remote)
		assert.NilError(t, err)
		x, _ := p.a.xfers.get(h)
		n := p.a.encodeNotif("self")
		_, err = p.a.postXfer(x, nixlWrite, local, remote, &n)
		assert.NilError(t, err)
		assert.Equal(t, nixlWaitXfer(t, p.a, x), nixlSuccess)
		assert.Assert(t, bytes.Equal(p.abuf.Bytes()[4*nixlTestBlock:], p.abuf.Bytes()[:4*nixlTestBlock]), "data differs")
		assert.DeepEqual(t, nixlWaitNotifs(t, p.a, 1, 10*time.Second), []engine.Notification{{Name: "alice", Msg: "self"}})
		assert.NilError(t, p.a.releaseXfer(x))
		for _, h := range self {
			assert.NilError(t, p.a.unloadMD(h))
		}
	})
	t.Run("release-in-flight", func(t *testing.T) {
		local, remote := nixlDescsOf(p.abuf, p.amd), nixlDescsOf(p.bbuf, p.arm)
		h, err := p.a.prepXfer(nixlWrite, "bob", local, remote)
		assert.NilError(t, err)
		x, _ := p.a.xfers.get(h)
		n := p.a.encodeNotif("never")
		_, err = p.a.postXfer(x, nixlWrite, local, remote, &n)
		assert.NilError(t, err)
		assert.NilError(t, p.a.releaseXfer(x))
		_, err = p.a.postXfer(x, nixlWrite, local, remote, nil)
		assert.Assert(t, errors.Is(err, errNixlReleased))
		for _, n := range nixlWaitNotifs(t, p.b, 1, 300*time.Millisecond) {
			assert.Assert(t, n.Msg != "never", "a released transfer notified")
		}
	})
	t.Run("errors", func(t *testing.T) {
		local, remote := nixlDescsOf(p.abuf, p.amd[:1]), nixlDescsOf(p.bbuf, p.arm[:1])
		_, err := p.a.prepXfer(nixlWrite, "nobody", local, remote)
		assert.Equal(t, nixlCode(err), nixlErrNotFound)
		outside := []nixlDesc{remote[0]}
		outside[0].Addr += nixlTestBlock / 2
		_, err = p.a.prepXfer(nixlWrite, "bob", local, outside)
		assert.Equal(t, nixlCode(err), nixlErrInvalidParam, "%v", err)
		_, err = p.a.prepXfer(nixlWrite, "bob", local, nil)
		assert.Equal(t, nixlCode(err), nixlErrInvalidParam)
		_, err = p.a.prepXfer(7, "bob", local, remote)
		assert.Equal(t, nixlCode(err), nixlErrInvalidParam)
		assert.Equal(t, nixlCode(p.a.loadConnInfo("bob", "127.0.0.1:1")), nixlErrNotAllowed)
		assert.NilError(t, p.a.loadConnInfo("bob", p.b.self.info))
		_, err = p.a.register(nixlVRAM, uint64(p.abuf.Addr()), 1, 0)
		assert.Equal(t, nixlCode(err), nixlErrNotSupported)
		blob, _ := p.a.publicData(p.amd[0])
		_, err = p.a.loadRemoteMD("bob", nixlDRAM, uint64(p.abuf.Addr()), nixlTestBlock, 0, blob)
		assert.Equal(t, nixlCode(err), nixlErrMismatch)
		assert.Equal(t, nixlCode(p.a.genNotif("nobody", "x")), nixlErrNotFound)
		assert.Equal(t, nixlCode(p.a.disconnect("nobody")), nixlErrNotFound)
		assert.Equal(t, nixlCode(p.a.deregister(p.arm[0])), nixlErrInvalidParam)
		assert.Equal(t, nixlCode(p.a.unloadMD(p.amd[0])), nixlErrInvalidParam)
	})
	t.Run("shared-registration", func(t *testing.T) {
		// The same range and a range inside it take references.
		base := uint64(p.abuf.Addr())
		h1, err := p.a.register(nixlDRAM, base, nixlTestBlock, 0)
		assert.NilError(t, err)
		h2, err := p.a.register(nixlDRAM, base+100, 100, 0)
		assert.NilError(t, err)
		assert.NilError(t, p.a.deregister(h1))
		assert.NilError(t, p.a.deregister(h2))
		assert.Assert(t, p.a.e.Registered(base, nixlTestBlock), "the first registration still holds it")
		assert.Equal(t, nixlCode(p.a.deregister(h2)), nixlErrInvalidParam)
	})
	t.Run("reconnect", func(t *testing.T) {
		assert.NilError(t, p.a.disconnect("bob"))
		_, err := p.a.prepXfer(nixlWrite, "bob", nixlDescsOf(p.abuf, p.amd[:1]), nixlDescsOf(p.bbuf, p.arm[:1]))
		assert.Equal(t, nixlCode(err), nixlErrNotFound)
		assert.NilError(t, p.a.loadConnInfo("bob", p.b.self.info))
		assert.NilError(t, p.a.genNotif("bob", "back"))
		assert.DeepEqual(t, nixlWaitNotifs(t, p.b, 1, 10*time.Second), []engine.Notification{{Name: "alice", Msg: "back"}})
	})
}

// TestNixlHTTPMetadata runs two agents whose engines find each other through
// an HTTP metadata server (the "metadata" option): the connection info is
// then the segment name, which defaults to the agent name.
func TestNixlHTTPMetadata(t *testing.T) {
	// Non-P2P engines advertise MC_TCP_BIND_ADDRESS: keep the test on loopback.
	t.Setenv("MC_TCP_BIND_ADDRESS", "127.0.0.1")
	srv, err := mdhttp.NewServer(mdhttp.ServerConfig{})
	assert.NilError(t, err)
	hs := httptest.NewServer(srv)
	t.Cleanup(func() { hs.Close(); _ = srv.Close() })
	opts := map[string]string{"metadata": hs.URL + "/metadata", "transport": "tcp", "tcp_lanes": "2"}
	a, err := newNixlAgent("meta-a", opts, false)
	assert.NilError(t, err)
	t.Cleanup(a.close)
	b, err := newNixlAgent("meta-b", opts, false)
	assert.NilError(t, err)
	t.Cleanup(b.close)
	assert.Equal(t, a.self.info, "meta-a")
	abuf, err := cmem.MapAnon(nixlTestBlock)
	assert.NilError(t, err)
	t.Cleanup(func() { abuf.Close() })
	bbuf, err := cmem.MapAnon(nixlTestBlock)
	assert.NilError(t, err)
	t.Cleanup(func() { bbuf.Close() })
	amd, err := a.register(nixlDRAM, uint64(abuf.Addr()), nixlTestBlock, 0)
	assert.NilError(t, err)
	bmd, err := b.register(nixlDRAM, uint64(bbuf.Addr()), nixlTestBlock, 0)
	assert.NilError(t, err)
	assert.NilError(t, a.loadConnInfo("meta-b", b.self.info))
	blob, err := b.publicData(bmd)
	assert.NilError(t, err)
	rmd, err := a.loadRemoteMD("meta-b", nixlDRAM, uint64(bbuf.Addr()), nixlTestBlock, 0, blob)
	assert.NilError(t, err)
	nixlFill(abuf.Bytes(), 9)
	local := []nixlDesc{{Addr: uint64(abuf.Addr()), Len: nixlTestBlock, Handle: uint64(amd)}}
	remote := []nixlDesc{{Addr: uint64(bbuf.Addr()), Len: nixlTestBlock, Handle: uint64(rmd)}}
	h, err := a.prepXfer(nixlWrite, "meta-b", local, remote)
	assert.NilError(t, err)
	x, _ := a.xfers.get(h)
	n := a.encodeNotif("via http")
	_, err = a.postXfer(x, nixlWrite, local, remote, &n)
	assert.NilError(t, err)
	assert.Equal(t, nixlWaitXfer(t, a, x), nixlSuccess)
	assert.Assert(t, bytes.Equal(abuf.Bytes(), bbuf.Bytes()), "data differs")
	assert.DeepEqual(t, nixlWaitNotifs(t, b, 1, 10*time.Second), []engine.Notification{{Name: "meta-a", Msg: "via http"}})
	assert.NilError(t, a.releaseXfer(x))
}
