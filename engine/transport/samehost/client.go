package samehost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/descriptor"
	"github.com/kvferry/kvferry/engine/peerauth"
	"github.com/kvferry/kvferry/engine/transport/samehost/shwire"
	"github.com/kvferry/kvferry/metrics"
)

// Errors. Both are path failures (engine.PathFailure): the engine moves
// the slices that fail with them to the next transport (shm, then TCP).
var (
	// ErrPeerGone: the same-host peer closed, died, or its session failed.
	ErrPeerGone error = &pathSentinel{msg: "same-host peer gone", cause: engine.FailoverReset}
	// ErrRefused: the kernel refuses cross-memory access to the peer
	// (the cma transport then leaves the peer to shm).
	ErrRefused error = &pathSentinel{msg: "cross-memory access refused by the kernel", cause: engine.FailoverRefused}
)

// errOwnerGone marks a dial that found no owner behind the socket the
// descriptor names (sessionFor then re-reads the descriptor).
var errOwnerGone = errors.New("the owner the descriptor names is gone")

// pathSentinel is a sentinel error that is an engine.PathFailure.
type pathSentinel struct{ msg, cause string }

func (e *pathSentinel) Error() string { return e.msg }

// FailoverCause returns the failover cause label (engine.PathFailure).
func (e *pathSentinel) FailoverCause() string { return e.cause }

// redialDelay is how long a peer whose session could not be opened is left
// to other transports before the next attempt.
const redialDelay = time.Second

// base is what the cma and shm transports share: the engine's node (owner
// side), peer resolution from descriptors and the initiator sessions.
type base struct {
	e       *engine.Engine
	name    string
	kind    uint8
	cfg     Config
	log     *slog.Logger
	node    *node
	ctx     context.Context
	cancel  context.CancelFunc
	work    sync.WaitGroup // workers
	reads   sync.WaitGroup // session readers
	mu      sync.RWMutex   // held for reading by Submit while sending on the queue
	stopped bool           // guarded by mu: Submit queues nothing more
	closed  atomic.Bool

	descs struct {
		sync.Mutex
		m map[*descriptor.Segment]peerInfo // what the owner publishes (Sock "": not same host or not offered)
	}
	peers struct {
		sync.Mutex
		m map[string]*peerEntry // by owner socket
	}
	replies []chan chunkReply // shm: one per worker
	rereads atomic.Uint64     // descriptor re-reads that found a restarted owner (sessionFor)
}

func (b *base) init(e *engine.Engine, name string, kind uint8, cfg Config) {
	b.e, b.name, b.kind, b.cfg = e, name, kind, cfg.withDefaults(e)
	b.log = e.Logger().With("transport", name)
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.descs.m = make(map[*descriptor.Segment]peerInfo)
	b.peers.m = make(map[string]*peerEntry)
	b.node = acquireNode(e, b.cfg)
}

// peerEntry is the initiator state toward one owner.
type peerEntry struct {
	sock    string
	sess    atomic.Pointer[session]
	refused atomic.Bool // cma: the kernel refused; permanent for this owner

	mu struct {
		sync.Mutex // serializes dialing
		retryAt    time.Time
		lastErr    string
		dialed     bool // a session was opened before
	}
}

// Name returns the transport's name.
func (b *base) Name() string { return b.name }

// Rereads returns how often a dial found the owner a peer's descriptor
// names gone and a re-read of the descriptor named a new one (a restarted
// peer; see sessionFor).
func (b *base) Rereads() uint64 { return b.rereads.Load() }

// Describe publishes the owner socket (when this engine can serve).
func (b *base) Describe(seg *descriptor.Segment) { b.node.describe(seg, b.name) }

// RegisterRegions mirrors new regions for cma initiators
// (engine.MemoryRegistrar).
func (b *base) RegisterRegions(rs []*engine.Region) error {
	b.node.regionsAdded(rs)
	return nil
}

// UnregisterRegions takes removed regions out of the mirror and waits for
// cma initiators of older epochs (engine.MemoryRegistrar).
func (b *base) UnregisterRegions(rs []*engine.Region) { b.node.regionsRemoved(rs) }

