package samehost_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/internal/cmem"
)

// owner is this process as the owner of registered memory.
type owner struct {
	e     *engine.Engine
	main  *cmem.Map
	spare *cmem.Map
}

func newOwner(t *testing.T) *owner {
	t.Helper()
	e, err := stack.New(context.Background(), stack.Config{AutoDiscover: true,
		Engine: engine.Config{LocalServerName: "127.0.0.1", TransferTimeout: 5 * time.Second}})
	assert.NilError(t, err)
	t.Cleanup(func() { e.Close() })
	return &owner{e: e, main: newBuf(t, e, maxXfer+refExtra), spare: newBuf(t, e, spareSize)}
}

var sizes = []uint64{4 << 10, 64 << 10, 1 << 20, 3<<20 + 5, 16 << 20, 64 << 20}

// exercise runs the transfer matrix from an initiator child against o and
// checks the bytes on both sides; sizes are READ and WRITE each.
func (o *owner) exercise(t *testing.T, c *child, sizes []uint64) {
	t.Helper()
	base := uint64(o.main.Addr())
	for i, n := range sizes {
		off := uint64(13 * i) // unaligned on purpose
		seed := uint64(100 + i)
		// WRITE: the owner's bytes must equal the pattern.
		clear(o.main.Bytes()[off : off+n])
		assert.Equal(t, c.do("xfer w %d %d %d", base+off, n, seed), "ok", "write %d", n)
		assert.Assert(t, bytes.Equal(o.main.Bytes()[off:off+n], patternAt(seed, n)), "write %d: bytes differ", n)
		// READ: the initiator compares with the pattern.
		seed += 50
		copy(o.main.Bytes()[off:off+n], patternAt(seed, n))
		assert.Equal(t, c.do("xfer r %d %d %d", base+off, n, seed), "ok", "read %d", n)
	}
	// Many small writes in one batch (iovec batching, chunk packing).
	clear(o.main.Bytes()[:2*1500*4096])
	assert.Equal(t, c.do("wbatch %d %d %d %d", base, 1500, 4096, 7), "ok")
	want := patternAt(7, 2*1500*4096)
	for i := range 1500 {
		off := i * 2 * 4096
		assert.Assert(t, bytes.Equal(o.main.Bytes()[off:off+4096], want[off:off+4096]), "batch request %d", i)
		assert.Assert(t, bytes.Equal(o.main.Bytes()[off+4096:off+8192], make([]byte, 4096)), "batch gap %d", i)
	}
}

// refusals checks that requests outside the owner's registered memory are
// refused: a range the initiator's cached descriptor still lists after the
// owner unregistered it (refused by the owner's registration data on the
// chosen path), and a range in no buffer (refused at submit).
func (o *owner) refusals(t *testing.T, c *child) {
	t.Helper()
	spare := uint64(o.spare.Addr())
	assert.NilError(t, o.e.UnregisterMemory(o.spare.Addr()))
	defer func() { assert.NilError(t, o.e.RegisterMemory(o.spare.Addr(), spareSize, "cpu:0", true)) }()
	clear(o.spare.Bytes())
	for _, op := range []string{"w", "r"} {
		r := c.do("xfer %s %d %d %d", op, spare, 64<<10, 1)
		assert.Assert(t, strings.HasPrefix(r, "err rejected"), "%s of an unregistered buffer: %s", op, r)
	}
	assert.Assert(t, bytes.Equal(o.spare.Bytes(), make([]byte, spareSize)), "unregistered memory was written")
	end := uint64(o.main.Addr()) + o.main.Len()
	r := c.do("xfer w %d %d %d", end-4096, 8192, 1)
	assert.Assert(t, strings.HasPrefix(r, "err"), "write across the end of a buffer: %s", r)
}

func metrics(t *testing.T, c *child) map[string]uint64 {
	t.Helper()
	f := strings.Fields(c.do("metrics"))
	assert.Assert(t, len(f) == 6 && f[0] == "metrics")
	m := map[string]uint64{}
	for _, kv := range f[1:] {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = atou(v)
	}
	return m
}

