package standalone

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/rpc"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/store/client"
	"github.com/kvferry/kvferry/store/wire"
)

// ServerConfig configures a real client's service for dummy clients.
type ServerConfig struct {
	// Port names the service's socket (SocketName; default DefaultPort).
	Port int
	// Logger receives sessions opening and closing; nil discards.
	Logger *slog.Logger
}

// Server serves dummy clients: it runs their store calls on its store
// client, with their shared buffers mapped into this process.
type Server struct {
	c   *client.Client
	log *slog.Logger
	lis *net.UnixListener
	ctx context.Context
	end context.CancelFunc
	wg  sync.WaitGroup

	mu struct {
		sync.Mutex
		closed   bool
		sessions map[[tokenBytes]byte]*session
		conns    map[net.Conn]struct{}
	}
}

// Serve starts serving dummy clients on the socket cfg.Port names, with
// store client c (which the caller keeps and closes after the Server).
func Serve(c *client.Client, cfg ServerConfig) (*Server, error) {
	if cfg.Port == 0 {
		cfg.Port = DefaultPort
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	lis, err := net.ListenUnix("unix", socketAddr(cfg.Port))
	if err != nil {
		return nil, fmt.Errorf("real client: listen on @%s: %w", SocketName(cfg.Port), err)
	}
	s := &Server{c: c, log: cfg.Logger, lis: lis}
	s.ctx, s.end = context.WithCancel(context.Background())
	s.mu.sessions = make(map[[tokenBytes]byte]*session)
	s.mu.conns = make(map[net.Conn]struct{})
	s.wg.Add(1)
	go s.accept() // owned by s; stops at Close
	s.log.Info("real client serving dummy clients", "socket", "@"+SocketName(cfg.Port), "segment", c.Hostname())
	return s, nil
}

// Close stops serving: it closes every dummy's connection, waits for the
// calls in flight, and unmaps every shared buffer. A second Close is
// harmless.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return nil
	}
	s.mu.closed = true
	conns := make([]net.Conn, 0, len(s.mu.conns))
	for c := range s.mu.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	s.end()
	err := s.lis.Close()
	for _, c := range conns {
		c.Close()
	}
	s.wg.Wait()
	return err
}

// Sessions returns how many dummy clients are connected.
func (s *Server) Sessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.mu.sessions)
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		conn, err := s.lis.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			s.log.Warn("real client accept failed", "err", err)
			select {
			case <-time.After(50 * time.Millisecond):
			case <-s.ctx.Done():
				return
			}
			continue
		}
		if !s.track(conn) {
			conn.Close()
			return
		}
		s.wg.Add(1)
		go s.serveConn(conn) // owned by s; ends when conn closes
	}
}

func (s *Server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return false
	}
	s.mu.conns[c] = struct{}{}
	return true
}

func (s *Server) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.mu.conns, c)
	s.mu.Unlock()
	c.Close()
}

// serveConn checks the peer and reads the connection's kind.
func (s *Server) serveConn(conn *net.UnixConn) {
	defer s.wg.Done()
	defer s.untrack(conn)
	if err := checkPeer(conn); err != nil {
		s.log.Warn("real client refused a connection", "err", err)
		return
	}
	_ = conn.SetReadDeadline(time.Now().Add(handshakeTimeout))
	var kind [1]byte
	if _, err := io.ReadFull(conn, kind[:]); err != nil {
		return
	}
	switch kind[0] {
	case connRPC:
		_ = conn.SetReadDeadline(time.Time{})
		s.serveRPC(conn)
	case connFD:
		s.serveFD(conn)
	default:
		s.log.Warn("real client closed a connection of unknown kind", "kind", kind[0])
	}
}

// checkPeer accepts processes of this user, and root.
func checkPeer(conn *net.UnixConn) error {
	raw, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("peer credentials: %w", cerr)
	}
	if cred.Uid != 0 && int(cred.Uid) != os.Getuid() {
		return fmt.Errorf("peer pid %d runs as uid %d, not %d", cred.Pid, cred.Uid, os.Getuid())
	}
	return nil
}

