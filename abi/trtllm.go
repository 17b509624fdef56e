package abi

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"structs"
	"sync"
	"time"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/metadata"
	"github.com/kvferry/kvferry/internal/hostenv"
)

// This file is the Go side of the TensorRT-LLM transfer agent (kvferry.h
// "TensorRT-LLM support", specs/tensorrt-llm.md §1, §3, §4). The C++ shim
// plugin/trtllm_agent.cpp forwards every BaseTransferAgent and
// TransferStatus method here through the kvferry_trtllm_* functions. Where
// the stock Mooncake agent falls short (§3, §6), this one does not:
// registrations are counted from one and really dropped, messages to an
// agent not loaded yet wait for its load instead of vanishing, transfers
// report failure and can be canceled, there is no descriptor cap, and no
// metadata handshake runs after a transfer.

// TransferState values of TensorRT-LLM (kvferry.h KVFERRY_XFER_*).
const (
	trtInProgress = 0
	trtSuccess    = 1
	trtFailure    = 2
)

// TensorRT-LLM memory types (MemoryType, kvferry.h KVFERRY_TRTLLM_*).
const (
	trtDRAM = 0
	trtVRAM = 1
)

func trtMemTypeName(t int) string {
	switch t {
	case trtDRAM:
		return "kDRAM"
	case trtVRAM:
		return "kVRAM"
	case 2:
		return "kBLK"
	case 3:
		return "kOBJ"
	case 4:
		return "kFILE"
	}
	return "unknown"
}

// trtMaxQueued bounds the messages waiting for agents not loaded yet.
const trtMaxQueued = 4096

// trtDefaultNotifyWait is how long getNotifiedSyncMessages waits for a
// message when none is queued (option notify_wait_us,
// KVFERRY_TRTLLM_NOTIFY_WAIT_US). TensorRT-LLM calls it in tight loops from
// several threads (specs/tensorrt-llm.md §4.2); waiting on arrival instead
// of returning at once keeps those threads off the CPU and adds no latency,
// since an arriving message ends the wait.
const trtDefaultNotifyWait = time.Millisecond

// trtDesc mirrors kvferry_trtllm_desc_t and TensorRT-LLM's MemoryDesc
// (layout tested in trtllm_test.go).
type trtDesc struct {
	_        structs.HostLayout
	Addr     uint64
	Len      uint64
	DeviceID uint32
	_        uint32
}

// trtAgents is the table of live agents.
var trtAgents handles[*trtAgent]

// trtAgent is one TensorRT-LLM transfer agent on its own engine.
type trtAgent struct {
	name string
	eh   uintptr // handle in the engines table
	e    *engine.Engine
	// notifyWait bounds how long takeNotifs waits when nothing is queued.
	notifyWait time.Duration

	ctx    context.Context // cancelled by close
	cancel context.CancelFunc

	// regMu serializes registration changes, which publish the descriptor
	// (I/O with an HTTP or etcd metadata service); it guards regs.
	regMu sync.Mutex
	regs  map[uint64]*trtReg // by start address

	mu struct {
		sync.Mutex
		peers  map[string]*trtPeer         // by agent name
		xfers  map[engine.BatchID]*trtXfer // live transfers
		queued int                         // messages in all peers' pending
	}
}

// trtPeer is another agent: loaded (conn set) or only addressed by
// messages that wait for its load.
type trtPeer struct {
	conn    string // connection info = segment name; "" while not loaded
	seg     engine.SegmentID
	pending []string // encoded messages, oldest first
}

// trtReg is one engine registration with its reference count.
type trtReg struct {
	len  uint64
	refs int
}

// trtXfer is one submitted transfer (one engine batch).
type trtXfer struct {
	peer   string
	reason string // why it failed or was canceled, once known
}

// trtAdvertisedHost picks the address the agent's engine advertises, as the
// stock agent does (specs/tensorrt-llm.md §2.3, §3): TLLM_MOONCAKE_IP_ADDR,
// else the address of TRTLLM_MOONCAKE_INTERFACE, else the first
// non-loopback IPv4 address, else 127.0.0.1.
func trtAdvertisedHost() string {
	if v, ok := hostenv.Getenv("TLLM_MOONCAKE_IP_ADDR"); ok && strings.TrimSpace(v) != "" {
		return strings.TrimSpace(v)
	}
	if v, ok := hostenv.Getenv("TRTLLM_MOONCAKE_INTERFACE"); ok && strings.TrimSpace(v) != "" {
		if ip := trtInterfaceIP(strings.TrimSpace(v)); ip != "" {
			return ip
		}
		logger.Warn("TRTLLM_MOONCAKE_INTERFACE has no usable address", "interface", v)
	}
	return engine.FirstNonLoopbackIPv4()
}

