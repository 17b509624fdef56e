package tcp_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/engine/transport/tcp"
	"github.com/kvferry/kvferry/internal/cmem"
)

// largePair is two engines over TCP with lanes lanes per peer, a's src and
// b's dst (size bytes each) registered and b's segment opened on a.
func largePair(t *testing.T, lanes int, size uint64) (a *engine.Engine, seg engine.SegmentID, src, dst *cmem.Map) {
	t.Helper()
	mk := func() *engine.Engine {
		e, err := stack.New(context.Background(), stack.Config{Engine: engine.Config{LocalServerName: "127.0.0.1",
			Transports: []string{"tcp"}}, TCP: tcp.Config{Lanes: lanes}})
		assert.NilError(t, err)
		t.Cleanup(func() { e.Close() })
		return e
	}
	a, b := mk(), mk()
	var err error
	src, err = cmem.MapAnon(size)
	assert.NilError(t, err)
	dst, err = cmem.MapAnon(size)
	assert.NilError(t, err)
	t.Cleanup(func() { src.Close(); dst.Close() })
	assert.NilError(t, a.RegisterMemory(src.Addr(), size, "*", true))
	assert.NilError(t, b.RegisterMemory(dst.Addr(), size, "*", true))
	seg, err = a.OpenSegment(context.Background(), b.SegmentName())
	assert.NilError(t, err)
	return a, seg, src, dst
}

// transferAsync runs reqs through the asynchronous API (the C API's
// submit, then a wait): the submitter does not wait right away for the
// engine, so it must never write a large payload itself.
func transferAsync(t *testing.T, e *engine.Engine, reqs []engine.Request) {
	t.Helper()
	id, err := e.AllocateBatch(len(reqs))
	assert.NilError(t, err)
	assert.NilError(t, e.Submit(id, reqs))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bs, err := e.Wait(ctx, id)
	assert.NilError(t, err)
	assert.Equal(t, bs.State, engine.StateCompleted)
	assert.NilError(t, e.FreeBatch(id))
}

// A single large write or read (one store put or get of 1 MiB: two
// stripes on two lanes) moves the right bytes whether the submitter waits
// for it (Transfer) or not (Submit, Wait). A waiting submitter writes the
// last stripe itself, and READ requests (headers only on the wire) are
// written by their submitter in both cases; a submitter that does not
// wait never writes a large payload.
func TestLargeSingleTransfers(t *testing.T) {
	const size = 1 << 20
	a, seg, src, dst := largePair(t, 4, 2*size)
	tr := a.Transport("tcp").(*tcp.Transport)
	ctx := context.Background()
	pat := make([]byte, 2*size)
	rng := rand.New(rand.NewPCG(1, 2))
	for j := 0; j < len(pat); j += 8 {
		binary.LittleEndian.PutUint64(pat[j:], rng.Uint64())
	}
	inline := func() uint64 { return tr.Stats().SlicesInline }
	check := func(what string, i int) {
		t.Helper()
		want := src.Bytes()[:size]
		assert.Assert(t, bytes.Equal(cmem.Bytes(src.Addr()+size, size), want), "%s %d: read back differs", what, i)
		assert.Assert(t, bytes.Equal(dst.Bytes()[:size], want), "%s %d: written differs", what, i)
	}
	round := 0
	fill := func() {
		round++
		copy(src.Bytes()[:size], pat[round*4099:])
	}
	w := engine.Request{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: uint64(dst.Addr()), Length: size}
	r := engine.Request{Op: engine.OpRead, Source: src.Addr() + size, Target: seg, TargetOffset: uint64(dst.Addr()), Length: size}
	assert.NilError(t, a.Transfer(ctx, []engine.Request{w})) // lanes connected

	var syncWrites, syncReads uint64
	for i := range 10 {
		fill()
		n := inline()
		assert.NilError(t, a.Transfer(ctx, []engine.Request{w}))
		syncWrites += inline() - n
		n = inline()
		assert.NilError(t, a.Transfer(ctx, []engine.Request{r}))
		syncReads += inline() - n
		check("sync", i)
	}
	var asyncWrites, asyncReads uint64
	for i := range 10 {
		fill()
		n := inline()
		transferAsync(t, a, []engine.Request{w})
		asyncWrites += inline() - n
		n = inline()
		transferAsync(t, a, []engine.Request{r})
		asyncReads += inline() - n
		check("async", i)
	}
	t.Logf("slices written by their submitter in 10 transfers of 2: sync writes %d, sync reads %d, async writes %d, async reads %d",
		syncWrites, syncReads, asyncWrites, asyncReads)
	// A lane busy at that moment (its writer checking the idle
	// connection) takes the slice instead, so timing decides how many;
	// none at all would mean the path is gone.
	assert.Assert(t, syncWrites > 0)
	assert.Assert(t, syncWrites <= 10, "at most the last stripe of each write")
	assert.Assert(t, syncReads > 0)
	assert.Assert(t, asyncReads > 0)
	assert.Equal(t, asyncWrites, uint64(0))
}

// One lane carrying large writes and large reads in one batch completes:
// the answers of the reads (their payloads) are read while the writes'
// payloads are still being written, so neither side stalls on a full
// socket buffer.
func TestLargeMixedBatchOneLane(t *testing.T) {
	const n, size = 16, 1 << 20
	a, seg, src, dst := largePair(t, 1, 2*n*size)
	pat := make([]byte, 4096+1)
	for j := range pat {
		pat[j] = byte(j * 7)
	}
	for j := 0; j < 2*n*size; j += 4096 {
		copy(src.Bytes()[j:j+4096], pat[:4096])
		copy(dst.Bytes()[j:j+4096], pat[1:])
	}
	wantRead := append([]byte(nil), dst.Bytes()[n*size:]...)
	var reqs []engine.Request
	for i := range uint64(n) {
		reqs = append(reqs,
			engine.Request{Op: engine.OpWrite, Source: src.Addr() + uintptr(i*size), Target: seg, TargetOffset: uint64(dst.Addr()) + i*size, Length: size},
			engine.Request{Op: engine.OpRead, Source: src.Addr() + uintptr((n+i)*size), Target: seg, TargetOffset: uint64(dst.Addr()) + (n+i)*size, Length: size})
	}
	transferAsync(t, a, reqs)
	assert.Assert(t, bytes.Equal(dst.Bytes()[:n*size], src.Bytes()[:n*size]), "written differs")
	assert.Assert(t, bytes.Equal(src.Bytes()[n*size:], wantRead), "read differs")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	assert.NilError(t, a.Transfer(ctx, reqs))
}
