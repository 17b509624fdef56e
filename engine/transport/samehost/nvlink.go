package samehost

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/descriptor"
	"github.com/kvferry/kvferry/engine/gpu"
	"github.com/kvferry/kvferry/engine/transport/samehost/shwire"
	"github.com/kvferry/kvferry/internal/cuda"
)

// NVLink is the same-host CUDA IPC transport ("nvlink", as Mooncake calls
// its intra-node GPU transports): the initiator maps the owner's device
// memory into its own address space and copies with cuMemcpyAsync on its
// device's stream pool (over NVLink or PCIe peer-to-peer on real GPUs).
//
// How a buffer is mapped depends on how the owner may share it (its
// descriptor's kvferry_share):
//
//   - legacy IPC (cuMemAlloc / cudaMalloc memory): the handle in the
//     buffer's shm_name, exactly as Mooncake publishes it, opened with
//     cuIpcOpenMemHandle (one mapping per allocation and device for the
//     whole process);
//   - VMM memory (cuMemCreate or hipMemCreate: PyTorch's expandable
//     segments, kvferry's allocator): the owner exports each allocation as
//     a POSIX fd on request, over the session socket with SCM_RIGHTS; the
//     initiator imports and maps it through engine/gpu's SharedMapping
//     (cuMemImportFromShareableHandle/hipMemImportFromShareableHandle,
//     then cuMemMap/hipMemMap), on whichever GPU runtime it has;
//   - fabric handles (MNNVL/IMEX): the 64-byte handle in shm_name,
//     imported the same way, when the owner offers no fd.
//
// Mappings are opened lazily, cached per session (per owner), and closed
// when the owner unregisters the memory (seen as an epoch change of its
// registration mirror) or goes away. Every range is first checked against
// the owner's registration mirror under the epoch protocol of cma: a
// request outside registered memory is refused before any byte moves, and
// an owner's UnregisterMemory waits until no initiator copies from an
// older registration (the worker's slot stays set until its device copies
// completed).
type NVLink struct {
	base
	q       chan ipcJob
	foreign foreignPeers // Mooncake's nvlink peers (mooncake_nvlink.go)
}

var _ engine.Transport = (*NVLink)(nil)

// NameNVLink is the CUDA IPC transport.
const NameNVLink = "nvlink"

// ipcJob is a group of slices to one owner: a kvferry owner through its
// session s, or a Mooncake nvlink peer (s nil) through its mappings im.
type ipcJob struct {
	s      *session
	im     *ipcMaps
	p      *engine.Peer
	slices []*engine.Slice
}

// NewNVLink starts the nvlink transport of e.
func NewNVLink(e *engine.Engine, cfg Config) *NVLink {
	t := &NVLink{}
	t.init(e, NameNVLink, shwire.KindIPC, cfg)
	t.foreign.legacyOnly = t.cfg.MooncakeNVLinkIPC
	t.q = make(chan ipcJob, 1024)
	for i := range t.cfg.Workers {
		t.work.Add(1)
		go t.runWorker(i)
	}
	return t
}

// Reaches reports whether p is another process of this host that offers
// nvlink and accepted a session.
func (t *NVLink) Reaches(p *engine.Peer) bool {
	if t.cfg.GPU == nil {
		return false
	}
	if isForeignNVLink(p) {
		return true
	}
	s := t.sessionFor(p, true)
	return s != nil && s.ctl.word(ctlOffOverflow).Load() == 0
}

// Carries reports requests whose target is device memory the owner shares.
func (t *NVLink) Carries(_ *engine.Peer, e engine.Ends) bool {
	return t.cfg.GPU != nil && e.Remote == engine.MemoryDevice && e.RemoteShare != 0 && e.Local != engine.MemoryManaged
}

// SliceSize: requests are not sliced (a device copy of any size is one
// call).
func (t *NVLink) SliceSize() uint64 { return 0 }

