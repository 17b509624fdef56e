package samehost

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/descriptor"
	"github.com/kvferry/kvferry/engine/peerauth"
	"github.com/kvferry/kvferry/engine/transport/samehost/shwire"
	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/internal/netguard"
	"github.com/kvferry/kvferry/internal/ratelog"
)

// node is the owner side of one engine: the Unix socket that initiators of
// this host connect to, the control page with the registration mirror and
// epoch, and the sessions it serves. The cma and shm transports of an
// engine share one node; the last of them to close closes it.
type node struct {
	e      *engine.Engine
	cfg    Config
	log    *slog.Logger
	ln     *net.UnixListener // nil when the node cannot serve
	sock   string            // abstract address, "@kvferry-<pid>-<random>"
	extra  json.RawMessage   // what Describe publishes
	ctl    ctlView           // owner's read-write mapping
	ctlFd  int
	nonce  uint64
	wg     sync.WaitGroup
	closed atomic.Bool
	refs   int // guarded by nodes

	mu struct {
		sync.Mutex
		table    []entry // the mirror as last written
		sessions map[*ownerSession]struct{}
	}
	served, rejected atomic.Uint64
	logs             ratelog.Every
	guard            *peerauth.Guard // nil without a cluster key
	// key proves to the owner that a cma initiator may read its memory
	// (zero addr: the owner maps nothing out; hostmap.go); maps counts the
	// memfds handed out.
	key  mapKey
	maps atomic.Uint64
}

// ownerSession is one initiator connection as the owner sees it.
type ownerSession struct {
	c       *net.UnixConn
	kind    uint8
	pid     int
	uid     int
	slots   *shmap // cma: the initiator's epoch slots
	nslots  int
	staging *shmap // shm
	gone    atomic.Bool
	pinned  stagingPin  // shm: the staging memory registered with the CUDA driver
	wmu     sync.Mutex  // serializes writes: map replies and revokes
	mapped  atomic.Bool // cma: asked for a mapping, so it hears of revoked epochs
	ring    *ownerRing  // cma: the notification ring (nil: none; notify.go)
}

// nodes holds the node of every engine of this process that installed a
// same-host transport.
var nodes = struct {
	sync.Mutex
	m map[*engine.Engine]*node
}{m: make(map[*engine.Engine]*node)}

// acquireNode returns e's node, starting it on first use.
func acquireNode(e *engine.Engine, cfg Config) *node {
	nodes.Lock()
	defer nodes.Unlock()
	if n := nodes.m[e]; n != nil {
		n.refs++
		return n
	}
	n := newNode(e, cfg)
	n.refs = 1
	nodes.m[e] = n
	return n
}

// release drops a transport's reference; the last one closes the node.
func (n *node) release() {
	nodes.Lock()
	n.refs--
	last := n.refs == 0
	if last {
		delete(nodes.m, n.e)
	}
	nodes.Unlock()
	if last {
		n.close()
	}
}

