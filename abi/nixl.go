package abi

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"structs"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/metadata"
	"github.com/kvferry/kvferry/engine/transport/samehost"
	"github.com/kvferry/kvferry/engine/transport/tcp"
	"github.com/kvferry/kvferry/internal/hostenv"
)

// This file is the Go side of the NIXL backend plugin (kvferry.h "NIXL
// support", specs/nixl.md §3). The C++ shim in plugin/ forwards every engine
// method here through the kvferry_nixl_* functions; all NIXL semantics live
// here: agents by name, per-buffer public data, reusable transfer requests,
// notifications carrying the sender agent's name, and progress.

// NIXL status codes (nixl_status_t, specs/nixl.md §2.4).
const (
	nixlInProg              = 1
	nixlSuccess             = 0
	nixlErrNotPosted        = -1
	nixlErrInvalidParam     = -2
	nixlErrBackend          = -3
	nixlErrNotFound         = -4
	nixlErrMismatch         = -5
	nixlErrNotAllowed       = -6
	nixlErrRepostActive     = -7
	nixlErrUnknown          = -8
	nixlErrNotSupported     = -9
	nixlErrRemoteDisconnect = -10
	nixlErrCanceled         = -11
)

// NIXL memory types and operations (nixl_mem_t, nixl_xfer_op_t).
const (
	nixlDRAM  = 0
	nixlVRAM  = 1
	nixlRead  = 0
	nixlWrite = 1
)

// Sentinels of the NIXL layer; nixlCode maps them (and the engine's) to
// status codes.
var (
	errNixlUnknownAgent = errors.New("unknown agent")
	errNixlMismatch     = errors.New("metadata mismatch")
	errNixlNotAllowed   = errors.New("not allowed")
	errNixlRepost       = errors.New("previous post still in progress")
	errNixlNotSupported = errors.New("not supported")
	errNixlReleased     = errors.New("request released")
	errNixlNotPosted    = errors.New("request not posted")
)

// nixlPublicPrefix starts every public-data blob; the version lets a later
// format be told apart.
const nixlPublicPrefix = "kvf1 "

// nixlBinaryTag ends the sender name of a notification whose message was not
// UTF-8 and travels base64-encoded (the notify RPC body is JSON, which would
// replace invalid bytes).
const nixlBinaryTag = "\x00b64"

// nixlDesc mirrors kvferry_nixl_desc_t (layout tested in nixl_test.go).
type nixlDesc struct {
	_      structs.HostLayout
	Addr   uint64
	Len    uint64
	DevID  uint64
	Handle uint64
}

// nixlOption is one backend option with its default.
type nixlOption struct{ key, def string }

// nixlOptions returns the backend options with their effective defaults:
// the MC_*/KVFERRY_* environment where set, else the built-in defaults.
func nixlOptions() []nixlOption {
	cfg := hostenv.StackConfig()
	lanes := cfg.TCP.Lanes
	if lanes <= 0 {
		lanes = tcp.DefaultLanes
	}
	stripe := cfg.TCP.StripeSize
	if stripe == 0 {
		stripe = tcp.DefaultStripeSize
	}
	timeout := cfg.Engine.TransferTimeout
	if timeout == 0 {
		timeout = engine.DefaultTransferTimeout
	}
	transport := cfg.Engine.ForceTransport
	if transport == "" {
		transport = "auto"
	}
	return []nixlOption{
		{"metadata", metadata.P2PHandshake},
		{"local_server_name", ""},
		{"transport", transport},
		{"tcp_lanes", strconv.Itoa(lanes)},
		{"slice_size", strconv.FormatUint(stripe, 10)},
		{"timeout_ms", strconv.FormatInt(timeout.Milliseconds(), 10)},
	}
}

// nixlAgents is the table of live NIXL engines.
var nixlAgents handles[*nixlAgent]

