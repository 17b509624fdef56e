package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

// A locked waiter's kernel sleep (waitIdleThread) ends when the batch
// becomes idle and the completing goroutine wakes it, and at its
// deadline, or at a cancellation, when nothing completes it.
func TestWaitIdleThread(t *testing.T) {
	b := &batch{}
	b.remaining.Store(1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	assert.Assert(t, errors.Is(b.waitIdleThread(ctx, 0), context.DeadlineExceeded))

	cctx, ccancel := context.WithCancel(context.Background())
	ccancel()
	assert.Assert(t, errors.Is(b.waitIdleThread(cctx, 0), context.Canceled))

	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		done <- b.waitIdleThread(ctx, 0)
	}()
	b.remaining.Store(0)
	b.wakeIfIdle()
	select {
	case err := <-done:
		assert.NilError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("the waiter was not woken")
	}
	// An idle batch returns at once, whatever the context.
	assert.NilError(t, b.waitIdleThread(cctx, 0))
}

// The timeout bounds a locked waiter whose context has no deadline (the
// engine's transfer timeout, kept beside ctx by Engine.wait).
func TestWaitIdleThreadTimeout(t *testing.T) {
	b := &batch{}
	b.remaining.Store(1)
	assert.Assert(t, errors.Is(b.waitIdleThread(context.Background(), 5*time.Millisecond), context.DeadlineExceeded))
}
