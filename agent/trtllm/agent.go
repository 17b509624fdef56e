package trtllm

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/gpu"
)

// Config configures an Agent.
type Config struct {
	// Name is the agent's name; required.
	Name string
	// Engine is the agent's transfer engine, created from ParseOptions'
	// EngineParams; required. The agent owns it from New on: Close closes
	// it.
	Engine *engine.Engine
	// NotifyWait bounds how long Notifications waits for a message when
	// none is queued. Zero returns at once; ParseOptions gives
	// DefaultNotifyWait unless told otherwise.
	NotifyWait time.Duration
	// Logger receives the agent's logs; nil discards them.
	Logger *slog.Logger
}

// Agent is one TensorRT-LLM transfer agent on its own engine. See the
// package comment.
type Agent struct {
	name       string
	e          *engine.Engine
	log        *slog.Logger
	notifyWait time.Duration

	ctx       context.Context // cancelled by Close
	cancel    context.CancelFunc
	closeOnce sync.Once
	closeErr  error

	// regMu serializes registration changes, which publish the descriptor
	// (I/O with an HTTP or etcd metadata service); it guards regs.
	regMu sync.Mutex
	regs  map[uint64]*reg // by start address

	mu struct {
		sync.Mutex
		peers  map[string]*peer         // by agent name
		xfers  map[engine.BatchID]*xfer // live transfers
		queued int                      // messages in all peers' pending
	}
}

// peer is another agent: loaded (conn set) or only addressed by messages
// that wait for its load.
type peer struct {
	conn    string // connection info = segment name; "" while not loaded
	seg     engine.SegmentID
	pending []string // encoded messages, oldest first
}

// reg is one engine registration with its reference count.
type reg struct {
	len  uint64
	refs int
}

// xfer is one submitted transfer (one engine batch).
type xfer struct {
	peer   string
	reason string // why it failed or was canceled, once known
}

