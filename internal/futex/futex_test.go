package futex

import (
	"sync/atomic"
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

func TestWaitReturnsWhenWordChanged(t *testing.T) {
	var w atomic.Uint32
	w.Store(1)
	Wait(&w, 0, time.Hour) // *w is not 0: returns at once
}

func TestWaitTimesOut(t *testing.T) {
	var w atomic.Uint32
	Wait(&w, 0, time.Millisecond) // nobody wakes it: d bounds it
	Wait(&w, 0, 0)
	Wait(&w, 0, -time.Second)
}

func TestWakeWakesAWaiter(t *testing.T) {
	var w atomic.Uint32
	var woke atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for w.Load() == 0 {
			Wait(&w, 0, time.Minute) // a spurious return loops
		}
		woke.Store(true)
	}()
	w.Store(1)
	Wake(&w)
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the waiter was not woken")
	}
	assert.Assert(t, woke.Load())
	Wake(&w) // nobody waits: harmless
}
