// Package local is the transport for requests whose target lives in this
// process: the engine's own segment (LOCAL_SEGMENT), or the segment of
// another engine of the same process (two engines in one process, as a
// prefill and a decode worker sharing a host process). Both ends are
// registered memory of this process, so a slice is one C memcpy. Copies run
// on a small pool of workers, one cgo crossing per batch of slices.
//
// Every slice is checked and pinned against the registry of the engine that
// owns the target memory (the target engine's own registry, not the
// initiator's cached descriptor), so a request outside the target's
// registered memory is refused and a region being unregistered is never
// touched after UnregisterMemory returns.
//
// The engines of a process find each other through a process-wide table of
// live local transports keyed by a random instance id, which every engine
// publishes in its descriptor (extension field kvferry_extra["local"]). A
// peer is served by this transport only when its descriptor names this
// host, this pid and a live instance.
package local

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/descriptor"
	"github.com/kvferry/kvferry/engine/gpu"
	"github.com/kvferry/kvferry/internal/cmem"
)

// Name is the transport's name.
const Name = "local"

// Defaults.
const (
	// DefaultSliceSize keeps one copy short enough to share the workers.
	DefaultSliceSize = 4 << 20
	// DefaultWorkers is the number of copy goroutines.
	DefaultWorkers = 2
	queueDepth     = 4096
	// copyPieceBytes bounds what one C copy call moves: between calls a
	// worker drops the slices of canceled batches, so Cancel waits for at
	// most one call per worker, never for a whole large batch.
	copyPieceBytes = 64 << 20
	// drainTimeout bounds how long Close waits for copies into this
	// engine's memory started by other engines of the process.
	drainTimeout = 30 * time.Second
)

// Config configures the transport. The zero value works.
type Config struct {
	// Workers is the number of copy goroutines (default 2,
	// KVFERRY_LOCAL_WORKERS).
	Workers int
	// SliceSize is the largest single copy (default 4 MiB).
	SliceSize uint64
	// GPU copies device memory (on each device's stream pool); nil: only
	// host-accessible memory is carried.
	GPU *gpu.Runtime
}

// extra is what the transport publishes in kvferry_extra["local"].
type extra struct {
	Instance uint64 `json:"instance"`
}

// live holds the open local transports of this process by instance id.
var live = struct {
	sync.RWMutex
	m map[uint64]*Transport
}{m: make(map[uint64]*Transport)}

// Transport copies within this process.
type Transport struct {
	e          *engine.Engine
	cfg        Config
	instance   uint64
	pid        int
	q          chan work
	ctx        context.Context
	cancel     context.CancelFunc
	wg         sync.WaitGroup
	mu         sync.RWMutex // held for reading by Submit while sending on q
	stopped    bool         // guarded by mu: Submit queues nothing more
	closed     atomic.Bool
	copies     atomic.Uint64
	served     gate   // copies into this engine's memory in progress
	pieceBytes uint64 // copyPieceBytes (tests set less)
	// beforeCopy, when set (tests only, before any Submit), runs before
	// each C copy call with the slices it copies.
	beforeCopy func(slices []*engine.Slice)

	descs struct {
		sync.Mutex
		m map[*descriptor.Segment]uint64 // parsed instance ids
	}
}

// work is a group of slices that all target the memory of tgt.
type work struct {
	tgt    *Transport
	slices []*engine.Slice
}

var _ engine.Transport = (*Transport)(nil)

// New starts the transport's workers and makes the engine reachable from
// other engines of the process.
func New(e *engine.Engine, cfg Config) *Transport {
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.SliceSize == 0 {
		cfg.SliceSize = DefaultSliceSize
	}
	t := &Transport{e: e, cfg: cfg, pid: os.Getpid(), q: make(chan work, queueDepth), pieceBytes: copyPieceBytes}
	t.descs.m = make(map[*descriptor.Segment]uint64)
	t.served.init()
	t.ctx, t.cancel = context.WithCancel(context.Background())
	for range cfg.Workers {
		t.wg.Add(1)
		go t.runWorker()
	}
	live.Lock()
	for t.instance == 0 || live.m[t.instance] != nil {
		t.instance = rand.Uint64()
	}
	live.m[t.instance] = t
	live.Unlock()
	return t
}

