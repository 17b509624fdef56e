package asyncq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/store/client"
	"github.com/kvferry/kvferry/store/wire"
)

// Op is a store call the queue runs; the values are kvferry.h's
// KVFERRY_QOP_*.
type Op int

// Operations. A completion's Value is what the matching synchronous call
// returns.
const (
	// OpPut stores Size bytes at Addr under Key (PutFrom, or UpsertFrom with
	// FlagUpsert). Value 0.
	OpPut Op = 1
	// OpGetInto reads Key into Size bytes at Addr. Value: the object size.
	OpGetInto Op = 2
	// OpGetAlloc reads Key into C memory it allocates (Completion.Data).
	// Value: the object size.
	OpGetAlloc Op = 3
	// OpIsExist asks whether Key exists. Value 1 or 0.
	OpIsExist Op = 4
	// OpGetSize asks for Key's size. Value: the size.
	OpGetSize Op = 5
	// OpRemove removes Key (ignoring leases with FlagForce). Value 0.
	OpRemove Op = 6
)

// Flags modify an Op; the values are kvferry.h's KVFERRY_QFLAG_*.
type Flags int

// Flags.
const (
	// FlagUpsert makes OpPut replace an existing object.
	FlagUpsert Flags = 1
	// FlagForce makes OpRemove ignore leases.
	FlagForce Flags = 2
)

// Queue limits (kvferry.h kvferry_store_queue_create).
const (
	// DefaultWorkers is the worker count when Config.Workers is 0.
	DefaultWorkers = 16
	// MaxWorkers is the largest Config.Workers.
	MaxWorkers = 256
	// DefaultDepth is the depth when Config.Depth is 0.
	DefaultDepth = 4096
	// MaxDepth is the largest Config.Depth.
	MaxDepth = 1 << 20
)

// Sentinel errors of Submit and New.
var (
	// ErrClosed: the queue was closed.
	ErrClosed = errors.New("store queue closed")
	// ErrFull: Depth calls are submitted and not yet polled.
	ErrFull = errors.New("store queue full")
	// ErrInvalid: an unknown op, or a Config out of range.
	ErrInvalid = errors.New("invalid store queue argument")
)

// Store is the store a queue's jobs run on; *client.Client implements it.
// The workers call it concurrently, so it must be safe for concurrent use,
// and each call must end on its own (the store's timeouts): Close waits for
// running calls. Addresses are the caller's C memory, valid for the call.
type Store interface {
	PutFrom(ctx context.Context, key string, addr uintptr, size uint64, cfg client.ReplicateConfig) error
	UpsertFrom(ctx context.Context, key string, addr uintptr, size uint64, cfg client.ReplicateConfig) error
	GetInto(ctx context.Context, key string, addr uintptr, size uint64) (uint64, error)
	GetSize(ctx context.Context, key string) (uint64, error)
	IsExist(ctx context.Context, key string) (bool, error)
	Remove(ctx context.Context, key string, force bool) error
}

var _ Store = (*client.Client)(nil)

// Config configures a Queue.
type Config struct {
	// Workers is the number of workers (0: DefaultWorkers; at most
	// MaxWorkers).
	Workers int
	// Depth is how many calls may be submitted and not yet polled (0:
	// DefaultDepth; at most MaxDepth).
	Depth int
	// Store returns the store a job runs on; it is called once per job, so
	// the store may be set up, or go away, after the queue was made. Its
	// error becomes the job's. Required.
	Store func() (Store, error)
	// OnError, when set, is called by the worker with the error of each job
	// that failed, as the job finishes (the C API records it as the store's
	// last error). It is not called for a recovered panic.
	OnError func(error)
	// Logger receives the queue's logs; nil discards them.
	Logger *slog.Logger
}

// Job is one store call.
type Job struct {
	// Op is the call.
	Op Op
	// Flags modify it.
	Flags Flags
	// Tag comes back with the completion.
	Tag uint64
	// Key is the object's key.
	Key string
	// Addr and Size are the caller's buffer (OpPut, OpGetInto); it must stay
	// valid until the completion has been polled.
	Addr uintptr
	// Size is the buffer's length in bytes.
	Size uint64
	// Config is OpPut's replication config.
	Config client.ReplicateConfig
}

