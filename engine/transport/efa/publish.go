package efa

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
)

// Published is what the transport publishes in the segment descriptor's
// kvferry extension (Extra["efa"]): the provider, each device's endpoint
// address, and each registered region with its key on every device. It is
// pure data.
//
// Mooncake's EFA transport publishes protocol "efa", one device per EFA
// NIC with lid 0 and gid = the hex of the provider's source address, and
// per buffer one rkey and lkey per device (fi_mr_key, 64 bits in its EFA
// builds); endpoint addresses travel in its Connection handshake
// (efa_addr, hex of fi_getname). Describe fills those fields too when no
// RDMA transport claims them (mooncake.go); kvferry peers read this record,
// which carries the endpoint addresses and saves the handshake.
type Published struct {
	// Provider and Fabric name the libfabric provider and fabric; peers
	// only talk over the same provider.
	Provider string `json:"provider"`
	Fabric   string `json:"fabric,omitempty"`
	// VirtAddr is true when remote addresses are virtual addresses
	// (FI_MR_VIRT_ADDR); otherwise they are offsets into the region.
	VirtAddr bool `json:"virt_addr"`
	// Devices lists the owner's devices in key order.
	Devices []PublishedDevice `json:"devices"`
	// Regions lists the registered regions, sorted by address.
	Regions []PublishedRegion `json:"regions"`
}

// PublishedDevice is one device: its name and its endpoint's address
// (fi_getname, in lower-case hex as Mooncake's efa_addr).
type PublishedDevice struct {
	Name string `json:"name"`
	Addr string `json:"addr"`
}

// PublishedRegion is one registered region with one key per device.
type PublishedRegion struct {
	Addr   uint64   `json:"addr"`
	Length uint64   `json:"length"`
	Keys   []uint64 `json:"keys"`
}

// ParsePublished decodes and checks a peer's record: at least one device,
// every address hex of at most 256 bytes, every region with one key per
// device, inside the address space and not overlapping the next.
func ParsePublished(raw json.RawMessage) (*Published, error) {
	var p Published
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, fmt.Errorf("efa descriptor: %w", err)
	}
	if len(p.Devices) == 0 {
		return nil, fmt.Errorf("efa descriptor: no devices")
	}
	for _, d := range p.Devices {
		if _, err := decodeAddr(d.Addr); err != nil {
			return nil, fmt.Errorf("efa descriptor: device %q: %w", d.Name, err)
		}
	}
	if err := p.checkRegions(); err != nil {
		return nil, err
	}
	return &p, nil
}

// decodeAddr decodes an endpoint address in hex (Mooncake's efa_addr):
// 1 to 256 bytes.
func decodeAddr(s string) ([]byte, error) {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) == 0 || len(b) > 256 {
		return nil, fmt.Errorf("bad endpoint address %q", s)
	}
	return b, nil
}

// checkRegions sorts the regions by address and checks each: one key per
// device, inside the address space, not overlapping the next.
func (p *Published) checkRegions() error {
	if !sort.SliceIsSorted(p.Regions, func(i, j int) bool { return p.Regions[i].Addr < p.Regions[j].Addr }) {
		slices.SortFunc(p.Regions, func(a, b PublishedRegion) int {
			if a.Addr < b.Addr {
				return -1
			}
			if a.Addr > b.Addr {
				return 1
			}
			return 0
		})
	}
	for i, r := range p.Regions {
		if len(r.Keys) != len(p.Devices) {
			return fmt.Errorf("efa descriptor: region %#x+%d has %d keys for %d devices", r.Addr, r.Length, len(r.Keys), len(p.Devices))
		}
		if r.Length == 0 || r.Addr+r.Length < r.Addr {
			return fmt.Errorf("efa descriptor: region %#x+%d wraps or is empty", r.Addr, r.Length)
		}
		if i > 0 && p.Regions[i-1].Addr+p.Regions[i-1].Length > r.Addr {
			return fmt.Errorf("efa descriptor: region %#x+%d overlaps the one before", r.Addr, r.Length)
		}
	}
	return nil
}

// Region returns the region holding all of [addr, addr+n), or false.
func (p *Published) Region(addr, n uint64) (PublishedRegion, bool) {
	i := sort.Search(len(p.Regions), func(i int) bool { return p.Regions[i].Addr > addr }) - 1
	if i < 0 {
		return PublishedRegion{}, false
	}
	r := p.Regions[i]
	if addr+n < addr || addr+n > r.Addr+r.Length {
		return PublishedRegion{}, false
	}
	return r, true
}