// Submit queues the slices for the workers.
func (t *NVLink) Submit(p *engine.Peer, slices []*engine.Slice) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.stopped {
		failAll(slices, engine.ErrClosed)
		return
	}
	if isForeignNVLink(p) {
		t.submitForeign(p, slices)
		return
	}
	s := t.sessionFor(p, false)
	if s == nil {
		failAll(slices, fmt.Errorf("%s: no session to segment %q: %w", t.name, p.Name, ErrPeerGone))
		return
	}
	per := max(1, (len(slices)+t.cfg.Workers-1)/t.cfg.Workers)
	for lo := 0; lo < len(slices); lo += per {
		part := slices[lo:min(lo+per, len(slices))]
		if !s.acquire() {
			failAll(part, fmt.Errorf("%s: session to segment %q closed: %w", t.name, s.peer, ErrPeerGone))
			continue
		}
		t.q <- ipcJob{s: s, p: p, slices: part}
	}
}

// Close stops the workers (queued slices fail), ends the sessions (their
// mappings close) and releases the engine's node.
func (t *NVLink) Close() error {
	if t.closed.Swap(true) {
		return nil
	}
	t.mu.Lock()
	t.stopped = true
	t.mu.Unlock()
	t.cancel()
	t.work.Wait()
	for {
		select {
		case j := <-t.q:
			failAll(j.slices, engine.ErrClosed)
			if j.s != nil {
				j.s.release()
			}
			continue
		default:
		}
		break
	}
	t.foreign.retireAll()
	t.closeBase()
	return nil
}

func (t *NVLink) runWorker(id int) {
	defer t.work.Done()
	w := &ipcWorker{t: t, id: id}
	for {
		select {
		case <-t.ctx.Done():
			return
		case j := <-t.q:
			if j.s == nil {
				w.runForeign(j)
				continue
			}
			w.run(j)
			j.s.release()
		}
	}
}

// ipcWorker is one copy goroutine's scratch.
type ipcWorker struct {
	t    *NVLink
	id   int
	rs   []rng
	res  []lookupResult
	errs []error
	ops  devOps
	held []*ipcMapping
}

func (w *ipcWorker) run(j ipcJob) {
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
	s.ipc.sweep(s.ctl, ep)
	w.rs, w.res, w.errs = w.rs[:0], w.res[:0], w.errs[:0]
	for _, sl := range slices {
		w.rs = append(w.rs, rng{addr: sl.Remote, length: sl.Length})
		w.res = append(w.res, lookupOK)
		w.errs = append(w.errs, nil)
	}
	s.ctl.validate(w.rs, w.res, w.t.cfg.Timeout, s.ownerGone)
	w.ops.reset()
	w.held = w.held[:0]
	for i, sl := range slices {
		switch {
		case sl.Canceled():
			w.errs[i] = engine.ErrCanceled
		case w.res[i] == lookupMissing:
			w.errs[i] = w.fail(s, sl, fmt.Errorf("outside the owner's registered memory: %w", engine.ErrRejected))
		case w.res[i] != lookupOK:
			w.errs[i] = fmt.Errorf("segment %q: registration mirror unusable: %w", s.peer, ErrPeerGone)
		default:
			if err := w.plan(s.ipc, s, j.p, sl); err != nil {
				w.errs[i] = w.fail(s, sl, err)
			}
		}
	}
	err = w.ops.copy(w.t.cfg.GPU, nil)
	if err == nil && (s.pidfd.exited() || s.isDead()) {
		// The bytes went to (or came from) the memory of a process that
		// died meanwhile: they are lost.
		s.kill(fmt.Errorf("owner pid %d exited: %w", s.pid, ErrPeerGone))
		err = s.deathErr()
	}
	for _, m := range w.held {
		s.ipc.put(m)
	}
	slot.Store(0)
	for i, sl := range slices {
		if w.errs[i] == nil && err != nil {
			w.errs[i] = w.fail(s, sl, err)
		}
		sl.Complete(w.errs[i])
	}
}

func (w *ipcWorker) fail(s *session, sl *engine.Slice, err error) error {
	return failSlice(s.peer, sl, err)
}

func failSlice(peer string, sl *engine.Slice, err error) error {
	return &engine.TransferError{Op: sl.Op, Peer: peer, Transport: NameNVLink, Addr: sl.Remote, Length: sl.Length, Err: err}
}