// serveRPC serves one control connection; its session ends with it.
func (s *Server) serveRPC(conn net.Conn) {
	svc := &Store{srv: s}
	rs := rpc.NewServer()
	if err := rs.RegisterName(service, svc); err != nil {
		s.log.Error("real client rpc service", "err", err)
		return
	}
	rs.ServeConn(conn)
	if sess := svc.sessionOrNil(); sess != nil {
		s.mu.Lock()
		delete(s.mu.sessions, sess.token)
		s.mu.Unlock()
		n := sess.close()
		s.log.Info("dummy client left", "pid", sess.pid, "buffers", n)
	}
}

// serveFD maps one shared buffer into a session.
func (s *Server) serveFD(conn *net.UnixConn) {
	code := s.receiveFD(conn)
	var b [fdReplyBytes]byte
	b[0], b[1], b[2], b[3] = byte(code), byte(code>>8), byte(code>>16), byte(code>>24)
	_ = conn.SetWriteDeadline(time.Now().Add(handshakeTimeout))
	_, _ = conn.Write(b[:])
}

func (s *Server) receiveFD(conn *net.UnixConn) int32 {
	buf := make([]byte, fdRequestBytes)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
	if err != nil || n != fdRequestBytes {
		s.log.Warn("real client: bad shared buffer registration", "bytes", n, "err", err)
		return int32(wire.ErrInvalidParams)
	}
	fd := -1
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil && len(msgs) == 1 {
		if fds, err := unix.ParseUnixRights(&msgs[0]); err == nil && len(fds) == 1 {
			fd = fds[0]
		}
	}
	if fd < 0 {
		return int32(wire.ErrInvalidParams)
	}
	defer unix.Close(fd) // the mapping keeps the pages
	var token [tokenBytes]byte
	copy(token[:], buf)
	addr := leUint64(buf[tokenBytes:])
	size := leUint64(buf[tokenBytes+8:])
	s.mu.Lock()
	sess := s.mu.sessions[token]
	s.mu.Unlock()
	if sess == nil {
		return int32(wire.ErrIllegalClient)
	}
	if err := sess.attach(fd, addr, size); err != nil {
		s.log.Warn("real client: cannot map a dummy's buffer", "pid", sess.pid, "addr", addr, "size", size, "err", err)
		return int32(wire.CodeOf(err))
	}
	return 0
}

func leUint64(b []byte) uint64 {
	var v uint64
	for i := 7; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v
}

// session is one dummy client's state: its shared buffers, mapped here.
type session struct {
	srv   *Server
	token [tokenBytes]byte
	pid   int
	// mu: calls hold it for reading while they use the mappings;
	// mapping, unmapping and closing hold it for writing.
	mu     sync.RWMutex
	bufs   map[uint64]*mapped // by the dummy's address
	closed bool
}

// mapped is a dummy's buffer mapped into this process.
type mapped struct {
	dummy uint64
	size  uint64
	m     *cmem.Map
}

func (m *mapped) real() uintptr { return m.m.Addr() }

// attach maps size bytes of fd (the dummy's buffer at addr) and registers
// them with the engine. The same buffer twice is one mapping.
func (x *session) attach(fd int, addr, size uint64) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("fstat: %v: %w", err, wire.ErrInvalidParams)
	}
	if size == 0 || addr == 0 || addr+size < addr || uint64(st.Size) < size {
		return fmt.Errorf("buffer %#x+%d of a %d-byte file: %w", addr, size, st.Size, wire.ErrInvalidParams)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return fmt.Errorf("session closed: %w", wire.ErrIllegalClient)
	}
	if old, ok := x.bufs[addr]; ok {
		if old.size == size {
			return nil
		}
		return fmt.Errorf("buffer %#x registered with %d bytes, now %d: %w", addr, old.size, size, wire.ErrInvalidParams)
	}
	for _, o := range x.bufs {
		if addr < o.dummy+o.size && o.dummy < addr+size {
			return fmt.Errorf("buffer %#x+%d overlaps %#x+%d: %w", addr, size, o.dummy, o.size, wire.ErrInvalidParams)
		}
	}
	m, err := cmem.MapShared(fd, size)
	if err != nil {
		return fmt.Errorf("%v: %w", err, wire.ErrInternal)
	}
	if err := x.srv.c.RegisterBuffer(m.Addr(), size); err != nil {
		m.Close()
		return err
	}
	x.bufs[addr] = &mapped{dummy: addr, size: size, m: m}
	return nil
}

// detach unregisters and unmaps the buffer at the dummy's address addr.
func (x *session) detach(addr uint64) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	b, ok := x.bufs[addr]
	if !ok {
		return fmt.Errorf("buffer %#x is not registered: %w", addr, wire.ErrInvalidParams)
	}
	delete(x.bufs, addr)
	return x.release(b)
}