// ownerSock returns the socket of p's owner when p runs on this host (same
// boot id and pid and user namespaces) and offers this transport.
func (b *base) ownerSock(p *engine.Peer) string { return b.ownerInfo(p).Sock }

// ownerInfo returns what p's owner publishes for this transport (Sock
// empty when p is not on this host or does not offer it).
func (b *base) ownerInfo(p *engine.Peer) peerInfo {
	if p.Local() {
		return peerInfo{} // the local transport serves the own segment
	}
	d := p.Descriptor()
	if d == nil || d.Host == nil || !b.e.HostIdentity().SameHost(d.Host) {
		return peerInfo{}
	}
	b.descs.Lock()
	defer b.descs.Unlock()
	if s, ok := b.descs.m[d]; ok {
		return s
	}
	var info peerInfo
	if raw, ok := d.Extra[b.name]; ok {
		if err := json.Unmarshal(raw, &info); err != nil || info.V != shwire.Version ||
			!strings.HasPrefix(info.Sock, "@kvferry-") || len(info.Sock) > 100 {
			info = peerInfo{}
		}
	}
	if len(b.descs.m) >= 256 { // descriptors are replaced on refresh; forget old ones
		clear(b.descs.m)
	}
	b.descs.m[d] = info
	return info
}

func (b *base) entry(sock string) *peerEntry {
	b.peers.Lock()
	defer b.peers.Unlock()
	pe := b.peers.m[sock]
	if pe == nil {
		pe = &peerEntry{sock: sock}
		b.peers.m[sock] = pe
	}
	return pe
}

// sessionFor returns a live session to p's owner, opening one when needed
// (bounded by the engine's connect timeout); nil when p cannot be served.
//
// When the owner the cached descriptor names is gone (its socket has no
// listener: the peer restarted, or went away), the descriptor is re-read
// once (bounded by the metadata timeout; at most once per redialDelay for
// one gone owner): a peer restarted under the same segment name publishes
// its new socket, and this request already goes to it on the same-host
// path, where without the re-read it would go to the next transport (TCP)
// until something else refreshed the descriptor (issue 35).
func (b *base) sessionFor(p *engine.Peer, dial bool) *session {
	s, gone := b.session(p, dial)
	if s != nil || !gone {
		return s
	}
	before := b.ownerSock(p)
	ctx, cancel := context.WithTimeout(b.ctx, b.e.Config().MetadataTimeout)
	defer cancel()
	if _, err := b.e.OpenSegmentNoCache(ctx, p.Name); err != nil {
		b.log.Debug("same-host owner gone; descriptor re-read failed", "peer", p.Name, "err", err)
		return nil
	}
	if sock := b.ownerSock(p); sock == "" || sock == before {
		return nil // not restarted (yet), or no longer on this host
	}
	b.rereads.Add(1)
	b.log.Info("same-host peer restarted: its new socket read from its descriptor", "peer", p.Name)
	s, _ = b.session(p, dial)
	return s
}

