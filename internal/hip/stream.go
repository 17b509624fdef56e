package hip

import (
	"context"
	"fmt"
	"time"
)

// Stream is a non-blocking stream of one device (hipStreamNonBlocking).
// It is safe for concurrent use; Close once no copy is queued.
type Stream struct {
	r   *Runtime
	dev int
	s   uintptr
}

// NewStream makes a non-blocking stream on dev.
func (r *Runtime) NewStream(dev int) (*Stream, error) {
	var s uintptr
	err := r.Do(dev, func() error { return r.check("hipStreamCreateWithFlags", r.f.streamCreate(&s, streamNonBlocking)) })
	if err != nil {
		return nil, err
	}
	return &Stream{r: r, dev: dev, s: s}, nil
}

// Device returns the stream's device.
func (s *Stream) Device() int { return s.dev }

// Copy is one copy of N bytes from Src to Dst (device or host addresses).
type Copy struct{ Dst, Src, N uint64 }

// Submit queues the copies on the stream (hipMemcpyAsync,
// hipMemcpyDefault) and records ev after them when ev is not nil. It
// returns the number queued before the first error; ev is recorded even
// then, so that it marks the end of what was queued.
func (s *Stream) Submit(ops []Copy, ev *Event) (int, error) {
	queued := 0
	err := s.r.Do(s.dev, func() error {
		var err error
		for _, op := range ops {
			if err = s.r.check("hipMemcpyAsync", s.r.f.memcpyAsync(op.Dst, op.Src, op.N, memcpyDefault, s.s)); err != nil {
				break
			}
			queued++
		}
		if ev != nil {
			if e2 := s.r.check("hipEventRecord", s.r.f.eventRecord(ev.e, s.s)); err == nil {
				err = e2
			}
		}
		return err
	})
	return queued, err
}

// Synchronize waits for every copy queued on the stream.
func (s *Stream) Synchronize() error {
	return s.r.Do(s.dev, func() error { return s.r.check("hipStreamSynchronize", s.r.f.streamSynchronize(s.s)) })
}

// Close destroys the stream; a second Close does nothing.
func (s *Stream) Close() error {
	if s.s == 0 {
		return nil
	}
	h := s.s
	s.s = 0
	return s.r.Do(s.dev, func() error { return s.r.check("hipStreamDestroy", s.r.f.streamDestroy(h)) })
}

// Event marks a point of a stream (hipEventBlockingSync,
// hipEventDisableTiming).
type Event struct {
	r   *Runtime
	dev int
	e   uintptr
}

// NewEvent makes an event on dev.
func (r *Runtime) NewEvent(dev int) (*Event, error) {
	var e uintptr
	err := r.Do(dev, func() error {
		return r.check("hipEventCreateWithFlags", r.f.eventCreate(&e, eventBlockingSync|eventDisableTiming))
	})
	if err != nil {
		return nil, err
	}
	return &Event{r: r, dev: dev, e: e}, nil
}

// Done reports whether the work before the event's last record has run
// (hipEventQuery); a failed copy shows as its error.
func (e *Event) Done() (bool, error) {
	var c Result
	err := e.r.Do(e.dev, func() error { c = e.r.f.eventQuery(e.e); return nil })
	if err != nil {
		return false, err
	}
	if c == ErrorNotReady {
		return false, nil
	}
	return c == Success, e.r.check("hipEventQuery", c)
}

// Synchronize blocks until the work before the event's last record has
// run (hipEventSynchronize; the event blocks instead of spinning). Device
// copies always finish, so this wait ends; use Wait for a deadline.
func (e *Event) Synchronize() error {
	return e.r.Do(e.dev, func() error { return e.r.check("hipEventSynchronize", e.r.f.eventSynchronize(e.e)) })
}

// Wait waits until the event has completed or ctx ends, polling
// hipEventQuery with a back-off from 2 µs to 1 ms (hipEventSynchronize has
// no deadline).
func (e *Event) Wait(ctx context.Context) error {
	pause := 2 * time.Microsecond
	for {
		done, err := e.Done()
		if done || err != nil {
			return err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("wait for HIP event on device %d: %w", e.dev, ctx.Err())
		case <-t.C:
		}
		pause = min(2*pause, time.Millisecond)
	}
}

// Close destroys the event; a second Close does nothing.
func (e *Event) Close() error {
	if e.e == 0 {
		return nil
	}
	h := e.e
	e.e = 0
	return e.r.Do(e.dev, func() error { return e.r.check("hipEventDestroy", e.r.f.eventDestroy(h)) })
}