// nixlAgent is one NIXL agent's backend engine.
type nixlAgent struct {
	name     string
	eh       uintptr // handle in the engines table
	e        *engine.Engine
	progress bool
	self     *nixlPeer

	ctx    context.Context // cancelled by close
	cancel context.CancelFunc
	wg     sync.WaitGroup // the progress goroutine
	kick   chan struct{}  // wakes the progress goroutine; capacity 1
	// gen grows whenever a handle that prepared requests may refer to goes
	// away (unload, deregister, disconnect), so posts re-check.
	gen atomic.Uint64

	mds   handles[*nixlMD]
	xfers handles[*nixlXfer]

	mu struct {
		sync.Mutex
		peers map[string]*nixlPeer // by agent name, self included
		regs  []*nixlReg           // engine registrations
	}
	pending struct {
		sync.Mutex
		// batches posted with a notification, not yet observed terminal
		m map[engine.BatchID]struct{}
	}
}

// nixlPeer is an agent this one can reach.
type nixlPeer struct {
	agent string
	info  string // its connection info: the segment name
	seg   engine.SegmentID
}

// nixlReg is one engine registration, shared by NIXL registrations of the
// same range or of ranges inside it.
type nixlReg struct {
	addr, len uint64
	refs      int
}

// nixlMD is a local registration or a loaded (remote-side) buffer.
type nixlMD struct {
	local     bool
	reg       *nixlReg  // local: the registration holding a reference
	peer      *nixlPeer // remote side: whose buffer
	addr, len uint64
	dev       uint64
}

func (m *nixlMD) covers(addr, n uint64) bool {
	return addr >= m.addr && n <= m.len && addr-m.addr <= m.len-n
}

// nixlXfer is a reusable transfer request: one batch per post.
type nixlXfer struct {
	mu       sync.Mutex
	op       int
	peer     *nixlPeer
	local    []nixlDesc // as prepared / last validated
	remote   []nixlDesc
	reqs     []engine.Request
	gen      uint64
	batch    engine.BatchID // live batch, 0 when none
	last     int            // status of the last finished post
	released bool
}

// newNixlAgent creates the engine of agent name.
func newNixlAgent(name string, opts map[string]string, progress bool) (*nixlAgent, error) {
	if name == "" {
		return nil, fmt.Errorf("nixl create: empty agent name: %w", engine.ErrInvalidArgument)
	}
	known := map[string]bool{}
	for _, o := range nixlOptions() {
		known[o.key] = true
	}
	eopts := map[string]string{}
	for k, v := range opts {
		if !known[k] {
			return nil, fmt.Errorf("nixl create: option %q: unknown: %w", k, engine.ErrInvalidArgument)
		}
		if v != "" && k != "metadata" && k != "local_server_name" {
			eopts[k] = v
		}
	}
	conn := opts["metadata"]
	if conn == "" {
		conn = metadata.P2PHandshake
	}
	server := opts["local_server_name"]
	if server == "" {
		if conn == metadata.P2PHandshake {
			server = engine.FirstNonLoopbackIPv4()
		} else {
			server = name
		}
	}
	if t := strings.ToLower(strings.TrimSpace(eopts["transport"])); t == "auto" {
		delete(eopts, "transport")
	}
	eh, err := newEngine(conn, server, true, eopts)
	if err != nil {
		return nil, fmt.Errorf("nixl create agent %q: %w", name, err)
	}
	e, _ := engines.get(eh)
	a := &nixlAgent{name: name, eh: eh, e: e, progress: progress, kick: make(chan struct{}, 1)}
	a.ctx, a.cancel = context.WithCancel(context.Background())
	a.self = &nixlPeer{agent: name, info: e.SegmentName(), seg: engine.LocalSegment}
	a.mu.peers = map[string]*nixlPeer{name: a.self}
	a.pending.m = map[engine.BatchID]struct{}{}
	if progress {
		a.wg.Add(1)
		go a.runProgress()
	}
	logger.Info("nixl engine created", "agent", name, "segment", e.SegmentName(), "progress_thread", progress)
	return a, nil
}

// close cancels running transfers, drops every handle and closes the engine.
func (a *nixlAgent) close() {
	a.cancel()
	a.wg.Wait()
	for _, x := range a.xfers.all() {
		_ = a.releaseXfer(x)
	}
	engines.remove(a.eh)
	if err := a.e.Close(); err != nil {
		logger.Warn("nixl engine close", "agent", a.name, "err", err)
	}
}

func (a *nixlAgent) fail(err error) int {
	engineFail(a.e, err)
	return nixlCode(err)
}

func (a *nixlAgent) metaCtx() (context.Context, context.CancelFunc) {
	c := a.e.Config()
	return context.WithTimeout(a.ctx, c.MetadataTimeout+c.ConnectTimeout)
}

