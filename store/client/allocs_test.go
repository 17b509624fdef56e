package client_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/internal/testutil"
	"github.com/kvferry/kvferry/store/client"
)

// Allocations per 4 KiB op of the store over the mux, client, holder and
// master together in this process (BenchmarkRemoteOps' shape): none for a
// get; for a put of a fresh key, the two the master keeps for the new
// object (its key and its record: docs/reports/allocs.md). The test fails
// above them, so that nothing creeps back in.
const (
	maxPutAllocs4K = 2
	maxGetAllocs4K = 0
)

// TestStoreAllocs4K pins the allocations of a 4 KiB put (a fresh key,
// over put grants) and get (an existing key) with the holder in another
// client of this process; the get both as a speculative one (the put left
// a hint) and as a plain one.
func TestStoreAllocs4K(t *testing.T) {
	if testing.Short() {
		t.Skip("a master and two clients over loopback")
	}
	if testutil.RaceEnabled {
		// The mux pools its call state and buffers in sync.Pools, which
		// drop items at random under the race detector.
		t.Skip("allocation counts through sync.Pool are random under -race")
	}
	t.Run("speculative", func(t *testing.T) { testStoreAllocs4K(t) })
	t.Run("plain", func(t *testing.T) {
		testStoreAllocs4K(t, func(c *client.Config) { c.NoSpeculativeGets = true })
	})
}

func testStoreAllocs4K(t *testing.T, userConfig ...func(*client.Config)) {
	ctx := context.Background()
	user, buf := remoteOpsPair(t, userConfig...)
	const sz = remoteOpsSize

	const runs, rounds = 100, 5
	keys := make([]string, rounds*(runs+1)+50)
	for i := range keys {
		keys[i] = fmt.Sprint("alloc-", i)
	}
	next := 0
	var opErr error
	put := func() {
		if err := user.PutFrom(ctx, keys[next], buf.Addr(), sz, client.ReplicateConfig{}); err != nil {
			opErr = err
		}
		next++
	}
	get := func() {
		if _, err := user.GetInto(ctx, keys[next%len(keys)], buf.Addr(), sz); err != nil {
			opErr = err
		}
		next++
	}
	for range 50 { // warm up: connections, grants, pools
		put()
	}
	// AllocsPerRun counts every goroutine of the process (heartbeats, the
	// master's sweeps): the least of a few rounds is the ops' own figure.
	least := func(f func(), limit int) float64 {
		n := math.Inf(1)
		for range rounds {
			n = min(n, testing.AllocsPerRun(runs, f))
			if n <= float64(limit) {
				break
			}
		}
		return n
	}
	n := least(put, maxPutAllocs4K)
	assert.NilError(t, opErr)
	assert.Assert(t, n <= maxPutAllocs4K, "a 4 KiB put allocates %v objects per op, want at most %d", n, maxPutAllocs4K)
	stored := next
	next = 0
	for range 20 {
		get()
	}
	n = least(func() {
		if next >= stored {
			next = 0
		}
		get()
	}, maxGetAllocs4K)
	assert.NilError(t, opErr)
	assert.Assert(t, n <= maxGetAllocs4K, "a 4 KiB get allocates %v objects per op, want at most %d", n, maxGetAllocs4K)
}