// Completion is one finished job.
type Completion struct {
	// Tag is the job's tag.
	Tag uint64
	// Value is the call's result when Err is nil (see Op).
	Value uint64
	// Err is why the call failed; wire.CodeOf gives its store code.
	Err error
	// Data is the C-malloc'ed object of an OpGetAlloc (free it with C free,
	// cmem.Free), else 0. The poller owns it.
	Data uintptr
}

// Queue is a completion queue; see the package comment.
type Queue struct {
	cfg Config
	log *slog.Logger
	fd  int // eventfd; readable while completions wait

	// outstanding counts calls submitted and not yet polled.
	outstanding atomic.Int64

	// submitMu orders submissions against Close: Submit holds it shared
	// while it sends, Close exclusively while it closes jobs.
	submitMu sync.RWMutex
	closed   bool // guarded by submitMu
	jobs     chan Job

	done struct {
		sync.Mutex
		list []Completion // finished, not yet polled
	}
	closeOnce sync.Once
	closeErr  error
	wg        sync.WaitGroup // the workers
}

// New checks cfg, creates the eventfd and starts the workers. A Config out
// of range wraps ErrInvalid.
func New(cfg Config) (*Queue, error) {
	switch {
	case cfg.Workers == 0:
		cfg.Workers = DefaultWorkers
	case cfg.Workers < 0 || cfg.Workers > MaxWorkers:
		return nil, fmt.Errorf("store queue: %d workers, want 1-%d: %w", cfg.Workers, MaxWorkers, ErrInvalid)
	}
	switch {
	case cfg.Depth == 0:
		cfg.Depth = DefaultDepth
	case cfg.Depth < 0 || cfg.Depth > MaxDepth:
		return nil, fmt.Errorf("store queue: depth %d, want 1-%d: %w", cfg.Depth, MaxDepth, ErrInvalid)
	}
	if cfg.Store == nil {
		return nil, fmt.Errorf("store queue: no store: %w", ErrInvalid)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("store queue: eventfd: %w", err)
	}
	q := &Queue{cfg: cfg, log: log, fd: fd, jobs: make(chan Job, cfg.Depth)}
	q.wg.Add(cfg.Workers)
	for range cfg.Workers {
		go q.runWorker()
	}
	return q, nil
}

// FD returns the queue's eventfd (non-blocking; read 8 bytes to reset it).
// The queue owns it; it is valid until Close.
func (q *Queue) FD() int { return q.fd }

// Submit queues j. It never blocks: it fails with ErrFull when Depth calls
// are outstanding (submitted, not yet polled), ErrClosed after Close and
// ErrInvalid for an unknown op.
func (q *Queue) Submit(j Job) error {
	if j.Op < OpPut || j.Op > OpRemove {
		return fmt.Errorf("store queue submit: op %d: %w", j.Op, ErrInvalid)
	}
	q.submitMu.RLock()
	defer q.submitMu.RUnlock()
	if q.closed {
		return fmt.Errorf("store queue submit: %w", ErrClosed)
	}
	if q.outstanding.Add(1) > int64(q.cfg.Depth) {
		q.outstanding.Add(-1)
		return fmt.Errorf("store queue submit: %d calls outstanding: %w", q.cfg.Depth, ErrFull)
	}
	// outstanding <= depth = cap(jobs), so the send never blocks.
	q.jobs <- j
	return nil
}

// Poll takes up to max completions, oldest first, without blocking. The
// caller owns their Data.
func (q *Queue) Poll(max int) []Completion {
	if max <= 0 {
		return nil
	}
	q.done.Lock()
	n := min(len(q.done.list), max)
	got := q.done.list[:n:n]
	q.done.list = append([]Completion(nil), q.done.list[n:]...)
	q.done.Unlock()
	q.outstanding.Add(-int64(n))
	return got
}

// Close stops the queue: later submissions fail with ErrClosed, running
// calls finish, unpolled completions are dropped (their Data freed) and the
// eventfd is closed. A second Close is harmless and returns the first one's
// error.
func (q *Queue) Close() error {
	q.closeOnce.Do(func() {
		q.submitMu.Lock()
		q.closed = true
		close(q.jobs)
		q.submitMu.Unlock()
		q.wg.Wait()
		q.done.Lock()
		for _, d := range q.done.list {
			if d.Data != 0 {
				cmem.Free(d.Data)
			}
		}
		q.done.list = nil
		q.done.Unlock()
		if err := unix.Close(q.fd); err != nil {
			q.closeErr = fmt.Errorf("store queue: close eventfd: %w", err)
		}
	})
	return q.closeErr
}