// Name returns "local".
func (t *Transport) Name() string { return Name }

// Describe publishes the instance id that other engines of this process
// look up.
func (t *Transport) Describe(seg *descriptor.Segment) {
	b, err := json.Marshal(extra{Instance: t.instance})
	if err != nil {
		return
	}
	if seg.Extra == nil {
		seg.Extra = make(map[string]json.RawMessage)
	}
	seg.Extra[Name] = b
}

// Reaches reports whether p is this engine's own segment or the segment of
// a live engine of this process.
func (t *Transport) Reaches(p *engine.Peer) bool {
	return p.Local() || t.target(p) != nil
}

// target returns the live local transport of the engine that owns p, or nil.
func (t *Transport) target(p *engine.Peer) *Transport {
	if p.Local() {
		return t
	}
	d := p.Descriptor()
	if d == nil || d.Host == nil || d.Host.PID != t.pid || !t.e.HostIdentity().SameHost(d.Host) {
		return nil
	}
	id := t.instanceOf(d)
	if id == 0 {
		return nil
	}
	live.RLock()
	tgt := live.m[id]
	live.RUnlock()
	if tgt == nil || tgt.closed.Load() {
		return nil
	}
	return tgt
}

// instanceOf returns the instance id d publishes (0 for none), parsing each
// descriptor once.
func (t *Transport) instanceOf(d *descriptor.Segment) uint64 {
	t.descs.Lock()
	defer t.descs.Unlock()
	if id, ok := t.descs.m[d]; ok {
		return id
	}
	var x extra
	if raw, ok := d.Extra[Name]; ok {
		_ = json.Unmarshal(raw, &x)
	}
	if len(t.descs.m) >= 256 { // descriptors are replaced on refresh; forget old ones
		clear(t.descs.m)
	}
	t.descs.m[d] = x.Instance
	return x.Instance
}

// SliceSize returns the largest single copy.
func (t *Transport) SliceSize() uint64 { return t.cfg.SliceSize }

// ReleasesSlices marks that the transport touches no slice once it has
// completed it (engine.Releaser): the workers complete a slice after its
// last copy, the device copies after their event, and read nothing of it
// afterwards.
func (t *Transport) ReleasesSlices() {}

var _ engine.Releaser = (*Transport)(nil)

// Copies returns the number of slices copied.
func (t *Transport) Copies() uint64 { return t.copies.Load() }

// Submit queues the slices for the workers.
func (t *Transport) Submit(p *engine.Peer, slices []*engine.Slice) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.stopped {
		failAll(slices, engine.ErrClosed)
		return
	}
	tgt := t.target(p)
	if tgt == nil {
		failAll(slices, fmt.Errorf("local: segment %q is not a live engine of this process: %w", p.Name, engine.ErrClosed))
		return
	}
	// Split the work so that every worker gets a share.
	per := max(1, (len(slices)+t.cfg.Workers-1)/t.cfg.Workers)
	for lo := 0; lo < len(slices); lo += per {
		t.q <- work{tgt: tgt, slices: slices[lo:min(lo+per, len(slices))]}
	}
}

func failAll(slices []*engine.Slice, err error) {
	for _, s := range slices {
		s.Complete(err)
	}
}

// runWorker copies queued slices; owned by Transport, stopped by Close.
func (t *Transport) runWorker() {
	defer t.wg.Done()
	ops := make([]cmem.Op, 0, 64)
	pins := make([]*engine.Region, 0, 64)
	done := make([]*engine.Slice, 0, 64)
	for {
		select {
		case <-t.ctx.Done():
			return
		case w, ok := <-t.q:
			if !ok {
				return
			}
			t.copyAll(w, ops[:0], pins[:0], done[:0])
		}
	}
}