// plan maps the slice's remote range (through im; s is the owner's session,
// nil for a Mooncake peer) and files its copies (one per mapping it
// crosses) under the device that runs them.
func (w *ipcWorker) plan(im *ipcMaps, s *session, p *engine.Peer, sl *engine.Slice) error {
	b, ok := p.RemoteBuffer(sl.Remote, sl.Length)
	if !ok {
		return fmt.Errorf("no buffer of the descriptor holds %#x+%d: %w", sl.Remote, sl.Length, engine.ErrRejected)
	}
	dev := 0
	if sl.LocalKind() == engine.MemoryDevice {
		dev = sl.LocalRegion().Device
	}
	share := engine.ParseShare(b)
	switch {
	case im.hip:
		share = mooncakeHIPShare(b)
	case im.share != 0:
		share = im.share // a Mooncake peer's handles are of the kind its transport uses
	}
	for off := uint64(0); off < sl.Length; {
		remote := sl.Remote + off
		m, err := im.get(s, dev, b, share, remote)
		if err != nil {
			return err
		}
		w.held = append(w.held, m)
		n := min(sl.Length-off, m.remoteBase+m.size-remote)
		local := m.localBase + (remote - m.remoteBase)
		op := cuda.Copy{Dst: local, Src: uint64(sl.Local) + off, N: n}
		if sl.Op == engine.OpRead {
			op.Dst, op.Src = op.Src, op.Dst
		}
		w.ops.addCopy(dev, op)
		off += n
	}
	return nil
}

// ---- the session's mappings ----

// ipcMapping is one mapped allocation of the owner.
type ipcMapping struct {
	kind       engine.ShareKind
	dev        int    // the device whose context maps it
	remoteBase uint64 // the allocation's start in the owner
	size       uint64 // bytes mapped
	localBase  uint64
	handle     cuda.IPCHandle    // legacy
	shared     gpu.SharedMapping // VMM allocations imported by fd (or side by side)
	shm        string            // the shm_name it was opened from (Mooncake peers' sweep)
	refs       int               // workers using it (guarded by ipcMaps.mu)
	stale      bool              // unmap once unused
}

// ipcMaps holds a session's (or a Mooncake peer's) mappings, sorted by
// remote start.
type ipcMaps struct {
	rt *gpu.Runtime
	// peer names the owner in errors; share, when set, is the kind of
	// every shm_name of a Mooncake peer (its descriptor does not say).
	peer  string
	share engine.ShareKind
	hip   bool // a Mooncake hip peer: the kind is each buffer's (mooncakeHIPShare)
	mu    sync.Mutex
	ms    []*ipcMapping
	ep    uint64 // registration epoch of the last sweep
	// export requests: one at a time
	req     sync.Mutex
	seq     uint64
	replies chan exportReply
	dead    bool
}

type exportReply struct {
	r  shwire.ExportResp
	fd int
}

func newIPCMaps(rt *gpu.Runtime, peer string) *ipcMaps {
	return &ipcMaps{rt: rt, peer: peer, replies: make(chan exportReply, 1)}
}

// get returns (with a reference) the mapping holding remote address a of
// buffer b, mapping it for dev first when needed.
func (im *ipcMaps) get(s *session, dev int, b descriptor.Buffer, share engine.ShareKind, a uint64) (*ipcMapping, error) {
	im.mu.Lock()
	if im.dead {
		im.mu.Unlock()
		return nil, fmt.Errorf("segment %q: %w", im.peer, ErrPeerGone)
	}
	for _, m := range im.ms {
		if m.dev == dev && !m.stale && a >= m.remoteBase && a-m.remoteBase < m.size {
			m.refs++
			im.mu.Unlock()
			return m, nil
		}
	}
	im.mu.Unlock()
	m, err := im.open(s, dev, b, share, a)
	if err != nil {
		if !errors.Is(err, engine.ErrRejected) && !errors.Is(err, gpu.ErrNoGPU) {
			// The driver refused the mapping: shm stages the copy instead.
			err = engine.PathFailed(engine.FailoverMapping, err)
		}
		return nil, err
	}
	im.mu.Lock()
	defer im.mu.Unlock()
	if im.dead {
		im.unmap(m)
		return nil, fmt.Errorf("segment %q: %w", im.peer, ErrPeerGone)
	}
	m.refs = 1
	im.ms = append(im.ms, m)
	sort.Slice(im.ms, func(i, j int) bool { return im.ms[i].remoteBase < im.ms[j].remoteBase })
	return m, nil
}