// trtInterfaceIP returns the first IPv4 address of interface name, else its
// first global IPv6 address, else "".
func trtInterfaceIP(name string) string {
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return ""
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return ""
	}
	var v6 string
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		if ip4 := ipn.IP.To4(); ip4 != nil {
			return ip4.String()
		}
		if v6 == "" && ipn.IP.IsGlobalUnicast() {
			v6 = ipn.IP.String()
		}
	}
	return v6
}

// newTRTAgent creates agent name on a new engine; opts are
// kvferry_engine_create's options.
func newTRTAgent(name string, opts map[string]string) (*trtAgent, error) {
	if name == "" {
		return nil, fmt.Errorf("trtllm create: empty agent name: %w", engine.ErrInvalidArgument)
	}
	eopts := map[string]string{}
	for k, v := range opts {
		eopts[k] = v
	}
	conn := eopts["metadata"]
	if conn == "" {
		conn = metadata.P2PHandshake
	}
	server := eopts["local_server_name"]
	if server == "" {
		server = trtAdvertisedHost()
	}
	auto := eopts["auto_discover"] != "0"
	wait := trtDefaultNotifyWait
	w, ok := eopts["notify_wait_us"]
	if !ok {
		w, ok = hostenv.Getenv("KVFERRY_TRTLLM_NOTIFY_WAIT_US")
	}
	if ok && strings.TrimSpace(w) != "" {
		us, err := strconv.ParseInt(strings.TrimSpace(w), 10, 64)
		if err != nil || us < 0 || us > 1_000_000 {
			return nil, fmt.Errorf("trtllm create: notify_wait_us %q: want 0-1000000: %w", w, engine.ErrInvalidArgument)
		}
		wait = time.Duration(us) * time.Microsecond
	}
	delete(eopts, "metadata")
	delete(eopts, "local_server_name")
	delete(eopts, "auto_discover")
	delete(eopts, "notify_wait_us")
	if t := strings.ToLower(strings.TrimSpace(eopts["transport"])); t == "auto" {
		delete(eopts, "transport")
	}
	eh, err := newEngine(conn, server, auto, eopts)
	if err != nil {
		return nil, fmt.Errorf("trtllm create agent %q: %w", name, err)
	}
	e, _ := engines.get(eh)
	a := &trtAgent{name: name, eh: eh, e: e, notifyWait: wait, regs: map[uint64]*trtReg{}}
	a.ctx, a.cancel = context.WithCancel(context.Background())
	a.mu.peers = map[string]*trtPeer{}
	a.mu.xfers = map[engine.BatchID]*trtXfer{}
	logger.Info("trtllm agent created", "agent", name, "segment", e.SegmentName())
	return a, nil
}

// close closes the engine: running transfers end FAILED.
func (a *trtAgent) close() {
	a.cancel()
	engines.remove(a.eh)
	a.mu.Lock()
	if a.mu.queued > 0 {
		logger.Warn("trtllm agent closed with undelivered messages", "agent", a.name, "messages", a.mu.queued)
	}
	a.mu.Unlock()
	if err := a.e.Close(); err != nil {
		logger.Warn("trtllm agent close", "agent", a.name, "err", err)
	}
}

func (a *trtAgent) metaCtx() (context.Context, context.CancelFunc) {
	c := a.e.Config()
	return context.WithTimeout(a.ctx, c.MetadataTimeout+c.ConnectTimeout)
}

// ---- memory ----

// register registers every range, or takes a reference on a range already
// registered at the same start. All or nothing. Only host memory: the
// engine has no GPU path yet, and a GPU address handed to a host copy would
// fault inside a transfer, so GPU memory is refused here, loudly.
func (a *trtAgent) register(memType int, descs []trtDesc) error {
	if memType != trtDRAM {
		return fmt.Errorf("register memory: memory type %d (%s): only host memory (kDRAM) is supported by this build: %w",
			memType, trtMemTypeName(memType), engine.ErrNotSupported)
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
					logger.Warn("trtllm register: rollback", "agent", a.name, "addr", added[i], "err", err)
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
		if err := a.e.RegisterMemory(uintptr(d.Addr), d.Len, "*", true); err != nil {
			undo()
			return fmt.Errorf("register memory: desc %d: %w", i, err)
		}
		a.regs[d.Addr] = &trtReg{len: d.Len, refs: 1}
		added = append(added, d.Addr)
	}
	return nil
}