// session is sessionFor without the re-read; gone reports that a dial
// found the owner the descriptor names gone (errOwnerGone).
func (b *base) session(p *engine.Peer, dial bool) (_ *session, gone bool) {
	if b.closed.Load() {
		return nil, false
	}
	sock := b.ownerSock(p)
	if sock == "" {
		return nil, false
	}
	pe := b.entry(sock)
	if pe.refused.Load() {
		return nil, false
	}
	if s := pe.sess.Load(); s != nil && !s.isDead() {
		return s, false
	}
	if !dial {
		return nil, false
	}
	pe.mu.Lock()
	defer pe.mu.Unlock()
	if s := pe.sess.Load(); s != nil && !s.isDead() {
		return s, false
	}
	if time.Now().Before(pe.mu.retryAt) || pe.refused.Load() {
		return nil, false
	}
	obs := b.e.MetricSet().Conn(b.name, p.Name)
	obs.Dials.Add(1)
	s, err := b.dial(p, sock, pe)
	if err != nil {
		obs.DialErrors.Add(1)
		pe.mu.retryAt = time.Now().Add(redialDelay)
		if errors.Is(err, ErrRefused) {
			pe.refused.Store(true)
			b.log.Warn("cma refused by the kernel; requests to this peer use the next transport (shm when installed)",
				"peer", p.Name, "err", err, "reason", refusalReason(err))
		} else if msg := err.Error(); msg != pe.mu.lastErr {
			pe.mu.lastErr = msg
			b.log.Info("same-host session not opened; requests to this peer use the next transport", "peer", p.Name, "err", err)
		}
		if old := pe.sess.Swap(nil); old != nil {
			old.release()
		}
		return nil, errors.Is(err, errOwnerGone)
	}
	pe.mu.lastErr = ""
	if pe.mu.dialed {
		obs.Redials.Add(1)
	}
	pe.mu.dialed = true
	if old := pe.sess.Swap(s); old != nil {
		old.release()
	}
	if s.isDead() { // the owner went away before we stored the session
		b.forget(pe, s)
		return nil, false
	}
	b.log.Info("same-host session opened", "peer", p.Name, "peer_pid", s.pid, "path", b.name, "why", b.why(s), "maps", s.maps != nil)
	return s, false
}

func (b *base) why(s *session) string {
	if b.kind == shwire.KindCMA {
		return "same host, kernel allows process_vm_readv/writev to the peer"
	}
	return fmt.Sprintf("same host, staging through %d x %d bytes of shared memory", s.chunks, s.chunkBytes)
}

