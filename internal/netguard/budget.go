package netguard

import (
	"context"
	"fmt"
	"sync"
)

// Budget is a shared allowance of bytes (request bodies being read and
// served, say) that callers take before they allocate and give back after.
// A caller that would pass the budget waits, bounded by its context, so the
// total stays bounded however many connections a peer opens. It is safe
// for concurrent use.
type Budget struct {
	size int64

	mu struct {
		sync.Mutex
		used int64
		wake chan struct{} // closed by the next Release
	}
}

// NewBudget returns a budget of size bytes.
func NewBudget(size int64) *Budget {
	return &Budget{size: max(size, 1)}
}

// Size returns the budget's size.
func (b *Budget) Size() int64 { return b.size }

// Used returns the bytes taken now.
func (b *Budget) Used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mu.used
}

// Acquire takes n bytes (a nil Budget admits everything), waiting until they are free or ctx is done. A
// request larger than the whole budget is refused at once.
func (b *Budget) Acquire(ctx context.Context, n int64) error {
	if b == nil || n <= 0 {
		return nil
	}
	if n > b.size {
		return fmt.Errorf("%d bytes exceed the whole budget of %d: %w", n, b.size, ErrLimit)
	}
	for {
		b.mu.Lock()
		if b.mu.used+n <= b.size {
			b.mu.used += n
			b.mu.Unlock()
			return nil
		}
		if b.mu.wake == nil {
			b.mu.wake = make(chan struct{})
		}
		wake := b.mu.wake
		b.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return fmt.Errorf("wait for %d of %d budget bytes: %w", n, b.size, ctx.Err())
		}
	}
}

// Release gives back n bytes taken by Acquire.
func (b *Budget) Release(n int64) {
	if b == nil || n <= 0 {
		return
	}
	b.mu.Lock()
	b.mu.used -= n
	if b.mu.used < 0 {
		panic("netguard: budget released more than acquired")
	}
	if b.mu.wake != nil {
		close(b.mu.wake)
		b.mu.wake = nil
	}
	b.mu.Unlock()
}