// TestTwoProcesses forces every transport in turn (and auto) between this
// process (owner) and a child (initiator).
func TestTwoProcesses(t *testing.T) {
	o := newOwner(t)
	short := []uint64{4 << 10, 1 << 20, 16<<20 + 3}
	for _, tc := range []struct {
		name, env, want string
		sizes           []uint64
	}{
		{"auto", "", "cma", sizes},
		{"cma", "KVFERRY_TRANSPORT=cma", "cma", sizes},
		{"shm", "KVFERRY_TRANSPORT=shm", "shm", sizes},
		{"tcp", "KVFERRY_TRANSPORT=tcp", "tcp", sizes},
		{"mc_force_tcp", "MC_FORCE_TCP=1", "tcp", short},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := []string{ownerEnv + "=" + o.e.SegmentName()}
			if tc.env != "" {
				env = append(env, tc.env)
			}
			c := startChild(t, childOpts{role: "initiator", env: env})
			assert.Equal(t, c.ready[0], tc.want)
			o.exercise(t, c, tc.sizes)
			o.refusals(t, c)
			if tc.name == "auto" { // a forced transport carries local copies too
				before := metrics(t, c)
				clear(o.main.Bytes()[:1<<20])
				assert.Equal(t, c.do("mixed %d %d %d", o.main.Addr(), 1<<20, 5), "ok")
				assert.Assert(t, bytes.Equal(o.main.Bytes()[:1<<20], patternAt(5, 1<<20)))
				after := metrics(t, c)
				assert.Equal(t, after["local"]-before["local"], uint64(1), "%v", after)
				assert.Assert(t, after["cma"] > before["cma"], "%v", after)
			}
			m := metrics(t, c)
			m["local"] = 0
			for _, tr := range []string{"local", "cma", "shm", "tcp"} {
				if tr == tc.want {
					assert.Assert(t, m[tr] > 0, "%v", m)
				} else {
					assert.Equal(t, m[tr], uint64(0), "%s in %v", tr, m)
				}
			}
		})
	}
}

// TestFallbackToShm denies cross-memory access to the initiator, once by a
// seccomp filter and once by running it as another user: the selector
// falls back to shm, which passes the same checks.
func TestFallbackToShm(t *testing.T) {
	o := newOwner(t)
	cases := []struct {
		name string
		opts childOpts
	}{
		{"seccomp", childOpts{env: []string{denyEnv + "=1"}}},
		{"other_user", childOpts{asNobody: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.opts.asNobody && os.Geteuid() != 0 {
				t.Skip("needs root to start a child as another user")
			}
			tc.opts.role = "initiator"
			tc.opts.env = append(tc.opts.env, ownerEnv+"="+o.e.SegmentName())
			c := startChild(t, tc.opts)
			assert.Equal(t, c.ready[0], "shm")
			o.exercise(t, c, []uint64{4 << 10, 1 << 20, 16<<20 + 3, 64 << 20})
			o.refusals(t, c)
			m := metrics(t, c)
			assert.Assert(t, m["shm"] > 0 && m["cma"] == 0 && m["tcp"] == 0, "%v", m)
		})
	}
	t.Run("forced_cma_refused", func(t *testing.T) {
		c := startChild(t, childOpts{role: "initiator", env: []string{denyEnv + "=1", "KVFERRY_TRANSPORT=cma", ownerEnv + "=" + o.e.SegmentName()}})
		assert.Equal(t, c.ready[0], "none")
		r := c.do("xfer w %d %d %d", o.main.Addr(), 4096, 1)
		assert.Assert(t, strings.HasPrefix(r, "err notsupported"), r)
	})
}

