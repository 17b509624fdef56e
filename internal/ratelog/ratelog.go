// Package ratelog keeps a flood of identical warnings from flooding a log:
// Every limits one event class to a line per interval and counts what it
// held back, and Handler applies the same rule to every warning and error
// record a slog.Logger emits. A hostile peer that triggers a refusal a
// thousand times a second then costs one line every few seconds, and the
// line says how many were suppressed.
package ratelog

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// DefaultInterval is the least time between two lines of one kind.
const DefaultInterval = 5 * time.Second

// maxKeys bounds the kinds an Every or Handler remembers; past it the
// oldest are forgotten (so a flood of distinct keys cannot grow memory).
const maxKeys = 1024

// Every admits one event per key and interval. The zero value uses
// DefaultInterval. It is safe for concurrent use.
type Every struct {
	// Interval is the least time between two admitted events of one key.
	Interval time.Duration

	mu struct {
		sync.Mutex
		last map[string]*slot
	}
}

type slot struct {
	at         time.Time
	suppressed uint64
}

// Allow reports whether an event of key may be logged now, and how many
// events of key were held back since the last admitted one.
func (e *Every) Allow(key string) (ok bool, suppressed uint64) {
	return e.allowAt(key, time.Now())
}

func (e *Every) allowAt(key string, now time.Time) (bool, uint64) {
	iv := e.Interval
	if iv <= 0 {
		iv = DefaultInterval
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.mu.last == nil {
		e.mu.last = make(map[string]*slot)
	}
	s := e.mu.last[key]
	if s == nil {
		if len(e.mu.last) >= maxKeys {
			e.evictLocked(now, iv)
		}
		e.mu.last[key] = &slot{at: now}
		return true, 0
	}
	if now.Sub(s.at) < iv {
		s.suppressed++
		return false, 0
	}
	n := s.suppressed
	s.at, s.suppressed = now, 0
	return true, n
}

// evictLocked drops slots older than the interval, or all of them when
// none is that old.
func (e *Every) evictLocked(now time.Time, iv time.Duration) {
	for k, s := range e.mu.last {
		if now.Sub(s.at) >= iv {
			delete(e.mu.last, k)
		}
	}
	if len(e.mu.last) >= maxKeys {
		clear(e.mu.last)
	}
}

// Handler wraps a slog.Handler: records at Warn and above are limited to
// one per message text and interval, and an admitted record carries a
// "suppressed" attribute when earlier ones were held back. Records below
// Warn pass through unchanged.
type Handler struct {
	next  slog.Handler
	every *Every
}

// NewHandler returns next limited to one warning or error per message and
// interval (DefaultInterval when interval is 0).
func NewHandler(next slog.Handler, interval time.Duration) *Handler {
	return &Handler{next: next, every: &Every{Interval: interval}}
}

// Enabled reports whether next handles the level.
func (h *Handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

// Handle passes r on unless it is a warning held back.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return h.next.Handle(ctx, r)
	}
	ok, n := h.every.Allow(r.Message)
	if !ok {
		return nil
	}
	if n > 0 {
		r = r.Clone()
		r.AddAttrs(slog.Uint64("suppressed", n))
	}
	return h.next.Handle(ctx, r)
}

// WithAttrs returns a handler with attrs that shares h's limits.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &Handler{next: h.next.WithAttrs(attrs), every: h.every}
}

// WithGroup returns a handler with a group that shares h's limits.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{next: h.next.WithGroup(name), every: h.every}
}