func (x *session) release(b *mapped) error {
	err := x.srv.c.UnregisterBuffer(b.real())
	if cerr := b.m.Close(); err == nil {
		err = cerr
	}
	return err
}

// close drops every buffer (after the calls in flight) and returns how
// many there were.
func (x *session) close() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.closed = true
	n := len(x.bufs)
	for a, b := range x.bufs {
		if err := x.release(b); err != nil {
			x.srv.log.Warn("real client: releasing a dummy's buffer", "pid", x.pid, "err", err)
		}
		delete(x.bufs, a)
	}
	return n
}

// translate turns pieces of the dummy's memory into this process's
// addresses; every piece must lie in one of the session's buffers. The
// caller holds x.mu for reading.
func (x *session) translate(ps []Piece) ([]client.Buffer, error) {
	out := make([]client.Buffer, len(ps))
	for i, p := range ps {
		b := x.find(p.Addr, p.Size)
		if b == nil {
			return nil, fmt.Errorf("%#x+%d is in no buffer registered with the real client: %w", p.Addr, p.Size, wire.ErrInvalidParams)
		}
		out[i] = client.Buffer{Addr: b.real() + uintptr(p.Addr-b.dummy), Size: p.Size}
	}
	return out, nil
}

func (x *session) find(addr, n uint64) *mapped {
	for _, b := range x.bufs {
		if addr >= b.dummy && addr-b.dummy <= b.size && n <= b.size-(addr-b.dummy) {
			return b
		}
	}
	return nil
}

// Store is the RPC service of one control connection (net/rpc: every
// exported method is a call). Its first call must be Open.
type Store struct {
	srv *Server
	mu  sync.Mutex
	s   *session
}

func (st *Store) sessionOrNil() *session {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.s
}

// session returns the open session, read-locked (release with RUnlock).
func (st *Store) session() (*session, error) {
	x := st.sessionOrNil()
	if x == nil {
		return nil, fmt.Errorf("no session (call Open first): %w", wire.ErrIllegalClient)
	}
	x.mu.RLock()
	if x.closed {
		x.mu.RUnlock()
		return nil, fmt.Errorf("session closed: %w", wire.ErrIllegalClient)
	}
	return x, nil
}

// Open opens the connection's session.
func (st *Store) Open(a *OpenArgs, r *OpenReply) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.s != nil {
		r.Err = toRPCError(fmt.Errorf("session already open: %w", wire.ErrInvalidParams))
		return nil
	}
	x := &session{srv: st.srv, pid: a.PID, bufs: make(map[uint64]*mapped)}
	if _, err := rand.Read(x.token[:]); err != nil {
		r.Err = toRPCError(fmt.Errorf("session token: %v: %w", err, wire.ErrInternal))
		return nil
	}
	st.srv.mu.Lock()
	st.srv.mu.sessions[x.token] = x
	st.srv.mu.Unlock()
	st.s = x
	r.Token = x.token
	r.Hostname = st.srv.c.Hostname()
	r.MasterAddr = st.srv.c.MasterAddr()
	st.srv.log.Info("dummy client joined", "pid", a.PID)
	return nil
}

// groupsOf returns cfg for the items at idx of a call (their group ids).
func groupsOf(cfg client.ReplicateConfig, idx []int) client.ReplicateConfig {
	if cfg.GroupIDs == nil {
		return cfg
	}
	g := make([]string, len(idx))
	for n, i := range idx {
		if i < len(cfg.GroupIDs) {
			g[n] = cfg.GroupIDs[i]
		}
	}
	cfg.GroupIDs = g
	return cfg
}