// ---- connections ----

func (a *nixlAgent) peer(agent string) (*nixlPeer, error) {
	a.mu.Lock()
	p := a.mu.peers[agent]
	a.mu.Unlock()
	if p == nil {
		return nil, fmt.Errorf("agent %q: %w", agent, errNixlUnknownAgent)
	}
	return p, nil
}

// loadConnInfo opens the segment named info for agent; the same info again
// is a no-op, different info is refused (specs/nixl.md §3.6).
func (a *nixlAgent) loadConnInfo(agent, info string) error {
	if agent == "" || info == "" {
		return fmt.Errorf("load conn info of %q: empty name or info: %w", agent, engine.ErrInvalidArgument)
	}
	if agent == a.name {
		if info != a.self.info {
			return fmt.Errorf("load conn info of self %q: %q is not %q: %w", agent, info, a.self.info, errNixlNotAllowed)
		}
		a.mu.Lock()
		a.mu.peers[agent] = a.self
		a.mu.Unlock()
		return nil
	}
	a.mu.Lock()
	p := a.mu.peers[agent]
	a.mu.Unlock()
	if p != nil {
		if p.info == info {
			return nil
		}
		return fmt.Errorf("load conn info of %q: has %q, got %q: %w", agent, p.info, info, errNixlNotAllowed)
	}
	ctx, cancel := a.metaCtx()
	defer cancel()
	seg, err := a.e.OpenSegment(ctx, info)
	if err != nil {
		return fmt.Errorf("load conn info of %q: %w", agent, err)
	}
	if seg == engine.LocalSegment {
		return fmt.Errorf("load conn info of %q: %q is this agent's own segment: %w", agent, info, errNixlMismatch)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if q := a.mu.peers[agent]; q != nil {
		if q.info == info {
			return nil
		}
		return fmt.Errorf("load conn info of %q: has %q, got %q: %w", agent, q.info, info, errNixlNotAllowed)
	}
	a.mu.peers[agent] = &nixlPeer{agent: agent, info: info, seg: seg}
	return nil
}

func (a *nixlAgent) connect(agent string) error {
	if agent == a.name {
		a.mu.Lock()
		a.mu.peers[agent] = a.self
		a.mu.Unlock()
		return nil
	}
	_, err := a.peer(agent)
	return err
}

func (a *nixlAgent) disconnect(agent string) error {
	a.mu.Lock()
	p := a.mu.peers[agent]
	delete(a.mu.peers, agent)
	a.mu.Unlock()
	if p == nil {
		return fmt.Errorf("disconnect %q: %w", agent, errNixlUnknownAgent)
	}
	a.gen.Add(1)
	if p != a.self {
		// A later load of the same info fetches a fresh descriptor.
		if err := a.e.RemoveSegment(p.info); err != nil {
			return fmt.Errorf("disconnect %q: %w", agent, err)
		}
	}
	return nil
}

// ---- memory ----

func (a *nixlAgent) register(mem int, addr, n, dev uint64) (uintptr, error) {
	if mem != nixlDRAM {
		return 0, fmt.Errorf("register memory type %d: %w", mem, errNixlNotSupported)
	}
	if addr == 0 || n == 0 || addr+n < addr {
		return 0, fmt.Errorf("register %#x+%d: %w", addr, n, engine.ErrInvalidArgument)
	}
	a.mu.Lock()
	var r *nixlReg
	for _, g := range a.mu.regs {
		if addr >= g.addr && addr-g.addr <= g.len && n <= g.len-(addr-g.addr) {
			r = g
			r.refs++
			break
		}
	}
	a.mu.Unlock()
	if r == nil {
		// Registration publishes the descriptor: no lock held across it.
		if err := a.e.RegisterMemory(uintptr(addr), n, "*", true); err != nil {
			return 0, fmt.Errorf("register %#x+%d: %w", addr, n, err)
		}
		r = &nixlReg{addr: addr, len: n, refs: 1}
		a.mu.Lock()
		a.mu.regs = append(a.mu.regs, r)
		a.mu.Unlock()
	}
	return a.mds.add(&nixlMD{local: true, reg: r, addr: addr, len: n, dev: dev}), nil
}

func (a *nixlAgent) deregister(h uintptr) error {
	m, ok := a.mds.get(h)
	if !ok || !m.local {
		return fmt.Errorf("deregister md %#x: %w", h, engine.ErrInvalidArgument)
	}
	if _, ok := a.mds.remove(h); !ok {
		return fmt.Errorf("deregister md %#x: %w", h, engine.ErrInvalidArgument)
	}
	a.gen.Add(1)
	a.mu.Lock()
	r := m.reg
	r.refs--
	last := r.refs == 0
	if last {
		a.mu.regs = slices.DeleteFunc(a.mu.regs, func(g *nixlReg) bool { return g == r })
	}
	a.mu.Unlock()
	if last {
		if err := a.e.UnregisterMemory(uintptr(r.addr)); err != nil {
			return fmt.Errorf("deregister %#x+%d: %w", r.addr, r.len, err)
		}
	}
	return nil
}

// publicData is what a peer needs to check descriptors against this
// registration: "kvf1 <addr hex> <len> <segment name>".
func (a *nixlAgent) publicData(h uintptr) (string, error) {
	m, ok := a.mds.get(h)
	if !ok || !m.local {
		return "", fmt.Errorf("public data of md %#x: %w", h, engine.ErrInvalidArgument)
	}
	return formatPublicData(m.addr, m.len, a.self.info), nil
}

// formatPublicData is the inverse of parsePublicData.
func formatPublicData(addr, n uint64, seg string) string {
	return nixlPublicPrefix + strconv.FormatUint(addr, 16) + " " + strconv.FormatUint(n, 10) + " " + seg
}

// parsePublicData splits a blob made by publicData.
func parsePublicData(blob string) (addr, n uint64, seg string, err error) {
	rest, ok := strings.CutPrefix(blob, nixlPublicPrefix)
	if !ok {
		return 0, 0, "", fmt.Errorf("public data %.40q: not kvferry's: %w", blob, engine.ErrInvalidArgument)
	}
	f := strings.SplitN(rest, " ", 3)
	if len(f) != 3 || f[2] == "" {
		return 0, 0, "", fmt.Errorf("public data %.40q: malformed: %w", blob, engine.ErrInvalidArgument)
	}
	addr, err1 := strconv.ParseUint(f[0], 16, 64)
	n, err2 := strconv.ParseUint(f[1], 10, 64)
	if err1 != nil || err2 != nil || n == 0 || addr+n < addr {
		return 0, 0, "", fmt.Errorf("public data %.40q: bad range: %w", blob, engine.ErrInvalidArgument)
	}
	return addr, n, f[2], nil
}

// loadRemoteMD checks a peer's buffer description against its public data
// and the agent's connection info; no network unless the cached segment
// descriptor predates the buffer.
func (a *nixlAgent) loadRemoteMD(agent string, mem int, addr, n, dev uint64, blob string) (uintptr, error) {
	if mem != nixlDRAM {
		return 0, fmt.Errorf("load remote md of type %d: %w", mem, errNixlNotSupported)
	}
	p, err := a.peer(agent)
	if err != nil {
		return 0, fmt.Errorf("load remote md: %w", err)
	}
	baddr, blen, seg, err := parsePublicData(blob)
	if err != nil {
		return 0, fmt.Errorf("load remote md of %q: %w", agent, err)
	}
	if seg != p.info {
		return 0, fmt.Errorf("load remote md of %q: buffer of segment %q, agent is %q: %w", agent, seg, p.info, errNixlMismatch)
	}
	m := &nixlMD{peer: p, addr: baddr, len: blen, dev: dev}
	if n == 0 || !m.covers(addr, n) {
		return 0, fmt.Errorf("load remote md of %q: %#x+%d outside its public data %#x+%d: %w", agent, addr, n, baddr, blen, errNixlMismatch)
	}
	if d, err := a.e.SegmentDescriptor(p.seg); err == nil {
		if _, ok := d.Find(baddr, blen); !ok {
			// Registered after we opened the segment: refresh once now
			// rather than inside the first post.
			ctx, cancel := a.metaCtx()
			if _, err := a.e.OpenSegmentNoCache(ctx, p.info); err != nil {
				logger.Debug("nixl refresh of peer descriptor failed", "peer", p.info, "err", err)
			}
			cancel()
		}
	}
	return a.mds.add(m), nil
}

func (a *nixlAgent) loadLocalMD(h uintptr) (uintptr, error) {
	m, ok := a.mds.get(h)
	if !ok || !m.local {
		return 0, fmt.Errorf("load local md %#x: %w", h, engine.ErrInvalidArgument)
	}
	return a.mds.add(&nixlMD{peer: a.self, addr: m.addr, len: m.len, dev: m.dev}), nil
}

func (a *nixlAgent) unloadMD(h uintptr) error {
	m, ok := a.mds.get(h)
	if !ok || m.local {
		return fmt.Errorf("unload md %#x: %w", h, engine.ErrInvalidArgument)
	}
	a.mds.remove(h)
	a.gen.Add(1)
	return nil
}

// ---- transfers ----

// validate checks a descriptor list pair and builds the requests into
// x.reqs.
func (a *nixlAgent) validate(x *nixlXfer, op int, p *nixlPeer, local, remote []nixlDesc) error {
	if op != nixlRead && op != nixlWrite {
		return fmt.Errorf("transfer: op %d: %w", op, engine.ErrInvalidArgument)
	}
	if len(local) != len(remote) || len(local) == 0 {
		return fmt.Errorf("transfer: %d local and %d remote descriptors: %w", len(local), len(remote), engine.ErrInvalidArgument)
	}
	gen := a.gen.Load()
	reqs := x.reqs[:0]
	for i := range local {
		l, r := &local[i], &remote[i]
		if l.Len != r.Len {
			return fmt.Errorf("transfer: descriptor %d: local %d bytes, remote %d: %w", i, l.Len, r.Len, engine.ErrInvalidArgument)
		}
		if l.Handle != 0 {
			m, ok := a.mds.get(uintptr(l.Handle))
			if !ok || !m.local || !m.covers(l.Addr, l.Len) {
				return fmt.Errorf("transfer: local descriptor %d %#x+%d outside its registration: %w", i, l.Addr, l.Len, engine.ErrAddressNotRegistered)
			}
		} else if l.Len != 0 && !a.e.Registered(l.Addr, l.Len) {
			return fmt.Errorf("transfer: local descriptor %d %#x+%d: %w", i, l.Addr, l.Len, engine.ErrAddressNotRegistered)
		}
		if r.Handle != 0 {
			m, ok := a.mds.get(uintptr(r.Handle))
			if !ok || m.local || m.peer != p || !m.covers(r.Addr, r.Len) {
				return fmt.Errorf("transfer: remote descriptor %d %#x+%d outside the buffers agent %q registered: %w", i, r.Addr, r.Len, p.agent, engine.ErrAddressNotRegistered)
			}
		} else if r.Len != 0 {
			ctx, cancel := a.metaCtx()
			err := a.e.CheckRange(ctx, p.seg, r.Addr, r.Len)
			cancel()
			if err != nil {
				return fmt.Errorf("transfer: remote descriptor %d of agent %q: %w", i, p.agent, err)
			}
		}
		reqs = append(reqs, engine.Request{Op: engine.OpCode(op), Source: uintptr(l.Addr), Target: p.seg, TargetOffset: r.Addr, Length: l.Len})
	}
	x.reqs = reqs
	x.op = op
	x.peer = p
	x.local = append(x.local[:0], local...)
	x.remote = append(x.remote[:0], remote...)
	x.gen = gen
	return nil
}

func (a *nixlAgent) prepXfer(op int, agent string, local, remote []nixlDesc) (uintptr, error) {
	p, err := a.peer(agent)
	if err != nil {
		return 0, fmt.Errorf("prepare transfer: %w", err)
	}
	x := &nixlXfer{last: nixlErrNotPosted}
	if err := a.validate(x, op, p, local, remote); err != nil {
		return 0, err
	}
	return a.xfers.add(x), nil
}

// postXfer starts a new batch for x (specs/nixl.md §3.9): the previous one
// must be terminal; it is freed first.
func (a *nixlAgent) postXfer(x *nixlXfer, op int, local, remote []nixlDesc, notif *engine.Notification) (int, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.released {
		return 0, fmt.Errorf("post: %w", errNixlReleased)
	}
	if x.batch != 0 {
		bs, err := a.e.BatchStatus(x.batch)
		if err == nil && bs.State == engine.StateWaiting {
			return 0, fmt.Errorf("post: %w", errNixlRepost)
		}
		a.finish(x, bs, err)
	}
	if op != x.op || x.gen != a.gen.Load() || !slices.Equal(local, x.local) || !slices.Equal(remote, x.remote) {
		p, err := a.peer(x.peer.agent)
		if err != nil {
			return 0, fmt.Errorf("post: %w", err)
		}
		if err := a.validate(x, op, p, local, remote); err != nil {
			x.local = x.local[:0] // validate again next time
			return 0, err
		}
	}
	id, err := a.e.AllocateBatch(len(x.reqs))
	if err != nil {
		return 0, fmt.Errorf("post: %w", err)
	}
	if notif != nil {
		err = a.e.SubmitWithNotify(id, x.reqs, *notif)
	} else {
		err = a.e.Submit(id, x.reqs)
	}
	if err != nil {
		_ = a.e.Cancel(a.ctx, id)
		_ = a.e.FreeBatch(id)
		return 0, fmt.Errorf("post to agent %q: %w", x.peer.agent, err)
	}
	x.batch = id
	if notif != nil {
		a.pending.Lock()
		a.pending.m[id] = struct{}{}
		a.pending.Unlock()
		if a.progress {
			select {
			case a.kick <- struct{}{}:
			default:
			}
		}
	}
	return nixlInProg, nil
}

// finish records the outcome of x's terminal batch and frees it; x.mu held.
func (a *nixlAgent) finish(x *nixlXfer, bs engine.BatchStatus, err error) {
	switch {
	case err != nil:
		x.last = nixlCode(err)
	case bs.State == engine.StateCompleted:
		x.last = nixlSuccess
	case bs.State == engine.StateCanceled:
		x.last = nixlErrCanceled
	case bs.Err != nil:
		x.last = nixlCode(bs.Err)
		engineFail(a.e, bs.Err)
	default:
		x.last = nixlErrBackend
	}
	_ = a.e.FreeBatch(x.batch)
	a.pending.Lock()
	delete(a.pending.m, x.batch)
	a.pending.Unlock()
	x.batch = 0
}

// checkXfer reports x's state without blocking.
func (a *nixlAgent) checkXfer(x *nixlXfer) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.released {
		return nixlErrInvalidParam
	}
	if x.batch == 0 {
		return x.last
	}
	bs, err := a.e.BatchStatus(x.batch)
	if err == nil && bs.State == engine.StateWaiting {
		return nixlInProg
	}
	a.finish(x, bs, err)
	return x.last
}

