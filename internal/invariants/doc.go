// Package invariants says whether expensive internal consistency checks
// run: they do in builds with the "invariants" tag (make test uses it) and
// are compiled out otherwise, as in pebble's internal/invariants. Code
// guards a check with `if invariants.Enabled { ... }`; the constant lets
// the compiler drop the check from release builds.
package invariants
