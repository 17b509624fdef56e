package abi

import (
	"fmt"
	"sync"

	"github.com/kvferry/kvferry/engine"
)

// Handle values carry a tag in the high bits, which makes them
// non-canonical addresses: a caller that dereferences one faults at once
// instead of corrupting memory. Ids are never reused, so a destroyed
// handle stays invalid.
const handleTag uintptr = 0x4b56460000000000

type handles[T any] struct {
	mu   sync.RWMutex
	next uintptr
	m    map[uintptr]T
}

func (h *handles[T]) add(v T) uintptr {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = make(map[uintptr]T)
	}
	h.next++
	k := handleTag | h.next<<4
	h.m[k] = v
	return k
}

func (h *handles[T]) get(k uintptr) (T, bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	v, ok := h.m[k]
	return v, ok
}

func (h *handles[T]) remove(k uintptr) (T, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.m[k]
	delete(h.m, k)
	return v, ok
}

func (h *handles[T]) all() []T {
	h.mu.RLock()
	defer h.mu.RUnlock()
	out := make([]T, 0, len(h.m))
	for _, v := range h.m {
		out = append(out, v)
	}
	return out
}

// engines is the table of live transfer engines.
var engines handles[*engine.Engine]

func lookupEngine(h uintptr) (*engine.Engine, error) {
	e, ok := engines.get(h)
	if !ok || e.Closed() {
		return nil, fmt.Errorf("engine handle %#x: %w", h, engine.ErrInvalidArgument)
	}
	return e, nil
}
