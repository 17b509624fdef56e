package efa

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/kvferry/kvferry/engine/descriptor"
)

// Published is what the transport publishes in the segment descriptor's
// kvferry extension (Extra["efa"]): the provider, each device's endpoint
// address, and each registered region with its key on every device. It is
// pure data.
//
// Mooncake's EFA transport (specs: its efa_transport sources) publishes
// protocol "efa", one device per EFA NIC with lid 0 and gid = the hex of
// the provider's source address, and per buffer one rkey and lkey per
// device (fi_mr_key, held in 32 bits); endpoint addresses travel in its
// Connection handshake (efa_addr, hex of fi_getname). Describe fills those
// fields too when no RDMA transport claims them; kvferry peers read this
// record, which carries the endpoint addresses and full 64-bit keys.
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
		b, err := hex.DecodeString(d.Addr)
		if err != nil || len(b) == 0 || len(b) > 256 {
			return nil, fmt.Errorf("efa descriptor: device %q: bad address %q", d.Name, d.Addr)
		}
	}
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
			return nil, fmt.Errorf("efa descriptor: region %#x+%d has %d keys for %d devices", r.Addr, r.Length, len(r.Keys), len(p.Devices))
		}
		if r.Length == 0 || r.Addr+r.Length < r.Addr {
			return nil, fmt.Errorf("efa descriptor: region %#x+%d wraps or is empty", r.Addr, r.Length)
		}
		if i > 0 && p.Regions[i-1].Addr+p.Regions[i-1].Length > r.Addr {
			return nil, fmt.Errorf("efa descriptor: region %#x+%d overlaps the one before", r.Addr, r.Length)
		}
	}
	return &p, nil
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

// describeMooncake fills the descriptor fields Mooncake's EFA transport
// publishes: protocol "efa", the devices (lid 0, gid the hex of the
// provider's source address) and per buffer one rkey and lkey per device.
// It leaves the descriptor alone when an RDMA transport published its NICs
// there, or when a key does not fit Mooncake's 32 bits.
func describeMooncake(seg *descriptor.Segment, devs []*device, pub *Published) bool {
	if seg.Protocol == descriptor.ProtocolRDMA || len(seg.Devices) > 0 {
		return false
	}
	keys := make([][]uint32, len(seg.Buffers))
	for i, b := range seg.Buffers {
		r, ok := pub.Region(b.Addr, b.Length)
		if !ok {
			return false
		}
		keys[i] = make([]uint32, len(r.Keys))
		for j, k := range r.Keys {
			if k > math.MaxUint32 {
				return false
			}
			keys[i][j] = uint32(k)
		}
	}
	seg.Protocol = Name
	seg.Devices = make([]descriptor.Device, len(devs))
	for i, d := range devs {
		gid := d.info.SrcAddr
		if len(gid) == 0 { // Mooncake's decoder refuses a device without gid
			gid = d.addr
		}
		seg.Devices[i] = descriptor.Device{Name: d.name, LID: 0, GID: hex.EncodeToString(gid)}
	}
	for i := range seg.Buffers {
		seg.Buffers[i].RKey = keys[i]
		seg.Buffers[i].LKey = keys[i]
	}
	return true
}
