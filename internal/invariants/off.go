//go:build !invariants

package invariants

// Enabled is true in builds with the "invariants" tag.
const Enabled = false
