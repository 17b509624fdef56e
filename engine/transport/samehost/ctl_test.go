package samehost

import (
	"os"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/internal/cmem"
)

func newCtl(t *testing.T) ctlView {
	t.Helper()
	m, fd, err := newMemfd("test-ctl", ctlBytes, true)
	assert.NilError(t, err)
	t.Cleanup(func() { m.Close() })
	// A second, read-only mapping, as an initiator has it.
	ro, err := mapFd(fd, ctlBytes, false)
	assert.NilError(t, err)
	t.Cleanup(func() { ro.Close() })
	_, err = mapFd(fd, ctlBytes, true)
	assert.Assert(t, err != nil, "the control page must refuse writable mappings (F_SEAL_FUTURE_WRITE)")
	closeFds([]int{fd})
	w := ctlView{m}
	w.writeTable(nil, nil)
	return w
}

func TestTable(t *testing.T) {
	c := newCtl(t)
	rows := []entry{{0x1000, 0x1000}, {0x10000, 0x100}, {0x20000, 0x8000}}
	c.writeTable(nil, rows)
	cases := []struct {
		addr, n uint64
		want    lookupResult
	}{
		{0x1000, 0x1000, lookupOK},
		{0x1800, 0x800, lookupOK},
		{0x1800, 0x801, lookupMissing}, // past the end
		{0xfff, 2, lookupMissing},      // before the start
		{0x10000, 0x100, lookupOK},
		{0x10080, 0x100, lookupMissing},
		{0x27fff, 1, lookupOK},
		{0x28000, 1, lookupMissing},
		{0x1000, 0, lookupMissing},
		{^uint64(0) - 1, 4, lookupMissing}, // wraps
		{0, 1, lookupMissing},
	}
	rs := make([]rng, len(cases))
	out := make([]lookupResult, len(cases))
	for i, tc := range cases {
		rs[i] = rng{tc.addr, tc.n}
	}
	c.validate(rs, out, time.Millisecond, nil)
	for i, tc := range cases {
		assert.Equal(t, out[i], tc.want, "case %d %#x+%d", i, tc.addr, tc.n)
	}
	// Removing the middle row: later rows move, the removed one is gone.
	next := []entry{rows[0], rows[2]}
	c.writeTable(rows, next)
	c.validate([]rng{{0x10000, 1}, {0x20000, 0x8000}}, out[:2], time.Millisecond, nil)
	assert.DeepEqual(t, out[:2], []lookupResult{lookupMissing, lookupOK})
	// A locked table (odd sequence) makes readers give up after their
	// wait, not spin forever; sooner when its owner is gone.
	c.word(ctlOffSeq).Add(1)
	c.validate([]rng{{0x1000, 1}}, out[:1], time.Millisecond, nil)
	assert.Equal(t, out[0], lookupBusy)
	began := time.Now()
	c.validate([]rng{{0x1000, 1}}, out[:1], time.Minute, func() bool { return true })
	assert.Equal(t, out[0], lookupBusy)
	assert.Assert(t, time.Since(began) < 30*time.Second, "a gone owner's locked table held the reader %s", time.Since(began))
	// A table unlocked within the wait (an owner descheduled while
	// writing) is read.
	// The unlocking goroutine is waited for: the race detector does not see
	// the ordering through the mapped word, and the cleanup unmaps it.
	unlocked := make(chan struct{})
	time.AfterFunc(20*time.Millisecond, func() { c.word(ctlOffSeq).Add(1); close(unlocked) })
	c.validate([]rng{{0x1000, 1}}, out[:1], time.Minute, func() bool { return false })
	<-unlocked
	assert.Equal(t, out[0], lookupOK)
	// Overflow.
	big := make([]entry, ctlEntries+1)
	for i := range big {
		big[i] = entry{uint64(i+1) << 16, 4096}
	}
	c.writeTable(next, big)
	c.validate([]rng{{1 << 16, 1}}, out[:1], time.Millisecond, nil)
	assert.Equal(t, out[0], lookupOverflow)
}

// TestCopyNoAllocs pins the cma hot path (validation and the copy calls)
// at zero allocations. It copies within this process.
func TestCopyNoAllocs(t *testing.T) {
	c := newCtl(t)
	src, err := cmem.MapAnon(1 << 20)
	assert.NilError(t, err)
	defer src.Close()
	dst, err := cmem.MapAnon(1 << 20)
	assert.NilError(t, err)
	defer dst.Close()
	c.writeTable(nil, []entry{{uint64(dst.Addr()), dst.Len()}})
	slices := make([]*engine.Slice, 64)
	for i := range slices {
		off := uint64(i) * 16384
		slices[i] = &engine.Slice{Op: engine.OpWrite, Local: src.Addr() + uintptr(off), Remote: uint64(dst.Addr()) + off, Length: 16384}
	}
	s := &session{pid: os.Getpid(), pidfd: openPidfd(os.Getpid()), ctl: c, dead: make(chan struct{})}
	defer s.pidfd.close()
	w := &cmaWorker{t: &CMA{callBytes: callBytes}}
	run := func() {
		w.rs, w.res, w.errs = w.rs[:0], w.res[:0], w.errs[:0]
		for _, sl := range slices {
			w.rs = append(w.rs, rng{sl.Remote, sl.Length})
			w.res = append(w.res, lookupOK)
			w.errs = append(w.errs, nil)
		}
		c.validate(w.rs, w.res, time.Millisecond, nil)
		w.copyOp(s, slices, engine.OpWrite)
	}
	run()
	for i := range slices {
		assert.NilError(t, w.errs[i])
		assert.Equal(t, w.res[i], lookupOK)
	}
	src.Bytes()[12345] = 7
	run()
	assert.Equal(t, dst.Bytes()[12345], byte(7))
	assert.Equal(t, testing.AllocsPerRun(20, run), 0.0)
}
