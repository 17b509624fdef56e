package efa_test

import (
	"bytes"
	"errors"
	"net"
	"strings"
	"testing"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/descriptor"
	"github.com/kvferry/kvferry/engine/transport/efa"
)

// TestPeerKilledMidBatch kills the owner (SIGKILL) while a batch of 64 MiB
// of writes is in flight: the batch fails (FAILED, not a hang) within the
// engine's deadline; the test's own bound of 60 s only catches a hang.
func TestPeerKilledMidBatch(t *testing.T) {
	skipWithoutLibfabric(t)
	o := startOwner(t, 128<<20, 0)
	l := newLocal(t, 64<<20, nil)
	seg := l.open(t, o.segment)
	var reqs []engine.Request
	for i := uint64(0); i < 64; i++ {
		reqs = append(reqs, engine.Request{Op: engine.OpWrite, Source: l.addr + uintptr(i<<20), Target: seg, TargetOffset: o.addr + i<<20, Length: 1 << 20})
	}
	assert.NilError(t, l.transfer(t, reqs[:1])) // connected
	batch, err := l.e.AllocateBatch(len(reqs))
	assert.NilError(t, err)
	defer l.e.FreeBatch(batch)
	assert.NilError(t, l.e.Submit(batch, reqs))
	o.kill()
	st, err := l.e.Wait(contextWithTimeout(t), batch)
	assert.NilError(t, err) // the batch ended before the test's bound
	// Some requests may have finished before the kill; the batch as a
	// whole fails.
	assert.Equal(t, st.State, engine.StateFailed, "batch to a killed peer: %+v", st)
	t.Logf("batch to the killed owner: %v", st.Err)
}