// dial opens a session: connect, hello, the reply with the shared memory,
// and for cma the probe that proves the pid and the kernel's permission.
func (b *base) dial(p *engine.Peer, sock string, pe *peerEntry) (*session, error) {
	timeout := b.e.Config().ConnectTimeout
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unixpacket", sock)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
			return nil, fmt.Errorf("connect to %s: %w: %w", sock, errOwnerGone, err)
		}
		return nil, fmt.Errorf("connect to %s: %w", sock, err)
	}
	c := nc.(*net.UnixConn)
	s := &session{kind: b.kind, peer: p.Name, conn: c, pidfd: -1, dead: make(chan struct{}), obs: b.e.MetricSet().Conn(b.name, p.Name),
		base: b, entry: pe}
	s.refs.Store(1)
	ok := false
	defer func() {
		if !ok {
			s.kill(ErrPeerGone)
			s.release()
		}
	}()
	pid, _, err := peerCred(c)
	if err != nil {
		return nil, fmt.Errorf("peer credentials: %w", err)
	}
	if want := p.Descriptor().Host.PID; pid != want {
		return nil, fmt.Errorf("socket owned by pid %d, descriptor names pid %d: %w: %w", pid, want, errOwnerGone, shwire.ErrProtocol)
	}
	s.pid = pid
	if err := peerauth.Handshake(ctx, c, b.e.Auth(), peerauth.RoleSameHost, timeout); err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(timeout))
	h := shwire.Hello{Kind: b.kind}
	switch b.kind {
	case shwire.KindCMA:
		h.Slots = uint32(b.cfg.cmaSlots())
		if !b.cfg.NoNotifyRing {
			h.Flags |= shwire.FlagNotifyRing
		}
	case shwire.KindIPC:
		h.Slots = uint32(b.cfg.Workers)
	default:
		h.Chunks, h.ChunkBytes = uint32(b.cfg.ShmChunks), b.cfg.ShmChunkBytes
	}
	var hb [shwire.HelloSize]byte
	h.Encode(hb[:])
	if _, err := c.Write(hb[:]); err != nil {
		return nil, fmt.Errorf("hello: %w", err)
	}
	var rb [shwire.ReplySize + 1]byte
	n, fds, err := recvFds(c, rb[:], 3)
	if err != nil {
		return nil, fmt.Errorf("hello reply: %w", err)
	}
	defer closeFds(fds)
	r, err := shwire.DecodeReply(rb[:n])
	if err != nil {
		return nil, err
	}
	if r.Status != shwire.StatusOK {
		return nil, fmt.Errorf("owner refused the session (status %d): %w", r.Status, ErrPeerGone)
	}
	switch b.kind {
	case shwire.KindCMA, shwire.KindIPC:
		ringFd := len(fds) == 3 && h.Flags&shwire.FlagNotifyRing != 0
		if (len(fds) != 2 && !ringFd) || r.Slots != h.Slots {
			return nil, fmt.Errorf("cma reply with %d fds and %d slots: %w", len(fds), r.Slots, shwire.ErrProtocol)
		}
		if ringFd {
			if s.ring, err = attachRing(fds[2]); err != nil {
				return nil, err
			}
		}
		ctl, err := mapFd(fds[0], ctlBytes, false)
		if err != nil {
			return nil, err
		}
		s.ctl = ctlView{ctl}
		if s.slots, err = mapFd(fds[1], slotBytes, true); err != nil {
			return nil, err
		}
		s.nslots = int(r.Slots)
		if s.ctl.magic() != ctlMagic || s.ctl.nonce() != r.Nonce {
			return nil, fmt.Errorf("control page does not match the reply: %w", shwire.ErrProtocol)
		}
		s.pidfd = openPidfd(pid)
		if b.kind == shwire.KindIPC {
			s.ipc = newIPCMaps(b.cfg.GPU, p.Name)
			break
		}
		if err := probe(pid, r.ProbeAddr, r.Nonce); err != nil {
			return nil, err
		}
		if info := b.ownerInfo(p); info.Map != 0 && !b.cfg.NoMap {
			// The owner maps out its memfd-backed memory to those who can
			// read its key (hostmap.go); without it, process_vm only.
			if key, err := peek(pid, info.Map); err == nil {
				s.maps = newHostMaps(key)
			} else {
				b.log.Info("cma: the owner's key cannot be read; its memory is not mapped", "peer", p.Name, "err", err)
			}
		}
	case shwire.KindShm:
		if len(fds) != 1 || r.Chunks == 0 || r.Chunks > maxChunks || r.ChunkBytes < minChunkBytes || r.ChunkBytes > maxChunkBytes {
			return nil, fmt.Errorf("shm reply with %d fds, %d chunks of %d bytes: %w", len(fds), r.Chunks, r.ChunkBytes, shwire.ErrProtocol)
		}
		s.chunks, s.chunkBytes = int(r.Chunks), r.ChunkBytes
		if s.staging, err = mapFd(fds[0], uint64(s.chunks)*s.chunkBytes, true); err != nil {
			return nil, err
		}
		s.free = make(chan uint32, s.chunks)
		for i := range s.chunks {
			s.free <- uint32(i)
		}
		s.owner = make([]atomic.Int32, s.chunks)
		s.status = make([][shwire.MaxEntries]byte, s.chunks)
		s.replies = b.replies
	}
	_ = c.SetDeadline(time.Time{})
	ok = true
	s.refs.Add(1) // the reader's
	b.reads.Add(1)
	s.opened.Store(true)
	s.obs.Open.Add(1)
	go s.runReader(&b.reads)
	if s.maps != nil {
		s.refs.Add(1) // the mapper's
		b.reads.Add(1)
		go s.runMapper(&b.reads)
	}
	return s, nil
}

// forget drops the peer entry's reference to s, a session that died, and
// the entry itself: an owner that went away (a restarted peer comes back
// with a new socket) leaves nothing behind, where its pidfd, its mappings
// and the entry stayed until the engine closed.
func (b *base) forget(pe *peerEntry, s *session) {
	if pe.sess.CompareAndSwap(s, nil) {
		s.release()
	}
	b.peers.Lock()
	if b.peers.m[pe.sock] == pe && pe.sess.Load() == nil && !pe.refused.Load() {
		delete(b.peers.m, pe.sock)
	}
	b.peers.Unlock()
}