// copyAll copies the slices of w. Host copies go in calls of about
// copyPieceBytes; a slice is checked for cancellation, and pinned in the
// target's registry, just before the call that copies it, and completes
// right after it: a slice completes only once no copy touches its memory.
func (t *Transport) copyAll(w work, ops []cmem.Op, pins []*engine.Region, done []*engine.Slice) {
	tgt := w.tgt
	if !tgt.served.enter() {
		failAll(w.slices, fmt.Errorf("local: target engine %q closed: %w", tgt.e.SegmentName(), engine.ErrClosed))
		return
	}
	var gb gpuBatches
	var bytes uint64
	for _, s := range w.slices {
		if s.Canceled() {
			s.Complete(engine.ErrCanceled)
			continue
		}
		// The target's own registry checks and pins the range.
		pin := tgt.e.Pin(s.Remote, s.Length)
		if pin == nil {
			s.Complete(&engine.TransferError{Op: s.Op, Peer: tgt.e.SegmentName(), Transport: Name, Addr: s.Remote, Length: s.Length,
				Err: fmt.Errorf("outside the target's registered memory: %w", engine.ErrRejected)})
			continue
		}
		op := cmem.Op{Dst: uintptr(s.Remote), Src: s.Local, N: s.Length}
		if s.Op == engine.OpRead {
			op.Dst, op.Src = s.Local, uintptr(s.Remote)
		}
		if s.LocalKind() == engine.MemoryDevice || pin.Kind == engine.MemoryDevice {
			gb = gb.add(s, pin, op)
			continue
		}
		ops = append(ops, op)
		pins = append(pins, pin)
		done = append(done, s)
		if bytes += s.Length; bytes >= t.pieceBytes {
			t.copyHost(ops, pins, done)
			ops, pins, done, bytes = ops[:0], pins[:0], done[:0], 0
		}
	}
	t.submitGPU(tgt, gb)
	t.copyHost(ops, pins, done)
	tgt.served.exit()
}

// copyHost runs ops in one C call, releases their target pins and
// completes their slices.
func (t *Transport) copyHost(ops []cmem.Op, pins []*engine.Region, done []*engine.Slice) {
	if len(ops) == 0 {
		return
	}
	if t.beforeCopy != nil {
		t.beforeCopy(done)
	}
	cmem.CopyBatch(ops)
	for _, p := range pins {
		p.Release()
	}
	t.copies.Add(uint64(len(done)))
	for _, s := range done {
		s.Complete(nil)
	}
	clear(pins)
	clear(done)
}

// Close stops the workers after draining what is queued (failing it), and
// waits (bounded) until no other engine of the process copies into this
// engine's memory.
func (t *Transport) Close() error {
	if t.closed.Swap(true) {
		return nil
	}
	live.Lock()
	delete(live.m, t.instance)
	live.Unlock()
	t.mu.Lock() // waits for Submits sending now; later ones see stopped
	t.stopped = true
	t.mu.Unlock()
	t.cancel()
	t.wg.Wait()
	for drained := false; !drained; {
		select {
		case w := <-t.q:
			failAll(w.slices, engine.ErrClosed)
		default:
			drained = true
		}
	}
	if !t.served.close(drainTimeout) {
		return fmt.Errorf("local transport of %q: copies by other engines still running after %s: %w", t.e.SegmentName(), drainTimeout, engine.ErrTimeout)
	}
	return nil
}

// gate counts users of a resource and lets its owner close it and wait for
// the users to leave.
type gate struct {
	mu     sync.Mutex
	n      int
	closed bool
	done   chan struct{}
}

func (g *gate) init() { g.done = make(chan struct{}) }

// enter registers a user; false once the gate is closed.
func (g *gate) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.n++
	return true
}

// exit unregisters a user.
func (g *gate) exit() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n--
	if g.n == 0 && g.closed {
		close(g.done)
	}
}

// close refuses new users and waits until the current ones left or timeout
// passed; it reports whether they left.
func (g *gate) close(timeout time.Duration) bool {
	g.mu.Lock()
	g.closed = true
	if g.n == 0 {
		close(g.done)
	}
	g.mu.Unlock()
	tm := time.NewTimer(timeout)
	defer tm.Stop()
	select {
	case <-g.done:
		return true
	case <-tm.C:
		return false
	}
}
