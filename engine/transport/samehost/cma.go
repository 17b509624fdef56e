package samehost

import (
	"errors"
	"fmt"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/transport/samehost/shwire"
	"github.com/kvferry/kvferry/internal/cmem"
)

// CMA copies to and from another process of this host with
// process_vm_readv/writev: one copy, done by the kernel in the initiator's
// thread. Ranges are validated against the owner's registration mirror
// under the epoch protocol described in the package comment.
//
// A small submission is copied by the goroutine that submits it (see
// Submit); of a larger one the workers copy most and the submitting
// goroutine a share.
type CMA struct {
	base
	q chan job
	// inline holds the free inline copiers; each owns epoch slot
	// Workers+k of every session. Nil when the inline path is off.
	inline chan *cmaWorker
	// inlined counts the submissions copied inline.
	inlined atomic.Uint64
	// shared counts the submissions split between the workers and the
	// submitting goroutine.
	shared atomic.Uint64
	// ringed counts the notifications written into owners' rings.
	ringed atomic.Uint64

	callBytes uint64 // about what one process_vm call moves (callBytes; tests set less)
	// beforeCall, when set (tests only, before any Submit), runs before
	// each process_vm call with the slice of its first range.
	beforeCall func(first *engine.Slice)
	// refuseCalls (tests only) makes every process_vm call fail with
	// EPERM, as when the kernel's policy tightens mid-session.
	refuseCalls atomic.Bool
}

var _ engine.Transport = (*CMA)(nil)

// NewCMA starts the cma transport of e.
func NewCMA(e *engine.Engine, cfg Config) *CMA {
	t := &CMA{callBytes: callBytes}
	t.init(e, NameCMA, shwire.KindCMA, cfg)
	t.q = make(chan job, 1024)
	if n := t.cfg.inlineSlots(); n > 0 {
		t.inline = make(chan *cmaWorker, n)
		for k := range n {
			t.inline <- &cmaWorker{t: t, id: t.cfg.Workers + k}
		}
	}
	for i := range t.cfg.Workers {
		t.work.Add(1)
		go t.runWorker(i)
	}
	return t
}

// Reaches reports whether p is another process of this host that offers
// cma, and the kernel lets us access it (checked once per owner by a probe
// read; a refusal is logged and leaves the peer to shm).
func (t *CMA) Reaches(p *engine.Peer) bool {
	s := t.sessionFor(p, true)
	return s != nil && s.ctl.word(ctlOffOverflow).Load() == 0
}

// Inlined returns the number of submissions copied by the goroutine that
// submitted them.
func (t *CMA) Inlined() uint64 { return t.inlined.Load() }

// RingNotified returns how many notifications went into owners' rings
// (notify.go) instead of the notify RPC.
func (t *CMA) RingNotified() uint64 { return t.ringed.Load() }

// Shared returns how many submissions the submitting goroutine copied a
// share of, beside the workers.
func (t *CMA) Shared() uint64 { return t.shared.Load() }

// GathersPieces reports that cma moves a slice of several local pieces
// in one call (engine.Gatherer): they are the call's local iovecs.
func (t *CMA) GathersPieces() bool { return true }

// SliceSize returns the cma slice size.
func (t *CMA) SliceSize() uint64 { return t.cfg.CMASliceSize }

