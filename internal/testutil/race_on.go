//go:build race

package testutil

// RaceEnabled reports whether the race detector is built in: sync.Pool then
// drops items at random, so allocation counts of code that pools through
// it are not deterministic.
const RaceEnabled = true
