package samehost_test

import "math/rand/v2"

// pattern fills b with bytes that depend on seed.
func pattern(b []byte, seed uint64) {
	_, _ = rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), 1}).Read(b)
}