// Submit copies a small submission itself and queues any other for the
// workers. A submission is small when its slices number at most 1024 and
// hold at most CMAInlineBytes together; it is copied here when one of the
// CMAInlineSlots inline slots is free, and queued otherwise. The work Submit
// then does is bounded by that size: a read of the owner's registration
// mirror (a table its writer keeps locked for about a millisecond sends
// the submission to the workers, which wait for the update to end, bounded
// by the transfer timeout), one process_vm_readv or process_vm_writev per
// direction (a kernel copy of at most CMAInlineBytes, page faults
// included), and the slices' completions. It never waits for the owner
// process or a socket.
//
// A larger submission of several slices is shared: the workers get all but
// the last slices, which the submitting goroutine copies itself when an
// inline slot is free: a 1/(Workers+1) share of the slices, at most
// CMAInlineBytes of them, and always at least one slice. An initiator that
// polls for completion (NIXL's checkXfer loop) would otherwise keep its
// CPU busy doing nothing while the workers copy; now it copies. Its share
// is bounded as above, so Submit stays bounded: by CMAInlineBytes or one
// slice (CMASliceSize), whichever is larger.
func (t *CMA) Submit(p *engine.Peer, slices []*engine.Slice) {
	if w := t.inlineCopier(slices); w != nil {
		t.copyInline(w, p, slices, &t.inlined)
		return
	}
	if w, k := t.shareCopier(slices); w != nil {
		defer func() { t.inline <- w }()
		t.mu.RLock()
		defer t.mu.RUnlock()
		if t.stopped {
			failAll(slices, engine.ErrClosed)
			return
		}
		s := t.sessionFor(p, false)
		if s == nil {
			failAll(slices, fmt.Errorf("%s: no session to segment %q: %w", t.name, p.Name, ErrPeerGone))
			return
		}
		t.queue(s, slices[:k], t.q)
		t.copyWith(w, s, slices[k:], &t.shared)
		return
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.stopped {
		failAll(slices, engine.ErrClosed)
		return
	}
	t.submit(p, slices, t.q)
}

// shareCopier returns a free inline copier and the index from which the
// submitting goroutine copies slices itself, or nil when slices are too
// few to share or no inline copier is free.
func (t *CMA) shareCopier(slices []*engine.Slice) (*cmaWorker, int) {
	if t.inline == nil || len(slices) < 2 {
		return nil, 0
	}
	k := len(slices) - 1 // the last slice at least
	budget := uint64(t.cfg.CMAInlineBytes)
	bytes := slices[k].Length
	for k > 1 && len(slices)-k < len(slices)/(t.cfg.Workers+1) && bytes+slices[k-1].Length <= budget {
		k--
		bytes += slices[k].Length
	}
	select {
	case w := <-t.inline:
		return w, k
	default:
		return nil, 0
	}
}

// Close stops the workers (queued slices fail), ends the sessions and
// releases the engine's node. A second Close is harmless.
func (t *CMA) Close() error {
	if t.closed.Swap(true) {
		return nil
	}
	t.closeQueue(t.q)
	t.closeBase()
	return nil
}

// inlineCopier returns a free inline copier when slices are small enough to
// be copied by the submitting goroutine, or nil.
func (t *CMA) inlineCopier(slices []*engine.Slice) *cmaWorker {
	if t.inline == nil || len(slices) > inlineMaxSlices {
		return nil
	}
	var n uint64
	for _, sl := range slices {
		n += sl.Length
	}
	if n > uint64(t.cfg.CMAInlineBytes) {
		return nil
	}
	select {
	case w := <-t.inline:
		return w
	default:
		return nil
	}
}

// copyInline copies slices in the calling goroutine with the inline copier
// w, which it then frees, and counts the copy in count. It holds the submit
// lock for reading, so that Close waits for it as for the workers.
func (t *CMA) copyInline(w *cmaWorker, p *engine.Peer, slices []*engine.Slice, count *atomic.Uint64) {
	defer func() { t.inline <- w }()
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.stopped {
		failAll(slices, engine.ErrClosed)
		return
	}
	s := t.sessionFor(p, false)
	if s == nil {
		failAll(slices, fmt.Errorf("%s: no session to segment %q: %w", t.name, p.Name, ErrPeerGone))
		return
	}
	t.copyWith(w, s, slices, count)
}

// copyWith copies slices of session s with the inline copier w and counts
// the copy in count; the caller holds the submit lock for reading.
func (t *CMA) copyWith(w *cmaWorker, s *session, slices []*engine.Slice, count *atomic.Uint64) {
	if !s.acquire() {
		failAll(slices, fmt.Errorf("%s: no session to segment %q: %w", t.name, s.peer, ErrPeerGone))
		return
	}
	count.Add(1)
	w.run(job{s: s, slices: slices})
	s.release()
}

// cmaWorker is one copy goroutine's scratch, allocated once. The workers'
// ids are 0..Workers-1 and the inline copiers' follow; an id is the index
// of the epoch slot its owner uses in every session.
type cmaWorker struct {
	t      *CMA
	id     int
	rs     []rng
	res    []lookupResult
	errs   []error
	liov   []unix.Iovec
	riov   []unix.RemoteIovec // one call's remote ranges, adjacent ones merged
	owners []int              // slice index of each local iovec
	lbase  []uintptr          // local address of each local iovec
	rbase  []uintptr          // remote address of each local iovec
	viaMap []bool             // slices copied through a mapping of the owner's memory
	ops    []cmem.Op          // the memcpys of those
}

// runWorker copies queued jobs; owned by the transport, stopped by Close.
func (t *CMA) runWorker(id int) {
	defer t.work.Done()
	w := &cmaWorker{t: t, id: id}
	for {
		select {
		case <-t.ctx.Done():
			return
		case j := <-t.q:
			w.run(j)
			j.s.release()
		}
	}
}

// run validates and copies one job. The worker's slot holds the epoch it
// validated in until every copy is done, so that an owner that removes a
// region waits for it.
func (w *cmaWorker) run(j job) {
	s, slices := j.s, j.slices
	if s.isDead() {
		failAll(slices, s.deathErr())
		return
	}
	slot := slotWord(s.slots, w.id)
	ep, err := s.enterEpoch(slot)
	if err != nil {
		failAll(slices, err)
		return
	}
	if s.pidfd.exited() {
		slot.Store(0)
		s.kill(fmt.Errorf("owner pid %d exited: %w", s.pid, ErrPeerGone))
		failAll(slices, s.deathErr())
		return
	}
	w.rs, w.res, w.errs = w.rs[:0], w.res[:0], w.errs[:0]
	for _, sl := range slices {
		w.rs = append(w.rs, rng{addr: sl.Remote, length: sl.Length})
		w.res = append(w.res, lookupOK)
		w.errs = append(w.errs, nil)
	}
	if w.id >= w.t.cfg.Workers { // an inline copier, in Submit: bounded
		s.ctl.validate(w.rs, w.res, inlineTableWait, nil)
		if len(slices) > 0 && w.res[0] == lookupBusy {
			// The owner is in the middle of an update of its table (its
			// thread descheduled on a loaded host, say): a worker waits
			// for it. The caller holds a reference and the submit lock.
			slot.Store(0)
			w.t.queue(s, slices, w.t.q)
			return
		}
	} else {
		s.ctl.validate(w.rs, w.res, w.t.cfg.Timeout, s.ownerGone)
	}
	for i, sl := range slices {
		switch {
		case sl.Canceled():
			w.errs[i] = engine.ErrCanceled
		case w.res[i] == lookupMissing:
			w.errs[i] = &engine.TransferError{Op: sl.Op, Peer: s.peer, Transport: NameCMA, Addr: sl.Remote, Length: sl.Length,
				Err: fmt.Errorf("outside the owner's registered memory: %w", engine.ErrRejected)}
		case w.res[i] == lookupOverflow:
			w.errs[i] = fmt.Errorf("segment %q registered more regions than cma mirrors (%d): %w", s.peer, ctlEntries, engine.ErrNotSupported)
		case w.res[i] == lookupBusy && s.ownerGone():
			s.kill(fmt.Errorf("owner pid %d exited: %w", s.pid, ErrPeerGone))
			w.errs[i] = s.deathErr()
		case w.res[i] == lookupBusy:
			w.errs[i] = fmt.Errorf("segment %q: registration table stayed locked for %s: %w", s.peer, w.t.cfg.Timeout, ErrPeerGone)
		}
	}
	w.viaMap = w.viaMap[:0]
	if s.maps != nil {
		w.copyMapped(s, slices, ep)
	}
	w.copyOp(s, slices, engine.OpWrite)
	w.copyOp(s, slices, engine.OpRead)
	slot.Store(0)
	for i, sl := range slices {
		sl.Complete(w.errs[i])
	}
}

// enterEpoch stores the owner's current registration epoch in slot (and
// checks that it did not move meanwhile), so that an owner removing a
// region waits for the work that follows; an owner that closed is an error.
func (s *session) enterEpoch(slot *atomic.Uint64) (uint64, error) {
	for {
		ep := s.ctl.epoch()
		if ep == epochClosed {
			slot.Store(0)
			return 0, fmt.Errorf("segment %q: owner closed: %w", s.peer, ErrPeerGone)
		}
		slot.Store(ep)
		if s.ctl.epoch() == ep {
			return ep, nil
		}
	}
}

// copyOp copies every still-good slice of direction op, up to iovMax
// ranges and about callBytes per system call, resuming after partial
// transfers. Before each call it drops the slices whose batch was canceled
// (ErrCanceled): a canceled batch waits for at most the call in progress. Remote ranges that follow each other (the pieces of one
// object gathered from several local buffers) go to the kernel as one
// remote iovec: it pins the owner's pages once per remote iovec, which
// costs about as much as copying a few pages. After every call it checks
// that the owner is still alive: a process that died keeps its memory until
// our call returns, so without the check a write into a killed owner would
// be reported done.
func (w *cmaWorker) copyOp(s *session, slices []*engine.Slice, op engine.OpCode) {
	n := 0 // local iovecs at most
	for _, sl := range slices {
		n += max(len(sl.Pieces), 1)
	}
	w.liov, w.owners, w.lbase, w.rbase = reuse(w.liov, n), reuse(w.owners, n), reuse(w.lbase, n), reuse(w.rbase, n)
	for i, sl := range slices {
		if sl.Op != op || w.errs[i] != nil || (i < len(w.viaMap) && w.viaMap[i]) {
			continue
		}
		if sl.Pieces == nil {
			w.addIovec(i, sl.Local, sl.Length, uintptr(sl.Remote))
			continue
		}
		at := uintptr(sl.Remote)
		for _, p := range sl.Pieces {
			if p.Length > 0 {
				w.addIovec(i, p.Addr, p.Length, at)
				at += uintptr(p.Length)
			}
		}
	}
	defer clear(w.liov)
	for i := 0; i < len(w.liov); {
		if !w.live(slices, i) {
			i++
			continue
		}
		j, bytes := i, uint64(0)
		w.riov = w.riov[:0]
		for j < len(w.liov) && j-i < iovMax && (j == i || bytes < w.t.callBytes) && w.live(slices, j) {
			l := w.liov[j].Len
			if r := len(w.riov) - 1; r >= 0 && w.riov[r].Base+uintptr(w.riov[r].Len) == w.rbase[j] {
				w.riov[r].Len += int(l)
			} else {
				w.riov = append(w.riov, unix.RemoteIovec{Base: w.rbase[j], Len: int(l)})
			}
			bytes += l
			j++
		}
		var n int
		var err error
		if w.t.beforeCall != nil {
			w.t.beforeCall(slices[w.owners[i]])
		}
		switch {
		case w.t.refuseCalls.Load():
			err = unix.EPERM
		case op == engine.OpWrite:
			n, err = unix.ProcessVMWritev(s.pid, w.liov[i:j], w.riov, 0)
		default:
			n, err = unix.ProcessVMReadv(s.pid, w.liov[i:j], w.riov, 0)
		}
		if err == nil && n == 0 {
			err = unix.EFAULT // no progress
		}
		if err == nil && (s.pidfd.exited() || s.isDead()) {
			s.kill(fmt.Errorf("owner pid %d exited: %w", s.pid, ErrPeerGone))
			err = unix.ESRCH
		}
		if err != nil {
			err = w.callErr(s, op, err)
			for k := i; k < len(w.liov); k++ {
				w.errs[w.owners[k]] = err
			}
			return
		}
		k := i
		for k < j && uint64(n) >= w.liov[k].Len {
			n -= int(w.liov[k].Len)
			k++
		}
		if k < j && n > 0 { // partial: resume inside iovec k
			w.lbase[k] += uintptr(n)
			w.liov[k].Base = (*byte)(cmem.Pointer(w.lbase[k]))
			w.liov[k].SetLen(int(w.liov[k].Len) - n)
			w.rbase[k] += uintptr(n)
		}
		i = k
	}
}

// live reports whether the slice of local iovec k is still to be copied:
// not failed, and its batch not canceled (which fails it now).
func (w *cmaWorker) live(slices []*engine.Slice, k int) bool {
	o := w.owners[k]
	if w.errs[o] == nil && slices[o].Canceled() {
		w.errs[o] = engine.ErrCanceled
	}
	return w.errs[o] == nil
}

// reuse returns s emptied, with room for n elements.
func reuse[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, 0, n)
	}
	return s[:0]
}

// addIovec adds n bytes of local memory at local, moved to or from the
// remote address remote, for slice i.
func (w *cmaWorker) addIovec(i int, local uintptr, n uint64, remote uintptr) {
	iv := unix.Iovec{Base: (*byte)(cmem.Pointer(local))}
	iv.SetLen(int(n))
	w.liov = append(w.liov, iv)
	w.owners = append(w.owners, i)
	w.lbase = append(w.lbase, local)
	w.rbase = append(w.rbase, remote)
}

// callErr turns a failed process_vm_* call into the slices' error.
func (w *cmaWorker) callErr(s *session, op engine.OpCode, err error) error {
	switch {
	case errors.Is(err, unix.ESRCH):
		s.kill(fmt.Errorf("owner pid %d exited: %w", s.pid, ErrPeerGone))
		return s.deathErr()
	case kernelRefused(err):
		w.t.log.Warn("cma refused by the kernel during a copy", "peer", s.peer, "err", err, "reason", refusalReason(err))
		return fmt.Errorf("cma %s to segment %q: %w: %w", op, s.peer, ErrRefused, err)
	}
	return fmt.Errorf("cma %s to segment %q (pid %d): %w", op, s.peer, s.pid, err)
}