// newNode starts serving. A node that cannot create its control page or
// socket logs why and serves nothing (its engine still initiates).
func newNode(e *engine.Engine, cfg Config) *node {
	n := &node{e: e, cfg: cfg, log: e.Logger().With("transport", "samehost"), ctlFd: -1}
	n.guard = peerauth.NewGuard(e.Auth(), peerauth.RoleSameHost, 0, n.log)
	n.mu.sessions = make(map[*ownerSession]struct{})
	ctl, fd, err := newMemfd("kvferry-ctl", ctlBytes, true)
	if err != nil {
		n.log.Warn("same-host transports cannot serve this engine", "segment", e.SegmentName(), "err", err)
		return n
	}
	n.ctl, n.ctlFd = ctlView{ctl}, fd
	n.nonce = rand.Uint64() | 1
	n.ctl.word(ctlOffNonce).Store(n.nonce)
	n.ctl.word(ctlOffEpoch).Store(1)
	n.ctl.word(ctlOffMagic).Store(ctlMagic)
	n.sock = fmt.Sprintf("@kvferry-%d-%016x", os.Getpid(), rand.Uint64())
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: n.sock, Net: "unixpacket"})
	if err != nil {
		n.log.Warn("same-host transports cannot serve this engine", "segment", e.SegmentName(), "err", err)
		n.closeCtl()
		return n
	}
	n.ln = ln
	info := peerInfo{Sock: n.sock, V: shwire.Version}
	if !cfg.NoMap {
		if k, err := newMapKey(); err == nil {
			n.key, info.Map = k, uint64(k.addr)
		}
	}
	n.extra, _ = json.Marshal(info)
	if cfg.AllowAnyPtracer {
		if err := unix.Prctl(unix.PR_SET_PTRACER, unix.PR_SET_PTRACER_ANY, 0, 0, 0); err != nil {
			n.log.Warn("prctl(PR_SET_PTRACER, ANY) failed", "err", err)
		} else {
			n.log.Info("any process of this user may now ptrace this one (KVFERRY_CMA_ALLOW_PTRACER)")
		}
	}
	n.mirror()
	n.wg.Add(1)
	go n.runAccept()
	n.log.Debug("same-host node listening", "segment", e.SegmentName(), "sock", n.sock)
	return n
}

// describe publishes the socket under name and refreshes the mirror.
func (n *node) describe(seg *descriptor.Segment, name string) {
	if n.ln == nil || n.closed.Load() {
		return
	}
	n.mirror()
	if seg.Extra == nil {
		seg.Extra = make(map[string]json.RawMessage)
	}
	seg.Extra[name] = n.extra
}

// mirror copies the engine's registered regions into the control page, all
// of them; it runs when the descriptor is rebuilt (Describe), so its cost
// is amortized over the registrations since the last rebuild. Single
// registrations and removals in between go through regionsAdded and
// regionsRemoved. When a region went away that no removal reported, it
// bumps the epoch and waits until no cma initiator works in an older epoch.
func (n *node) mirror() { n.withTable(n.mirrorLocked) }

func (n *node) mirrorLocked() {
	// The snapshot is taken under n.mu, so that a removal reported after it
	// (regionsRemoved, which also takes n.mu) is never undone by it.
	regs := n.e.Regions()
	rows := make([]entry, 0, len(regs))
	for _, r := range regs {
		if n.e.RemoteServable(r) { // with a cluster key, only remotely accessible memory
			rows = append(rows, entry{addr: uint64(r.Addr), length: r.Length})
		}
	}
	removed := false
	j := 0
	for _, o := range n.mu.table { // both sorted by address
		if o.length == 0 {
			continue // a removal already reported and drained
		}
		for j < len(rows) && rows[j].addr < o.addr {
			j++
		}
		if j == len(rows) || rows[j] != o {
			removed = true
			break
		}
	}
	n.ctl.writeTable(n.mu.table, rows)
	n.mu.table = rows
	if removed {
		n.bumpEpochLocked()
	}
}

// maxShiftRows bounds the rows a registration in front of others moves
// inside the seqlock (readers retry meanwhile).
const maxShiftRows = 4096

// regionsAdded mirrors new regions at once where that is cheap: appended
// after the last row, in the row a removed region of the same start left
// behind, or in front of at most maxShiftRows rows. Others wait for the next mirror (the engine rebuilds its
// descriptor, and so mirrors, within its publish delay, and before any
// peer fetches a descriptor that lists them).
func (n *node) regionsAdded(rs []*engine.Region) { n.withTable(func() { n.addLocked(rs) }) }

