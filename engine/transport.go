package engine

import (
	"cmp"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvferry/kvferry/engine/descriptor"
)

// OpCode is a transfer direction (values as Mooncake's OPCODE_*).
type OpCode uint8

// Opcodes.
const (
	// OpRead copies remote memory into the local source buffer.
	OpRead OpCode = 0
	// OpWrite copies the local source buffer into remote memory.
	OpWrite OpCode = 1
)

func (o OpCode) String() string {
	switch o {
	case OpRead:
		return "read"
	case OpWrite:
		return "write"
	}
	return "op?"
}

// Transport moves slices between local registered memory and a peer.
//
// Contract: Submit never blocks on the network or waits for a peer; it
// queues the slices and returns. It may instead move a small submission
// itself, doing a bounded amount of local work that the transport
// documents (cma copies up to its inline size, or one share of a larger
// submission, in Submit). The transport
// calls Complete exactly once for every slice it was given, from any
// goroutine, possibly before Submit returns, and within the transport's own
// deadlines (a dead or silent peer completes slices with an error; nothing
// waits forever). A slice whose batch was canceled before it reached the
// wire is completed with ErrCanceled without touching memory. The
// transport may touch a slice's local memory only between Submit and
// Complete. After Close, Submit completes every slice with ErrClosed.
// A transport that also leaves the Slice itself alone once completed
// (outside Slice.Hold and Slice.Release) says so by being a Releaser: the
// engine then recycles the batch. Implementations are safe for concurrent
// use.
type Transport interface {
	// Name is the transport's name ("tcp", "local", ...).
	Name() string
	// Describe adds what the transport publishes to the local descriptor
	// (ports, handles). It is called whenever the descriptor is rebuilt.
	Describe(seg *descriptor.Segment)
	// Reaches reports whether the transport can carry requests to p.
	Reaches(p *Peer) bool
	// SliceSize is the largest slice the engine hands to Submit for this
	// transport; 0 means requests are never sliced.
	SliceSize() uint64
	// Submit starts the slices, all of which target p.
	Submit(p *Peer, slices []*Slice)
	// Close stops the transport; in-flight slices complete with an error.
	// A second Close is harmless.
	Close() error
}

// Peer is an opened segment as transports see it.
type Peer struct {
	// ID is the segment id in this engine (LocalSegment for our own).
	ID SegmentID
	// Name is the segment name.
	Name string
	// Endpoint is the peer's RPC endpoint; its host is also the data host.
	Endpoint descriptor.RPCMeta

	desc   atomic.Pointer[peerDesc]
	gpu    atomic.Pointer[gpuScan]
	paths  sync.Map   // Ends -> *pathStats (pathchoice.go)
	health peerHealth // transports' health toward the peer (failover.go)
}

// peerDesc is a peer's descriptor with its buffers indexed by address.
type peerDesc struct {
	seg *descriptor.Segment
	// byAddr holds the buffers sorted by address, or is nil when they
	// overlap (then Contains searches them all).
	byAddr []descriptor.Buffer
}

// Descriptor returns the current cached descriptor (never nil once opened).
func (p *Peer) Descriptor() *descriptor.Segment {
	if d := p.desc.Load(); d != nil {
		return d.seg
	}
	return nil
}

// setDescriptor caches seg as p's descriptor, indexing its buffers (our own
// descriptors list them sorted already; others are sorted once here).
func (p *Peer) setDescriptor(seg *descriptor.Segment) {
	d := &peerDesc{seg: seg}
	bufs := seg.Buffers
	if !slices.IsSortedFunc(bufs, cmpBufferAddr) {
		bufs = slices.SortedFunc(slices.Values(bufs), cmpBufferAddr)
	}
	d.byAddr = bufs
	for i := 1; i < len(bufs); i++ {
		if bufs[i].Addr < bufs[i-1].Addr+bufs[i-1].Length {
			d.byAddr = nil
			break
		}
	}
	p.desc.Store(d)
}

