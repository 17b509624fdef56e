package trtllm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/internal/hostenv"
)

// newTestAgent creates agent name as kvferry_trtllm_create does with the
// option local_server_name=127.0.0.1.
func newTestAgent(t *testing.T, name string) *Agent {
	t.Helper()
	p, err := ParseOptions(name, map[string]string{"local_server_name": "127.0.0.1"}, hostenv.Getenv, nil)
	assert.NilError(t, err)
	assert.Equal(t, len(p.EngineOptions), 0)
	cfg := stack.ConfigFromEnv(hostenv.Lookup)
	cfg.Engine.MetadataConn = p.MetadataConn
	cfg.Engine.LocalServerName = p.LocalServerName
	cfg.AutoDiscover = p.AutoDiscover
	e, err := stack.New(context.Background(), cfg)
	assert.NilError(t, err)
	a, err := New(Config{Name: name, Engine: e, NotifyWait: p.NotifyWait})
	if err != nil {
		_ = e.Close()
	}
	assert.NilError(t, err)
	t.Cleanup(func() { assert.Check(t, a.Close()) })
	return a
}

func newTestMap(t *testing.T, n uint64) *cmem.Map {
	t.Helper()
	m, err := cmem.MapAnon(n)
	assert.NilError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func desc(addr uintptr, n uint64) Desc { return Desc{Addr: uint64(addr), Len: n} }

// waitNotifs drains a until want messages arrived (5 s at most).
func waitNotifs(t *testing.T, a *Agent, want int) []engine.Notification {
	t.Helper()
	var got []engine.Notification
	deadline := time.Now().Add(5 * time.Second)
	for len(got) < want && time.Now().Before(deadline) {
		got = append(got, a.Notifications()...)
		if len(got) < want {
			time.Sleep(time.Millisecond)
		}
	}
	assert.Equal(t, len(got), want, "messages received")
	return got
}

func TestParseOptions(t *testing.T) {
	env := func(vars map[string]string) Env {
		return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	}
	_, err := ParseOptions("", nil, nil, nil)
	assert.ErrorIs(t, err, engine.ErrInvalidArgument)
	_, err = New(Config{Name: "x"})
	assert.ErrorIs(t, err, engine.ErrInvalidArgument)

	p, err := ParseOptions("a", map[string]string{"local_server_name": "10.0.0.1", "transport": "AUTO", "tcp_lanes": "2",
		"auto_discover": "0", "metadata": "etcd://127.0.0.1:1"}, nil, nil)
	assert.NilError(t, err)
	assert.DeepEqual(t, p, EngineParams{MetadataConn: "etcd://127.0.0.1:1", LocalServerName: "10.0.0.1",
		NotifyWait: DefaultNotifyWait, EngineOptions: map[string]string{"tcp_lanes": "2"}})

	// The advertised host and the notify wait come from the environment
	// unless the options say otherwise.
	p, err = ParseOptions("a", nil, env(map[string]string{"TLLM_MOONCAKE_IP_ADDR": " 10.1.2.3 ", "KVFERRY_TRTLLM_NOTIFY_WAIT_US": "0"}), nil)
	assert.NilError(t, err)
	assert.Equal(t, p.MetadataConn, "P2PHANDSHAKE")
	assert.Equal(t, p.LocalServerName, "10.1.2.3")
	assert.Assert(t, p.AutoDiscover)
	assert.Equal(t, p.NotifyWait, time.Duration(0))
	p, err = ParseOptions("a", map[string]string{"notify_wait_us": "250"}, env(map[string]string{"KVFERRY_TRTLLM_NOTIFY_WAIT_US": "bad"}), nil)
	assert.NilError(t, err)
	assert.Equal(t, p.NotifyWait, 250*time.Microsecond)
	p, err = ParseOptions("a", nil, env(map[string]string{"TRTLLM_MOONCAKE_INTERFACE": "lo"}), nil)
	assert.NilError(t, err)
	assert.Equal(t, p.LocalServerName, "127.0.0.1")
	p, err = ParseOptions("a", nil, env(map[string]string{"TRTLLM_MOONCAKE_INTERFACE": "no-such-if0"}), nil)
	assert.NilError(t, err)
	assert.Equal(t, p.LocalServerName, engine.FirstNonLoopbackIPv4())
	for _, bad := range []string{"-1", "1000001", "x"} {
		_, err = ParseOptions("a", map[string]string{"notify_wait_us": bad}, nil, nil)
		assert.ErrorIs(t, err, engine.ErrInvalidArgument, bad)
	}
	_, err = ParseOptions("a", nil, env(map[string]string{"KVFERRY_TRTLLM_NOTIFY_WAIT_US": "x"}), nil)
	assert.ErrorIs(t, err, engine.ErrInvalidArgument)
}

func TestRegisterCounts(t *testing.T) {
	a := newTestAgent(t, "reg")
	m := newTestMap(t, 1<<20)
	d := desc(m.Addr(), 1<<20)

	// Counted from one: one register and one deregister really unregister
	// (the stock agent's count starts at zero and never unregisters).
	assert.NilError(t, a.Register(DRAM, []Desc{d}))
	assert.Assert(t, a.e.Registered(d.Addr, d.Len))
	assert.NilError(t, a.Deregister([]Desc{d}))
	assert.Assert(t, !a.e.Registered(d.Addr, d.Len))

	// Twice registered: the first deregister keeps it.
	assert.NilError(t, a.Register(DRAM, []Desc{d}))
	assert.NilError(t, a.Register(DRAM, []Desc{desc(m.Addr(), 4096)}))
	assert.NilError(t, a.Deregister([]Desc{d}))
	assert.Assert(t, a.e.Registered(d.Addr, d.Len))
	assert.NilError(t, a.Deregister([]Desc{d}))
	assert.Assert(t, !a.e.Registered(d.Addr, d.Len))

	// Host memory handed over as kVRAM is refused (no driver here, or a
	// driver that knows it as host memory), not accepted and faulted on;
	// other memory types are refused outright.
	err := a.Register(VRAM, []Desc{d})
	assert.Assert(t, errors.Is(err, engine.ErrNotSupported) || errors.Is(err, engine.ErrInvalidArgument), "%v", err)
	assert.Assert(t, !a.e.Registered(d.Addr, d.Len))
	err = a.Register(2, []Desc{d})
	assert.ErrorIs(t, err, ErrMemoryType)

	// Unknown starts are skipped.
	assert.NilError(t, a.Deregister([]Desc{desc(m.Addr()+4096, 1)}))

	// All or nothing: a bad descriptor rolls back the good one before it.
	m2 := newTestMap(t, 1<<16)
	err = a.Register(DRAM, []Desc{desc(m2.Addr(), 1<<16), {Addr: 0, Len: 5}})
	assert.ErrorIs(t, err, engine.ErrInvalidArgument)
	assert.Assert(t, !a.e.Registered(uint64(m2.Addr()), 1<<16))
	assert.NilError(t, a.Register(DRAM, []Desc{desc(m2.Addr(), 4096)}))
	err = a.Register(DRAM, []Desc{desc(m2.Addr(), 1<<16)})
	assert.ErrorIs(t, err, engine.ErrAddressOverlapped, "a longer range at a registered start")
	assert.NilError(t, a.Deregister([]Desc{desc(m2.Addr(), 4096)}))
}

func TestNotifyBeforeLoad(t *testing.T) {
	a := newTestAgent(t, "alice")
	b := newTestAgent(t, "bob")

	// Binary messages, with NUL bytes, to an agent not loaded yet: queued.
	msgs := [][]byte{[]byte("\x00first\x00"), {0xff, 0xfe, 0}, []byte("third")}
	for _, m := range msgs {
		queued, err := a.Notify("bob", m)
		assert.NilError(t, err)
		assert.Assert(t, queued)
	}
	assert.Equal(t, len(b.Notifications()), 0)

	// Loading bob delivers them, in order, tagged with alice's name.
	assert.NilError(t, a.Load("bob", b.ConnInfo()))
	got := waitNotifs(t, b, len(msgs))
	for i, n := range got {
		assert.Equal(t, n.Name, "alice")
		assert.Assert(t, bytes.Equal([]byte(n.Msg), msgs[i]), "message %d: %q", i, n.Msg)
	}

	// Loaded: sent at once.
	queued, err := a.Notify("bob", []byte("now"))
	assert.NilError(t, err)
	assert.Assert(t, !queued)
	got = waitNotifs(t, b, 1)
	assert.Equal(t, got[0].Msg, "now")

	// Invalidated: queued again, delivered by the next load.
	a.Invalidate("bob")
	queued, err = a.Notify("bob", []byte("after invalidate"))
	assert.NilError(t, err)
	assert.Assert(t, queued)
	assert.NilError(t, a.Load("bob", b.ConnInfo()))
	got = waitNotifs(t, b, 1)
	assert.Equal(t, got[0].Msg, "after invalidate")

	// The queue is bounded and says so.
	for i := 0; i < MaxQueued; i++ {
		_, err := a.Notify("carol", []byte("x"))
		assert.NilError(t, err)
	}
	_, err = a.Notify("carol", []byte("x"))
	assert.ErrorIs(t, err, engine.ErrTooManyRequests)
	assert.ErrorIs(t, err, ErrQueueFull)
}

func TestNotifsDrainOnce(t *testing.T) {
	a := newTestAgent(t, "sender")
	b := newTestAgent(t, "receiver")
	assert.NilError(t, a.Load("receiver", b.ConnInfo()))
	const n = 200
	var (
		mu   sync.Mutex
		seen []string
		wg   sync.WaitGroup
		done = make(chan struct{})
	)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				for _, m := range b.Notifications() {
					mu.Lock()
					seen = append(seen, m.Msg)
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		_, err := a.Notify("receiver", fmt.Appendf(nil, "m%03d", i))
		assert.NilError(t, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		k := len(seen)
		mu.Unlock()
		if k >= n {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(done)
	wg.Wait()
	sort.Strings(seen)
	assert.Equal(t, len(seen), n)
	for i := range n {
		assert.Equal(t, seen[i], fmt.Sprintf("m%03d", i))
	}
}

func TestTransfer(t *testing.T) {
	a := newTestAgent(t, "ctx")
	b := newTestAgent(t, "gen")
	const size = 4 << 20
	src, dst := newTestMap(t, size), newTestMap(t, size)
	for i := range src.Bytes() {
		src.Bytes()[i] = byte(i*7 + i>>11)
	}
	assert.NilError(t, a.Register(DRAM, []Desc{desc(src.Addr(), size)}))
	assert.NilError(t, b.Register(DRAM, []Desc{desc(dst.Addr(), size)}))

	// Not loaded yet.
	_, err := a.Submit(engine.OpWrite, "gen", []Desc{desc(src.Addr(), 8)}, []Desc{desc(dst.Addr(), 8)})
	assert.ErrorIs(t, err, engine.ErrUnknownSegment)
	assert.ErrorIs(t, err, ErrNotLoaded)
	assert.NilError(t, a.Load("gen", b.ConnInfo()))
	assert.NilError(t, a.Load("gen", b.ConnInfo()), "loading again is a no-op")

	// checkRemoteDescs is real.
	assert.Assert(t, a.CheckRemote("gen", []Desc{desc(dst.Addr(), size)}))
	assert.Assert(t, !a.CheckRemote("gen", []Desc{desc(dst.Addr(), size+1)}))
	assert.Assert(t, !a.CheckRemote("nobody", []Desc{desc(dst.Addr(), 1)}))
	late := newTestMap(t, 1<<16)
	assert.Assert(t, !a.CheckRemote("gen", []Desc{desc(late.Addr(), 1<<16)}))
	assert.NilError(t, b.Register(DRAM, []Desc{desc(late.Addr(), 1<<16)}))
	assert.Assert(t, a.CheckRemote("gen", []Desc{desc(late.Addr(), 1<<16)}), "registered after load")

	// Bad requests fail at submit and leave nothing running.
	_, err = a.Submit(engine.OpWrite, "gen", []Desc{desc(src.Addr(), 8)}, nil)
	assert.ErrorIs(t, err, engine.ErrInvalidArgument)
	_, err = a.Submit(engine.OpWrite, "gen", []Desc{desc(src.Addr(), 8)}, []Desc{desc(dst.Addr(), 9)})
	assert.ErrorIs(t, err, engine.ErrInvalidArgument)
	_, err = a.Submit(7, "gen", nil, nil)
	assert.ErrorIs(t, err, engine.ErrInvalidArgument)
	_, err = a.SubmitNotify(engine.OpWrite, "gen", nil, nil, []byte("m"))
	assert.ErrorIs(t, err, engine.ErrInvalidArgument)
	_, err = a.Submit(engine.OpWrite, "gen", []Desc{desc(src.Addr(), 8)}, []Desc{desc(dst.Addr()+size, 8)})
	assert.ErrorIs(t, err, engine.ErrAddressNotRegistered)
	assert.Equal(t, a.e.Metrics().BatchesLive, 0)

	// 4096 descriptors in one transfer (the stock agent stops at 1024),
	// with a completion message.
	const nd = 4096
	ld, rd := make([]Desc, nd), make([]Desc, nd)
	chunk := uint64(size / nd)
	for i := range nd {
		ld[i] = desc(src.Addr()+uintptr(uint64(i)*chunk), chunk)
		rd[i] = desc(dst.Addr()+uintptr(uint64(nd-1-i)*chunk), chunk) // reversed
	}
	id, err := a.SubmitNotify(engine.OpWrite, "gen", ld, rd, []byte("done\x00!"))
	assert.NilError(t, err)
	assert.Equal(t, a.Wait(id, 30*time.Second), Success)
	assert.Equal(t, a.Poll(id), Success)
	assert.Equal(t, a.XferError(id), "")
	assert.NilError(t, a.Cancel(id), "cancel after success")
	assert.Equal(t, a.Wait(id, 0), Success, "a completed transfer stays a success")
	got := waitNotifs(t, b, 1)
	assert.Equal(t, got[0].Name, "ctx")
	assert.Equal(t, got[0].Msg, "done\x00!")
	for i := range nd {
		want := src.Bytes()[uint64(i)*chunk : uint64(i+1)*chunk]
		have := dst.Bytes()[uint64(nd-1-i)*chunk : uint64(nd-i)*chunk]
		if !bytes.Equal(want, have) {
			t.Fatalf("descriptor %d differs", i)
		}
	}
	a.Free(id)
	assert.Equal(t, a.Wait(id, 0), Failure, "a freed id is unknown")
	assert.ErrorIs(t, a.Cancel(id), engine.ErrUnknownBatch)
	assert.Equal(t, a.e.Metrics().BatchesLive, 0)

	// READ back.
	back := newTestMap(t, 1<<16)
	assert.NilError(t, a.Register(DRAM, []Desc{desc(back.Addr(), 1<<16)}))
	id, err = a.Submit(engine.OpRead, "gen", []Desc{desc(back.Addr(), 1<<16)}, []Desc{desc(dst.Addr(), 1<<16)})
	assert.NilError(t, err)
	assert.Equal(t, a.Wait(id, -1), Success)
	assert.Assert(t, bytes.Equal(back.Bytes(), dst.Bytes()[:1<<16]))
	a.Free(id)

	// A peer that went away: the transfer fails and says why.
	assert.NilError(t, b.Close())
	id, err = a.Submit(engine.OpWrite, "gen", []Desc{desc(src.Addr(), 1<<16)}, []Desc{desc(dst.Addr(), 1<<16)})
	if err == nil {
		assert.Equal(t, a.Wait(id, 10*time.Second), Failure)
		assert.Assert(t, a.XferError(id) != "")
		a.Free(id)
	}
	assert.Equal(t, a.e.Metrics().BatchesLive, 0)
	assert.Check(t, is.Equal(a.Wait(12345, 0), Failure), "unknown transfer")
	assert.Check(t, is.Equal(a.XferError(12345), "unknown transfer 12345"))
}

func TestMemTypeNames(t *testing.T) {
	for mt, want := range map[MemType]string{DRAM: "kDRAM", VRAM: "kVRAM", 2: "kBLK", 3: "kOBJ", 4: "kFILE", 9: "unknown"} {
		assert.Equal(t, mt.String(), want)
	}
}

// TestMessageBytes: every byte value arrives exactly, by Notify and with a
// transfer, and a transfer waited for has its message delivered already.
func TestMessageBytes(t *testing.T) {
	a := newTestAgent(t, "ctx")
	b := newTestAgent(t, "gen")
	src, dst := newTestMap(t, 1<<16), newTestMap(t, 1<<16)
	assert.NilError(t, a.Register(DRAM, []Desc{desc(src.Addr(), 1<<16)}))
	assert.NilError(t, b.Register(DRAM, []Desc{desc(dst.Addr(), 1<<16)}))
	assert.NilError(t, a.Load("gen", b.ConnInfo()))
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	_, err := a.Notify("gen", all)
	assert.NilError(t, err)
	got := waitNotifs(t, b, 1)
	assert.DeepEqual(t, []byte(got[0].Msg), all)
	id, err := a.SubmitNotify(engine.OpWrite, "gen", []Desc{desc(src.Addr(), 4096)}, []Desc{desc(dst.Addr(), 4096)}, all)
	assert.NilError(t, err)
	assert.Equal(t, a.Wait(id, 30*time.Second), Success)
	a.Free(id)
	got = b.e.Notifications() // no waiting: it is there already
	assert.Equal(t, len(got), 1)
	assert.Equal(t, got[0].Msg, encode(all))
}