// deregister drops one reference per range; the last one unregisters.
func (a *trtAgent) deregister(descs []trtDesc) error {
	a.regMu.Lock()
	defer a.regMu.Unlock()
	var first error
	for _, d := range descs {
		r := a.regs[d.Addr]
		if r == nil {
			logger.Debug("trtllm deregister: not registered", "agent", a.name, "addr", d.Addr)
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

// load opens the segment named conn for agent name and delivers the
// messages waiting for it.
func (a *trtAgent) load(name, conn string) error {
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
		p = &trtPeer{}
		a.mu.peers[name] = p
	}
	old := p.conn
	p.conn, p.seg = conn, seg
	drop := old != "" && old != conn && !a.connUsedLocked(old)
	a.mu.Unlock()
	if drop {
		_ = a.e.RemoveSegment(old)
	}
	logger.Debug("trtllm agent loaded", "agent", a.name, "peer", name, "segment", conn)
	return a.flush(name)
}

// connUsedLocked reports whether a loaded peer uses segment conn; a.mu is
// held.
func (a *trtAgent) connUsedLocked(conn string) bool {
	for _, p := range a.mu.peers {
		if p.conn == conn {
			return true
		}
	}
	return false
}

// invalidate forgets agent name (keeping messages that wait for it) and
// drops its cached segment unless another agent name shares it.
func (a *trtAgent) invalidate(name string) {
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
func (a *trtAgent) peerSeg(name string) (engine.SegmentID, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.mu.peers[name]
	if p == nil || p.conn == "" {
		return -1, false
	}
	return p.seg, true
}

// checkRemote reports whether every range lies in memory agent name
// registered.
func (a *trtAgent) checkRemote(name string, descs []trtDesc) bool {
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
			logger.Debug("trtllm check remote descs", "agent", a.name, "peer", name, "err", err)
			return false
		}
	}
	return true
}

// ---- messages ----

// trtEncode turns a message into the text the stock agent sends: base64, so
// that any bytes survive the NUL-terminated C strings and the JSON body of
// the notify RPC (specs/tensorrt-llm.md §3).
func trtEncode(msg []byte) string { return base64.StdEncoding.EncodeToString(msg) }

// trtDecode reverses trtEncode; text that is not base64 (a peer that sent raw
// text) is returned as it is.
func trtDecode(s string) []byte {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return []byte(s)
	}
	return b
}