func (n *node) addLocked(rs []*engine.Region) {
	for _, r := range rs {
		e := entry{addr: uint64(r.Addr), length: r.Length}
		t := n.mu.table
		i := sort.Search(len(t), func(i int) bool { return t[i].addr >= e.addr })
		fits := i+1 >= len(t) || t[i+1].addr >= e.addr+e.length
		switch {
		case i == len(t) && len(t) < ctlEntries:
			n.ctl.update(func() {
				n.ctl.entryAddr(uint64(i)).Store(e.addr)
				n.ctl.entryLen(uint64(i)).Store(e.length)
				n.ctl.word(ctlOffCount).Store(uint64(i + 1))
			})
			n.mu.table = append(t, e)
		case i < len(t) && i < ctlEntries && t[i].addr == e.addr && t[i].length == 0 && fits:
			n.ctl.update(func() { n.ctl.entryLen(uint64(i)).Store(e.length) })
			t[i] = e
		case i < len(t) && len(t) < ctlEntries && len(t)-i <= maxShiftRows && t[i].addr >= e.addr+e.length:
			// In front of or between rows: shift the rows after it. An
			// initiator whose descriptor already lists the region (one
			// registered again after a mirror compacted its tombstone away)
			// does not refresh it, so waiting for the next mirror would
			// refuse its transfers meanwhile.
			n.ctl.update(func() {
				for k := len(t); k > i; k-- {
					n.ctl.entryAddr(uint64(k)).Store(t[k-1].addr)
					n.ctl.entryLen(uint64(k)).Store(t[k-1].length)
				}
				n.ctl.entryAddr(uint64(i)).Store(e.addr)
				n.ctl.entryLen(uint64(i)).Store(e.length)
				n.ctl.word(ctlOffCount).Store(uint64(len(t) + 1))
			})
			n.mu.table = slices.Insert(t, i, e)
		}
	}
}

// regionsRemoved takes removed regions out of the mirror at once (their
// rows stay as empty tombstones until the next mirror compacts the table),
// bumps the epoch and waits until no cma initiator still works in an older
// one, so that no initiator copies into them once UnregisterMemory
// returns.
func (n *node) regionsRemoved(rs []*engine.Region) { n.withTable(func() { n.removeLocked(rs) }) }

func (n *node) removeLocked(rs []*engine.Region) {
	hit := false
	for _, r := range rs {
		t := n.mu.table
		i := sort.Search(len(t), func(i int) bool { return t[i].addr >= uint64(r.Addr) })
		if i < len(t) && t[i].addr == uint64(r.Addr) && t[i].length != 0 {
			if i < ctlEntries { // rows past the table's capacity are not shared
				n.ctl.update(func() { n.ctl.entryLen(uint64(i)).Store(0) })
				hit = true
			}
			t[i].length = 0
		}
	}
	if hit {
		n.bumpEpochLocked()
	}
}

// withTable runs f with n.mu held, unless the node serves no control page
// or is closed.
func (n *node) withTable(f func()) {
	if n.ctl.m == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed.Load() {
		return
	}
	f()
}

// bumpEpochLocked starts a new registration epoch and waits until no cma
// initiator works in an older one (bounded by the transfer timeout); n.mu
// held.
func (n *node) bumpEpochLocked() {
	ep := n.ctl.word(ctlOffEpoch).Add(1)
	if !n.drainLocked(ep, time.Now().Add(n.cfg.Timeout)) {
		n.log.Error("a cma initiator still works in an old registration epoch; unregistered memory may still be written",
			"segment", n.e.SegmentName(), "epoch", ep, "timeout", n.cfg.Timeout)
	}
	n.revokeLocked(ep)
}

// drainLocked waits until every slot of every live cma session is idle or
// in epoch ep or later; false when the deadline passed first. n.mu is held
// (sessions are not unmapped while we read their slots).
func (n *node) drainLocked(ep uint64, deadline time.Time) bool {
	for s := range n.mu.sessions {
		if s.kind != shwire.KindCMA && s.kind != shwire.KindIPC {
			continue
		}
		for i := range s.nslots {
			w := slotWord(s.slots, i)
			for wait := 10 * time.Microsecond; ; wait = min(2*wait, time.Millisecond) {
				v := w.Load()
				if v == 0 || v >= ep || s.gone.Load() {
					break
				}
				if time.Now().After(deadline) {
					return false
				}
				time.Sleep(wait)
			}
		}
	}
	return true
}