// open maps the allocation of b holding a: by its legacy IPC handle, by a
// POSIX fd the owner exports, or by its fabric handle.
func (im *ipcMaps) open(s *session, dev int, b descriptor.Buffer, share engine.ShareKind, a uint64) (*ipcMapping, error) {
	if im.rt == nil {
		return nil, gpu.ErrNoGPU
	}
	if share&engine.ShareLegacyIPC == 0 {
		// File descriptors are CUDA's or HIP's VMM path; fabric handles
		// the CUDA driver's only.
		if share&engine.SharePosixFD != 0 {
			return im.openFD(s, dev, b, a)
		}
		d, err := im.rt.Driver()
		if err != nil {
			return nil, err
		}
		return im.openFabric(d, dev, b, share)
	}
	switch {
	case len(b.Chunks) > 0:
		// One handle per allocation; the allocation holding a.
		c, ok := b.ChunkAt(a)
		if !ok {
			return nil, fmt.Errorf("buffer %#x+%d lists no allocation holding %#x: %w", b.Addr, b.Length, a, engine.ErrRejected)
		}
		h, err := parseHandle(c.Handle)
		if err != nil {
			return nil, err
		}
		base, err := im.rt.OpenIPC(dev, cuda.IPCHandle{Reserved: h})
		if err != nil {
			return nil, fmt.Errorf("open the owner's IPC handle: %w", err)
		}
		return &ipcMapping{kind: engine.ShareLegacyIPC, dev: dev, remoteBase: c.Addr, size: c.Size, localBase: base, handle: cuda.IPCHandle{Reserved: h}}, nil
	default:
		h, err := parseHandle(b.ShmName)
		if err != nil {
			return nil, err
		}
		base, err := im.rt.OpenIPC(dev, cuda.IPCHandle{Reserved: h})
		if err != nil {
			return nil, fmt.Errorf("open the owner's IPC handle: %w", err)
		}
		// The buffer lies in one allocation that starts IPCOffset before it.
		return &ipcMapping{kind: engine.ShareLegacyIPC, dev: dev, remoteBase: b.Addr - b.IPCOffset,
			size: b.IPCOffset + b.Length, localBase: base, handle: cuda.IPCHandle{Reserved: h}, shm: b.ShmName}, nil
	}
}

// openFD maps the allocation of b holding a by a POSIX fd the owner
// exports over its session (VMM memory of CUDA or HIP, through the
// process's GPU runtime).
func (im *ipcMaps) openFD(s *session, dev int, b descriptor.Buffer, a uint64) (*ipcMapping, error) {
	switch {
	case s == nil && im.hip:
		return im.openPeerFD(dev, b)
	case s == nil:
		return nil, fmt.Errorf("buffer %#x+%d is exported as file descriptors, and segment %q has no session: %w", b.Addr, b.Length, im.peer, engine.ErrNotSupported)
	case len(b.Chunks) > 1:
		return im.openChunks(dev, b, engine.SharePosixFD, func(m gpu.SharedMapping, off uint64, c descriptor.Chunk) error {
			// An address of the chunk inside the registration: the owner
			// exports registered memory only.
			r, fd, err := s.requestExport(max(c.Addr, b.Addr))
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			if r.Base != c.Addr || r.Size != c.Size {
				return fmt.Errorf("owner exported %#x+%d for its allocation %#x+%d: %w", r.Base, r.Size, c.Addr, c.Size, shwire.ErrProtocol)
			}
			return m.MapFD(off, c.Size, fd)
		})
	}
	r, fd, err := s.requestExport(a)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	if a < r.Base || a-r.Base >= r.Size {
		return nil, fmt.Errorf("owner exported %#x+%d for address %#x: %w", r.Base, r.Size, a, shwire.ErrProtocol)
	}
	m, err := im.rt.ImportFD(dev, fd, r.Size)
	if err != nil {
		return nil, fmt.Errorf("map the owner's exported memory: %w", err)
	}
	return &ipcMapping{kind: engine.SharePosixFD, dev: dev, remoteBase: r.Base, size: r.Size, localBase: m.Addr(), shared: m}, nil
}

