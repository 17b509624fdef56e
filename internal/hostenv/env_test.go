package hostenv

import (
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

// mapEnv is an Env over a map.
func mapEnv(m map[string]string) Env {
	return func(name string) (string, bool) {
		v, ok := m[name]
		return v, ok
	}
}

// TestReaders: Str takes the first name set and not empty, Int parses a
// decimal with blanks around it, Flag is on for anything but the four
// off words, Set counts an empty value.
func TestReaders(t *testing.T) {
	e := mapEnv(map[string]string{
		"EMPTY": "", "A": "a", "B": "b", "N": " 42 ", "NEG": "-7", "BAD": "4k", "HUGE": "99999999999999999999",
		"ON": "yes", "OFF1": "0", "OFF2": "False", "OFF3": " no ", "OFF4": "OFF",
	})
	v, ok := e.Str("MISSING", "EMPTY", "A", "B")
	assert.Equal(t, v, "a")
	assert.Assert(t, ok)
	_, ok = e.Str("MISSING", "EMPTY")
	assert.Assert(t, !ok, "empty counts as unset")

	for name, want := range map[string]int64{"N": 42, "NEG": -7} {
		n, ok := e.Int(name)
		assert.Assert(t, ok, name)
		assert.Equal(t, n, want, name)
	}
	for _, name := range []string{"BAD", "HUGE", "EMPTY", "MISSING", "A"} {
		_, ok := e.Int(name)
		assert.Assert(t, !ok, name)
	}
	n, ok := e.Int("MISSING", "N")
	assert.Assert(t, ok && n == 42, "an alias")

	assert.Assert(t, e.Flag("ON"))
	assert.Assert(t, e.Flag("A"))
	for _, name := range []string{"OFF1", "OFF2", "OFF3", "OFF4", "EMPTY", "MISSING"} {
		assert.Assert(t, !e.Flag(name), name)
	}

	assert.Assert(t, e.Set("EMPTY"))
	assert.Assert(t, !e.Set("MISSING"))
}

// TestEnvKnobs reads KVFERRY_METRICS and KVFERRY_SPIN_US from an Env.
func TestEnvKnobs(t *testing.T) {
	assert.Assert(t, mapEnv(nil).RequestMetrics(), "on by default")
	for v, want := range map[string]bool{"off": false, "0": false, "FALSE": false, "no": false, "on": true, "1": true} {
		assert.Equal(t, mapEnv(map[string]string{"KVFERRY_METRICS": v}).RequestMetrics(), want, "KVFERRY_METRICS=%s", v)
	}
	for v, want := range map[string]time.Duration{
		"": 0, "junk": 0, "-1": 0, "0": -1, "20": 20 * time.Microsecond, "99999999": 10 * time.Millisecond,
	} {
		assert.Equal(t, mapEnv(map[string]string{"KVFERRY_SPIN_US": v}).SpinWait(), want, "KVFERRY_SPIN_US=%q", v)
	}
}

// TestLookupSeam: the package-level readers go through Lookup.
func TestLookupSeam(t *testing.T) {
	saved := Lookup
	t.Cleanup(func() { Lookup = saved })
	Lookup = mapEnv(map[string]string{
		"KVFERRY_MAX_PROCS": "9", "KVFERRY_METRICS_ADDR": ":9100", "KVFERRY_METRICS_PPROF": "1",
		"KVFERRY_METRICS_MAX_PEERS": "77", "MC_FORCE_TCP": "",
	})
	assert.Equal(t, MaxProcs(), 9)
	assert.Equal(t, MetricsAddr(), ":9100")
	assert.Assert(t, MetricsPprof())
	assert.Equal(t, MetricsMaxPeers(), 77)
	assert.Assert(t, Set("MC_FORCE_TCP"))
	Lookup = mapEnv(nil)
	assert.Equal(t, MaxProcs(), 4, "the default")
	assert.Equal(t, MetricsMaxPeers(), 0)
	assert.Assert(t, !MetricsPprof())
}
