package nixl

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/kvferry/kvferry/agent/nixl/publicdata"
	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/internal/handle"
	"github.com/kvferry/kvferry/internal/spin"
)

// Config configures an Agent.
type Config struct {
	// Name is the agent's NIXL name; required.
	Name string
	// Engine is the agent's transfer engine, created from ParseOptions'
	// EngineParams with auto-discovered transports; required. The agent owns
	// it from New on: Close closes it.
	Engine *engine.Engine
	// ProgressThread is NIXL's progress-thread flag. The engine progresses
	// on its own either way (a transfer's notification leaves as soon as
	// its data has landed, polled or not), so it only shows in the log.
	ProgressThread bool
	// Logger receives the agent's logs; nil discards them.
	Logger *slog.Logger
}

// Agent is one NIXL agent's backend engine. See the package comment.
type Agent struct {
	name     string
	e        *engine.Engine
	log      *slog.Logger
	progress bool
	self     *peer

	ctx       context.Context // cancelled by Close
	cancel    context.CancelFunc
	closeOnce sync.Once
	closeErr  error
	// gen grows whenever a handle that prepared requests may refer to goes
	// away (unload, deregister, disconnect), so posts re-check.
	gen atomic.Uint64

	mds   handle.Table[*md]
	xfers handle.Table[*xfer]

	mu struct {
		sync.Mutex
		peers map[string]*peer // by agent name, self included
		regs  map[uint64]*reg  // engine registrations by start address
	}
}

// peer is an agent this one can reach.
type peer struct {
	agent string
	info  string // its connection info: the segment name
	seg   engine.SegmentID
}

// reg is one engine registration, shared by NIXL registrations of the
// same range or of ranges inside it.
type reg struct {
	addr, len uint64
	refs      int
}

// md is a local registration or a loaded (remote-side) buffer.
type md struct {
	local     bool
	reg       *reg  // local: the registration holding a reference
	peer      *peer // remote side: whose buffer
	addr, len uint64
	dev       uint64
}

func (m *md) covers(addr, n uint64) bool {
	return addr >= m.addr && n <= m.len && addr-m.addr <= m.len-n
}

// xfer is a reusable transfer request: one batch per post.
type xfer struct {
	mu       sync.Mutex
	op       Op
	peer     *peer
	local    []Desc // as prepared / last validated
	remote   []Desc
	reqs     []engine.Request
	gen      uint64
	batch    engine.BatchID // live batch, 0 when none
	last     error          // outcome of the last finished post
	released bool
}