// TestPeerRestart restarts the owner on the same RPC port and address:
// the new process has a new endpoint address and new keys, and transfers
// reach it after the engine reopens the segment.
func TestPeerRestart(t *testing.T) {
	skipWithoutLibfabric(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	o := startOwner(t, 8<<20, port)
	l := newLocal(t, 8<<20, nil)
	seg := l.open(t, o.segment)
	pattern(l.buf[:1<<20], 3)
	write := []engine.Request{{Op: engine.OpWrite, Source: l.addr, Target: seg, TargetOffset: o.addr, Length: 1 << 20}}
	assert.NilError(t, l.transfer(t, write))
	assert.Equal(t, o.do(t, "check", 3, 0, 1<<20), "ok")
	o.kill()

	o2 := startOwner(t, 8<<20, port)
	assert.Equal(t, o2.segment, o.segment)
	// The first write may still go to the old endpoint and fail; the
	// engine then refreshes the descriptor.
	if err := l.transfer(t, write); err != nil {
		t.Logf("first write after the restart: %v", err)
		seg2, err := l.e.OpenSegmentNoCache(contextWithTimeout(t), o2.segment)
		assert.NilError(t, err)
		write[0].Target = seg2
		assert.NilError(t, l.transfer(t, write))
	}
	assert.Equal(t, o2.do(t, "check", 3, 0, 1<<20), "ok")
}

// TestStriping opens the loopback domain twice (two devices) and checks
// that a 16 MiB write is spread over both, then reads it back.
func TestStriping(t *testing.T) {
	skipWithoutLibfabric(t)
	o := startOwner(t, 32<<20, 0)
	l := newLocal(t, 16<<20, []string{"lo", "lo"})
	tr := l.e.Transport(efa.Name).(*efa.Transport)
	assert.DeepEqual(t, tr.Devices(), []string{"lo", "lo.1"})
	seg := l.open(t, o.segment)
	pattern(l.buf, 11)
	assert.NilError(t, l.transfer(t, []engine.Request{{Op: engine.OpWrite, Source: l.addr, Target: seg, TargetOffset: o.addr, Length: 16 << 20}}))
	assert.Equal(t, o.do(t, "check", 11, 0, 16<<20), "ok")
	stats := l.e.NICStats()
	assert.Equal(t, len(stats), 2)
	for _, s := range stats {
		assert.Equal(t, s.Transport, efa.Name)
		assert.Assert(t, s.SlicesCompleted > 0, "device %s carried nothing: %+v", s.Device, stats)
	}
	want := append([]byte(nil), l.buf...)
	clear(l.buf)
	assert.NilError(t, l.transfer(t, []engine.Request{{Op: engine.OpRead, Source: l.addr, Target: seg, TargetOffset: o.addr, Length: 16 << 20}}))
	assert.Assert(t, bytes.Equal(l.buf, want))
}

// TestManyPeers writes to four owners in one batch.
func TestManyPeers(t *testing.T) {
	skipWithoutLibfabric(t)
	l := newLocal(t, 4<<20, nil)
	pattern(l.buf, 21)
	var owners []*owner
	var reqs []engine.Request
	for i := 0; i < 4; i++ {
		o := startOwner(t, 4<<20, 0)
		owners = append(owners, o)
		reqs = append(reqs, engine.Request{Op: engine.OpWrite, Source: l.addr, Target: l.open(t, o.segment), TargetOffset: o.addr, Length: 4 << 20})
	}
	assert.NilError(t, l.transfer(t, reqs))
	for _, o := range owners {
		assert.Equal(t, o.do(t, "check", 21, 0, 4<<20), "ok")
	}
}

// TestDescriptor checks what the transport publishes: its record with the
// provider, one device and the region's keys, and Mooncake's EFA fields
// (protocol "efa", devices with lid 0 and a gid, one rkey per device).
func TestDescriptor(t *testing.T) {
	skipWithoutLibfabric(t)
	l := newLocal(t, 1<<20, nil)
	d := l.e.LocalDescriptor()
	pub, err := efa.ParsePublished(d.Extra[efa.Name])
	assert.NilError(t, err)
	assert.Equal(t, pub.Provider, testProvider)
	assert.Equal(t, len(pub.Devices), 1)
	r, ok := pub.Region(uint64(l.addr), 1<<20)
	assert.Assert(t, ok, "%#x not in %s", l.addr, d.Extra[efa.Name])
	assert.Equal(t, len(r.Keys), 1)
	assert.Equal(t, d.Protocol, efa.Name)
	assert.Equal(t, len(d.Devices), 1)
	assert.Equal(t, d.Devices[0].Name, "lo")
	assert.Assert(t, d.Devices[0].GID != "")
	for _, b := range d.Buffers {
		assert.Equal(t, len(b.RKey), 1)
		assert.Equal(t, b.RKey[0], r.Keys[0])
	}
	// Mooncake's decoder rules hold for it (one key per device, a gid).
	raw, err := descriptor.Marshal(d)
	assert.NilError(t, err)
	back, err := descriptor.Unmarshal(raw)
	assert.NilError(t, err)
	assert.Equal(t, back.Protocol, efa.Name)
	assert.Assert(t, strings.Contains(string(raw), `"protocol":"efa"`), "%s", raw)

	_, err = efa.ParsePublished([]byte(`{"provider":"x","devices":[]}`))
	assert.Assert(t, err != nil)
	assert.Assert(t, !errors.Is(err, engine.ErrNotSupported))
}

// TestSelf moves bytes between two regions of one engine through its own
// endpoint (the local segment, forced onto efa).
func TestSelf(t *testing.T) {
	skipWithoutLibfabric(t)
	l := newLocal(t, 2<<20, nil)
	pattern(l.buf[:1<<20], 8)
	err := l.transfer(t, []engine.Request{{Op: engine.OpWrite, Source: l.addr, Target: engine.LocalSegment, TargetOffset: uint64(l.addr) + 1<<20, Length: 1 << 20}})
	assert.NilError(t, err)
	assert.Assert(t, bytes.Equal(l.buf[:1<<20], l.buf[1<<20:]))

	// After Close: submissions fail with ErrClosed, figures still read.
	tr := l.e.Transport(efa.Name).(*efa.Transport)
	assert.NilError(t, tr.Close())
	assert.NilError(t, tr.Close())
	st := tr.NICStats()
	assert.Equal(t, len(st), 1)
	assert.Equal(t, st[0].State, "down")
	assert.Assert(t, !tr.Reaches(&engine.Peer{ID: engine.LocalSegment}))
}

// TestRestartAtOldAddress: a restarted peer whose endpoint answers at an
// address that failed under its old incarnation (on EFA a reused QPN) is
// reached at once: its new incarnation clears the failure mark and the AV
// entry, where the mark alone would fail every operation to it.
func TestRestartAtOldAddress(t *testing.T) {
	skipWithoutLibfabric(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	o := startOwner(t, 4<<20, port)
	l := newLocal(t, 4<<20, nil)
	tr := l.e.Transport(efa.Name).(*efa.Transport)
	seg := l.open(t, o.segment)
	pattern(l.buf[:1<<20], 5)
	write := []engine.Request{{Op: engine.OpWrite, Source: l.addr, Target: seg, TargetOffset: o.addr, Length: 1 << 20}}
	assert.NilError(t, l.transfer(t, write))
	o.kill()

	o2 := startOwner(t, 4<<20, port)
	seg2, err := l.e.OpenSegmentNoCache(contextWithTimeout(t), o2.segment)
	assert.NilError(t, err)
	d, err := l.e.SegmentDescriptor(seg2)
	assert.NilError(t, err)
	pub, err := efa.ParsePublished(d.Extra[efa.Name])
	assert.NilError(t, err)
	// As if the old incarnation had failed at the address the new one has.
	tr.MarkGone(pub.Devices[0].Addr)
	assert.Assert(t, tr.IsGone(pub.Devices[0].Addr))
	write[0].Target = seg2
	assert.NilError(t, l.transfer(t, write))
	assert.Equal(t, o2.do(t, "check", 5, 0, 1<<20), "ok")
	assert.Assert(t, !tr.IsGone(pub.Devices[0].Addr))

	// The same incarnation keeps its mark: operations fail at once.
	tr.MarkGone(pub.Devices[0].Addr)
	err = l.transfer(t, write)
	assert.ErrorIs(t, err, engine.ErrPeerGone)
}

// TestRetryOnAnotherDevice: the owner has two devices and one of its
// endpoints is marked failed here (as after a failed completion on it):
// the slices striped to it move to the other device pair instead of
// failing, and every byte arrives, both ways.
func TestRetryOnAnotherDevice(t *testing.T) {
	skipWithoutLibfabric(t)
	o := startOwner(t, 16<<20, 0, "EFA_TEST_DOMAINS=lo,lo")
	l := newLocal(t, 8<<20, []string{"lo", "lo"})
	tr := l.e.Transport(efa.Name).(*efa.Transport)
	seg := l.open(t, o.segment)
	d, err := l.e.SegmentDescriptor(seg)
	assert.NilError(t, err)
	pub, err := efa.ParsePublished(d.Extra[efa.Name])
	assert.NilError(t, err)
	assert.Equal(t, len(pub.Devices), 2)
	tr.MarkGone(pub.Devices[1].Addr)

	pattern(l.buf, 21)
	assert.NilError(t, l.transfer(t, []engine.Request{{Op: engine.OpWrite, Source: l.addr, Target: seg, TargetOffset: o.addr, Length: 8 << 20}}))
	assert.Equal(t, o.do(t, "check", 21, 0, 8<<20), "ok")
	assert.Equal(t, o.do(t, "fill", 22, 0, 8<<20), "ok")
	clear(l.buf)
	assert.NilError(t, l.transfer(t, []engine.Request{{Op: engine.OpRead, Source: l.addr, Target: seg, TargetOffset: o.addr, Length: 8 << 20}}))
	want := make([]byte, 8<<20)
	pattern(want, 22)
	assert.Assert(t, bytes.Equal(l.buf, want))
	var failed uint64
	for _, s := range l.e.NICStats() {
		failed += s.SlicesFailed
	}
	assert.Equal(t, failed, uint64(0), "slices failed instead of moving: %+v", l.e.NICStats())

	// With both of its endpoints marked, nothing is left to retry on.
	tr.MarkGone(pub.Devices[0].Addr)
	err = l.transfer(t, []engine.Request{{Op: engine.OpWrite, Source: l.addr, Target: seg, TargetOffset: o.addr, Length: 1 << 20}})
	assert.ErrorIs(t, err, engine.ErrPeerGone)
}
