package engine

import (
	"fmt"

	"github.com/kvferry/kvferry/internal/invariants"
)

// Batches are recycled (issue 38): a batch-1 Transfer takes its batch, with
// the task, slice and lists it carries (batch.one), from the engine's free
// list instead of the heap. A batch goes back only once nobody can touch it:
//
//   - its owner let go of it (FreeBatch), and every call that looked it up
//     by id has returned (lookup takes a reference under the table's lock,
//     the call drops it; FreeBatch removes the id first, so no call can
//     find it afterwards);
//   - every slice handed to a transport was released: the engine takes a
//     reference per slice before Submit, which Complete drops once the
//     engine is done with it (a slice failed over keeps it for the next
//     transport); a transport that still reads a slice after completing it
//     takes its own with Slice.Hold and drops it with Slice.Release;
//   - every transport it went to is a Releaser: one that never touches a
//     slice it completed outside Hold and Release. A batch with a slice on
//     any other transport, or with a notification (its sender settles the
//     batch after its last task), is left to the garbage collector.
//
// So a FreeBatch of a batch whose slice a lane still holds does not race
// with its reuse: the reuse waits for the lane's Release.

// A Releaser is a Transport that touches no slice it was given, nor the
// slice's batch, once it has completed it (Slice.Complete), except between
// Slice.Hold and Slice.Release: the engine recycles the batches that went
// only to such transports. Implementations say so by having the method.
type Releaser interface {
	Transport
	// ReleasesSlices does nothing; it marks the contract.
	ReleasesSlices()
}

// maxFreeBatches caps the engine's free list of batches.
const maxFreeBatches = 64

// Hold keeps the slice's batch (and the slice with it) from being reused
// until the matching Release, for a transport that reads the slice after
// it may have completed it (see Releaser). Call it while the slice is not
// yet completed, or while already holding it.
func (s *Slice) Hold() { s.task.batch.refs.Add(1) }

// Release drops a Hold; the slice must not be touched afterwards.
func (s *Slice) Release() { s.task.batch.unref() }

// unref drops one reference; the last recycles the batch.
func (b *batch) unref() {
	n := b.refs.Add(-1)
	if n > 0 {
		return
	}
	if n < 0 { // a slice completed or released twice: never reuse it
		if invariants.Enabled {
			panic("engine: batch reference count below zero")
		}
		b.noReuse.Store(true)
		return
	}
	if b.noReuse.Load() {
		return
	}
	b.e.recycle(b)
}

// handOut counts n slices about to be handed to t in b's references, and
// marks b not reusable when t is not a Releaser.
func (b *batch) handOut(t Transport, n int) {
	if _, ok := t.(Releaser); !ok {
		b.noReuse.Store(true)
	}
	b.refs.Add(int32(n))
}

// recycle resets b, which nobody references any more, and keeps it for
// the next AllocateBatch.
func (e *Engine) recycle(b *batch) {
	*b = batch{}
	e.batchFree.Lock()
	if len(e.batchFree.free) < maxFreeBatches {
		e.batchFree.free = append(e.batchFree.free, b)
	}
	e.batchFree.Unlock()
}

// newBatch returns a zero batch of e, recycled when one is free.
func (e *Engine) newBatch() *batch {
	e.batchFree.Lock()
	var b *batch
	if n := len(e.batchFree.free); n > 0 {
		b = e.batchFree.free[n-1]
		e.batchFree.free[n-1] = nil
		e.batchFree.free = e.batchFree.free[:n-1]
	}
	e.batchFree.Unlock()
	if b == nil {
		b = new(batch)
	}
	b.e = e
	return b
}

// lookup returns batch id with a reference taken, which the caller drops
// (unref) when done with it.
func (e *Engine) lookup(id BatchID) (*batch, error) {
	e.batches.RLock()
	b := e.batches.m[id]
	if b != nil {
		b.refs.Add(1)
	}
	e.batches.RUnlock()
	if b == nil {
		return nil, fmt.Errorf("batch %d: %w", id, ErrUnknownBatch)
	}
	return b, nil
}
