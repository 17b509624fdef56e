package nixl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	mdhttp "github.com/kvferry/kvferry/engine/metadata/http"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/internal/hostenv"
)

// newTestAgent creates agent name as kvferry_nixl_create does: options
// parsed by ParseOptions, the engine configured from the environment and
// the options these tests use.
func newTestAgent(t testing.TB, name string, opts map[string]string, progress bool) *Agent {
	t.Helper()
	p, err := ParseOptions(name, opts)
	assert.NilError(t, err)
	cfg := stack.ConfigFromEnv(hostenv.Lookup)
	cfg.Engine.MetadataConn = p.MetadataConn
	cfg.Engine.LocalServerName = p.LocalServerName
	cfg.AutoDiscover = true
	for k, v := range p.EngineOptions {
		switch k {
		case "transport":
			cfg.Engine.ForceTransport = v
		case "tcp_lanes":
			n, err := strconv.Atoi(v)
			assert.NilError(t, err)
			cfg.TCP.Lanes = n
		default:
			t.Fatalf("option %q not handled by the test", k)
		}
	}
	e, err := stack.New(context.Background(), cfg)
	assert.NilError(t, err)
	a, err := New(Config{Name: name, Engine: e, ProgressThread: progress})
	if err != nil {
		_ = e.Close()
	}
	assert.NilError(t, err)
	t.Cleanup(func() { assert.Check(t, a.Close()) })
	return a
}

func TestOptions(t *testing.T) {
	opts := Options(stack.ConfigFromEnv(hostenv.Lookup))
	keys := map[string]string{}
	for _, o := range opts {
		keys[o.Key] = o.Default
	}
	for _, k := range []string{"metadata", "local_server_name", "transport", "tcp_lanes", "slice_size", "timeout_ms"} {
		_, ok := keys[k]
		assert.Assert(t, ok, k)
	}
	assert.Equal(t, keys["metadata"], "P2PHANDSHAKE")
	assert.Equal(t, Options(stack.Config{})[2], Option{Key: "transport", Default: "auto"})

	// Keys of other backends are ignored (NIXL passes a program's whole
	// map to every backend); malformed values of kvferry's keys are not.
	p, err := ParseOptions("x", map[string]string{"num_workers": "4", "ucx_devices": "mlx5_0", "engine_config": "{}", "tcp_lanes": "2"})
	assert.NilError(t, err)
	assert.DeepEqual(t, p.Ignored, []string{"engine_config", "num_workers", "ucx_devices"})
	assert.DeepEqual(t, p.EngineOptions, map[string]string{"tcp_lanes": "2"})
	for k, v := range map[string]string{"tcp_lanes": "abc", "slice_size": "1", "timeout_ms": "0", "transport": "carrier-pigeon"} {
		_, err := ParseOptions("x", map[string]string{k: v, "num_workers": "4"})
		assert.Assert(t, errors.Is(err, engine.ErrInvalidArgument), "%s=%s: %v", k, v, err)
		assert.ErrorContains(t, err, k+"=")
		assert.ErrorContains(t, err, "want ")
	}
	for _, tr := range []string{"auto", "TCP", "cma", "shm", "local"} {
		_, err := ParseOptions("x", map[string]string{"transport": tr})
		assert.NilError(t, err, tr)
	}
	_, err = ParseOptions("", nil)
	assert.Assert(t, errors.Is(err, engine.ErrInvalidArgument), "%v", err)
	_, err = New(Config{Name: "x"})
	assert.Assert(t, errors.Is(err, engine.ErrInvalidArgument), "%v", err)

	p, err = ParseOptions("x", map[string]string{"metadata": "http://127.0.0.1:1/metadata", "transport": "Auto", "tcp_lanes": "2", "timeout_ms": ""})
	assert.NilError(t, err)
	assert.DeepEqual(t, p, EngineParams{MetadataConn: "http://127.0.0.1:1/metadata", LocalServerName: "x",
		EngineOptions: map[string]string{"tcp_lanes": "2"}})
	p, err = ParseOptions("x", map[string]string{"local_server_name": "127.0.0.1"})
	assert.NilError(t, err)
	assert.Equal(t, p.MetadataConn, "P2PHANDSHAKE")
	assert.Equal(t, p.LocalServerName, "127.0.0.1")
}

// pair is two agents in this process, each with 8 x 1 MiB registered.
type pair struct {
	a, b       *Agent
	abuf, bbuf *cmem.Map
	amd, bmd   []MD // registrations
	arm, brm   []MD // a's handles of b's buffers, b's of a's
}

