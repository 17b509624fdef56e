package client

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvferry/kvferry/engine/rpc"
	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/store/wire"
)

// Serving other clients' reads of this client's disk tier (issue 32;
// Mooncake's offload RPC: a holder reads the file into a client buffer of
// its own, and the reader pulls it with the transfer engine).
//
// A client with a disk tier maps a serve buffer (Config.DiskServeBufferSize),
// registers it with its engine as remotely readable, and answers TypeStore
// requests on the engine's RPC port, which carries the engine's cluster-key
// authentication and netguard's connection caps. A read request names an
// object's file; the holder takes room for it in the serve buffer (a grant),
// reads and verifies the file into it, and answers the grant's address and
// token. The reader reads the bytes with the transfer engine and releases
// the grant. A grant that is not released (a reader that died) lapses
// after its lease, at most diskServeMaxLease. A full buffer, or
// diskServeReaders file reads in progress, answers NO_AVAILABLE_HANDLE at
// once (the reader asks again), so no handler ever waits for room, the
// memory used never passes the buffer, and disk reads never take all the
// engine's RPC handlers.

// Serve tunables.
const (
	// diskServeAlign is the unit grants are taken in.
	diskServeAlign = 4096
	// diskServeMinLease and diskServeMaxLease bound a grant's lease (the
	// reader asks for the time its read may still take).
	diskServeMinLease = 100 * time.Millisecond
	diskServeMaxLease = 30 * time.Second
	// diskServeReaders bounds the file reads in progress at once: they run
	// on the engine's RPC handlers, which notifications and handshakes
	// share. Beyond it a request is answered busy.
	diskServeReaders = 8
)

// extent is a range of the serve buffer, in bytes from its start.
type extent struct{ off, n uint64 }

// diskGrant is room of the serve buffer handed to one reader.
type diskGrant struct {
	extent
	expiry time.Time
}

// diskServer serves reads of c's disk tier; owned by c, closed in
// teardown.
type diskServer struct {
	c      *Client
	mem    *cmem.Map
	remove func() // takes the RPC handler off the engine

	mu struct {
		sync.Mutex
		free    []extent // free room, by offset, merged
		grants  map[uint64]*diskGrant
		next    uint64 // the next token
		used    uint64 // bytes granted
		reading int    // file reads in progress (diskServeReaders)
		closed  bool
	}
	inflight sync.WaitGroup // file reads into mem in progress

	served, servedBytes, busy, lapsed atomic.Uint64
	peak                              atomic.Uint64 // the most bytes granted at once
}

// startDiskServer maps and registers the serve buffer and takes the
// engine's TypeStore requests (openDisk). An engine shared with another
// client that serves already keeps that one: this client's files are then
// read through promotions (logged once).
func (c *Client) startDiskServer() error {
	size := (c.cfg.DiskServeBufferSize + diskServeAlign - 1) &^ (diskServeAlign - 1)
	m, err := cmem.MapAnon(size)
	if err != nil {
		return fmt.Errorf("disk serve buffer of %d bytes: %w", size, err)
	}
	if err := c.e.RegisterMemory(m.Addr(), m.Len(), "*", true); err != nil {
		m.Close()
		return fmt.Errorf("register disk serve buffer of %d bytes: %w", size, err)
	}
	s := &diskServer{c: c, mem: m}
	s.mu.free = []extent{{0, size}}
	s.mu.grants = map[uint64]*diskGrant{}
	s.mu.next = 1
	remove, err := c.e.HandleRPC(rpc.TypeStore, s.handle)
	if err != nil {
		c.log.Warn("disk tier: another client of this engine serves disk reads; this one's files are read through promotions",
			"err", err)
		_ = c.e.UnregisterMemory(m.Addr())
		m.Close()
		return nil
	}
	s.remove = remove
	c.diskSrv = s
	return nil
}

// close stops serving: no new grants, the file reads in progress end, then
// the buffer is unregistered and unmapped. Readers still pulling from a
// grant fail their transfer (their bytes are never served half written:
// the reader checks its transfer's status).
func (s *diskServer) close() {
	s.remove()
	s.mu.Lock()
	s.mu.closed = true
	s.mu.Unlock()
	s.inflight.Wait()
	_ = s.c.e.UnregisterMemory(s.mem.Addr())
	_ = s.mem.Close()
}

// handle answers one TypeStore request (engine.RPCHandler).
func (s *diskServer) handle(_ context.Context, body []byte, peer net.Addr) ([]byte, error) {
	if len(body) == 0 {
		return nil, fmt.Errorf("disk serve request from %s: empty: %w", peer, wire.ErrInvalidParams)
	}
	var r diskReply
	switch body[0] {
	case diskOpRead:
		req, err := decodeDiskRead(body)
		if err != nil {
			return nil, fmt.Errorf("disk serve request from %s: %w", peer, err)
		}
		r = s.read(req)
	case diskOpRelease:
		token, err := decodeDiskRelease(body)
		if err != nil {
			return nil, fmt.Errorf("disk serve request from %s: %w", peer, err)
		}
		s.release(token)
	default:
		return nil, fmt.Errorf("disk serve request from %s: op %d: %w", peer, body[0], wire.ErrInvalidParams)
	}
	return r.append(make([]byte, 0, diskReplyLen+len(r.msg))), nil
}