// TestOwnerKilled kills the owner while this process writes 1 GiB to it:
// the batch ends FAILED within the timeout on every path (cma must not
// report writes into the memory of a dead process as done), and later
// transfers fail too, without hanging.
func TestOwnerKilled(t *testing.T) {
	for _, tr := range []string{"cma", "shm", "tcp", ""} {
		name := tr
		if name == "" {
			name = "auto"
		}
		t.Run(name, func(t *testing.T) {
			c := startChild(t, childOpts{role: "owner", bufBytes: 64 << 20})
			segName, addr := c.ready[0], atou(c.ready[1])
			e, err := stack.New(context.Background(), stack.Config{AutoDiscover: true,
				Engine: engine.Config{LocalServerName: "127.0.0.1", TransferTimeout: 5 * time.Second, ForceTransport: tr}})
			assert.NilError(t, err)
			defer e.Close()
			src := newBuf(t, e, 64<<20)
			ctx := context.Background()
			seg, err := e.OpenSegment(ctx, segName)
			assert.NilError(t, err)
			want := tr
			if want == "" {
				want = "cma"
			}
			assert.Equal(t, e.ChooseTransport(seg), want)
			req := engine.Request{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: addr, Length: 64 << 20}
			assert.NilError(t, e.Transfer(ctx, []engine.Request{req}))
			// 1 GiB in flight (16 x the same 64 MiB), then the kill.
			reqs := make([]engine.Request, 16)
			for i := range reqs {
				reqs[i] = req
			}
			id, err := e.AllocateBatch(len(reqs))
			assert.NilError(t, err)
			assert.NilError(t, e.Submit(id, reqs))
			time.Sleep(20 * time.Millisecond) // let the copies start
			killed := time.Now()
			c.kill()
			wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			bs, err := e.Wait(wctx, id)
			if err != nil {
				buf := make([]byte, 1<<20)
				t.Fatalf("batch not terminal 15 s after the owner was killed (%v):\n%s", err, buf[:runtime.Stack(buf, true)])
			}
			assert.Equal(t, bs.State, engine.StateFailed, "a batch in flight when the owner died must fail")
			t.Logf("batch %s %s after the kill: %v", bs.State, time.Since(killed).Round(time.Millisecond), bs.Err)
			assert.NilError(t, e.FreeBatch(id))
			for _, op := range []engine.OpCode{engine.OpWrite, engine.OpRead} {
				start := time.Now()
				err := e.Transfer(ctx, []engine.Request{{Op: op, Source: src.Addr(), Target: seg, TargetOffset: addr, Length: 1 << 20}})
				assert.Assert(t, err != nil)
				assert.Assert(t, time.Since(start) < 10*time.Second, "took %s", time.Since(start))
			}
		})
	}
}

// TestInitiatorKilled kills an initiator in the middle of a loop of
// writes: this process (the owner) survives, unregisters the memory
// without waiting for the dead peer, and serves the next initiator.
func TestInitiatorKilled(t *testing.T) {
	o := newOwner(t)
	for _, tr := range []string{"cma", "shm"} {
		t.Run(tr, func(t *testing.T) {
			victim := newBuf(t, o.e, 64<<20)
			c := startChild(t, childOpts{role: "initiator", env: []string{"KVFERRY_TRANSPORT=" + tr, ownerEnv + "=" + o.e.SegmentName()}})
			assert.Equal(t, c.ready[0], tr)
			_, err := fmt.Fprintf(c.in, "loop %d %d\n", victim.Addr(), 64<<20)
			assert.NilError(t, err)
			assert.Equal(t, c.read(30*time.Second), "started")
			c.kill()
			start := time.Now()
			assert.NilError(t, o.e.UnregisterMemory(victim.Addr()))
			assert.Assert(t, time.Since(start) < 3*time.Second, "unregister took %s", time.Since(start))
			c2 := startChild(t, childOpts{role: "initiator", env: []string{"KVFERRY_TRANSPORT=" + tr, ownerEnv + "=" + o.e.SegmentName()}})
			o.exercise(t, c2, []uint64{1 << 20})
		})
	}
}

// TestUnregisterWaitsForCMA unregisters a region while a cma initiator
// writes into it in a loop, through the workers (64 MiB writes) and inline
// (1 MiB writes, copied by the submitting goroutine): once
// UnregisterMemory returned, the region must not change any more (the
// epoch drain), and the initiator's next writes fail as rejected.
func TestUnregisterWaitsForCMA(t *testing.T) {
	o := newOwner(t)
	for _, tc := range []struct {
		name   string
		size   uint64
		inline bool
	}{
		{"workers", 64 << 20, false},
		{"inline", 1 << 20, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			victim := newBuf(t, o.e, 64<<20)
			c := startChild(t, childOpts{role: "initiator", env: []string{"KVFERRY_TRANSPORT=cma", ownerEnv + "=" + o.e.SegmentName()}})
			_, err := fmt.Fprintf(c.in, "loop %d %d\n", victim.Addr(), tc.size)
			assert.NilError(t, err)
			assert.Equal(t, c.read(30*time.Second), "started")
			assert.NilError(t, o.e.UnregisterMemory(victim.Addr()))
			clear(victim.Bytes())
			r := c.read(30 * time.Second)
			assert.Assert(t, strings.HasPrefix(r, "err rejected"), r)
			assert.Assert(t, bytes.Equal(victim.Bytes(), make([]byte, victim.Len())), "written after UnregisterMemory returned")
			assert.Equal(t, metrics(t, c)["inlined"] > 0, tc.inline)
		})
	}
}