// releaseXfer cancels x's running batch (bounded) and drops x. On a failed
// cancel x stays valid so the caller can release it again.
func (a *nixlAgent) releaseXfer(x *nixlXfer) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.released {
		return fmt.Errorf("release: %w", errNixlReleased)
	}
	if x.batch != 0 {
		bs, err := a.e.BatchStatus(x.batch)
		if err == nil && bs.State == engine.StateWaiting {
			if err := a.e.Cancel(context.Background(), x.batch); err != nil {
				return fmt.Errorf("release: %w", err)
			}
			bs, err = a.e.BatchStatus(x.batch)
		}
		a.finish(x, bs, err)
	}
	x.released = true
	return nil
}

// ---- notifications ----

// encodeNotif makes the engine notification for msg from this agent.
func (a *nixlAgent) encodeNotif(msg string) engine.Notification {
	if utf8.ValidString(msg) {
		return engine.Notification{Name: a.name, Msg: msg}
	}
	return engine.Notification{Name: a.name + nixlBinaryTag, Msg: base64.StdEncoding.EncodeToString([]byte(msg))}
}

// decodeNotif undoes encodeNotif.
func decodeNotif(n engine.Notification) engine.Notification {
	if name, ok := strings.CutSuffix(n.Name, nixlBinaryTag); ok {
		if b, err := base64.StdEncoding.DecodeString(n.Msg); err == nil {
			return engine.Notification{Name: name, Msg: string(b)}
		}
	}
	return n
}