// Put puts objects: those in shared buffers in one batch, the others one
// by one from their bytes.
func (st *Store) Put(a *PutArgs, r *PutReply) error {
	x, err := st.session()
	if err != nil {
		r.Errs = rpcErrs(fill(len(a.Items), err))
		return nil
	}
	defer x.mu.RUnlock()
	cfg := a.Config
	if a.HasGroups && cfg.GroupIDs == nil {
		cfg.GroupIDs = []string{}
	}
	errs := make([]error, len(a.Items))
	if cfg.GroupIDs != nil && len(cfg.GroupIDs) != len(a.Items) {
		r.Errs = rpcErrs(fill(len(a.Items), fmt.Errorf("%d group ids for %d keys: %w", len(cfg.GroupIDs), len(a.Items), wire.ErrInvalidParams)))
		return nil
	}
	ctx := st.srv.ctx
	if a.Publish {
		if len(a.Items) != 1 {
			r.Errs = rpcErrs(fill(len(a.Items), fmt.Errorf("publish of %d objects: %w", len(a.Items), wire.ErrInvalidParams)))
			return nil
		}
		r.Version, errs[0] = x.publish(ctx, a.Items[0], a.Expected, cfg)
		r.Errs = rpcErrs(errs)
		return nil
	}
	var keys []string
	var bufs [][]client.Buffer
	var idx []int
	for i, it := range a.Items {
		if it.Pieces == nil {
			continue
		}
		b, err := x.translate(it.Pieces)
		if err != nil {
			errs[i] = err
			continue
		}
		keys, bufs, idx = append(keys, it.Key), append(bufs, b), append(idx, i)
	}
	if len(keys) > 0 {
		var res []error
		if a.Upsert {
			res = st.srv.c.BatchUpsertFromMulti(ctx, keys, bufs, groupsOf(cfg, idx))
		} else {
			res = st.srv.c.BatchPutFromMulti(ctx, keys, bufs, groupsOf(cfg, idx))
		}
		for n, i := range idx {
			errs[i] = res[n]
		}
	}
	for i, it := range a.Items {
		if it.Pieces != nil {
			continue
		}
		one := groupsOf(cfg, []int{i})
		if a.Upsert {
			errs[i] = st.srv.c.Upsert(ctx, it.Key, it.Data, one)
		} else {
			errs[i] = st.srv.c.Put(ctx, it.Key, it.Data, one)
		}
	}
	r.Errs = rpcErrs(errs)
	return nil
}

// publish is a versioned put of one item.
func (x *session) publish(ctx context.Context, it PutItem, expected uint64, cfg client.ReplicateConfig) (uint64, error) {
	if it.Pieces == nil {
		if len(it.Data) == 0 {
			return 0, fmt.Errorf("publish %q: no data: %w", it.Key, wire.ErrInvalidParams)
		}
		p, err := cmem.Malloc(uint64(len(it.Data)))
		if err != nil {
			return 0, fmt.Errorf("publish %q: %v: %w", it.Key, err, wire.ErrInternal)
		}
		defer cmem.Free(p)
		copy(cmem.Bytes(p, uint64(len(it.Data))), it.Data)
		return x.srv.c.PublishFrom(ctx, it.Key, p, uint64(len(it.Data)), expected, cfg)
	}
	b, err := x.translate(it.Pieces)
	if err != nil {
		return 0, err
	}
	if len(b) != 1 {
		return 0, fmt.Errorf("publish %q from %d buffers: %w", it.Key, len(b), wire.ErrInvalidParams)
	}
	return x.srv.c.PublishFrom(ctx, it.Key, b[0].Addr, b[0].Size, expected, cfg)
}

// Get reads objects: into shared buffers in one batch, the others as
// bytes.
func (st *Store) Get(a *GetArgs, r *GetReply) error {
	n := len(a.Items)
	r.Sizes, r.Data = make([]uint64, n), make([][]byte, n)
	x, err := st.session()
	if err != nil {
		r.Errs = rpcErrs(fill(n, err))
		return nil
	}
	defer x.mu.RUnlock()
	errs := make([]error, n)
	ctx := st.srv.ctx
	var keys []string
	var bufs [][]client.Buffer
	var idx []int
	for i, it := range a.Items {
		if it.Pieces == nil {
			continue
		}
		b, err := x.translate(it.Pieces)
		if err != nil {
			errs[i] = err
			continue
		}
		keys, bufs, idx = append(keys, it.Key), append(bufs, b), append(idx, i)
	}
	if len(keys) > 0 {
		sizes, res := st.srv.c.BatchGetIntoMulti(ctx, keys, bufs)
		for k, i := range idx {
			r.Sizes[i], errs[i] = sizes[k], res[k]
		}
	}
	for i, it := range a.Items {
		if it.Pieces != nil {
			continue
		}
		data, err := st.srv.c.Get(ctx, it.Key)
		switch {
		case err != nil:
			errs[i] = err
		case uint64(len(data)) > it.Cap:
			errs[i] = fmt.Errorf("get %q: object of %d bytes, buffer of %d: %w", it.Key, len(data), it.Cap, wire.ErrInvalidParams)
		default:
			r.Sizes[i], r.Data[i] = uint64(len(data)), data
		}
	}
	r.Errs = rpcErrs(errs)
	return nil
}

