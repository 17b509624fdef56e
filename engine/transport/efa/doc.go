// Package efa is the libfabric transport, named "efa" after Mooncake's
// transport for AWS's Elastic Fabric Adapter: one-sided READ and WRITE
// (fi_read, fi_write) between registered regions over reliable datagram
// endpoints (FI_EP_RDM). On AWS it runs on the "efa" provider, one device
// per EFA NIC, slices striped over them; elsewhere on any provider with
// FI_EP_RDM and FI_RMA ("tcp;ofi_rxm" on any host, "verbs;ofi_rxm" on
// RDMA NICs), which is how it is tested against the real library here.
// libfabric is reached only through package fabric, opened at run time: on
// a host without it, or without the provider, New fails with
// engine.ErrNotSupported and the engine uses its other transports.
//
// Each device is one fabric, domain, address vector, completion queue and
// endpoint; its address and every region's key are published in the
// segment descriptor (Published, and Mooncake's fields where free). Submit
// posts each slice as one operation straight from the submitting goroutine
// (one crossing into C per device and batch); what the provider cannot take
// yet (its queue full, no context slot free) waits in a bounded backlog
// that the device's poller posts as completions free room. One poller per
// device reads the completion queue, parking on its wait object when idle,
// which also drives the progress manual-progress providers need on the
// target side. A failed completion of a lost peer drops the peer's
// address and moves its slice to another (local device, peer device) pair
// not tried yet, or fails it (engine.ErrPeerGone); a restarted peer is
// reached at its new address, and its new incarnation clears what the old
// one left at an old one. Peers that publish only Mooncake's fields (a
// Mooncake EFA node) are reached through Mooncake's Connection handshake
// (efa_addr), which the transport also answers (mooncake.go); an operation still in flight at the transfer
// deadline makes the poller drop the peer's address, which fails what the
// provider holds for it, and its slice fails with engine.ErrTimeout.
package efa