// New creates agent cfg.Name on cfg.Engine. On error the engine is not
// taken over: the caller still closes it.
func New(cfg Config) (*Agent, error) {
	if cfg.Name == "" {
		return nil, fmt.Errorf("trtllm create: empty agent name: %w", engine.ErrInvalidArgument)
	}
	if cfg.Engine == nil {
		return nil, fmt.Errorf("trtllm create agent %q: no engine: %w", cfg.Name, engine.ErrInvalidArgument)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Agent{name: cfg.Name, e: cfg.Engine, log: log, notifyWait: cfg.NotifyWait, regs: map[uint64]*reg{}}
	a.ctx, a.cancel = context.WithCancel(context.Background())
	a.mu.peers = map[string]*peer{}
	a.mu.xfers = map[engine.BatchID]*xfer{}
	log.Info("trtllm agent created", "agent", cfg.Name, "segment", a.e.SegmentName())
	return a, nil
}

// Close closes the engine: running transfers end FAILED, and messages still
// waiting for agents not loaded are dropped. A second Close is harmless and
// returns the first one's error.
func (a *Agent) Close() error {
	a.closeOnce.Do(func() {
		a.cancel()
		a.mu.Lock()
		if a.mu.queued > 0 {
			a.log.Warn("trtllm agent closed with undelivered messages", "agent", a.name, "messages", a.mu.queued)
		}
		a.mu.Unlock()
		a.closeErr = a.e.Close()
	})
	return a.closeErr
}

// Name returns the agent's name.
func (a *Agent) Name() string { return a.name }

// Engine returns the agent's engine.
func (a *Agent) Engine() *engine.Engine { return a.e }

// ConnInfo returns what other agents load to reach this one: the engine's
// segment name ("ip:port", "[v6]:port").
func (a *Agent) ConnInfo() string { return a.e.SegmentName() }

func (a *Agent) metaCtx() (context.Context, context.CancelFunc) {
	c := a.e.Config()
	return context.WithTimeout(a.ctx, c.MetadataTimeout+c.ConnectTimeout)
}

// ---- memory ----

// Register registers every range, or takes a reference on a range already
// registered at the same start (with no greater length; a longer one is
// engine.ErrAddressOverlapped). All or nothing. kDRAM ranges are host
// memory; kVRAM ranges GPU memory of their DeviceID, which the CUDA driver
// must know as such (the engine then moves it with CUDA copies, IPC or
// staging); other types are refused with ErrMemoryType. TensorRT-LLM is
// CUDA-only: kVRAM in a process whose GPU runtime is HIP is refused with
// ErrHIPMemory.
func (a *Agent) Register(mem MemType, descs []Desc) error {
	if mem != DRAM && mem != VRAM {
		return fmt.Errorf("register memory: memory type %d (%s): %w", mem, mem, ErrMemoryType)
	}
	a.regMu.Lock()
	defer a.regMu.Unlock()
	var added []uint64 // starts this call registered or referenced
	undo := func() {
		for i := len(added) - 1; i >= 0; i-- {
			r := a.regs[added[i]]
			if r.refs--; r.refs == 0 {
				delete(a.regs, added[i])
				if err := a.e.UnregisterMemory(uintptr(added[i])); err != nil {
					a.log.Warn("trtllm register: rollback", "agent", a.name, "addr", added[i], "err", err)
				}
			}
		}
	}
	for i, d := range descs {
		if d.Addr == 0 || d.Len == 0 {
			undo()
			return fmt.Errorf("register memory: desc %d (%#x+%d): %w", i, d.Addr, d.Len, engine.ErrInvalidArgument)
		}
		if r := a.regs[d.Addr]; r != nil {
			if d.Len > r.len {
				undo()
				return fmt.Errorf("register memory %#x+%d: already registered with length %d: %w",
					d.Addr, d.Len, r.len, engine.ErrAddressOverlapped)
			}
			r.refs++
			added = append(added, d.Addr)
			continue
		}
		loc := "*"
		if mem == VRAM {
			loc = fmt.Sprintf("cuda:%d", d.DeviceID)
		}
		if err := a.e.RegisterMemory(uintptr(d.Addr), d.Len, loc, true); err != nil {
			undo()
			return fmt.Errorf("register memory: desc %d: %w", i, err)
		}
		a.regs[d.Addr] = &reg{len: d.Len, refs: 1}
		added = append(added, d.Addr)
		if mem == VRAM && a.onHIP() {
			undo()
			return fmt.Errorf("register memory: desc %d (%#x+%d): %w", i, d.Addr, d.Len, ErrHIPMemory)
		}
		if mem == VRAM && !a.isGPU(d.Addr, d.Len) {
			undo()
			return fmt.Errorf("register memory: desc %d (%#x+%d) is kVRAM but the CUDA driver does not know it as GPU memory: %w",
				i, d.Addr, d.Len, engine.ErrInvalidArgument)
		}
	}
	return nil
}

// onHIP reports whether the engine's GPU runtime is HIP (loaded by the
// registration just made, or before it).
func (a *Agent) onHIP() bool {
	rt := gpu.RuntimeOf(a.e)
	return rt != nil && rt.Kind() == gpu.HIP
}

// isGPU reports whether [addr, addr+n) is registered GPU memory.
func (a *Agent) isGPU(addr, n uint64) bool {
	r := a.e.Pin(addr, n)
	if r == nil {
		return false
	}
	defer r.Release()
	return r.Kind.GPU()
}

// Deregister drops one reference per range (matched by start); the last
// one unregisters. Unknown starts are skipped. It returns the first error.
func (a *Agent) Deregister(descs []Desc) error {
	a.regMu.Lock()
	defer a.regMu.Unlock()
	var first error
	for _, d := range descs {
		r := a.regs[d.Addr]
		if r == nil {
			a.log.Debug("trtllm deregister: not registered", "agent", a.name, "addr", d.Addr)
			continue
		}
		if r.refs--; r.refs > 0 {
			continue
		}
		delete(a.regs, d.Addr)
		if err := a.e.UnregisterMemory(uintptr(d.Addr)); err != nil && first == nil {
			first = fmt.Errorf("deregister memory %#x: %w", d.Addr, err)
		}
	}
	return first
}

// ---- agents ----

// Load opens the segment named conn for agent name and delivers the
// messages waiting for it, in order. The same conn again only delivers
// what a failed delivery left; new conn replaces the old.
func (a *Agent) Load(name, conn string) error {
	if name == "" || conn == "" {
		return fmt.Errorf("load remote agent %q: empty name or connection info: %w", name, engine.ErrInvalidArgument)
	}
	a.mu.Lock()
	if p := a.mu.peers[name]; p != nil && p.conn == conn {
		a.mu.Unlock()
		return a.flush(name) // loaded already; deliver what a failed flush left
	}
	a.mu.Unlock()
	ctx, cancel := a.metaCtx()
	seg, err := a.e.OpenSegment(ctx, conn)
	cancel()
	if err != nil {
		return fmt.Errorf("load remote agent %q at %q: %w", name, conn, err)
	}
	a.mu.Lock()
	p := a.mu.peers[name]
	if p == nil {
		p = &peer{}
		a.mu.peers[name] = p
	}
	old := p.conn
	p.conn, p.seg = conn, seg
	drop := old != "" && old != conn && !a.connUsedLocked(old)
	a.mu.Unlock()
	if drop {
		_ = a.e.RemoveSegment(old)
	}
	a.log.Debug("trtllm agent loaded", "agent", a.name, "peer", name, "segment", conn)
	return a.flush(name)
}

// connUsedLocked reports whether a loaded peer uses segment conn; a.mu is
// held.
func (a *Agent) connUsedLocked(conn string) bool {
	for _, p := range a.mu.peers {
		if p.conn == conn {
			return true
		}
	}
	return false
}

// Invalidate forgets agent name (keeping messages that wait for it) and
// drops its cached segment unless another agent name shares it. Unknown
// names are ignored.
func (a *Agent) Invalidate(name string) {
	a.mu.Lock()
	p := a.mu.peers[name]
	if p == nil || p.conn == "" {
		a.mu.Unlock()
		return
	}
	conn := p.conn
	p.conn, p.seg = "", -1
	if len(p.pending) == 0 {
		delete(a.mu.peers, name)
	}
	drop := !a.connUsedLocked(conn)
	a.mu.Unlock()
	if drop && conn != a.e.SegmentName() {
		_ = a.e.RemoveSegment(conn)
	}
}

// peerSeg returns the segment of loaded agent name.
func (a *Agent) peerSeg(name string) (engine.SegmentID, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.mu.peers[name]
	if p == nil || p.conn == "" {
		return -1, false
	}
	return p.seg, true
}

// CheckRemote reports whether agent name is loaded and every range lies in
// memory it registered (refreshing its descriptor once if not).
func (a *Agent) CheckRemote(name string, descs []Desc) bool {
	seg, ok := a.peerSeg(name)
	if !ok {
		return false
	}
	ctx, cancel := a.metaCtx()
	defer cancel()
	for _, d := range descs {
		if d.Len == 0 {
			continue
		}
		if err := a.e.CheckRange(ctx, seg, d.Addr, d.Len); err != nil {
			a.log.Debug("trtllm check remote descs", "agent", a.name, "peer", name, "err", err)
			return false
		}
	}
	return true
}

// ---- messages ----

// encode turns a message into the text the stock agent sends: base64, so
// that any bytes survive the NUL-terminated C strings and the JSON body of
// the notify RPC (specs/tensorrt-llm.md §3).
func encode(msg []byte) string { return base64.StdEncoding.EncodeToString(msg) }

// decode reverses encode; text that is not base64 (a peer that sent raw
// text) is returned as it is.
func decode(s string) []byte {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return []byte(s)
	}
	return b
}