// notify sends msg to agent name, or queues it until name is loaded. It
// reports whether the message was queued.
func (a *trtAgent) notify(name string, msg []byte) (bool, error) {
	if name == "" {
		return false, fmt.Errorf("notify: empty agent name: %w", engine.ErrInvalidArgument)
	}
	m := trtEncode(msg)
	a.mu.Lock()
	p := a.mu.peers[name]
	if p == nil || p.conn == "" {
		if a.mu.queued >= trtMaxQueued {
			a.mu.Unlock()
			return false, fmt.Errorf("notify agent %q: not loaded and %d messages already wait for agents not loaded: %w",
				name, a.mu.queued, engine.ErrTooManyRequests)
		}
		if p == nil {
			p = &trtPeer{seg: -1}
			a.mu.peers[name] = p
		}
		first := len(p.pending) == 0
		p.pending = append(p.pending, m)
		a.mu.queued++
		a.mu.Unlock()
		if first {
			logger.Warn("trtllm message to an agent not loaded yet; it waits for the agent's load", "agent", a.name, "peer", name)
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
		return a.notify(name, msg)
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
func (a *trtAgent) flush(name string) error {
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
	logger.Debug("trtllm queued messages delivered", "agent", a.name, "peer", name, "messages", len(msgs))
	return nil
}

// takeNotifs drains the received messages, decoded, oldest first. When none
// is queued it waits up to a.notifyWait for one.
func (a *trtAgent) takeNotifs() []engine.Notification {
	ns := a.e.Notifications()
	if len(ns) == 0 && a.notifyWait > 0 {
		ctx, cancel := context.WithTimeout(a.ctx, a.notifyWait)
		ns = a.e.WaitNotifications(ctx)
		cancel()
	}
	for i := range ns {
		ns[i].Msg = string(trtDecode(ns[i].Msg))
	}
	return ns
}

// ---- transfers ----

// submit starts one transfer of len(local) pairs to or from agent name.
func (a *trtAgent) submit(op int, name string, local, remote []trtDesc, msg []byte, hasMsg bool) (engine.BatchID, error) {
	if op != int(engine.OpRead) && op != int(engine.OpWrite) {
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
		return 0, fmt.Errorf("submit to agent %q: not loaded: %w", name, engine.ErrUnknownSegment)
	}
	reqs := make([]engine.Request, len(local))
	for i := range local {
		if local[i].Len != remote[i].Len {
			return 0, fmt.Errorf("submit: descriptor %d: local length %d, remote length %d: %w",
				i, local[i].Len, remote[i].Len, engine.ErrInvalidArgument)
		}
		reqs[i] = engine.Request{Op: engine.OpCode(op), Source: uintptr(local[i].Addr), Target: seg,
			TargetOffset: remote[i].Addr, Length: local[i].Len}
	}
	id, err := a.e.AllocateBatch(len(reqs))
	if err != nil {
		return 0, fmt.Errorf("submit to agent %q: %w", name, err)
	}
	if hasMsg {
		err = a.e.SubmitWithNotify(id, reqs, engine.Notification{Name: a.name, Msg: trtEncode(msg)})
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
	a.mu.xfers[id] = &trtXfer{peer: name}
	a.mu.Unlock()
	return id, nil
}

func (a *trtAgent) xfer(id engine.BatchID) *trtXfer {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.mu.xfers[id]
}

// state maps a batch status to a TransferState and records why it failed.
func (a *trtAgent) state(x *trtXfer, bs engine.BatchStatus) int {
	switch bs.State {
	case engine.StateCompleted:
		return trtSuccess
	case engine.StateWaiting, engine.StatePending:
		return trtInProgress
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
	return trtFailure
}

func (a *trtAgent) setReason(x *trtXfer, reason string) {
	a.mu.Lock()
	if x.reason == "" {
		x.reason = reason
	}
	a.mu.Unlock()
}

// wait waits up to timeoutMS. With timeoutMS < 0 it waits as long as the
// transfer makes progress: a transfer that moves no byte for a whole
// transfer timeout (MC_TRANSFER_TIMEOUT) is canceled and fails, so TensorRT-
// LLM's wait() without a timeout never hangs on a dead or silent peer.
func (a *trtAgent) wait(id engine.BatchID, timeoutMS int64) int {
	x := a.xfer(id)
	if x == nil {
		return trtFailure
	}
	forever := timeoutMS < 0
	timeout := a.e.Config().TransferTimeout
	if !forever {
		timeout = time.Duration(min(timeoutMS, int64(math.MaxInt64/time.Millisecond))) * time.Millisecond
	}
	var moved uint64
	for {
		ctx, cancel := context.WithTimeout(a.ctx, timeout)
		bs, err := a.e.Wait(ctx, id)
		cancel()
		switch {
		case err == nil:
			return a.state(x, bs)
		case !errors.Is(err, engine.ErrTimeout):
			a.setReason(x, err.Error())
			return trtFailure
		case a.ctx.Err() != nil:
			a.setReason(x, "agent destroyed")
			return trtFailure
		case !forever:
			return trtInProgress
		case bs.TransferredBytes > moved:
			moved = bs.TransferredBytes // progress: keep waiting
			continue
		}
		a.setReason(x, fmt.Sprintf("transfer to agent %q moved no data for the transfer timeout (%s, MC_TRANSFER_TIMEOUT); canceled",
			x.peer, timeout))
		if err := a.e.Cancel(context.Background(), id); err != nil {
			logger.Warn("trtllm wait: cancel after timeout", "agent", a.name, "peer", x.peer, "err", err)
		}
		return trtFailure
	}
}

// poll reports the state without blocking.
func (a *trtAgent) poll(id engine.BatchID) int {
	x := a.xfer(id)
	if x == nil {
		return trtFailure
	}
	bs, err := a.e.BatchStatus(id)
	if err != nil {
		a.setReason(x, err.Error())
		return trtFailure
	}
	return a.state(x, bs)
}

// xferError returns why the transfer failed ("" while it runs or after
// success).
func (a *trtAgent) xferError(id engine.BatchID) string {
	x := a.xfer(id)
	if x == nil {
		return fmt.Sprintf("unknown transfer %d", id)
	}
	if a.poll(id) != trtFailure {
		return ""
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return x.reason
}

// cancelXfer cancels the transfer; its memory is untouched afterwards.
func (a *trtAgent) cancelXfer(id engine.BatchID) error {
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

// freeXfer forgets the transfer, canceling it if it still runs. A completed
// transfer's pending message goes out first.
func (a *trtAgent) freeXfer(id engine.BatchID) {
	a.mu.Lock()
	x := a.mu.xfers[id]
	delete(a.mu.xfers, id)
	a.mu.Unlock()
	if x == nil {
		return
	}
	if bs, err := a.e.BatchStatus(id); err == nil && !bs.State.Terminal() {
		if err := a.e.Cancel(context.Background(), id); err != nil {
			logger.Warn("trtllm free transfer: cancel", "agent", a.name, "peer", x.peer, "err", err)
		}
	}
	if err := a.e.FreeBatch(id); err != nil && !a.e.Closed() {
		logger.Warn("trtllm free transfer", "agent", a.name, "peer", x.peer, "err", err)
	}
}