// fabricMapper is a shared mapping that also maps fabric handles (the
// CUDA driver's).
type fabricMapper interface {
	MapFabric(off, size uint64, fh cuda.FabricHandle) error
}

// openFabric maps the allocations of b by their fabric handles (CUDA VMM
// memory).
func (im *ipcMaps) openFabric(d *cuda.Driver, dev int, b descriptor.Buffer, share engine.ShareKind) (*ipcMapping, error) {
	switch {
	case share&engine.ShareFabric != 0 && len(b.Chunks) > 0:
		return im.openChunks(dev, b, engine.ShareFabric, func(m gpu.SharedMapping, off uint64, c descriptor.Chunk) error {
			h, err := parseHandle(c.Handle)
			if err != nil {
				return err
			}
			fm, ok := m.(fabricMapper)
			if !ok {
				return fmt.Errorf("fabric handles on this GPU runtime: %w", engine.ErrNotSupported)
			}
			return fm.MapFabric(off, c.Size, cuda.FabricHandle{Data: h})
		})
	case share&engine.ShareFabric != 0:
		h, err := parseHandle(b.ShmName)
		if err != nil {
			return nil, err
		}
		g, err := d.Granularity(dev, cuda.HandleFabric)
		if err != nil {
			return nil, err
		}
		size := (b.IPCOffset + b.Length + g - 1) / g * g
		local, err := d.ImportFabric(dev, cuda.FabricHandle{Data: h}, size)
		if err != nil {
			return nil, fmt.Errorf("map the owner's fabric handle: %w", err)
		}
		return &ipcMapping{kind: engine.ShareFabric, dev: dev, remoteBase: b.Addr - b.IPCOffset, size: size, localBase: local, shm: b.ShmName}, nil
	}
	return nil, fmt.Errorf("buffer %#x+%d cannot be mapped: %w", b.Addr, b.Length, engine.ErrNotSupported)
}

// openChunks maps the VMM allocations of b side by side, as they lie in
// the owner (one reservation, one cuMemMap each, access granted once), so
// a range of the owner's that spans allocations is one copy here.
func (im *ipcMaps) openChunks(dev int, b descriptor.Buffer, kind engine.ShareKind,
	mapOne func(m gpu.SharedMapping, off uint64, c descriptor.Chunk) error) (*ipcMapping, error) {
	first, last := b.Chunks[0], b.Chunks[len(b.Chunks)-1]
	span := last.Addr + last.Size - first.Addr
	m, err := im.rt.ReserveShared(dev, span)
	if err != nil {
		return nil, fmt.Errorf("map the owner's %d allocations: %w", len(b.Chunks), err)
	}
	for _, c := range b.Chunks {
		if err := mapOne(m, c.Addr-first.Addr, c); err != nil {
			m.Close()
			return nil, fmt.Errorf("map the owner's allocation %#x+%d: %w", c.Addr, c.Size, err)
		}
	}
	if err := m.Finish(); err != nil {
		m.Close()
		return nil, fmt.Errorf("map the owner's %d allocations: %w", len(b.Chunks), err)
	}
	return &ipcMapping{kind: kind, dev: dev, remoteBase: first.Addr, size: span, localBase: m.Addr(), shared: m}, nil
}

// parseHandle reads a descriptor's 64-byte handle in hex.
func parseHandle(shm string) ([64]byte, error) {
	h, err := shwire.ParseHandle(shm)
	if err != nil {
		return h, fmt.Errorf("%w: %w", err, engine.ErrInvalidArgument)
	}
	return h, nil
}

