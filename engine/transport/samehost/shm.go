package samehost

import (
	"fmt"
	"time"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/transport/samehost/shwire"
	"github.com/kvferry/kvferry/internal/cmem"
)

// Shm copies through staging chunks of shared memory (a memfd the owner
// creates per session and passes over the socket): for a write the
// initiator copies into a chunk and the owner copies from it into its
// registered memory; for a read the other way round. Both copies are C
// memcpy. Small pieces share a chunk; a worker keeps every chunk of its
// session busy, so the two copies overlap. The owner checks and pins every
// piece against its own registry, as the TCP server does.
type Shm struct {
	base
	q chan job
}

var _ engine.Transport = (*Shm)(nil)

// NewShm starts the shm transport of e.
func NewShm(e *engine.Engine, cfg Config) *Shm {
	t := &Shm{}
	t.init(e, NameShm, shwire.KindShm, cfg)
	t.q = make(chan job, 1024)
	t.replies = make([]chan chunkReply, t.cfg.Workers)
	for i := range t.replies {
		t.replies[i] = make(chan chunkReply, maxChunks)
	}
	for i := range t.cfg.Workers {
		t.work.Add(1)
		go t.runWorker(i)
	}
	return t
}

// Reaches reports whether p is another process of this host that offers
// shm and accepted a session.
func (t *Shm) Reaches(p *engine.Peer) bool { return t.sessionFor(p, true) != nil }

// SliceSize returns the staging chunk size.
func (t *Shm) SliceSize() uint64 { return t.cfg.ShmChunkBytes }

// Submit queues the slices for the workers.
func (t *Shm) Submit(p *engine.Peer, slices []*engine.Slice) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.stopped {
		failAll(slices, engine.ErrClosed)
		return
	}
	t.submit(p, slices, t.q)
}

// Close stops the workers (queued slices fail), ends the sessions and
// releases the engine's node. A second Close is harmless.
func (t *Shm) Close() error {
	if t.closed.Swap(true) {
		return nil
	}
	t.closeQueue(t.q)
	t.closeBase()
	return nil
}

// piece is the part of a slice that travels in one chunk.
type piece struct {
	slice  int32
	op     engine.OpCode
	dev    int32 // device of local device memory, -1 for host memory
	local  uintptr
	offset uint64 // in the chunk
	addr   uint64
	length uint64
}

// shmWorker is one copy goroutine with its scratch, allocated once.
type shmWorker struct {
	t        *Shm
	id       int
	replies  chan chunkReply
	timer    *time.Timer
	pieces   [maxChunks][]piece // by chunk: the pieces in flight
	seqs     [maxChunks]uint64
	left     []uint64 // per slice: bytes not yet accounted for
	errs     []error  // per slice: the first error
	inflight int
	msg      []byte
	ops      []cmem.Op
	gpu      devOps // copies to and from local device memory
}