// runWorker runs submitted calls until jobs is closed. Owned by the queue,
// stopped and waited for by Close.
func (q *Queue) runWorker() {
	defer q.wg.Done()
	var one [8]byte
	one[0] = 1 // native little-endian uint64 1
	for j := range q.jobs {
		d := q.run(j)
		q.done.Lock()
		q.done.list = append(q.done.list, d)
		q.done.Unlock()
		_, _ = unix.Write(q.fd, one[:])
	}
}

// run performs one call and returns its completion; a panic becomes
// wire.ErrInternal.
func (q *Queue) run(j Job) (d Completion) {
	d.Tag = j.Tag
	defer func() {
		if r := recover(); r != nil {
			if d.Data != 0 {
				cmem.Free(d.Data)
				d.Data = 0
			}
			d.Value = 0
			d.Err = fmt.Errorf("store queue %s of %q: recovered panic: %v: %w", j.Op, j.Key, r, wire.ErrInternal)
			q.log.Error("recovered panic in store queue job", "err", d.Err, "stack", string(debug.Stack()))
		}
	}()
	d.Value, d.Data, d.Err = q.call(j)
	if d.Err != nil {
		d.Value = 0
		if q.cfg.OnError != nil {
			q.cfg.OnError(d.Err)
		}
	}
	return d
}

// call performs job j on the current store.
func (q *Queue) call(j Job) (uint64, uintptr, error) {
	s, err := q.cfg.Store()
	if err != nil {
		return 0, 0, err
	}
	ctx := context.Background() // each call is bounded by the store's timeouts
	switch j.Op {
	case OpPut:
		if j.Flags&FlagUpsert != 0 {
			return 0, 0, s.UpsertFrom(ctx, j.Key, j.Addr, j.Size, j.Config)
		}
		return 0, 0, s.PutFrom(ctx, j.Key, j.Addr, j.Size, j.Config)
	case OpGetInto:
		n, err := s.GetInto(ctx, j.Key, j.Addr, j.Size)
		return n, 0, err
	case OpGetAlloc:
		return GetAlloc(ctx, s, j.Key)
	case OpIsExist:
		yes, err := s.IsExist(ctx, j.Key)
		if yes && err == nil {
			return 1, 0, nil
		}
		return 0, 0, err
	case OpGetSize:
		n, err := s.GetSize(ctx, j.Key)
		return n, 0, err
	case OpRemove:
		return 0, 0, s.Remove(ctx, j.Key, j.Flags&FlagForce != 0)
	}
	return 0, 0, fmt.Errorf("store queue: op %d: %w", j.Op, ErrInvalid)
}

// GetAlloc reads key into C-malloc'ed memory (kvferry_store_get_alloc and
// its queued form): it returns the size and the memory, which the caller
// frees with C free, or an error and no memory.
func GetAlloc(ctx context.Context, s Store, key string) (uint64, uintptr, error) {
	// The object may be replaced between the size query and the read; try
	// again with the new size a few times.
	for range 3 {
		size, err := s.GetSize(ctx, key)
		if err != nil {
			return 0, 0, err
		}
		p, err := cmem.Malloc(max(size, 1))
		if err != nil {
			return 0, 0, fmt.Errorf("get %q: %w: %w", key, err, wire.ErrBufferOverflow)
		}
		n, err := s.GetInto(ctx, key, p, size)
		if err == nil {
			return n, p, nil
		}
		cmem.Free(p)
		if wire.CodeOf(err) != wire.ErrInvalidParams {
			return 0, 0, err
		}
	}
	return 0, 0, fmt.Errorf("get %q: object keeps changing size: %w", key, wire.ErrInvalidParams)
}

// String returns the op's kvferry.h name without its prefix ("PUT", ...).
func (o Op) String() string {
	switch o {
	case OpPut:
		return "PUT"
	case OpGetInto:
		return "GET_INTO"
	case OpGetAlloc:
		return "GET_ALLOC"
	case OpIsExist:
		return "IS_EXIST"
	case OpGetSize:
		return "GET_SIZE"
	case OpRemove:
		return "REMOVE"
	}
	return fmt.Sprintf("OP(%d)", int(o))
}