// put drops a worker's reference; a stale mapping closes with its last.
func (im *ipcMaps) put(m *ipcMapping) {
	im.mu.Lock()
	defer im.mu.Unlock()
	m.refs--
	if m.refs == 0 && m.stale {
		im.drop(m)
	}
}

// drop removes and unmaps m; im.mu is held and m is unused.
func (im *ipcMaps) drop(m *ipcMapping) {
	for i, x := range im.ms {
		if x == m {
			im.ms = append(im.ms[:i], im.ms[i+1:]...)
			break
		}
	}
	im.unmap(m)
}

func (im *ipcMaps) unmap(m *ipcMapping) {
	switch m.kind {
	case engine.ShareLegacyIPC:
		im.rt.CloseIPC(m.dev, m.handle)
	default:
		if m.shared != nil {
			_ = m.shared.Close()
			return
		}
		if d, err := im.rt.Driver(); err == nil {
			_ = d.UnmapImported(m.dev, m.localBase, m.size)
		}
	}
}

// sweep closes the mappings of memory the owner no longer registers, once
// per registration epoch.
func (im *ipcMaps) sweep(ctl ctlView, ep uint64) {
	im.mu.Lock()
	defer im.mu.Unlock()
	if im.ep == ep {
		return
	}
	im.ep = ep
	for _, m := range append([]*ipcMapping(nil), im.ms...) {
		if ctl.overlaps(m.remoteBase, m.size) {
			continue
		}
		m.stale = true
		if m.refs == 0 {
			im.drop(m)
		}
	}
}

// retireAll closes every mapping (the session died); mappings in use close
// when their workers are done with them.
func (im *ipcMaps) retireAll() {
	if im == nil {
		return
	}
	im.mu.Lock()
	defer im.mu.Unlock()
	im.dead = true
	for _, m := range append([]*ipcMapping(nil), im.ms...) {
		m.stale = true
		if m.refs == 0 {
			im.drop(m)
		}
	}
}

// ---- export requests (initiator) ----

// requestExport asks the owner for the POSIX fd of the VMM allocation
// holding its address a.
func (s *session) requestExport(a uint64) (shwire.ExportResp, int, error) {
	im := s.ipc
	im.req.Lock()
	defer im.req.Unlock()
	im.seq++
	var b [shwire.ExportReqSize]byte
	shwire.ExportReq{Seq: im.seq, Addr: a}.Encode(b[:])
	if _, err := s.conn.Write(b[:]); err != nil {
		s.kill(fmt.Errorf("%w: export request: %w", ErrPeerGone, err))
		return shwire.ExportResp{}, -1, s.deathErr()
	}
	t := time.NewTimer(exportTimeout)
	defer t.Stop()
	select {
	case r := <-im.replies:
		if r.r.Seq != im.seq {
			if r.fd >= 0 {
				unix.Close(r.fd)
			}
			err := fmt.Errorf("export reply %d for request %d: %w", r.r.Seq, im.seq, shwire.ErrProtocol)
			s.kill(err)
			return shwire.ExportResp{}, -1, err
		}
		if r.r.Status != shwire.StatusOK {
			return shwire.ExportResp{}, -1, fmt.Errorf("owner refused to export %#x (status %d): %w", a, r.r.Status, engine.ErrRejected)
		}
		return r.r, r.fd, nil
	case <-s.dead:
		return shwire.ExportResp{}, -1, s.deathErr()
	case <-t.C:
		err := fmt.Errorf("segment %q: no export reply within %s: %w", s.peer, exportTimeout, ErrPeerGone)
		s.kill(err)
		return shwire.ExportResp{}, -1, err
	}
}

// exportTimeout bounds the wait for an owner's export reply.
const exportTimeout = 10 * time.Second

