package engine

// NICStat is one NIC's state and load, as getNicLoadStats and showLinks
// report them.
type NICStat struct {
	// Device is the NIC's name (mlx5_0).
	Device string
	// Transport is the transport that owns it ("rdma").
	Transport string
	// Active reports whether the port is up and in use.
	Active bool
	// State is the port state ("active", "down", ...).
	State string
	// LinkLayer is "InfiniBand" or "Ethernet".
	LinkLayer string
	// RateGbps is the port's signalling rate (width × lane speed).
	RateGbps float64
	// MTU is the active path MTU in bytes.
	MTU int
	// GID is the GID in use and GIDIndex its index.
	GID      string
	GIDIndex int
	// LID is the port's LID (InfiniBand).
	LID uint16
	// NUMA is the NIC's NUMA node (-1 unknown); PCI its PCI address;
	// Netdev its network interface.
	NUMA   int
	PCI    string
	Netdev string
	// InflightBytes is the bytes posted and not completed yet.
	InflightBytes uint64
	// EWMABandwidthBps is an exponentially weighted moving average of the
	// completed bytes per second.
	EWMABandwidthBps float64
	// BytesCompleted, SlicesCompleted, SlicesRetried and SlicesFailed count
	// the NIC's work since the transport started.
	BytesCompleted                               uint64
	SlicesCompleted, SlicesRetried, SlicesFailed uint64
	// Endpoints is the number of connected endpoints (peer NICs);
	// EndpointsEvicted counts those evicted to stay within the NIC's
	// endpoint limit (MC_MAX_EP_PER_CTX).
	Endpoints        int
	EndpointsEvicted uint64
	// GPURegions is the GPU memory regions registered with the NIC
	// (GPUDirect RDMA).
	GPURegions int
}

// NICReporter is implemented by transports that drive NICs.
type NICReporter interface {
	NICStats() []NICStat
}

// NICStats returns the NICs of every installed transport that has some.
func (e *Engine) NICStats() []NICStat {
	e.transports.RLock()
	defer e.transports.RUnlock()
	var out []NICStat
	for _, in := range e.transports.list {
		if r, ok := in.t.(NICReporter); ok {
			out = append(out, r.NICStats()...)
		}
	}
	return out
}
