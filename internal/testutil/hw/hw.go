// Package hw says whether the tests run on this machine's real drivers
// instead of the fakes (KVFERRY_HW=1, set by make hw-check): the CUDA
// driver (internal/testutil/fakecuda) and libibverbs
// (tests/rdma/fakeverbs). A test fixture; the variable is read with
// syscall.Getenv because it is set before the test process starts (the
// library reads its environment through internal/hostenv).
package hw

import "syscall"

// Enabled reports whether KVFERRY_HW=1.
func Enabled() bool {
	v, _ := syscall.Getenv("KVFERRY_HW")
	return v == "1"
}

// Getenv returns the variable name ("" when unset).
func Getenv(name string) string {
	v, _ := syscall.Getenv(name)
	return v
}