// runExportReader routes the owner's export replies (with their fds) to
// requestExport; any other message or a read error ends the session.
func (s *session) runExportReader() {
	buf := make([]byte, shwire.ExportRespSize+1)
	for {
		n, fds, err := recvFds(s.conn, buf, 1)
		if err != nil {
			s.kill(fmt.Errorf("%w: connection to the owner: %w", ErrPeerGone, err))
			return
		}
		r, err := shwire.DecodeExportResp(buf[:n])
		if err != nil || (r.Status == shwire.StatusOK) != (len(fds) == 1) {
			closeFds(fds)
			s.kill(fmt.Errorf("bad export reply: %w", shwire.ErrProtocol))
			return
		}
		fd := -1
		if len(fds) == 1 {
			fd = fds[0]
		}
		select {
		case s.ipc.replies <- exportReply{r: r, fd: fd}:
		default:
			if fd >= 0 {
				unix.Close(fd)
			}
			s.kill(fmt.Errorf("unexpected export reply: %w", shwire.ErrProtocol))
			return
		}
	}
}

// ---- export requests (owner) ----

// serveExports answers an nvlink initiator's export requests until it goes
// away: the address must lie in a registered region of device memory that
// may be shared as a POSIX fd.
func (n *node) serveExports(s *ownerSession, buf []byte) {
	var out [shwire.ExportRespSize]byte
	for {
		k, err := s.c.Read(buf)
		if err != nil {
			return
		}
		req, err := shwire.DecodeExportReq(buf[:k])
		if err != nil {
			n.log.Warn("nvlink session: bad request, closing", "peer_pid", s.pid, "err", err)
			return
		}
		resp := shwire.ExportResp{Seq: req.Seq, Status: shwire.StatusUnsupported}
		fd := -1
		if r, f, err := n.export(req.Addr); err == nil {
			resp, fd = r, f
			resp.Seq = req.Seq
		} else {
			n.log.Info("nvlink export refused", "peer_pid", s.pid, "addr", req.Addr, "err", err)
		}
		resp.Encode(out[:])
		var oob []byte
		if fd >= 0 {
			oob = unix.UnixRights(fd)
		}
		_, _, err = s.c.WriteMsgUnix(out[:], oob, nil)
		if fd >= 0 {
			unix.Close(fd)
		}
		if err != nil {
			return
		}
	}
}

func (n *node) export(a uint64) (shwire.ExportResp, int, error) {
	pin := n.e.Pin(a, 1)
	if pin == nil {
		return shwire.ExportResp{}, -1, fmt.Errorf("%#x is not registered: %w", a, engine.ErrRejected)
	}
	defer pin.Release()
	if pin.Kind != engine.MemoryDevice || pin.Share&engine.SharePosixFD == 0 {
		return shwire.ExportResp{}, -1, fmt.Errorf("%#x is %s memory that is not shareable as a file descriptor: %w", a, pin.Kind, engine.ErrNotSupported)
	}
	if n.cfg.GPU == nil {
		return shwire.ExportResp{}, -1, gpu.ErrNoGPU
	}
	fd, base, size, err := n.cfg.GPU.ExportFD(a)
	if err != nil {
		return shwire.ExportResp{}, -1, err
	}
	return shwire.ExportResp{Status: shwire.StatusOK, Base: base, Size: size, Device: uint32(pin.Device)}, fd, nil
}

// ---- helpers ----

// overlaps reports whether any registered range of the mirror overlaps
// [addr, addr+length).
func (c ctlView) overlaps(addr, length uint64) bool {
	end := addr + length
	seq := c.word(ctlOffSeq)
	for spins := 0; spins < 1<<16; spins++ {
		s1 := seq.Load()
		if s1&1 != 0 {
			continue
		}
		n := min(c.word(ctlOffCount).Load(), ctlEntries)
		found := false
		for i := uint64(0); i < n; i++ {
			a, l := c.entryAddr(i).Load(), c.entryLen(i).Load()
			if l != 0 && a < end && addr < a+l { // l == 0: a removed region's tombstone
				found = true
				break
			}
		}
		if seq.Load() == s1 {
			return found
		}
	}
	return true // a table that stays locked: keep the mapping
}

// addCopy files a device copy under dev.
func (d *devOps) addCopy(dev int, c cuda.Copy) {
	for i, x := range d.devs {
		if x == dev {
			d.ops[i] = append(d.ops[i], c)
			return
		}
	}
	d.devs = append(d.devs, dev)
	d.ops = append(d.ops, []cuda.Copy{c})
}