func (a *nixlAgent) genNotif(agent, msg string) error {
	p, err := a.peer(agent)
	if err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	ctx, cancel := a.metaCtx()
	defer cancel()
	if err := a.e.Notify(ctx, p.seg, a.encodeNotif(msg)); err != nil {
		return fmt.Errorf("notify agent %q: %w", agent, err)
	}
	return nil
}

// getNotifs observes finished batches (without a progress thread this is
// where their notifications go out) and drains the received notifications.
func (a *nixlAgent) getNotifs() []engine.Notification {
	if !a.progress {
		a.progressPending()
	}
	ns := a.e.Notifications()
	for i := range ns {
		ns[i] = decodeNotif(ns[i])
	}
	return ns
}

// observe reports whether batch id is done with; a completed batch's
// notification is sent as a side effect of BatchStatus.
func (a *nixlAgent) observe(id engine.BatchID) bool {
	bs, err := a.e.BatchStatus(id)
	if err == nil && bs.State == engine.StateWaiting {
		return false
	}
	a.pending.Lock()
	delete(a.pending.m, id)
	a.pending.Unlock()
	return true
}

// progressPending observes every pending batch once, without blocking.
func (a *nixlAgent) progressPending() {
	a.pending.Lock()
	if len(a.pending.m) == 0 {
		a.pending.Unlock()
		return
	}
	ids := make([]engine.BatchID, 0, len(a.pending.m))
	for id := range a.pending.m {
		ids = append(ids, id)
	}
	a.pending.Unlock()
	for _, id := range ids {
		a.observe(id)
	}
}

