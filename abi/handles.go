package abi

import (
	"fmt"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/internal/handle"
)

// handles is a table of C handles (internal/handle: tagged, never reused,
// never a Go pointer).
type handles[T any] struct{ t handle.Table[T] }

func (h *handles[T]) add(v T) uintptr            { return h.t.Add(v) }
func (h *handles[T]) get(k uintptr) (T, bool)    { return h.t.Get(k) }
func (h *handles[T]) remove(k uintptr) (T, bool) { return h.t.Remove(k) }
func (h *handles[T]) all() []T                   { return h.t.All() }

// engines is the table of live transfer engines.
var engines handles[*engine.Engine]

func lookupEngine(h uintptr) (*engine.Engine, error) {
	e, ok := engines.get(h)
	if !ok || e.Closed() {
		return nil, fmt.Errorf("engine handle %#x: %w", h, engine.ErrInvalidArgument)
	}
	return e, nil
}