// Notify sends msg (any bytes) to agent name, or queues it until name is
// loaded (at most MaxQueued messages in all, else ErrQueueFull). It reports
// whether the message was queued.
func (a *Agent) Notify(name string, msg []byte) (queued bool, err error) {
	if name == "" {
		return false, fmt.Errorf("notify: empty agent name: %w", engine.ErrInvalidArgument)
	}
	m := encode(msg)
	a.mu.Lock()
	p := a.mu.peers[name]
	if p == nil || p.conn == "" {
		if a.mu.queued >= MaxQueued {
			a.mu.Unlock()
			return false, fmt.Errorf("notify agent %q: not loaded and %d messages already wait for agents not loaded: %w",
				name, a.mu.queued, ErrQueueFull)
		}
		if p == nil {
			p = &peer{seg: -1}
			a.mu.peers[name] = p
		}
		first := len(p.pending) == 0
		p.pending = append(p.pending, m)
		a.mu.queued++
		a.mu.Unlock()
		if first {
			a.log.Warn("trtllm message to an agent not loaded yet; it waits for the agent's load", "agent", a.name, "peer", name)
		}
		return true, nil
	}
	a.mu.Unlock()
	// Older messages go first.
	if err := a.flush(name); err != nil {
		return false, err
	}
	seg, ok := a.peerSeg(name)
	if !ok { // invalidated meanwhile: queue it
		return a.Notify(name, msg)
	}
	ctx, cancel := a.metaCtx()
	defer cancel()
	if err := a.e.Notify(ctx, seg, engine.Notification{Name: a.name, Msg: m}); err != nil {
		return false, fmt.Errorf("notify agent %q: %w", name, err)
	}
	return false, nil
}