// probe reads the owner's nonce across processes: it proves that the kernel
// allows the access and that pid is the owner (not a recycled pid).
func probe(pid int, addr, nonce uint64) error {
	var v uint64
	local := []unix.Iovec{{Base: (*byte)(unsafe.Pointer(&v)), Len: 8}}
	remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: 8}}
	n, err := unix.ProcessVMReadv(pid, local, remote, 0)
	if err != nil {
		if kernelRefused(err) {
			return fmt.Errorf("process_vm_readv of pid %d: %w: %w", pid, ErrRefused, err)
		}
		return fmt.Errorf("process_vm_readv of pid %d: %w: %w", pid, ErrPeerGone, err)
	}
	if n != 8 || v != nonce {
		return fmt.Errorf("pid %d does not hold the owner's nonce: %w", pid, shwire.ErrProtocol)
	}
	return nil
}

// closeBase stops the sessions and the node after the workers stopped.
func (b *base) closeBase() {
	b.peers.Lock()
	pes := make([]*peerEntry, 0, len(b.peers.m))
	for _, pe := range b.peers.m {
		pes = append(pes, pe)
	}
	b.peers.m = map[string]*peerEntry{}
	b.peers.Unlock()
	for _, pe := range pes {
		if s := pe.sess.Swap(nil); s != nil {
			s.kill(engine.ErrClosed)
			s.release()
		}
	}
	b.reads.Wait()
	b.node.release()
}

// session is an initiator's connection to one owner, with the shared
// memory it received. It is reference counted: the peer entry, the reader
// goroutine and every queued job hold a reference, and the last release
// unmaps the memory.
type session struct {
	kind  uint8
	peer  string // segment name, for errors
	conn  *net.UnixConn
	pid   int
	pidfd pidfd
	refs  atomic.Int64
	dead  chan struct{}
	once  sync.Once
	err   error // why it died; set before dead is closed
	obs   *metrics.Conn
	// opened: counted in obs.Open (from just before runReader starts
	// until kill).
	opened atomic.Bool

	// cma
	ctl    ctlView
	slots  *shmap
	nslots int

	// shm
	staging    *shmap
	chunks     int
	chunkBytes uint64
	free       chan uint32               // free chunk indices
	owner      []atomic.Int32            // worker id + 1 that waits for each chunk
	status     [][shwire.MaxEntries]byte // per chunk: the entries' status from the last response
	replies    []chan chunkReply         // the transport's per-worker reply queues
	seq        atomic.Uint64
	pinned     stagingPin // staging memory registered with the CUDA driver

	// nvlink
	ipc *ipcMaps // mappings of the owner's device memory

	// cma: mappings of the owner's memfd-backed memory (nil: the owner
	// offers none, or mapping is off)
	maps *hostMaps
	// cma: the owner's notification ring (nil: none; notify.go)
	ring *initRing

	// base and entry: the transport and the peer entry the session was
	// dialed for, which forgets it when it dies.
	base  *base
	entry *peerEntry
}

// chunkReply tells a worker that the response for a chunk arrived.
type chunkReply struct {
	s     *session
	chunk uint32
	count uint32
	seq   uint64
}

func (s *session) isDead() bool {
	select {
	case <-s.dead:
		return true
	default:
		return false
	}
}

// ownerGone reports whether the session died or its owner process exited.
func (s *session) ownerGone() bool { return s.isDead() || s.pidfd.exited() }

// kill ends the session with err (the first reason wins).
func (s *session) kill(err error) {
	s.once.Do(func() {
		s.err = err
		if s.opened.Load() {
			s.obs.Open.Add(-1)
		}
		close(s.dead)
		s.conn.Close()
		s.ipc.retireAll()
		s.maps.retire()
	})
}

// deathErr returns why the session died.
func (s *session) deathErr() error {
	<-s.dead
	return fmt.Errorf("segment %q: %w", s.peer, s.err)
}