const testBlocks, testBlock = 8, 1 << 20

func newPair(t *testing.T) *pair {
	t.Helper()
	p := &pair{}
	var err error
	opts := map[string]string{"local_server_name": "127.0.0.1"}
	p.a = newTestAgent(t, "alice", opts, true)
	p.b = newTestAgent(t, "bob", opts, false)
	p.abuf, err = cmem.MapAnon(testBlocks * testBlock)
	assert.NilError(t, err)
	t.Cleanup(func() { p.abuf.Close() })
	p.bbuf, err = cmem.MapAnon(testBlocks * testBlock)
	assert.NilError(t, err)
	t.Cleanup(func() { p.bbuf.Close() })
	for i := range testBlocks {
		off := uint64(i * testBlock)
		h, err := p.a.Register(DRAM, uint64(p.abuf.Addr())+off, testBlock, 0)
		assert.NilError(t, err)
		p.amd = append(p.amd, h)
		h, err = p.b.Register(DRAM, uint64(p.bbuf.Addr())+off, testBlock, 0)
		assert.NilError(t, err)
		p.bmd = append(p.bmd, h)
	}
	assert.NilError(t, p.a.LoadConnInfo("bob", p.b.ConnInfo()))
	assert.NilError(t, p.b.LoadConnInfo("alice", p.a.ConnInfo()))
	for i := range testBlocks {
		off := uint64(i * testBlock)
		blob, err := p.b.PublicData(p.bmd[i])
		assert.NilError(t, err)
		h, err := p.a.LoadRemoteMD("bob", DRAM, uint64(p.bbuf.Addr())+off, testBlock, 0, blob)
		assert.NilError(t, err)
		p.arm = append(p.arm, h)
		blob, err = p.a.PublicData(p.amd[i])
		assert.NilError(t, err)
		h, err = p.b.LoadRemoteMD("alice", DRAM, uint64(p.abuf.Addr())+off, testBlock, 0, blob)
		assert.NilError(t, err)
		p.brm = append(p.brm, h)
	}
	return p
}

func descsOf(buf *cmem.Map, mds []MD) []Desc {
	d := make([]Desc, len(mds))
	for i := range mds {
		d[i] = Desc{Addr: uint64(buf.Addr()) + uint64(i*testBlock), Len: testBlock, MD: mds[i]}
	}
	return d
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7)
	}
}

// waitXfer polls Check (as NIXL does) until the post is done and returns
// its outcome.
func waitXfer(t *testing.T, a *Agent, x Xfer) error {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if err := a.Check(x); !errors.Is(err, ErrInProgress) {
			return err
		}
		time.Sleep(100 * time.Microsecond)
	}
	t.Fatal("transfer did not finish in 30s")
	return nil
}

// waitNotifs collects notifications of a until want arrived or the timeout
// passed (for want 0, the time a stray one would take to come).
func waitNotifs(t *testing.T, a *Agent, want int, timeout time.Duration) []engine.Notification {
	t.Helper()
	var got []engine.Notification
	deadline := time.Now().Add(timeout)
	for len(got) < want && time.Now().Before(deadline) {
		got = append(got, a.Notifications()...)
		time.Sleep(time.Millisecond)
	}
	return got
}