// runAccept accepts sessions; owned by the node, stopped by close.
func (n *node) runAccept() {
	defer n.wg.Done()
	var backoff netguard.Backoff
	// Connections still in their handshake count too, so a flood of
	// silent ones cannot pile up goroutines beside the sessions. Every
	// local process shares the one address of the socket: at the cap a
	// new connection displaces the oldest one that has not sent its hello
	// (netguard.Limiter), and a session, once its hello arrived, holds its
	// slot for its life (Slot.Begin without End).
	limit := netguard.NewLimiter(n.cfg.MaxSessions+64, 0).WithFrames(1, func([]byte) bool { return true }) // a datagram is a whole hello
	for {
		c, err := n.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || n.closed.Load() {
				return
			}
			d := backoff.Next() // EMFILE and the like
			n.warn("accept", "same-host accept failed", "err", err, "retry_in", d)
			time.Sleep(d)
			continue
		}
		backoff.Reset()
		slot, err := limit.Admit(nil, c)
		if err != nil {
			n.warn("limit", "same-host connection refused", "err", err)
			c.Close()
			continue
		}
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			defer slot.Release()
			n.serve(c, slot)
		}()
	}
}

// add registers a session; false when closed or at the session limit.
func (n *node) add(s *ownerSession) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed.Load() || len(n.mu.sessions) >= n.cfg.MaxSessions {
		return false
	}
	n.mu.sessions[s] = struct{}{}
	return true
}

// remove forgets a session and unmaps its memory.
func (n *node) remove(s *ownerSession) {
	s.gone.Store(true)
	n.mu.Lock()
	delete(n.mu.sessions, s)
	n.mu.Unlock()
	s.slots.Close()
	s.unpinStaging()
	s.staging.Close()
}

// serve runs one session: the handshake, then (shm) requests until the
// initiator goes away. Once the hello arrived the session is never
// displaced from slot.
func (n *node) serve(c *net.UnixConn, slot *netguard.Slot) {
	defer c.Close()
	if err := n.guard.Accept(c); err != nil {
		return // counted and logged by the guard
	}
	_ = c.SetDeadline(time.Now().Add(n.e.Config().ConnectTimeout))
	buf := make([]byte, shwire.MaxReqSize+1)
	k, err := c.Read(buf)
	if err != nil {
		return
	}
	h, err := shwire.DecodeHello(buf[:k])
	if err != nil {
		n.warn("hello", "same-host session refused", "err", err)
		return
	}
	if !slot.Begin() {
		return // displaced while its hello was on its way
	}
	s := &ownerSession{c: c, kind: h.Kind}
	s.pid, s.uid, _ = peerCred(c)
	var r shwire.Reply
	r.Nonce = n.nonce
	var fds []int
	switch h.Kind {
	case shwire.KindCMA, shwire.KindIPC:
		if h.Slots == 0 || h.Slots > maxSlots {
			n.refuse(c, shwire.StatusUnsupported)
			return
		}
		m, fd, err := newMemfd("kvferry-slots", slotBytes, false)
		if err != nil {
			n.log.Warn("same-host session: no slot page", "err", err)
			n.refuse(c, shwire.StatusInternal)
			return
		}
		defer unix.Close(fd)
		s.slots, s.nslots = m, int(h.Slots)
		r.Slots, r.ProbeAddr = h.Slots, n.ctl.probeAddr()
		fds = []int{n.ctlFd, fd}
		if h.Kind == shwire.KindCMA && h.Flags&shwire.FlagNotifyRing != 0 && !n.cfg.NoNotifyRing {
			if ring, rfd, err := n.newOwnerRing(s); err != nil {
				n.log.Warn("same-host session: no notification ring; notifications come by RPC", "err", err)
			} else {
				defer unix.Close(rfd)
				s.ring = ring
				fds = append(fds, rfd)
			}
		}
	case shwire.KindShm:
		chunks := min(max(int(h.Chunks), 1), maxChunks)
		cb := clampChunkBytes(h.ChunkBytes)
		m, fd, err := newMemfd("kvferry-staging", uint64(chunks)*cb, false)
		if err != nil {
			n.log.Warn("same-host session: no staging memory", "err", err)
			n.refuse(c, shwire.StatusInternal)
			return
		}
		defer unix.Close(fd)
		s.staging = m
		r.Chunks, r.ChunkBytes = uint32(chunks), cb
		fds = []int{fd}
	default:
		n.refuse(c, shwire.StatusUnsupported)
		return
	}
	if !n.add(s) {
		s.slots.Close()
		s.staging.Close()
		if s.ring != nil {
			s.ring.m.Close()
		}
		n.refuse(c, shwire.StatusBusy)
		return
	}
	defer n.remove(s)
	if s.ring != nil {
		// Drained from before the reply goes: the initiator may push a
		// notification (and its application see the batch complete) before
		// this goroutine runs again, and the owner's next Notifications
		// call must find it.
		n.e.AddNotifySource(s.ring)
		defer func() {
			n.e.RemoveNotifySource(s.ring) // takes what the ring still holds
			s.ring.m.Close()
		}()
	}
	var rb [shwire.ReplySize]byte
	r.Encode(rb[:])
	if _, _, err := c.WriteMsgUnix(rb[:], unix.UnixRights(fds...), nil); err != nil {
		return
	}
	_ = c.SetDeadline(time.Time{})
	n.log.Debug("same-host session opened", "transport", kindName(h.Kind), "peer_pid", s.pid, "peer_uid", s.uid)
	switch h.Kind {
	case shwire.KindShm:
		n.serveShm(s, buf, r.Chunks, r.ChunkBytes)
	case shwire.KindIPC:
		n.serveExports(s, buf)
	default:
		if n.key.addr != 0 {
			n.serveMaps(s, buf) // map requests until it goes away
			break
		}
		// A cma initiator sends nothing more but wake messages; a read
		// ends when it goes away.
		for {
			k, err := c.Read(buf)
			if err != nil || !shwire.IsWake(buf[:k]) {
				break
			}
			n.e.WakeNotificationWaiters()
		}
	}
	n.log.Debug("same-host session closed", "transport", kindName(h.Kind), "peer_pid", s.pid)
}