// New creates agent cfg.Name on cfg.Engine. On error the engine is not
// taken over: the caller still closes it.
func New(cfg Config) (*Agent, error) {
	if cfg.Name == "" {
		return nil, fmt.Errorf("nixl create: empty agent name: %w", engine.ErrInvalidArgument)
	}
	if cfg.Engine == nil {
		return nil, fmt.Errorf("nixl create agent %q: no engine: %w", cfg.Name, engine.ErrInvalidArgument)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := cfg.Engine
	a := &Agent{name: cfg.Name, e: e, log: log, progress: cfg.ProgressThread}
	a.ctx, a.cancel = context.WithCancel(context.Background())
	a.self = &peer{agent: cfg.Name, info: e.SegmentName(), seg: engine.LocalSegment}
	a.mu.peers = map[string]*peer{cfg.Name: a.self}
	a.mu.regs = map[uint64]*reg{}
	log.Info("nixl engine created", "agent", cfg.Name, "segment", e.SegmentName(), "progress_thread", a.progress)
	return a, nil
}

// Close cancels running transfers, drops every handle and closes the
// engine. A second Close is harmless and returns the
// first one's error.
func (a *Agent) Close() error {
	a.closeOnce.Do(func() {
		a.cancel()
		for _, x := range a.xfers.All() {
			_ = a.release(x)
		}
		a.closeErr = a.e.Close()
	})
	return a.closeErr
}

// Name returns the agent's name.
func (a *Agent) Name() string { return a.name }

// Engine returns the agent's engine (for its last error and metrics).
func (a *Agent) Engine() *engine.Engine { return a.e }

// ConnInfo returns what other agents load to reach this one: its engine's
// segment name.
func (a *Agent) ConnInfo() string { return a.self.info }

func (a *Agent) metaCtx() (context.Context, context.CancelFunc) {
	c := a.e.Config()
	return context.WithTimeout(a.ctx, c.MetadataTimeout+c.ConnectTimeout)
}

// ---- connections ----

func (a *Agent) peer(agent string) (*peer, error) {
	a.mu.Lock()
	p := a.mu.peers[agent]
	a.mu.Unlock()
	if p == nil {
		return nil, fmt.Errorf("agent %q: %w", agent, ErrUnknownAgent)
	}
	return p, nil
}

// LoadConnInfo opens the segment named info for agent; the same info again
// is a no-op, different info is refused with ErrNotAllowed (specs/nixl.md
// §3.6).
func (a *Agent) LoadConnInfo(agent, info string) error {
	if agent == "" || info == "" {
		return fmt.Errorf("load conn info of %q: empty name or info: %w", agent, engine.ErrInvalidArgument)
	}
	if agent == a.name {
		if info != a.self.info {
			return fmt.Errorf("load conn info of self %q: %q is not %q: %w", agent, info, a.self.info, ErrNotAllowed)
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
		return fmt.Errorf("load conn info of %q: has %q, got %q: %w", agent, p.info, info, ErrNotAllowed)
	}
	ctx, cancel := a.metaCtx()
	defer cancel()
	seg, err := a.e.OpenSegment(ctx, info)
	if err != nil {
		return fmt.Errorf("load conn info of %q: %w", agent, err)
	}
	if seg == engine.LocalSegment {
		return fmt.Errorf("load conn info of %q: %q is this agent's own segment: %w", agent, info, ErrMismatch)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if q := a.mu.peers[agent]; q != nil {
		if q.info == info {
			return nil
		}
		return fmt.Errorf("load conn info of %q: has %q, got %q: %w", agent, q.info, info, ErrNotAllowed)
	}
	a.mu.peers[agent] = &peer{agent: agent, info: info, seg: seg}
	return nil
}

// Connect checks that agent was loaded (the agent itself always is).
func (a *Agent) Connect(agent string) error {
	if agent == a.name {
		a.mu.Lock()
		a.mu.peers[agent] = a.self
		a.mu.Unlock()
		return nil
	}
	_, err := a.peer(agent)
	return err
}

// Disconnect forgets agent; a later LoadConnInfo fetches a fresh segment
// descriptor. Requests prepared for it fail their next post.
func (a *Agent) Disconnect(agent string) error {
	a.mu.Lock()
	p := a.mu.peers[agent]
	delete(a.mu.peers, agent)
	a.mu.Unlock()
	if p == nil {
		return fmt.Errorf("disconnect %q: %w", agent, ErrUnknownAgent)
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

// Register registers n bytes of memory type mem at addr (device dev). A
// range inside one registered before shares its engine registration.
func (a *Agent) Register(mem MemType, addr, n, dev uint64) (MD, error) {
	loc := "*"
	switch mem {
	case DRAM:
	case VRAM:
		if dev > 1<<16 {
			return 0, fmt.Errorf("register VRAM of device %d: %w", dev, engine.ErrInvalidArgument)
		}
		loc = fmt.Sprintf("cuda:%d", dev)
	default:
		return 0, fmt.Errorf("register memory type %d: %w", mem, ErrNotSupported)
	}
	if addr == 0 || n == 0 || addr+n < addr {
		return 0, fmt.Errorf("register %#x+%d: %w", addr, n, engine.ErrInvalidArgument)
	}
	if mem == VRAM {
		if err := a.checkVRAM(addr, n, loc); err != nil {
			return 0, err
		}
	}
	// A range inside an engine registration of this agent shares it (the
	// engine's index finds it in O(log n)).
	a.mu.Lock()
	var r *reg
	if er := a.e.RegionOf(addr, n); er != nil {
		if r = a.mu.regs[uint64(er.Addr)]; r != nil {
			r.refs++
		}
	}
	a.mu.Unlock()
	if r == nil {
		if err := a.e.RegisterMemory(uintptr(addr), n, loc, true); err != nil {
			return 0, fmt.Errorf("register %#x+%d: %w", addr, n, err)
		}
		r = &reg{addr: addr, len: n, refs: 1}
		a.mu.Lock()
		a.mu.regs[addr] = r
		a.mu.Unlock()
	}
	return MD(a.mds.Add(&md{local: true, reg: r, addr: addr, len: n, dev: dev})), nil
}

// checkVRAM refuses VRAM the process's GPU runtime (CUDA or HIP) does not
// know as GPU memory (engine.ErrNotSupported without one, engine.ErrInvalidArgument for
// host memory), before anything is registered.
func (a *Agent) checkVRAM(addr, n uint64, loc string) error {
	mc := a.e.Config().Memory
	if mc == nil {
		return fmt.Errorf("register VRAM %#x+%d: no GPU runtime: %w", addr, n, engine.ErrNotSupported)
	}
	info, err := mc.Classify(uintptr(addr), n, loc)
	if err != nil {
		return fmt.Errorf("register VRAM %#x+%d: %w", addr, n, err)
	}
	if !info.Kind.GPU() {
		return fmt.Errorf("register VRAM %#x+%d: the GPU runtime says it is %s memory: %w", addr, n, info.Kind, engine.ErrInvalidArgument)
	}
	return nil
}

// Deregister drops local registration h; the engine registration goes with
// its last reference.
func (a *Agent) Deregister(h MD) error {
	m, ok := a.mds.Get(uintptr(h))
	if !ok || !m.local {
		return fmt.Errorf("deregister md %#x: %w", uint64(h), engine.ErrInvalidArgument)
	}
	if _, ok := a.mds.Remove(uintptr(h)); !ok {
		return fmt.Errorf("deregister md %#x: %w", uint64(h), engine.ErrInvalidArgument)
	}
	a.gen.Add(1)
	a.mu.Lock()
	r := m.reg
	r.refs--
	last := r.refs == 0
	if last {
		delete(a.mu.regs, r.addr)
	}
	a.mu.Unlock()
	if last {
		if err := a.e.UnregisterMemory(uintptr(r.addr)); err != nil {
			return fmt.Errorf("deregister %#x+%d: %w", r.addr, r.len, err)
		}
	}
	return nil
}

// PublicData returns what a peer needs to check descriptors against local
// registration h: "kvf1 <addr hex> <len> <segment name>".
func (a *Agent) PublicData(h MD) (string, error) {
	m, ok := a.mds.Get(uintptr(h))
	if !ok || !m.local {
		return "", fmt.Errorf("public data of md %#x: %w", uint64(h), engine.ErrInvalidArgument)
	}
	return publicdata.Format(m.addr, m.len, a.self.info), nil
}

// LoadRemoteMD checks agent's buffer addr+n against its public data blob
// and the agent's connection info, and returns a handle for descriptors
// inside it. No network unless the cached segment descriptor predates the
// buffer.
func (a *Agent) LoadRemoteMD(agent string, mem MemType, addr, n, dev uint64, blob string) (MD, error) {
	if mem != DRAM && mem != VRAM {
		return 0, fmt.Errorf("load remote md of type %d: %w", mem, ErrNotSupported)
	}
	p, err := a.peer(agent)
	if err != nil {
		return 0, fmt.Errorf("load remote md: %w", err)
	}
	baddr, blen, seg, err := publicdata.Parse(blob)
	if err != nil {
		return 0, fmt.Errorf("load remote md of %q: %w: %w", agent, err, engine.ErrInvalidArgument)
	}
	if seg != p.info {
		return 0, fmt.Errorf("load remote md of %q: buffer of segment %q, agent is %q: %w", agent, seg, p.info, ErrMismatch)
	}
	m := &md{peer: p, addr: baddr, len: blen, dev: dev}
	if n == 0 || !m.covers(addr, n) {
		return 0, fmt.Errorf("load remote md of %q: %#x+%d outside its public data %#x+%d: %w", agent, addr, n, baddr, blen, ErrMismatch)
	}
	if ep := a.e.Peer(p.seg); ep != nil && !ep.Contains(baddr, blen) {
		// Registered after we opened the segment: refresh once now
		// rather than inside the first post.
		ctx, cancel := a.metaCtx()
		if err := a.e.CheckRange(ctx, p.seg, baddr, blen); err != nil {
			a.log.Debug("nixl refresh of peer descriptor", "peer", p.info, "err", err)
		}
		cancel()
	}
	return MD(a.mds.Add(m)), nil
}

// LoadLocalMD returns a remote-side handle of local registration h, for
// transfers inside this agent.
func (a *Agent) LoadLocalMD(h MD) (MD, error) {
	m, ok := a.mds.Get(uintptr(h))
	if !ok || !m.local {
		return 0, fmt.Errorf("load local md %#x: %w", uint64(h), engine.ErrInvalidArgument)
	}
	return MD(a.mds.Add(&md{peer: a.self, addr: m.addr, len: m.len, dev: m.dev})), nil
}

// UnloadMD drops a handle made by LoadRemoteMD or LoadLocalMD.
func (a *Agent) UnloadMD(h MD) error {
	m, ok := a.mds.Get(uintptr(h))
	if !ok || m.local {
		return fmt.Errorf("unload md %#x: %w", uint64(h), engine.ErrInvalidArgument)
	}
	a.mds.Remove(uintptr(h))
	a.gen.Add(1)
	return nil
}

// ---- notifications ----

// Notify sends msg (any bytes) to loaded agent.
func (a *Agent) Notify(agent, msg string) error {
	p, err := a.peer(agent)
	if err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	ctx, cancel := a.metaCtx()
	defer cancel()
	if err := a.e.Notify(ctx, p.seg, engine.Notification{Name: a.name, Msg: msg}); err != nil {
		return fmt.Errorf("notify agent %q: %w", agent, err)
	}
	return nil
}

// Notifications drains the received notifications: Name is the sender
// agent, Msg its message, oldest first.
func (a *Agent) Notifications() []engine.Notification {
	q := a.e.Notifications()
	if len(q) == 0 {
		// As Check: a caller that polls for notifications (nixlbench's
		// target) lets the threads that receive them run.
		spin.YieldThread()
	}
	return q
}
