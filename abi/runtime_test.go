package abi

import (
	"testing"

	"gotest.tools/v3/assert"
)

// The GOMAXPROCS cap lowers the runtime's default and leaves a lower
// setting (the host's GOMAXPROCS, a container's CPU limit) alone.
func TestCappedProcs(t *testing.T) {
	for _, c := range []struct {
		limit, current, want int
		set                  bool
	}{
		{limit: 4, current: 16, want: 4, set: true},
		{limit: 4, current: 4, want: 4},
		{limit: 4, current: 1, want: 1}, // GOMAXPROCS=1 on a 16-CPU host stays 1
		{limit: 8, current: 2, want: 2},
		{limit: 0, current: 2, want: 2},
	} {
		n, set := cappedProcs(c.limit, c.current)
		assert.Equal(t, n, c.want, "limit %d, current %d", c.limit, c.current)
		assert.Equal(t, set, c.set, "limit %d, current %d", c.limit, c.current)
	}
}
