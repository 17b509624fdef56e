package engine

import (
	"testing"
	"time"
)

// SetHealthBackoff makes d the first back-off of a transport taken down
// for a peer until t ends, for tests whose checks must finish inside it
// however loaded the machine is.
func SetHealthBackoff(t testing.TB, d time.Duration) {
	old := healthBackoffFloor.Swap(int64(d))
	t.Cleanup(func() { healthBackoffFloor.Store(old) })
}
