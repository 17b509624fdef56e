// Package priority is Mooncake's NIC priority matrix (specs/mooncake.md
// §1.7): its JSON form (the installTransport argument and a descriptor's
// priority_matrix) and the choice of a NIC for a buffer's location. It is
// pure data with no dependencies beyond the standard library, so its fuzz
// target runs in a small binary; package rdma discovers and uses it.
package priority