func (n *node) refuse(c *net.UnixConn, status uint32) {
	var rb [shwire.ReplySize]byte
	shwire.Reply{Status: status}.Encode(rb[:])
	_, _ = c.Write(rb[:])
}

// serveShm serves staging requests: every piece is checked and pinned
// against the engine's own registry (so a piece outside registered memory,
// or in a region being unregistered, is refused), then all pieces of a
// request are copied with one C call.
func (n *node) serveShm(s *ownerSession, buf []byte, chunks uint32, chunkBytes uint64) {
	ops := make([]cmem.Op, 0, shwire.MaxEntries)
	pins := make([]*engine.Region, 0, shwire.MaxEntries)
	resp := make([]byte, shwire.RespHeaderSize+shwire.MaxEntries)
	var dev devOps // pieces of device memory
	var devIdx []int
	for {
		k, err := s.c.Read(buf)
		if err != nil {
			return
		}
		chunk, count, seq, err := shwire.DecodeReq(buf[:min(k, shwire.MaxReqSize+1)])
		if err == nil && chunk >= chunks {
			err = fmt.Errorf("chunk %d of %d: %w", chunk, chunks, shwire.ErrProtocol)
		}
		if err != nil {
			n.warn("request", "same-host session: bad request, closing", "peer_pid", s.pid, "err", err)
			return
		}
		base := s.staging.addr() + uintptr(uint64(chunk)*chunkBytes)
		st := resp[shwire.RespHeaderSize : shwire.RespHeaderSize+int(count)]
		for i := range int(count) {
			e := shwire.ReqEntryAt(buf, i)
			if e.Length == 0 || e.Offset > chunkBytes || e.Length > chunkBytes-e.Offset ||
				(e.Op != uint8(engine.OpRead) && e.Op != uint8(engine.OpWrite)) {
				st[i] = shwire.EntryBad
				continue
			}
			pin := n.e.PinRemote(e.Addr, e.Length)
			if pin == nil {
				st[i] = shwire.EntryRejected
				n.rejected.Add(1)
				n.logReject(s.pid, e)
				continue
			}
			st[i] = shwire.EntryOK
			op := cmem.Op{Dst: uintptr(e.Addr), Src: base + uintptr(e.Offset), N: e.Length}
			if e.Op == uint8(engine.OpRead) {
				op.Dst, op.Src = op.Src, op.Dst
			}
			if pin.Kind == engine.MemoryDevice {
				dev.add(pin.Device, op)
				devIdx = append(devIdx, i)
			} else {
				ops = append(ops, op)
			}
			pins = append(pins, pin)
		}
		cmem.CopyBatch(ops)
		if len(devIdx) > 0 {
			if err := dev.copy(n.cfg.GPU, func() { s.pinStaging(n.cfg.GPU) }); err != nil {
				n.log.Warn("shm: owner's device copy failed", "peer_pid", s.pid, "err", err)
				for _, i := range devIdx {
					st[i] = shwire.EntryDevice
				}
			}
			dev.reset()
			devIdx = devIdx[:0]
		}
		for _, p := range pins {
			p.Release()
		}
		n.served.Add(uint64(len(ops)))
		ops, pins = ops[:0], pins[:0]
		clear(pins[:cap(pins)])
		shwire.PutRespHeader(resp, chunk, count, seq)
		if _, err := s.c.Write(resp[:shwire.RespHeaderSize+int(count)]); err != nil {
			return
		}
	}
}

