package handle

import "sync"

// Tag is set in the high bits of every handle value.
const Tag uintptr = 0x4b56460000000000

// Table maps handle values to objects of type T. It is safe for concurrent
// use.
type Table[T any] struct {
	mu   sync.RWMutex
	next uintptr       // guarded by mu; the last id handed out
	m    map[uintptr]T // guarded by mu
}

// Add stores v and returns its new handle, never 0.
func (t *Table[T]) Add(v T) uintptr {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = make(map[uintptr]T)
	}
	t.next++
	k := Tag | t.next<<4
	t.m[k] = v
	return k
}

// Get returns the object of handle k.
func (t *Table[T]) Get(k uintptr) (T, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	v, ok := t.m[k]
	return v, ok
}

// Remove drops handle k and returns its object; ok is false when k was not
// in the table.
func (t *Table[T]) Remove(k uintptr) (v T, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v, ok = t.m[k]
	delete(t.m, k)
	return v, ok
}

// All returns the live objects, in no order.
func (t *Table[T]) All() []T {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]T, 0, len(t.m))
	for _, v := range t.m {
		out = append(out, v)
	}
	return out
}