// flush delivers the messages waiting for loaded agent name, in order. On
// failure the undelivered ones wait again, at the front.
func (a *Agent) flush(name string) error {
	a.mu.Lock()
	p := a.mu.peers[name]
	if p == nil || p.conn == "" || len(p.pending) == 0 {
		a.mu.Unlock()
		return nil
	}
	msgs, seg := p.pending, p.seg
	p.pending = nil
	a.mu.queued -= len(msgs)
	a.mu.Unlock()
	ctx, cancel := a.metaCtx()
	defer cancel()
	for i, m := range msgs {
		if err := a.e.Notify(ctx, seg, engine.Notification{Name: a.name, Msg: m}); err != nil {
			a.mu.Lock()
			p.pending = append(msgs[i:len(msgs):len(msgs)], p.pending...)
			a.mu.queued += len(msgs) - i
			a.mu.Unlock()
			return fmt.Errorf("deliver %d queued messages to agent %q: %w", len(msgs)-i, name, err)
		}
	}
	a.log.Debug("trtllm queued messages delivered", "agent", a.name, "peer", name, "messages", len(msgs))
	return nil
}

// Notifications drains the received messages, decoded (Name is the sender
// agent, Msg the message bytes), oldest first. When none is queued it waits
// up to Config.NotifyWait for one. Each message is returned once, also to
// concurrent callers.
func (a *Agent) Notifications() []engine.Notification {
	ns := a.e.Notifications()
	if len(ns) == 0 && a.notifyWait > 0 {
		ctx, cancel := context.WithTimeout(a.ctx, a.notifyWait)
		ns = a.e.WaitNotificationsLocked(ctx) // called by C threads (abi/)
		cancel()
	}
	for i := range ns {
		ns[i].Msg = string(decode(ns[i].Msg))
	}
	return ns
}

// ---- transfers ----