func TestTransfers(t *testing.T) {
	p := newPair(t)
	for _, dir := range []struct {
		name       string
		src, dst   *Agent
		sbuf, dbuf *cmem.Map
		smd, rmd   []MD
	}{
		{"alice-to-bob", p.a, p.b, p.abuf, p.bbuf, p.amd, p.arm},
		{"bob-to-alice", p.b, p.a, p.bbuf, p.abuf, p.bmd, p.brm},
	} {
		t.Run(dir.name, func(t *testing.T) {
			local, remote := descsOf(dir.sbuf, dir.smd), descsOf(dir.dbuf, dir.rmd)
			x, err := dir.src.PrepXfer(Write, dir.dst.Name(), local, remote)
			assert.NilError(t, err)
			assert.Assert(t, errors.Is(dir.src.Check(x), ErrNotPosted))
			for k := range 10 {
				fill(dir.sbuf.Bytes(), byte(k))
				assert.NilError(t, dir.src.PostNotify(x, Write, local, remote, "0xBEEF"))
				assert.NilError(t, waitXfer(t, dir.src, x))
				assert.Assert(t, bytes.Equal(dir.dbuf.Bytes(), dir.sbuf.Bytes()), "data differs")
			}
			ns := waitNotifs(t, dir.dst, 10, 10*time.Second)
			assert.Equal(t, len(ns), 10)
			for _, n := range ns {
				assert.Equal(t, n, engine.Notification{Name: dir.src.Name(), Msg: "0xBEEF"})
			}
			// READ back into a cleared source, through the same handle.
			clear(dir.sbuf.Bytes())
			assert.NilError(t, dir.src.Post(x, Read, local, remote))
			assert.NilError(t, waitXfer(t, dir.src, x))
			assert.Assert(t, bytes.Equal(dir.dbuf.Bytes(), dir.sbuf.Bytes()), "data differs")
			assert.NilError(t, dir.src.Release(x))
			assert.Assert(t, errors.Is(dir.src.Release(x), ErrReleased))
			assert.Equal(t, len(waitNotifs(t, dir.dst, 1, 300*time.Millisecond)), 0)
		})
	}
	t.Run("intra-agent", func(t *testing.T) {
		self := make([]MD, 4)
		for i := range self {
			h, err := p.a.LoadLocalMD(p.amd[4+i])
			assert.NilError(t, err)
			self[i] = h
		}
		local := descsOf(p.abuf, p.amd[:4])
		remote := descsOf(p.abuf, p.amd[:4])
		for i := range remote {
			remote[i].Addr += 4 * testBlock
			remote[i].MD = self[i]
		}
		fill(p.abuf.Bytes()[:4*testBlock], 42)
		x, err := p.a.PrepXfer(Write, "alice", local, remote)
		assert.NilError(t, err)
		assert.NilError(t, p.a.PostNotify(x, Write, local, remote, "self"))
		assert.NilError(t, waitXfer(t, p.a, x))
		assert.Assert(t, bytes.Equal(p.abuf.Bytes()[4*testBlock:], p.abuf.Bytes()[:4*testBlock]), "data differs")
		assert.DeepEqual(t, waitNotifs(t, p.a, 1, 10*time.Second), []engine.Notification{{Name: "alice", Msg: "self"}})
		assert.NilError(t, p.a.Release(x))
		for _, h := range self {
			assert.NilError(t, p.a.UnloadMD(h))
		}
	})
	t.Run("release-in-flight", func(t *testing.T) {
		local, remote := descsOf(p.abuf, p.amd), descsOf(p.bbuf, p.arm)
		h, err := p.a.PrepXfer(Write, "bob", local, remote)
		assert.NilError(t, err)
		x, _ := p.a.xfers.Get(uintptr(h))
		assert.NilError(t, p.a.PostNotify(h, Write, local, remote, "never"))
		assert.NilError(t, p.a.Release(h))
		// The released request refuses posts; its handle is gone.
		assert.Assert(t, errors.Is(p.a.postXfer(x, Write, local, remote, nil), ErrReleased))
		assert.Assert(t, errors.Is(p.a.Post(h, Write, local, remote), engine.ErrInvalidArgument))
		assert.Assert(t, errors.Is(p.a.Check(h), engine.ErrInvalidArgument))
		for _, n := range waitNotifs(t, p.b, 1, 300*time.Millisecond) {
			assert.Assert(t, n.Msg != "never", "a released transfer notified")
		}
	})
	t.Run("errors", func(t *testing.T) {
		local, remote := descsOf(p.abuf, p.amd[:1]), descsOf(p.bbuf, p.arm[:1])
		_, err := p.a.PrepXfer(Write, "nobody", local, remote)
		assert.Assert(t, errors.Is(err, ErrUnknownAgent), "%v", err)
		outside := []Desc{remote[0]}
		outside[0].Addr += testBlock / 2
		_, err = p.a.PrepXfer(Write, "bob", local, outside)
		assert.Assert(t, errors.Is(err, engine.ErrAddressNotRegistered), "%v", err)
		_, err = p.a.PrepXfer(Write, "bob", local, nil)
		assert.Assert(t, errors.Is(err, engine.ErrInvalidArgument), "%v", err)
		_, err = p.a.PrepXfer(7, "bob", local, remote)
		assert.Assert(t, errors.Is(err, engine.ErrInvalidArgument), "%v", err)
		assert.Assert(t, errors.Is(p.a.LoadConnInfo("bob", "127.0.0.1:1"), ErrNotAllowed))
		assert.NilError(t, p.a.LoadConnInfo("bob", p.b.ConnInfo()))
		_, err = p.a.Register(VRAM, uint64(p.abuf.Addr()), 1, 0) // host memory: no driver, or not GPU memory
		assert.Assert(t, errors.Is(err, engine.ErrNotSupported) || errors.Is(err, engine.ErrInvalidArgument), "%v", err)
		blob, _ := p.a.PublicData(p.amd[0])
		_, err = p.a.LoadRemoteMD("bob", DRAM, uint64(p.abuf.Addr()), testBlock, 0, blob)
		assert.Assert(t, errors.Is(err, ErrMismatch), "%v", err)
		assert.Assert(t, errors.Is(p.a.Notify("nobody", "x"), ErrUnknownAgent))
		assert.Assert(t, errors.Is(p.a.Disconnect("nobody"), ErrUnknownAgent))
		assert.Assert(t, errors.Is(p.a.Deregister(p.arm[0]), engine.ErrInvalidArgument))
		assert.Assert(t, errors.Is(p.a.UnloadMD(p.amd[0]), engine.ErrInvalidArgument))
		assert.Assert(t, errors.Is(p.a.Release(0), ErrReleased))
		assert.Assert(t, errors.Is(p.a.Post(0, Write, local, remote), engine.ErrInvalidArgument))
	})
	t.Run("shared-registration", func(t *testing.T) {
		// The same range and a range inside it take references.
		base := uint64(p.abuf.Addr())
		h1, err := p.a.Register(DRAM, base, testBlock, 0)
		assert.NilError(t, err)
		h2, err := p.a.Register(DRAM, base+100, 100, 0)
		assert.NilError(t, err)
		assert.NilError(t, p.a.Deregister(h1))
		assert.NilError(t, p.a.Deregister(h2))
		assert.Assert(t, p.a.Engine().Registered(base, testBlock), "the first registration still holds it")
		assert.Assert(t, errors.Is(p.a.Deregister(h2), engine.ErrInvalidArgument))
	})
	t.Run("reconnect", func(t *testing.T) {
		assert.NilError(t, p.a.Disconnect("bob"))
		_, err := p.a.PrepXfer(Write, "bob", descsOf(p.abuf, p.amd[:1]), descsOf(p.bbuf, p.arm[:1]))
		assert.Assert(t, errors.Is(err, ErrUnknownAgent), "%v", err)
		assert.NilError(t, p.a.LoadConnInfo("bob", p.b.ConnInfo()))
		assert.NilError(t, p.a.Notify("bob", "back"))
		assert.DeepEqual(t, waitNotifs(t, p.b, 1, 10*time.Second), []engine.Notification{{Name: "alice", Msg: "back"}})
	})
}