// runWorker copies queued jobs; owned by the transport, stopped by Close.
func (t *Shm) runWorker(id int) {
	defer t.work.Done()
	w := &shmWorker{t: t, id: id, replies: t.replies[id], timer: time.NewTimer(time.Hour), msg: make([]byte, shwire.MaxReqSize)}
	w.timer.Stop()
	for i := range w.pieces {
		w.pieces[i] = make([]piece, 0, 16)
	}
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

// run moves one job through the session's chunks.
func (w *shmWorker) run(j job) {
	s, slices := j.s, j.slices
	for { // forget responses of an earlier, failed session
		select {
		case <-w.replies:
			continue
		default:
		}
		break
	}
	w.left, w.errs = w.left[:0], w.errs[:0]
	for _, sl := range slices {
		w.left = append(w.left, sl.Length)
		w.errs = append(w.errs, nil)
	}
	w.inflight = 0
	if err := w.send(s, slices); err != nil {
		w.abort(s, slices, err)
		return
	}
	for w.inflight > 0 {
		if err := w.wait(s, slices, false); err != nil {
			w.abort(s, slices, err)
			return
		}
	}
}

// send cuts the slices into pieces, fills chunks and sends one request per
// chunk, taking free chunks as responses return them.
func (w *shmWorker) send(s *session, slices []*engine.Slice) error {
	cur, used := -1, uint64(0)
	for i, sl := range slices {
		if sl.Canceled() {
			w.account(slices, i, sl.Length, engine.ErrCanceled)
			continue
		}
		for off := uint64(0); off < sl.Length; {
			if cur >= 0 && (used == s.chunkBytes || len(w.pieces[cur]) == shwire.MaxEntries) {
				if err := w.flush(s, cur); err != nil {
					return err
				}
				cur = -1
			}
			if cur < 0 {
				c, err := w.acquire(s, slices)
				if err != nil {
					return err
				}
				cur, used = int(c), 0
			}
			n := min(sl.Length-off, s.chunkBytes-used)
			dev := int32(-1)
			if sl.LocalKind() == engine.MemoryDevice {
				dev = int32(sl.LocalRegion().Device)
			}
			w.pieces[cur] = append(w.pieces[cur], piece{slice: int32(i), op: sl.Op, dev: dev, local: sl.Local + uintptr(off), offset: used,
				addr: sl.Remote + off, length: n})
			used += n
			off += n
		}
	}
	if cur >= 0 {
		if len(w.pieces[cur]) == 0 {
			s.free <- uint32(cur)
			return nil
		}
		return w.flush(s, cur)
	}
	return nil
}

// acquire returns a free chunk, handling this worker's responses meanwhile.
func (w *shmWorker) acquire(s *session, slices []*engine.Slice) (uint32, error) {
	for {
		select {
		case c := <-s.free:
			return c, nil
		default:
		}
		if err := w.wait(s, slices, true); err != nil {
			return 0, err
		}
	}
}

// wait handles one response of this worker (or, with free, returns when a
// chunk was freed by another worker). It fails when the session dies, the
// transport closes or the owner stays silent for the timeout.
func (w *shmWorker) wait(s *session, slices []*engine.Slice, free bool) error {
	var freeCh chan uint32
	if free {
		freeCh = s.free
	}
	w.timer.Reset(w.t.cfg.Timeout)
	defer w.timer.Stop()
	select {
	case r := <-w.replies:
		if r.s != s {
			return nil // stale
		}
		return w.handle(s, slices, r)
	case c := <-freeCh:
		s.free <- c // put it back for acquire's fast path
		return nil
	case <-s.dead:
		return s.deathErr()
	case <-w.t.ctx.Done():
		return engine.ErrClosed
	case <-w.timer.C:
		err := fmt.Errorf("segment %q: no response from the owner within %s: %w", s.peer, w.t.cfg.Timeout, ErrPeerGone)
		s.kill(err)
		return err
	}
}

// flush copies the chunk's write pieces into it and sends the request.
func (w *shmWorker) flush(s *session, c int) error {
	ps := w.pieces[c]
	base := s.staging.addr() + uintptr(uint64(c)*s.chunkBytes)
	w.ops = w.ops[:0]
	w.gpu.reset()
	for k, p := range ps {
		if p.op == engine.OpWrite {
			op := cmem.Op{Dst: base + uintptr(p.offset), Src: p.local, N: p.length}
			if p.dev >= 0 {
				w.gpu.add(int(p.dev), op)
			} else {
				w.ops = append(w.ops, op)
			}
		}
		shwire.PutReqEntry(w.msg[shwire.ReqHeaderSize+k*shwire.ReqEntrySize:], shwire.ReqEntry{Op: uint8(p.op), Offset: p.offset, Addr: p.addr, Length: p.length})
	}
	cmem.CopyBatch(w.ops)
	if err := w.gpu.copy(w.t.cfg.GPU, s.pinStaging(w.t.cfg.GPU)); err != nil {
		return fmt.Errorf("shm: stage device memory: %w", err)
	}
	seq := s.seq.Add(1)
	w.seqs[c] = seq
	shwire.PutReqHeader(w.msg, uint32(c), uint32(len(ps)), seq)
	s.owner[c].Store(int32(w.id + 1))
	w.inflight++
	if _, err := s.conn.Write(w.msg[:shwire.ReqHeaderSize+len(ps)*shwire.ReqEntrySize]); err != nil {
		s.kill(fmt.Errorf("%w: send to the owner: %w", ErrPeerGone, err))
		return s.deathErr()
	}
	return nil
}

// handle finishes a chunk: copies read pieces out, accounts every piece and
// frees the chunk.
func (w *shmWorker) handle(s *session, slices []*engine.Slice, r chunkReply) error {
	c := r.chunk
	ps := w.pieces[c]
	if len(ps) == 0 || r.seq != w.seqs[c] || int(r.count) != len(ps) {
		err := fmt.Errorf("response for chunk %d does not match the request: %w", c, shwire.ErrProtocol)
		s.kill(err)
		return err
	}
	st := &s.status[c]
	base := s.staging.addr() + uintptr(uint64(c)*s.chunkBytes)
	w.ops = w.ops[:0]
	w.gpu.reset()
	for k, p := range ps {
		if p.op == engine.OpRead && st[k] == shwire.EntryOK {
			op := cmem.Op{Dst: p.local, Src: base + uintptr(p.offset), N: p.length}
			if p.dev >= 0 {
				w.gpu.add(int(p.dev), op)
			} else {
				w.ops = append(w.ops, op)
			}
		}
	}
	cmem.CopyBatch(w.ops)
	devErr := w.gpu.copy(w.t.cfg.GPU, s.pinStaging(w.t.cfg.GPU))
	for k, p := range ps {
		var err error
		switch st[k] {
		case shwire.EntryOK:
			if p.op == engine.OpRead && p.dev >= 0 && devErr != nil {
				err = fmt.Errorf("shm: copy into device memory: %w", devErr)
			}
		case shwire.EntryDevice:
			sl := slices[p.slice]
			err = &engine.TransferError{Op: sl.Op, Peer: s.peer, Transport: NameShm, Addr: p.addr, Length: p.length,
				Err: fmt.Errorf("the owner's device copy failed: %w", engine.ErrRejected)}
		case shwire.EntryRejected:
			sl := slices[p.slice]
			err = &engine.TransferError{Op: sl.Op, Peer: s.peer, Transport: NameShm, Addr: p.addr, Length: p.length,
				Err: fmt.Errorf("outside the owner's registered memory: %w", engine.ErrRejected)}
		default:
			err = fmt.Errorf("segment %q: owner found piece %#x+%d malformed: %w", s.peer, p.addr, p.length, engine.ErrInvalidArgument)
		}
		w.account(slices, int(p.slice), p.length, err)
	}
	w.pieces[c] = ps[:0]
	s.owner[c].Store(0)
	w.inflight--
	s.free <- c
	return nil
}

// account records n bytes of slice i as done (with err) and completes the
// slice when all its bytes are accounted for.
func (w *shmWorker) account(slices []*engine.Slice, i int, n uint64, err error) {
	if w.left[i] == 0 {
		return
	}
	if err != nil && w.errs[i] == nil {
		w.errs[i] = err
	}
	w.left[i] -= min(n, w.left[i])
	if w.left[i] == 0 {
		slices[i].Complete(w.errs[i])
	}
}

// abort completes every slice not yet completed with err. Chunks in flight
// are abandoned with the session (which died, or is killed here).
func (w *shmWorker) abort(s *session, slices []*engine.Slice, err error) {
	s.kill(err)
	for i := range slices {
		if w.left[i] != 0 {
			w.left[i] = 0
			if w.errs[i] == nil {
				w.errs[i] = err
			}
			slices[i].Complete(w.errs[i])
		}
	}
	for c := range w.pieces {
		w.pieces[c] = w.pieces[c][:0]
	}
	w.inflight = 0
}
