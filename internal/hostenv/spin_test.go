package hostenv

import (
	"os"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/internal/spin"
)

// TestSpinWait reads KVFERRY_SPIN_US (through the C getenv) into the
// engine's SpinWait: unset or bad means the default, 0 never spins, large
// values are capped.
func TestSpinWait(t *testing.T) {
	t.Setenv("KVFERRY_SPIN_US", "")
	os.Unsetenv("KVFERRY_SPIN_US")
	assert.Equal(t, SpinWait(), time.Duration(0))
	assert.Equal(t, spin.Budget(SpinWait()), spin.Default)
	for v, want := range map[string]time.Duration{
		"0": 0, "20": 20 * time.Microsecond, "junk": spin.Default, "-3": spin.Default, "99999999": spin.Max,
	} {
		t.Setenv("KVFERRY_SPIN_US", v)
		assert.Equal(t, spin.Budget(SpinWait()), want, "KVFERRY_SPIN_US=%s", v)
	}
}
