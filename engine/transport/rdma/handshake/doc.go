// Package handshake is the codec of Mooncake's RDMA Connection handshake
// (HandShakeDesc, specs/mooncake.md §3.6): the JSON body a peer sends on the
// RPC port to connect queue pairs, and the "<server>@<nic>" NIC paths it
// names. It is pure data with no dependencies beyond the standard library,
// so its fuzz target runs in a small binary; package rdma drives it.
package handshake