func fill(n int, err error) []error {
	out := make([]error, n)
	for i := range out {
		out[i] = err
	}
	return out
}

// Exist reports which keys exist.
func (st *Store) Exist(a *KeysArgs, r *ExistReply) error {
	var err error
	r.Exist, err = st.srv.c.BatchIsExist(st.srv.ctx, a.Keys)
	r.Err = toRPCError(err)
	return nil
}

// Size returns the size of the one key.
func (st *Store) Size(a *KeysArgs, r *CountReply) error {
	if len(a.Keys) != 1 {
		r.Err = toRPCError(fmt.Errorf("size of %d keys: %w", len(a.Keys), wire.ErrInvalidParams))
		return nil
	}
	n, err := st.srv.c.GetSize(st.srv.ctx, a.Keys[0])
	r.Count, r.Err = int64(n), toRPCError(err)
	return nil
}

// Remove removes keys (one: its error in Err; several: per key).
func (st *Store) Remove(a *KeysArgs, r *ErrsReply) error {
	ctx := st.srv.ctx
	if len(a.Keys) == 1 {
		r.Err = toRPCError(st.srv.c.Remove(ctx, a.Keys[0], a.Force))
		return nil
	}
	errs, err := st.srv.c.BatchRemove(ctx, a.Keys, a.Force)
	r.Errs, r.Err = rpcErrs(errs), toRPCError(err)
	return nil
}

// RemoveMatching removes every object (All) or those matching Pattern.
func (st *Store) RemoveMatching(a *KeysArgs, r *CountReply) error {
	var err error
	if a.All {
		r.Count, err = st.srv.c.RemoveAll(st.srv.ctx, a.Force)
	} else {
		r.Count, err = st.srv.c.RemoveByRegex(st.srv.ctx, a.Pattern, a.Force)
	}
	r.Err = toRPCError(err)
	return nil
}

// Replicas looks up where the objects of keys live.
func (st *Store) Replicas(a *KeysArgs, r *ReplicasReply) error {
	ks, err := st.srv.c.ReplicaDescs(st.srv.ctx, a.Keys)
	r.Err = toRPCError(err)
	for _, k := range ks {
		r.Keys = append(r.Keys, KeyReplicas{Err: toRPCError(k.Err), Size: k.Size, Replicas: k.Replicas})
	}
	return nil
}

// Health checks the real client's master.
func (st *Store) Health(_ *Empty, r *ReplyErr) error {
	r.Err = toRPCError(st.srv.c.HealthCheck(st.srv.ctx))
	return nil
}

// Unregister drops one of the session's shared buffers.
func (st *Store) Unregister(a *UnregisterArgs, r *ReplyErr) error {
	x := st.sessionOrNil()
	if x == nil {
		r.Err = toRPCError(fmt.Errorf("no session: %w", wire.ErrIllegalClient))
		return nil
	}
	r.Err = toRPCError(x.detach(a.Addr))
	return nil
}

// Task creates a copy or move task (ID empty) or queries one (ID set).
func (st *Store) Task(a *TaskArgs, r *TaskReply) error {
	ctx := st.srv.ctx
	var err error
	switch {
	case a.ID != "":
		r.Info, err = st.srv.c.QueryTask(ctx, a.ID)
	case a.Move:
		if len(a.Targets) != 1 {
			err = fmt.Errorf("move task with %d targets: %w", len(a.Targets), wire.ErrInvalidParams)
			break
		}
		r.ID, err = st.srv.c.CreateMoveTask(ctx, a.Key, a.Source, a.Targets[0])
	default:
		r.ID, err = st.srv.c.CreateCopyTask(ctx, a.Key, a.Targets)
	}
	r.Err = toRPCError(err)
	return nil
}

// GetVersion reads an object once it has a version of at least Min.
func (st *Store) GetVersion(a *VersionArgs, r *VersionReply) error {
	var err error
	r.Data, r.Version, err = st.srv.c.GetVersioned(st.srv.ctx, a.Key, a.Min, a.Wait)
	r.Err = toRPCError(err)
	return nil
}
