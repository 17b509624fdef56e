package hostenv

import (
	"strconv"
	"strings"
	"time"
)

// Env looks up an environment variable: its value and whether it is set.
// Its methods read typed values the way every kvferry variable is read;
// Lookup is the process's, and a test may pass a map's.
type Env func(name string) (string, bool)

// Lookup is the environment the package-level readers use (Getenv); tests
// replace it.
var Lookup Env = Getenv

// Str returns the value of the first of names that is set and not empty.
func (e Env) Str(names ...string) (string, bool) {
	for _, n := range names {
		if v, ok := e(n); ok && v != "" {
			return v, true
		}
	}
	return "", false
}

// Int returns the first of names that is set and not empty as a decimal
// integer (surrounding blanks allowed); false when none is set or the
// value does not parse.
func (e Env) Int(names ...string) (int64, bool) {
	v, ok := e.Str(names...)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil {
		return 0, false
	}
	return n, true
}

// Flag reports whether the first of names that is set and not empty is on:
// any value but 0, false, no and off (in any case).
func (e Env) Flag(names ...string) bool {
	v, ok := e.Str(names...)
	if !ok {
		return false
	}
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "0", "false", "no", "off":
		return false
	}
	return true
}

// Set reports whether the variable is set at all (even empty), as Mooncake
// tests MC_FORCE_TCP.
func (e Env) Set(name string) bool {
	_, ok := e(name)
	return ok
}

// RequestMetrics reports whether per-request metrics are on (default;
// KVFERRY_METRICS=off, 0, false or no turns them off).
func (e Env) RequestMetrics() bool {
	v, ok := e.Str("KVFERRY_METRICS")
	if !ok {
		return true
	}
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "0", "off", "false", "no":
		return false
	}
	return true
}

// SpinWait reads KVFERRY_SPIN_US: how long a wait polls before it parks,
// in microseconds (0: never; unset: the default, internal/spin). It is
// the engine's Config.SpinWait (negative for off) and the store's.
func (e Env) SpinWait() time.Duration {
	n, ok := e.Int("KVFERRY_SPIN_US")
	switch {
	case !ok || n < 0:
		return 0
	case n == 0:
		return -1
	}
	return time.Duration(min(n, 10_000)) * time.Microsecond
}

// Set reports whether the variable is set in Lookup (even empty).
func Set(name string) bool { return Lookup.Set(name) }

// RequestMetrics is Lookup.RequestMetrics.
func RequestMetrics() bool { return Lookup.RequestMetrics() }

// SpinWait is Lookup.SpinWait.
func SpinWait() time.Duration { return Lookup.SpinWait() }

// MaxProcs returns the GOMAXPROCS cap (KVFERRY_MAX_PROCS, default 4).
func MaxProcs() int {
	if n, ok := Lookup.Int("KVFERRY_MAX_PROCS"); ok && n > 0 {
		return int(n)
	}
	return 4
}

// MetricsAddr returns KVFERRY_METRICS_ADDR ("" = no HTTP listener; a
// bare port or ":port" binds loopback).
func MetricsAddr() string {
	v, _ := Lookup.Str("KVFERRY_METRICS_ADDR")
	return v
}

// MetricsPprof reports KVFERRY_METRICS_PPROF: serve /debug/pprof/ beside
// /metrics on the metrics listener.
func MetricsPprof() bool { return Lookup.Flag("KVFERRY_METRICS_PPROF") }

// MetricsMaxPeers returns KVFERRY_METRICS_MAX_PEERS (distinct peer labels
// before "other"; 0 = the default).
func MetricsMaxPeers() int {
	if n, ok := Lookup.Int("KVFERRY_METRICS_MAX_PEERS"); ok && n > 0 && n <= 100000 {
		return int(n)
	}
	return 0
}