// TestHTTPMetadata runs two agents whose engines find each other through an
// HTTP metadata server (the "metadata" option): the connection info is then
// the segment name, which defaults to the agent name.
func TestHTTPMetadata(t *testing.T) {
	// Non-P2P engines advertise MC_TCP_BIND_ADDRESS: keep the test on loopback.
	t.Setenv("MC_TCP_BIND_ADDRESS", "127.0.0.1")
	srv, err := mdhttp.NewServer(mdhttp.ServerConfig{})
	assert.NilError(t, err)
	hs := httptest.NewServer(srv)
	t.Cleanup(func() { hs.Close(); _ = srv.Close() })
	opts := map[string]string{"metadata": hs.URL + "/metadata", "transport": "tcp", "tcp_lanes": "2"}
	a := newTestAgent(t, "meta-a", opts, false)
	b := newTestAgent(t, "meta-b", opts, false)
	assert.Equal(t, a.ConnInfo(), "meta-a")
	abuf, err := cmem.MapAnon(testBlock)
	assert.NilError(t, err)
	t.Cleanup(func() { abuf.Close() })
	bbuf, err := cmem.MapAnon(testBlock)
	assert.NilError(t, err)
	t.Cleanup(func() { bbuf.Close() })
	amd, err := a.Register(DRAM, uint64(abuf.Addr()), testBlock, 0)
	assert.NilError(t, err)
	bmd, err := b.Register(DRAM, uint64(bbuf.Addr()), testBlock, 0)
	assert.NilError(t, err)
	assert.NilError(t, a.LoadConnInfo("meta-b", b.ConnInfo()))
	blob, err := b.PublicData(bmd)
	assert.NilError(t, err)
	rmd, err := a.LoadRemoteMD("meta-b", DRAM, uint64(bbuf.Addr()), testBlock, 0, blob)
	assert.NilError(t, err)
	fill(abuf.Bytes(), 9)
	local := []Desc{{Addr: uint64(abuf.Addr()), Len: testBlock, MD: amd}}
	remote := []Desc{{Addr: uint64(bbuf.Addr()), Len: testBlock, MD: rmd}}
	x, err := a.PrepXfer(Write, "meta-b", local, remote)
	assert.NilError(t, err)
	assert.NilError(t, a.PostNotify(x, Write, local, remote, "via http"))
	assert.NilError(t, waitXfer(t, a, x))
	assert.Assert(t, bytes.Equal(abuf.Bytes(), bbuf.Bytes()), "data differs")
	assert.DeepEqual(t, waitNotifs(t, b, 1, 10*time.Second), []engine.Notification{{Name: "meta-a", Msg: "via http"}})
	assert.NilError(t, a.Release(x))
}

