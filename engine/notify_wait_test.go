package engine_test

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
)

// TestWaitNotifications: waiters block while nothing arrived, wake at once
// on arrival, give up at their deadline or when the engine closes, and every
// notification is returned exactly once among many waiters.
func TestWaitNotifications(t *testing.T) {
	a, b := newEngine(t, "tcp"), newEngine(t, "tcp")
	seg, err := a.OpenSegment(context.Background(), b.SegmentName())
	assert.NilError(t, err)

	// Deadline with nothing queued.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	start := time.Now()
	assert.Equal(t, len(b.WaitNotifications(ctx)), 0)
	cancel()
	assert.Assert(t, time.Since(start) >= 20*time.Millisecond)

	// Several waiters; each notification is returned once.
	const n = 100
	var (
		mu   sync.Mutex
		got  = map[string]int{}
		wg   sync.WaitGroup
		done = make(chan struct{})
	)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wait := b.WaitNotifications
			if i%2 == 1 { // as C threads wait (locked to their thread)
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				wait = b.WaitNotificationsLocked
			}
			for {
				select {
				case <-done:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				ns := wait(ctx)
				cancel()
				mu.Lock()
				for _, x := range ns {
					got[x.Msg]++
				}
				mu.Unlock()
			}
		}()
	}
	for i := range n {
		assert.NilError(t, a.Notify(context.Background(), seg, engine.Notification{Name: "a", Msg: string(rune('A'+i%26)) + string(rune('0'+i/26))}))
	}
	deadline := time.After(10 * time.Second)
	for {
		mu.Lock()
		total := 0
		for _, c := range got {
			total += c
		}
		mu.Unlock()
		if total >= n {
			break
		}
		select {
		case <-deadline:
			t.Fatalf("received %d of %d", total, n)
		case <-time.After(time.Millisecond):
		}
	}
	close(done)
	wg.Wait()
	assert.Equal(t, len(got), n)
	for m, c := range got {
		assert.Equal(t, c, 1, "message %q", m)
	}

	// A waiter without deadline returns when the engine closes (whether it
	// started waiting before or after Close).
	ret := make(chan []engine.Notification, 1)
	go func() { ret <- b.WaitNotifications(context.Background()) }()
	assert.NilError(t, b.Close())
	select {
	case ns := <-ret:
		assert.Equal(t, len(ns), 0)
	case <-time.After(5 * time.Second):
		t.Fatal("WaitNotifications did not return on Close")
	}
}
