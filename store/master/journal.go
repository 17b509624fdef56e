package master

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/kvferry/kvferry/store/oplog"
	"github.com/kvferry/kvferry/store/wire"
)

// journal numbers the master's state changes and stores them in an
// oplog.Backend with group commit: records are added under the Service
// lock (so their order is the order of the changes) and written after it
// is released, by whichever caller waits first, in one Append for all
// that are pending. A mutating call answers only after its records (and
// every earlier one) are stored, so an acknowledged put is in the log, and
// space freed by a removal is handed out again only after the removal is.
type journal struct {
	be      oplog.Backend
	timeout time.Duration

	io sync.Mutex // held around every backend call

	mu      sync.Mutex
	cond    sync.Cond
	pending []oplog.Record
	last    uint64 // last seq assigned
	durable uint64 // last seq stored
	writing bool
	// err is sticky: the backend refused for good (another master leads,
	// or the log can no longer be appended to safely); nothing more is
	// stored.
	err error
	// failed is a batch whose write failed for a passing reason (an etcd
	// member died, a full disk): it is written again, as it was, before
	// anything newer, so the log keeps its order and nothing is lost.
	failed []oplog.Record
	// fails counts failed writes; lastErr is the latest one.
	fails   uint64
	lastErr error
	// sinceSnap counts records added since the last snapshot.
	sinceSnap int
	lastSnap  time.Time
}

func newJournal(be oplog.Backend, last uint64, timeout time.Duration) *journal {
	j := &journal{be: be, timeout: timeout, last: last, durable: last, lastSnap: time.Now()}
	j.cond.L = &j.mu
	return j
}

// add queues data as the next record.
func (j *journal) add(data []byte) {
	j.mu.Lock()
	j.last++
	j.pending = append(j.pending, oplog.Record{Seq: j.last, Data: data})
	j.sinceSnap++
	j.mu.Unlock()
}

// wait returns once every record added before the call is stored, or the
// failure that kept them from it: a write that fails for a passing reason
// fails the callers waiting for it (their changes are stored by a later
// write: the outcome they were told is unknown, as after any timeout), and
// the journal goes on; only a backend that refuses for good stops it.
func (j *journal) wait() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	target := j.last
	fails := j.fails
	for j.durable < target && j.err == nil {
		if j.fails != fails {
			return j.lastErr // the write this call waited for failed
		}
		if j.writing {
			j.cond.Wait()
			continue
		}
		batch := j.failed
		if batch == nil {
			batch = j.pending
			j.pending = nil
		}
		j.failed = nil
		j.writing = true
		j.mu.Unlock()
		err := j.call(func(ctx context.Context) error { return j.be.Append(ctx, batch) })
		j.mu.Lock()
		j.writing = false
		switch {
		case err == nil:
			if len(batch) > 0 {
				j.durable = batch[len(batch)-1].Seq
			}
		case errors.Is(err, oplog.ErrFenced), errors.Is(err, oplog.ErrBroken):
			j.err = err
		default:
			j.failed = batch
			j.fails++
			j.lastErr = err
		}
		j.cond.Broadcast()
	}
	return j.err
}

func (j *journal) call(fn func(ctx context.Context) error) error {
	j.io.Lock()
	defer j.io.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), j.timeout)
	defer cancel()
	return fn(ctx)
}

// snapshotDue reports whether a snapshot should be taken.
func (j *journal) snapshotDue(records int, interval time.Duration) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.err == nil && j.failed == nil && j.sinceSnap > 0 && (j.sinceSnap >= records || time.Since(j.lastSnap) >= interval)
}

// snapshot stores data as the state after record seq (every record up to
// seq is stored first).
func (j *journal) snapshot(seq uint64, data []byte, added int) error {
	if err := j.wait(); err != nil {
		return err
	}
	if err := j.call(func(ctx context.Context) error { return j.be.Snapshot(ctx, seq, data) }); err != nil {
		return err
	}
	j.mu.Lock()
	j.sinceSnap -= added
	j.lastSnap = time.Now()
	j.mu.Unlock()
	return nil
}

// journalErr turns a backend failure into the error a caller sees: a
// fenced HA leader is UNAVAILABLE_IN_CURRENT_STATUS (the client finds the
// new leader), anything else INTERNAL_ERROR.
func journalErr(err error) error {
	if errors.Is(err, oplog.ErrFenced) {
		return fmt.Errorf("store master oplog: %w: %w", err, wire.ErrUnavailableInStatus)
	}
	return fmt.Errorf("store master oplog: %w: %w", err, wire.ErrInternal)
}

// logLocked queues a record when the Service persists.
func (s *Service) logLocked(data []byte) {
	if s.jr != nil {
		s.jr.add(data)
	}
}

// durable waits for the journal and puts its failure in *errp when that
// holds no error yet. Mutating methods defer it before taking the lock,
// so it runs after the lock is released.
func (s *Service) durable(errp *error) {
	if s.jr == nil {
		return
	}
	if err := s.jr.wait(); err != nil && *errp == nil {
		*errp = journalErr(err)
	}
}

// durableAll is durable for per-key results: a journal failure replaces
// every success.
func (s *Service) durableAll(errs []error) {
	if s.jr == nil {
		return
	}
	if err := s.jr.wait(); err != nil {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = journalErr(err)
			}
		}
	}
}

// Persistent reports whether the Service keeps an operation log.
func (s *Service) Persistent() bool { return s.jr != nil }

// Snapshot writes a snapshot of the state when one is due (or always with
// force) and drops the log records it covers. Server calls it from the
// maintenance loop.
func (s *Service) Snapshot(force bool) error {
	if s.jr == nil {
		return nil
	}
	if !force && !s.jr.snapshotDue(s.cfg.SnapshotRecords, s.cfg.SnapshotInterval) {
		return nil
	}
	s.mu.Lock()
	data := s.encodeStateLocked()
	s.jr.mu.Lock()
	seq, added := s.jr.last, s.jr.sinceSnap
	s.jr.mu.Unlock()
	s.mu.Unlock()
	if err := s.jr.snapshot(seq, data, added); err != nil {
		return journalErr(err)
	}
	s.log.Info("store master snapshot", "seq", seq, "bytes", len(data))
	return nil
}

// flushLog waits for the journal where no caller waits for an answer
// (maintenance, removals that return counts); a failure is logged.
func (s *Service) flushLog() {
	if s.jr == nil {
		return
	}
	if err := s.jr.wait(); err != nil {
		s.log.Error("store master oplog write failed", "err", err)
	}
}
