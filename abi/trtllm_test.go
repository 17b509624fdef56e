package abi

import (
	"bytes"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"
	"unsafe"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/internal/cmem"
)

func newTestTRTAgent(t *testing.T, name string) *trtAgent {
	t.Helper()
	a, err := newTRTAgent(name, map[string]string{"local_server_name": "127.0.0.1"})
	assert.NilError(t, err)
	t.Cleanup(a.close)
	return a
}

func newTestMap(t *testing.T, n uint64) *cmem.Map {
	t.Helper()
	m, err := cmem.MapAnon(n)
	assert.NilError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func desc(addr uintptr, n uint64) trtDesc { return trtDesc{Addr: uint64(addr), Len: n} }

// waitNotifs drains a until want messages arrived (5 s at most).
func waitNotifs(t *testing.T, a *trtAgent, want int) []engine.Notification {
	t.Helper()
	var got []engine.Notification
	deadline := time.Now().Add(5 * time.Second)
	for len(got) < want && time.Now().Before(deadline) {
		got = append(got, a.takeNotifs()...)
		if len(got) < want {
			time.Sleep(time.Millisecond)
		}
	}
	assert.Equal(t, len(got), want, "messages received")
	return got
}

// TestTRTLayout compares the Go mirror of kvferry_trtllm_desc_t with the C
// compiler's view and with TensorRT-LLM's MemoryDesc (24 bytes,
// specs/tensorrt-llm.md §1.3).
func TestTRTLayout(t *testing.T) {
	c := trtCLayout()
	var d trtDesc
	assert.Equal(t, unsafe.Sizeof(d), c["sizeof(kvferry_trtllm_desc_t)"])
	assert.Equal(t, unsafe.Sizeof(d), uintptr(24))
	assert.Equal(t, unsafe.Offsetof(d.Len), c["offsetof(len)"])
	assert.Equal(t, unsafe.Offsetof(d.DeviceID), c["offsetof(device_id)"])
	assert.Equal(t, c["sizeof(kvferry_trtllm_notif_t)"], uintptr(32))
	assert.Equal(t, c["offsetof(kvferry_trtllm_notif_t.msg)"], uintptr(16))
}

func TestTRTRegisterCounts(t *testing.T) {
	a := newTestTRTAgent(t, "reg")
	m := newTestMap(t, 1<<20)
	d := desc(m.Addr(), 1<<20)

	// Counted from one: one register and one deregister really unregister
	// (the stock agent's count starts at zero and never unregisters).
	assert.NilError(t, a.register(trtDRAM, []trtDesc{d}))
	assert.Assert(t, a.e.Registered(d.Addr, d.Len))
	assert.NilError(t, a.deregister([]trtDesc{d}))
	assert.Assert(t, !a.e.Registered(d.Addr, d.Len))

	// Twice registered: the first deregister keeps it.
	assert.NilError(t, a.register(trtDRAM, []trtDesc{d}))
	assert.NilError(t, a.register(trtDRAM, []trtDesc{desc(m.Addr(), 4096)}))
	assert.NilError(t, a.deregister([]trtDesc{d}))
	assert.Assert(t, a.e.Registered(d.Addr, d.Len))
	assert.NilError(t, a.deregister([]trtDesc{d}))
	assert.Assert(t, !a.e.Registered(d.Addr, d.Len))

	// GPU memory is refused (no GPU path yet), not accepted and faulted on.
	err := a.register(trtVRAM, []trtDesc{d})
	assert.ErrorIs(t, err, engine.ErrNotSupported)
	assert.Assert(t, !a.e.Registered(d.Addr, d.Len))

	// Unknown starts are skipped.
	assert.NilError(t, a.deregister([]trtDesc{desc(m.Addr()+4096, 1)}))

	// All or nothing: a bad descriptor rolls back the good one before it.
	m2 := newTestMap(t, 1<<16)
	err = a.register(trtDRAM, []trtDesc{desc(m2.Addr(), 1<<16), {Addr: 0, Len: 5}})
	assert.ErrorIs(t, err, engine.ErrInvalidArgument)
	assert.Assert(t, !a.e.Registered(uint64(m2.Addr()), 1<<16))
	assert.NilError(t, a.register(trtDRAM, []trtDesc{desc(m2.Addr(), 4096)}))
	err = a.register(trtDRAM, []trtDesc{desc(m2.Addr(), 1<<16)})
	assert.ErrorIs(t, err, engine.ErrAddressOverlapped, "a longer range at a registered start")
	assert.NilError(t, a.deregister([]trtDesc{desc(m2.Addr(), 4096)}))
}

func TestTRTNotifyBeforeLoad(t *testing.T) {
	a := newTestTRTAgent(t, "alice")
	b := newTestTRTAgent(t, "bob")

	// Binary messages, with NUL bytes, to an agent not loaded yet: queued.
	msgs := [][]byte{[]byte("\x00first\x00"), {0xff, 0xfe, 0}, []byte("third")}
	for _, m := range msgs {
		queued, err := a.notify("bob", m)
		assert.NilError(t, err)
		assert.Assert(t, queued)
	}
	assert.Equal(t, len(b.takeNotifs()), 0)

	// Loading bob delivers them, in order, tagged with alice's name.
	assert.NilError(t, a.load("bob", b.e.SegmentName()))
	got := waitNotifs(t, b, len(msgs))
	for i, n := range got {
		assert.Equal(t, n.Name, "alice")
		assert.Assert(t, bytes.Equal([]byte(n.Msg), msgs[i]), "message %d: %q", i, n.Msg)
	}

	// Loaded: sent at once.
	queued, err := a.notify("bob", []byte("now"))
	assert.NilError(t, err)
	assert.Assert(t, !queued)
	got = waitNotifs(t, b, 1)
	assert.Equal(t, got[0].Msg, "now")

	// Invalidated: queued again, delivered by the next load.
	a.invalidate("bob")
	queued, err = a.notify("bob", []byte("after invalidate"))
	assert.NilError(t, err)
	assert.Assert(t, queued)
	assert.NilError(t, a.load("bob", b.e.SegmentName()))
	got = waitNotifs(t, b, 1)
	assert.Equal(t, got[0].Msg, "after invalidate")

	// The queue is bounded and says so.
	for i := 0; i < trtMaxQueued; i++ {
		_, err := a.notify("carol", []byte("x"))
		assert.NilError(t, err)
	}
	_, err = a.notify("carol", []byte("x"))
	assert.ErrorIs(t, err, engine.ErrTooManyRequests)
}

func TestTRTNotifsDrainOnce(t *testing.T) {
	a := newTestTRTAgent(t, "sender")
	b := newTestTRTAgent(t, "receiver")
	assert.NilError(t, a.load("receiver", b.e.SegmentName()))
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
				for _, m := range b.takeNotifs() {
					mu.Lock()
					seen = append(seen, m.Msg)
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		_, err := a.notify("receiver", fmt.Appendf(nil, "m%03d", i))
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

func TestTRTTransfer(t *testing.T) {
	a := newTestTRTAgent(t, "ctx")
	b := newTestTRTAgent(t, "gen")
	const size = 4 << 20
	src, dst := newTestMap(t, size), newTestMap(t, size)
	for i := range src.Bytes() {
		src.Bytes()[i] = byte(i*7 + i>>11)
	}
	assert.NilError(t, a.register(trtDRAM, []trtDesc{desc(src.Addr(), size)}))
	assert.NilError(t, b.register(trtDRAM, []trtDesc{desc(dst.Addr(), size)}))

	// Not loaded yet.
	_, err := a.submit(int(engine.OpWrite), "gen", []trtDesc{desc(src.Addr(), 8)}, []trtDesc{desc(dst.Addr(), 8)}, nil, false)
	assert.ErrorIs(t, err, engine.ErrUnknownSegment)
	assert.NilError(t, a.load("gen", b.e.SegmentName()))
	assert.NilError(t, a.load("gen", b.e.SegmentName()), "loading again is a no-op")

	// checkRemoteDescs is real.
	assert.Assert(t, a.checkRemote("gen", []trtDesc{desc(dst.Addr(), size)}))
	assert.Assert(t, !a.checkRemote("gen", []trtDesc{desc(dst.Addr(), size+1)}))
	assert.Assert(t, !a.checkRemote("nobody", []trtDesc{desc(dst.Addr(), 1)}))
	late := newTestMap(t, 1<<16)
	assert.Assert(t, !a.checkRemote("gen", []trtDesc{desc(late.Addr(), 1<<16)}))
	assert.NilError(t, b.register(trtDRAM, []trtDesc{desc(late.Addr(), 1<<16)}))
	assert.Assert(t, a.checkRemote("gen", []trtDesc{desc(late.Addr(), 1<<16)}), "registered after load")

	// Bad requests fail at submit and leave nothing running.
	_, err = a.submit(int(engine.OpWrite), "gen", []trtDesc{desc(src.Addr(), 8)}, nil, nil, false)
	assert.ErrorIs(t, err, engine.ErrInvalidArgument)
	_, err = a.submit(int(engine.OpWrite), "gen", []trtDesc{desc(src.Addr(), 8)}, []trtDesc{desc(dst.Addr(), 9)}, nil, false)
	assert.ErrorIs(t, err, engine.ErrInvalidArgument)
	_, err = a.submit(7, "gen", nil, nil, nil, false)
	assert.ErrorIs(t, err, engine.ErrInvalidArgument)
	_, err = a.submit(int(engine.OpWrite), "gen", []trtDesc{desc(src.Addr(), 8)}, []trtDesc{desc(dst.Addr()+size, 8)}, nil, false)
	assert.ErrorIs(t, err, engine.ErrAddressNotRegistered)
	assert.Equal(t, a.e.Metrics().BatchesLive, 0)

	// 4096 descriptors in one transfer (the stock agent stops at 1024),
	// with a completion message.
	const nd = 4096
	ld, rd := make([]trtDesc, nd), make([]trtDesc, nd)
	chunk := uint64(size / nd)
	for i := range nd {
		ld[i] = desc(src.Addr()+uintptr(uint64(i)*chunk), chunk)
		rd[i] = desc(dst.Addr()+uintptr(uint64(nd-1-i)*chunk), chunk) // reversed
	}
	id, err := a.submit(int(engine.OpWrite), "gen", ld, rd, []byte("done\x00!"), true)
	assert.NilError(t, err)
	assert.Equal(t, a.wait(id, 30000), trtSuccess)
	assert.Equal(t, a.poll(id), trtSuccess)
	assert.Equal(t, a.xferError(id), "")
	assert.NilError(t, a.cancelXfer(id), "cancel after success")
	assert.Equal(t, a.wait(id, 0), trtSuccess, "a completed transfer stays a success")
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
	a.freeXfer(id)
	assert.Equal(t, a.wait(id, 0), trtFailure, "a freed id is unknown")
	assert.Equal(t, a.e.Metrics().BatchesLive, 0)

	// READ back.
	back := newTestMap(t, 1<<16)
	assert.NilError(t, a.register(trtDRAM, []trtDesc{desc(back.Addr(), 1<<16)}))
	id, err = a.submit(int(engine.OpRead), "gen", []trtDesc{desc(back.Addr(), 1<<16)}, []trtDesc{desc(dst.Addr(), 1<<16)}, nil, false)
	assert.NilError(t, err)
	assert.Equal(t, a.wait(id, -1), trtSuccess)
	assert.Assert(t, bytes.Equal(back.Bytes(), dst.Bytes()[:1<<16]))
	a.freeXfer(id)

	// A peer that went away: the transfer fails and says why.
	b.close()
	id, err = a.submit(int(engine.OpWrite), "gen", []trtDesc{desc(src.Addr(), 1<<16)}, []trtDesc{desc(dst.Addr(), 1<<16)}, nil, false)
	if err == nil {
		assert.Equal(t, a.wait(id, 10000), trtFailure)
		assert.Assert(t, a.xferError(id) != "")
		a.freeXfer(id)
	}
	assert.Equal(t, a.e.Metrics().BatchesLive, 0)
	assert.Check(t, is.Equal(a.wait(12345, 0), trtFailure), "unknown transfer")
}