func (a *nixlAgent) oldestPending() (engine.BatchID, bool) {
	a.pending.Lock()
	defer a.pending.Unlock()
	var best engine.BatchID
	for id := range a.pending.m {
		if best == 0 || id < best {
			best = id
		}
	}
	return best, best != 0
}

// runProgress is the progress thread of an agent created with one: it waits
// for each batch posted with a notification and observes it, so the
// notification goes out without the caller polling. Owned by the agent,
// stopped by close.
func (a *nixlAgent) runProgress() {
	defer a.wg.Done()
	for {
		select {
		case <-a.ctx.Done():
			return
		case <-a.kick:
		}
		for {
			id, ok := a.oldestPending()
			if !ok {
				break
			}
			ctx, cancel := context.WithTimeout(a.ctx, a.e.Config().TransferTimeout+time.Second)
			_, _ = a.e.Wait(ctx, id)
			cancel()
			if a.ctx.Err() != nil {
				return
			}
			a.observe(id)
		}
	}
}

// ---- codes ----

// nixlCode maps an error to a nixl_status_t; the one Go -> NIXL table.
func nixlCode(err error) int {
	switch {
	case err == nil:
		return nixlSuccess
	case errors.Is(err, errPanic):
		return nixlErrUnknown
	case errors.Is(err, errNixlUnknownAgent), errors.Is(err, engine.ErrUnknownSegment):
		return nixlErrNotFound
	case errors.Is(err, errNixlMismatch):
		return nixlErrMismatch
	case errors.Is(err, errNixlNotAllowed):
		return nixlErrNotAllowed
	case errors.Is(err, errNixlRepost):
		return nixlErrRepostActive
	case errors.Is(err, errNixlNotPosted):
		return nixlErrNotPosted
	case errors.Is(err, errNixlNotSupported), errors.Is(err, engine.ErrNotSupported):
		return nixlErrNotSupported
	case errors.Is(err, engine.ErrCanceled):
		return nixlErrCanceled
	case disconnected(err):
		return nixlErrRemoteDisconnect
	case errors.Is(err, engine.ErrInvalidArgument), errors.Is(err, engine.ErrAddressNotRegistered),
		errors.Is(err, engine.ErrAddressOverlapped), errors.Is(err, engine.ErrTooManyRequests),
		errors.Is(err, errNixlReleased), errors.Is(err, errNULL):
		return nixlErrInvalidParam
	}
	return nixlErrBackend
}

// disconnected reports whether err means the peer went away: its
// connections were refused, reset or closed, or its process is gone (the
// same-host transports).
func disconnected(err error) bool {
	for _, target := range []error{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.EPIPE,
		syscall.ECONNABORTED, syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.ESRCH,
		io.EOF, io.ErrUnexpectedEOF, net.ErrClosed, samehost.ErrPeerGone} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}