// TestClose: Close stops the progress goroutine, ends a running post and
// closes the engine; a second Close is harmless.
func TestClose(t *testing.T) {
	p := newPair(t)
	local, remote := descsOf(p.abuf, p.amd), descsOf(p.bbuf, p.arm)
	x, err := p.a.PrepXfer(Write, "bob", local, remote)
	assert.NilError(t, err)
	assert.NilError(t, p.a.PostNotify(x, Write, local, remote, "closing"))
	assert.NilError(t, p.a.Close())
	assert.Assert(t, p.a.Engine().Closed())
	assert.NilError(t, p.a.Close())
	assert.Assert(t, errors.Is(p.a.Check(x), ErrReleased), "Close released the request")
}

// TestDoneMeansNotified: once Check reports a post with a notification
// done, the target already holds the notification, so a program may drop
// the remote agent right away (NIXL's examples invalidate it after DONE;
// the target then waits for the notification). Both progress modes.
func TestDoneMeansNotified(t *testing.T) {
	p := newPair(t)
	for _, src := range []*Agent{p.a, p.b} { // alice has a progress thread, bob not
		dst, sbuf, smd, dbuf, rmd := p.b, p.abuf, p.amd, p.bbuf, p.arm
		if src == p.b {
			dst, sbuf, smd, dbuf, rmd = p.a, p.bbuf, p.bmd, p.abuf, p.brm
		}
		local, remote := descsOf(sbuf, smd)[:2], descsOf(dbuf, rmd)[:2]
		for k := range 20 {
			x, err := src.PrepXfer(Write, dst.Name(), local, remote)
			assert.NilError(t, err)
			msg := fmt.Sprintf("post %d", k)
			assert.NilError(t, src.PostNotify(x, Write, local, remote, msg))
			assert.NilError(t, waitXfer(t, src, x))
			assert.NilError(t, src.Release(x))
			assert.NilError(t, src.Disconnect(dst.Name()))
			assert.DeepEqual(t, dst.Notifications(), []engine.Notification{{Name: src.Name(), Msg: msg}})
			// Reload, as NIXL does on the next metadata exchange.
			assert.NilError(t, src.LoadConnInfo(dst.Name(), dst.ConnInfo()))
			for i := range rmd[:2] {
				blob, err := dst.PublicData(map[*Agent][]MD{p.a: p.amd, p.b: p.bmd}[dst][i])
				assert.NilError(t, err)
				h, err := src.LoadRemoteMD(dst.Name(), DRAM, remote[i].Addr, testBlock, 0, blob)
				assert.NilError(t, err)
				remote[i].MD = h
			}
		}
	}
}

// TestNotificationBytes: every byte value arrives exactly, by Notify and
// with a post, between agents of two engines.
func TestNotificationBytes(t *testing.T) {
	p := newPair(t)
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	all := string(b)
	assert.NilError(t, p.a.Notify("bob", all))
	assert.DeepEqual(t, waitNotifs(t, p.b, 1, 10*time.Second), []engine.Notification{{Name: "alice", Msg: all}})
	local, remote := descsOf(p.abuf, p.amd)[:1], descsOf(p.bbuf, p.arm)[:1]
	x, err := p.a.PrepXfer(Write, "bob", local, remote)
	assert.NilError(t, err)
	assert.NilError(t, p.a.PostNotify(x, Write, local, remote, all))
	assert.NilError(t, waitXfer(t, p.a, x))
	assert.DeepEqual(t, p.b.Notifications(), []engine.Notification{{Name: "alice", Msg: all}})
	assert.NilError(t, p.a.Release(x))
}