// Submit starts one transfer of len(local) pairs between local memory and
// agent name's registered memory (remote holds absolute addresses there;
// pair i must have equal lengths), with op engine.OpRead or OpWrite. There
// is no limit on the number of pairs. On failure nothing is left running.
// Release the returned id with Free.
func (a *Agent) Submit(op engine.OpCode, name string, local, remote []Desc) (engine.BatchID, error) {
	return a.submit(op, name, local, remote, nil, false)
}

// SubmitNotify is Submit with a message: agent name receives (this agent,
// msg) as soon as the whole transfer has completed; Wait and Poll report
// completion only once the message has reached the peer. It needs at least
// one pair.
func (a *Agent) SubmitNotify(op engine.OpCode, name string, local, remote []Desc, msg []byte) (engine.BatchID, error) {
	return a.submit(op, name, local, remote, msg, true)
}

func (a *Agent) submit(op engine.OpCode, name string, local, remote []Desc, msg []byte, hasMsg bool) (engine.BatchID, error) {
	if op != engine.OpRead && op != engine.OpWrite {
		return 0, fmt.Errorf("submit: opcode %d: %w", op, engine.ErrInvalidArgument)
	}
	if len(local) != len(remote) {
		return 0, fmt.Errorf("submit: %d local and %d remote descriptors: %w", len(local), len(remote), engine.ErrInvalidArgument)
	}
	if hasMsg && len(local) == 0 {
		return 0, fmt.Errorf("submit with a message: no descriptors: %w", engine.ErrInvalidArgument)
	}
	seg, ok := a.peerSeg(name)
	if !ok {
		return 0, fmt.Errorf("submit to agent %q: %w", name, ErrNotLoaded)
	}
	reqs := make([]engine.Request, len(local))
	for i := range local {
		if local[i].Len != remote[i].Len {
			return 0, fmt.Errorf("submit: descriptor %d: local length %d, remote length %d: %w",
				i, local[i].Len, remote[i].Len, engine.ErrInvalidArgument)
		}
		reqs[i] = engine.Request{Op: op, Source: uintptr(local[i].Addr), Target: seg,
			TargetOffset: remote[i].Addr, Length: local[i].Len}
	}
	id, err := a.e.AllocateBatch(len(reqs))
	if err != nil {
		return 0, fmt.Errorf("submit to agent %q: %w", name, err)
	}
	if hasMsg {
		err = a.e.SubmitWithNotify(id, reqs, engine.Notification{Name: a.name, Msg: encode(msg)})
	} else {
		err = a.e.Submit(id, reqs)
	}
	if err != nil {
		// Nothing may stay running: cancel what started, then free.
		_ = a.e.Cancel(context.Background(), id)
		_ = a.e.FreeBatch(id)
		return 0, fmt.Errorf("submit %d descriptors to agent %q: %w", len(reqs), name, err)
	}
	a.mu.Lock()
	a.mu.xfers[id] = &xfer{peer: name}
	a.mu.Unlock()
	return id, nil
}

func (a *Agent) xfer(id engine.BatchID) *xfer {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.mu.xfers[id]
}

// state maps a batch status to a State and records why it failed.
func (a *Agent) state(x *xfer, bs engine.BatchStatus) State {
	switch bs.State {
	case engine.StateCompleted:
		return Success
	case engine.StateWaiting, engine.StatePending:
		return InProgress
	}
	a.mu.Lock()
	if x.reason == "" {
		if bs.Err != nil {
			x.reason = bs.Err.Error()
		} else {
			x.reason = "transfer " + bs.State.String()
		}
	}
	a.mu.Unlock()
	return Failure
}

func (a *Agent) setReason(x *xfer, reason string) {
	a.mu.Lock()
	if x.reason == "" {
		x.reason = reason
	}
	a.mu.Unlock()
}