func (n *node) logReject(pid int, e shwire.ReqEntry) {
	n.warn("reject", "shm request outside registered memory refused", "peer_pid", pid, "addr", e.Addr, "bytes", e.Length, "op", engine.OpCode(e.Op))
}

// warn logs at Warn, at most one line per kind every few seconds.
func (n *node) warn(kind, msg string, args ...any) {
	if ok, held := n.logs.Allow(kind); ok {
		if held > 0 {
			args = append(args, "suppressed", held)
		}
		n.log.Warn(msg, args...)
	}
}

// close marks the epoch closed, waits (bounded) until no cma initiator
// copies any more, ends every session and frees the control page.
func (n *node) close() {
	if n.closed.Swap(true) {
		return
	}
	if n.ln == nil {
		return
	}
	n.mu.Lock()
	n.ctl.word(ctlOffEpoch).Store(epochClosed)
	if !n.drainLocked(epochClosed, time.Now().Add(n.cfg.Timeout)) {
		n.log.Error("a cma initiator still copies after the owner closed", "segment", n.e.SegmentName())
	}
	conns := make([]*net.UnixConn, 0, len(n.mu.sessions))
	for s := range n.mu.sessions {
		conns = append(conns, s.c)
	}
	n.mu.Unlock()
	n.ln.Close()
	for _, c := range conns {
		c.Close()
	}
	n.wg.Wait()
	n.closeCtl()
	n.key.free()
}

func (n *node) closeCtl() {
	n.ctl.m.Close()
	if n.ctlFd >= 0 {
		unix.Close(n.ctlFd)
		n.ctlFd = -1
	}
}

func kindName(k uint8) string {
	switch k {
	case shwire.KindCMA:
		return NameCMA
	case shwire.KindShm:
		return NameShm
	case shwire.KindIPC:
		return NameNVLink
	}
	return "unknown"
}

// peerInfo is what an owner publishes in kvferry_extra["cma"] and ["shm"].
type peerInfo struct {
	// Sock is the abstract Unix socket address of the owner's node.
	Sock string `json:"sock"`
	// V is the session protocol version.
	V int `json:"v"`
	// Map, when not zero, is the owner-side address of the key a cma
	// initiator reads with process_vm_readv to ask for mappings of
	// memfd-backed memory (hostmap.go); absent from older owners.
	Map uint64 `json:"map,omitempty"`
}
