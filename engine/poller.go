package engine

// A Poller reads, on the calling goroutine and without blocking, the
// answers that have already arrived for slices a transport has in flight,
// and completes their slices. A transport offers one for a slice whose
// answer is small and likely microseconds away (a small request on an idle
// connection): the goroutine that waits for the slice's batch (Wait, a
// status query) polls it, so that the answer is read and the batch
// completed by the thread that wants it, with no hand-off to the
// transport's reader goroutine and no thread woken (issue 18). The
// transport must still complete the slice on its own when nobody polls,
// within about SpinBudget.
type Poller interface {
	// Poll must not block, and must be safe to call from any goroutine,
	// concurrently, and after the slice completed.
	Poll()
}

// PollWith tells the engine that p reads s's answer when polled (see
// Poller). Call it before the slice can complete.
func (s *Slice) PollWith(p Poller) { s.task.batch.addPoller(p) }

// addPoller adds p to the batch's pollers (once).
func (b *batch) addPoller(p Poller) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, q := range b.mu.pollers {
		if q == p {
			return
		}
	}
	b.mu.pollers = append(b.mu.pollers, p)
	b.npollers.Store(int32(len(b.mu.pollers)))
}

// poll polls the batch's pollers while it is not idle. Pollers are only
// ever appended, so the elements read outside the lock stay as they were.
func (b *batch) poll() {
	n := int(b.npollers.Load())
	if n == 0 || b.idle() {
		return
	}
	b.mu.Lock()
	ps := b.mu.pollers[:n]
	b.mu.Unlock()
	for _, p := range ps {
		p.Poll()
	}
}

// settled is the wait's poll: it polls the batch's pollers, then reports
// whether the batch is idle.
func (b *batch) settled() bool {
	b.poll()
	return b.idle()
}