// Wait waits up to timeout for transfer id and returns its state:
// InProgress only when a timeout >= 0 passed, Failure also for an unknown
// id. With timeout < 0 it waits as long as the transfer makes progress: a
// transfer that moves no byte for a whole transfer timeout
// (MC_TRANSFER_TIMEOUT) is canceled and fails, so TensorRT-LLM's wait()
// without a timeout never hangs on a dead or silent peer.
func (a *Agent) Wait(id engine.BatchID, timeout time.Duration) State {
	x := a.xfer(id)
	if x == nil {
		return Failure
	}
	forever := timeout < 0
	if forever {
		timeout = a.e.Config().TransferTimeout
	}
	var moved uint64
	for {
		ctx, cancel := context.WithTimeout(a.ctx, timeout)
		bs, err := a.e.WaitLocked(ctx, id) // called by C threads (abi/)
		cancel()
		switch {
		case err == nil:
			return a.state(x, bs)
		case !errors.Is(err, engine.ErrTimeout):
			a.setReason(x, err.Error())
			return Failure
		case a.ctx.Err() != nil:
			a.setReason(x, "agent destroyed")
			return Failure
		case !forever:
			return InProgress
		case bs.TransferredBytes > moved:
			moved = bs.TransferredBytes // progress: keep waiting
			continue
		}
		a.setReason(x, fmt.Sprintf("transfer to agent %q moved no data for the transfer timeout (%s, MC_TRANSFER_TIMEOUT); canceled",
			x.peer, timeout))
		if err := a.e.Cancel(context.Background(), id); err != nil {
			a.log.Warn("trtllm wait: cancel after timeout", "agent", a.name, "peer", x.peer, "err", err)
		}
		return Failure
	}
}

// Poll reports the state of transfer id without blocking (Failure for an
// unknown id).
func (a *Agent) Poll(id engine.BatchID) State {
	x := a.xfer(id)
	if x == nil {
		return Failure
	}
	bs, err := a.e.BatchStatus(id)
	if err != nil {
		a.setReason(x, err.Error())
		return Failure
	}
	return a.state(x, bs)
}

// XferError returns why transfer id failed ("" while it runs or after
// success).
func (a *Agent) XferError(id engine.BatchID) string {
	x := a.xfer(id)
	if x == nil {
		return fmt.Sprintf("unknown transfer %d", id)
	}
	if a.Poll(id) != Failure {
		return ""
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return x.reason
}

// Cancel cancels transfer id; its memory is untouched afterwards. A
// finished transfer keeps its outcome (a completed one stays a success).
// An unknown id wraps engine.ErrUnknownBatch.
func (a *Agent) Cancel(id engine.BatchID) error {
	x := a.xfer(id)
	if x == nil {
		return fmt.Errorf("cancel transfer %d: %w", id, engine.ErrUnknownBatch)
	}
	if bs, err := a.e.BatchStatus(id); err == nil && bs.State.Terminal() {
		return nil // already final; a completed transfer stays a success
	}
	a.setReason(x, fmt.Sprintf("transfer to agent %q canceled (released)", x.peer))
	if err := a.e.Cancel(context.Background(), id); err != nil {
		return fmt.Errorf("cancel transfer to agent %q: %w", x.peer, err)
	}
	return nil
}

// Free forgets transfer id, canceling it if it still runs. A completed
// transfer's pending message goes out first. Unknown ids are ignored.
func (a *Agent) Free(id engine.BatchID) {
	a.mu.Lock()
	x := a.mu.xfers[id]
	delete(a.mu.xfers, id)
	a.mu.Unlock()
	if x == nil {
		return
	}
	if bs, err := a.e.BatchStatus(id); err == nil && !bs.State.Terminal() {
		if err := a.e.Cancel(context.Background(), id); err != nil {
			a.log.Warn("trtllm free transfer: cancel", "agent", a.name, "peer", x.peer, "err", err)
		}
	}
	if err := a.e.FreeBatch(id); err != nil && !a.e.Closed() {
		a.log.Warn("trtllm free transfer", "agent", a.name, "peer", x.peer, "err", err)
	}
}
