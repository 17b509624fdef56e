package engine

import (
	"sync/atomic"
	"time"
)

// Metrics is a snapshot of an engine's counters.
type Metrics struct {
	// TasksCompleted, TasksFailed and TasksCanceled count terminal tasks.
	TasksCompleted, TasksFailed, TasksCanceled uint64
	// BytesCompleted sums the length of completed tasks.
	BytesCompleted uint64
	// TaskNanos sums the submit-to-terminal time of terminal tasks.
	TaskNanos uint64
	// SlicesByTransport counts slices handed to each transport.
	SlicesByTransport map[string]uint64
	// NotifiesSent, NotifiesReceived and NotifiesFailed count notifications.
	NotifiesSent, NotifiesReceived, NotifiesFailed uint64
	// BatchesLive is the number of allocated, not yet freed batches.
	BatchesLive int
	// RegisteredBytes sums the length of registered regions.
	RegisteredBytes uint64
	// Segments is the number of opened remote segments.
	Segments int
}

type metrics struct {
	tasksCompleted, tasksFailed, tasksCanceled atomic.Uint64
	bytesCompleted, taskNanos                  atomic.Uint64
	notifiesSent, notifiesReceived             atomic.Uint64
	notifiesFailed                             atomic.Uint64
}

func (m *metrics) taskDone(st TaskState, n uint64, d time.Duration) {
	switch st {
	case StateCompleted:
		m.tasksCompleted.Add(1)
		m.bytesCompleted.Add(n)
	case StateCanceled:
		m.tasksCanceled.Add(1)
	default:
		m.tasksFailed.Add(1)
	}
	m.taskNanos.Add(uint64(d))
}