func cmpBufferAddr(a, b descriptor.Buffer) int { return cmp.Compare(a.Addr, b.Addr) }

// Contains reports whether [addr, addr+length) lies inside one buffer of
// p's cached descriptor, in O(log n) for non-overlapping buffers.
func (p *Peer) Contains(addr, length uint64) bool {
	_, ok := p.buffer(addr, length)
	return ok
}

// buffer returns the buffer of p's cached descriptor holding
// [addr, addr+length).
func (p *Peer) buffer(addr, length uint64) (descriptor.Buffer, bool) {
	d := p.desc.Load()
	if d == nil {
		return descriptor.Buffer{}, false
	}
	if d.byAddr == nil {
		return d.seg.Find(addr, length)
	}
	b := d.byAddr
	i := sort.Search(len(b), func(i int) bool { return b[i].Addr > addr }) - 1
	if i < 0 || !b[i].Contains(addr, 1) {
		return descriptor.Buffer{}, false
	}
	if !b[i].Contains(addr, length) {
		// Maybe a run of buffers continuing each other (one registration).
		return (&descriptor.Segment{Buffers: b[i:]}).Find(addr, length)
	}
	return b[i], true
}

// Local reports whether p is this engine's own segment.
func (p *Peer) Local() bool { return p.ID == LocalSegment }

// Slice is one piece of a task handed to a transport. The engine owns it;
// a transport reads its fields and calls Complete once.
type Slice struct {
	// Op is the direction.
	Op OpCode
	// Local is the local address (source of a write, destination of a read).
	Local uintptr
	// Remote is the address in the peer's registered memory.
	Remote uint64
	// Length is the size in bytes (never 0).
	Length uint64
	// Pieces, when not nil, is the local side in order (Local is the
	// first's address), the pieces totalling Length; only a transport
	// that implements Gatherer gets such slices.
	Pieces []Piece
	// Posted is when the engine handed the slice to the transport.
	Posted time.Time
	// Retries is scratch for the transport: how often it resubmitted the
	// slice after a connection-level failure.
	Retries uint8

	task   *task
	region *Region
	via    Transport // the transport it was handed to
	moved  bool      // failed over from another transport (failover.go)
	probe  bool      // the one slice probing via for the peer (failover.go)
}

// LocalRegion returns the registered region holding the slice's local
// memory (the engine holds it registered until the slice completes), or
// nil for a source outside registered memory (AllowUnregisteredSource),
// which is host memory. Transports ask it for the memory kind.
func (s *Slice) LocalRegion() *Region { return s.region }

// LocalKind returns the memory kind of the slice's local memory.
func (s *Slice) LocalKind() MemoryKind {
	if s.region == nil {
		return MemoryHost
	}
	return s.region.Kind
}

// Canceled reports whether the slice's batch was canceled; a transport that
// has not yet put the slice on the wire completes it with ErrCanceled.
func (s *Slice) Canceled() bool { return s.task != nil && s.task.batch.canceled.Load() }

// SubmitterWaits reports whether the goroutine that submitted the slice
// waits for its batch right away (Engine.Transfer, the store's single
// operations): a transport may then do blocking work for the slice on the
// submitting goroutine (write a large payload itself) instead of handing
// it to one of its own goroutines and waking it. For batches submitted
// through the asynchronous API it is false: their submit must not block.
//
// A slice moved from another transport (failover) reads false: its
// submit runs on the failed transport's goroutine.
func (s *Slice) SubmitterWaits() bool {
	return s.task != nil && !s.moved && s.task.batch.awaited.Load()
}

// Complete reports the slice's outcome: nil for success. Afterwards the
// slice and its batch may be reused (Releaser): a transport that reads the
// slice later holds it (Hold) before completing it.
func (s *Slice) Complete(err error) {
	b := s.task.batch
	if s.task.sliceDone(s, err) {
		b.unref()
	}
}