// read takes a grant for req, reads the file into it and answers where.
func (s *diskServer) read(req diskRead) diskReply {
	fail := func(err error) diskReply {
		return diskReply{code: wire.CodeOf(err), msg: err.Error()}
	}
	disk := s.c.disk
	if req.disk != disk.ID() {
		return fail(fmt.Errorf("disk tier %q is not this client's (%s): %w", req.disk, disk.ID(), wire.ErrObjectNotFound))
	}
	if req.size == 0 || req.size > s.mem.Len() {
		return fail(fmt.Errorf("object of %d bytes, serve buffer of %d: %w", req.size, s.mem.Len(), wire.ErrInvalidParams))
	}
	lease := min(max(time.Duration(req.leaseMs)*time.Millisecond, diskServeMinLease), diskServeMaxLease)
	token, g, err := s.grant(req.size)
	if err != nil {
		s.busy.Add(1)
		return fail(err)
	}
	defer s.inflight.Done()
	err = disk.Read(req.tenant, req.key, req.uid, s.mem.Bytes()[g.off:g.off+req.size])
	s.mu.Lock()
	s.mu.reading--
	g.expiry = time.Now().Add(lease) // the lease runs from when the bytes are there
	s.mu.Unlock()
	if err != nil {
		s.release(token)
		s.c.logDiskFailure(req.key, err)
		return fail(err)
	}
	s.served.Add(1)
	s.servedBytes.Add(req.size)
	return diskReply{token: token, addr: uint64(s.mem.Addr()) + g.off}
}

// grant takes room for size bytes, reclaiming lapsed grants first when
// there is none; the caller is counted in inflight.
func (s *diskServer) grant(size uint64) (uint64, *diskGrant, error) {
	n := (size + diskServeAlign - 1) &^ (diskServeAlign - 1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return 0, nil, fmt.Errorf("disk serve: client closing: %w", wire.ErrUnavailableInStatus)
	}
	if s.mu.reading >= diskServeReaders {
		return 0, nil, fmt.Errorf("disk serve: %d file reads in progress: %w", s.mu.reading, wire.ErrNoAvailableHandle)
	}
	off, ok := s.takeLocked(n)
	if !ok {
		now := time.Now()
		for token, g := range s.mu.grants {
			if !g.expiry.IsZero() && now.After(g.expiry) {
				s.dropLocked(token, g)
				s.lapsed.Add(1)
			}
		}
		if off, ok = s.takeLocked(n); !ok {
			return 0, nil, fmt.Errorf("disk serve buffer busy (%d grants): %w", len(s.mu.grants), wire.ErrNoAvailableHandle)
		}
	}
	token := s.mu.next
	s.mu.next++
	g := &diskGrant{extent: extent{off, n}}
	s.mu.grants[token] = g
	s.mu.reading++
	s.mu.used += n
	if s.mu.used > s.peak.Load() {
		s.peak.Store(s.mu.used)
	}
	s.inflight.Add(1)
	return token, g, nil
}

// release gives a grant back; an unknown token (lapsed, or released
// already) is ignored.
func (s *diskServer) release(token uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g, ok := s.mu.grants[token]; ok {
		s.dropLocked(token, g)
	}
}

// dropLocked ends grant token.
func (s *diskServer) dropLocked(token uint64, g *diskGrant) {
	delete(s.mu.grants, token)
	s.mu.used -= g.n
	s.putLocked(g.extent)
}

// takeLocked takes n bytes, first fit.
func (s *diskServer) takeLocked(n uint64) (uint64, bool) {
	for i, f := range s.mu.free {
		if f.n < n {
			continue
		}
		if f.n == n {
			s.mu.free = append(s.mu.free[:i], s.mu.free[i+1:]...)
		} else {
			s.mu.free[i] = extent{f.off + n, f.n - n}
		}
		return f.off, true
	}
	return 0, false
}

// putLocked returns e to the free list, merged with its neighbours.
func (s *diskServer) putLocked(e extent) {
	free := s.mu.free
	i := 0
	for i < len(free) && free[i].off < e.off {
		i++
	}
	free = append(free, extent{})
	copy(free[i+1:], free[i:])
	free[i] = e
	if i+1 < len(free) && free[i].off+free[i].n == free[i+1].off {
		free[i].n += free[i+1].n
		free = append(free[:i+1], free[i+2:]...)
	}
	if i > 0 && free[i-1].off+free[i-1].n == free[i].off {
		free[i-1].n += free[i].n
		free = append(free[:i], free[i+1:]...)
	}
	s.mu.free = free
}

// usedBytes returns the bytes granted now.
func (s *diskServer) usedBytes() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.used
}