// acquire takes a reference for a job; false when the last reference is
// already gone (the session was replaced and unmapped meanwhile).
func (s *session) acquire() bool {
	for {
		n := s.refs.Load()
		if n <= 0 {
			return false
		}
		if s.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func (s *session) release() {
	if s.refs.Add(-1) != 0 {
		return
	}
	s.maps.retire()
	if s.ring != nil {
		s.ring.m.Close()
	}
	s.ctl.m.Close()
	s.slots.Close()
	s.unpinStaging()
	s.staging.Close()
	s.pidfd.close()
}

// runReader watches the connection: for cma any read means the owner went
// away; for shm it routes responses to the waiting workers. Owned by the
// transport (wg), stopped by kill.
func (s *session) runReader(wg *sync.WaitGroup) {
	defer wg.Done()
	defer s.release()
	defer func() {
		if s.isDead() { // every way out kills it
			s.base.forget(s.entry, s)
		}
	}()
	if s.kind == shwire.KindIPC {
		s.runExportReader()
		return
	}
	if s.maps != nil {
		s.runMapReader()
		return
	}
	buf := make([]byte, shwire.RespHeaderSize+shwire.MaxEntries+1)
	for {
		k, err := s.conn.Read(buf)
		if err != nil {
			s.kill(fmt.Errorf("%w: connection to the owner: %w", ErrPeerGone, err))
			return
		}
		if s.kind != shwire.KindShm {
			s.kill(fmt.Errorf("unexpected message from the owner: %w", shwire.ErrProtocol))
			return
		}
		chunk, count, seq, err := shwire.DecodeResp(buf[:k])
		if err == nil && int(chunk) >= s.chunks {
			err = fmt.Errorf("response for chunk %d of %d: %w", chunk, s.chunks, shwire.ErrProtocol)
		}
		var w int32
		if err == nil {
			if w = s.owner[chunk].Load(); w <= 0 || int(w) > len(s.replies) {
				err = fmt.Errorf("response for idle chunk %d: %w", chunk, shwire.ErrProtocol)
			}
		}
		if err != nil {
			s.kill(err)
			return
		}
		copy(s.status[chunk][:count], buf[shwire.RespHeaderSize:k])
		select {
		case s.replies[w-1] <- chunkReply{s: s, chunk: chunk, count: count, seq: seq}:
		default:
			s.kill(fmt.Errorf("reply queue of worker %d full: %w", w-1, shwire.ErrProtocol))
			return
		}
	}
}

// job is a group of slices for one worker, all to one session.
type job struct {
	s      *session
	slices []*engine.Slice
}

func failAll(slices []*engine.Slice, err error) {
	for _, s := range slices {
		s.Complete(err)
	}
}

// submit splits slices over the workers' queue. The caller checked that the
// transport is open and holds b.mu for reading.
func (b *base) submit(p *engine.Peer, slices []*engine.Slice, q chan<- job) {
	s := b.sessionFor(p, false)
	if s == nil {
		failAll(slices, fmt.Errorf("%s: no session to segment %q: %w", b.name, p.Name, ErrPeerGone))
		return
	}
	b.queue(s, slices, q)
}

// queue splits slices of session s over the workers' queue; the caller
// holds b.mu for reading.
func (b *base) queue(s *session, slices []*engine.Slice, q chan<- job) {
	per := max(1, (len(slices)+b.cfg.Workers-1)/b.cfg.Workers)
	for lo := 0; lo < len(slices); lo += per {
		part := slices[lo:min(lo+per, len(slices))]
		if !s.acquire() {
			failAll(part, fmt.Errorf("%s: session to segment %q closed: %w", b.name, s.peer, ErrPeerGone))
			continue
		}
		q <- job{s: s, slices: part}
	}
}

// closeQueue stops Submit from queueing, stops the workers and fails what
// is still queued.
func (b *base) closeQueue(q chan job) {
	b.mu.Lock() // waits for Submits sending now; later ones see stopped
	b.stopped = true
	b.mu.Unlock()
	b.cancel()
	b.work.Wait()
	for {
		select {
		case j := <-q:
			failAll(j.slices, engine.ErrClosed)
			j.s.release()
		default:
			return
		}
	}
}
