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

// NICCounters are one NIC port's counters as the kernel keeps them (sysfs
// class/infiniband/<dev>/ports/<port>/counters and hw_counters). They count
// all the port's traffic, every process's, not only this engine's; they
// say what the NIC carried beside what the engine moved.
type NICCounters struct {
	// Device and Port name the port.
	Device string
	Port   int
	// XmitBytes and RcvBytes are port_xmit_data and port_rcv_data in
	// bytes (the kernel counts 4-byte words); XmitPackets and RcvPackets
	// are port_xmit_packets and port_rcv_packets.
	XmitBytes, RcvBytes     uint64
	XmitPackets, RcvPackets uint64
	// LinkDowned is link_downed: how often the link went down.
	LinkDowned uint64
	// Errors are the port's error counters by file name (symbol_error,
	// port_rcv_errors, port_xmit_discards, ...; NICErrorCounters).
	Errors map[string]uint64
	// HW are the driver's hw_counters by file name (mlx5: out_of_buffer,
	// rnr_nak_retry_err, ...), without lifespan (the refresh period of
	// the others); empty for drivers without them.
	HW map[string]uint64
	// Err says why the counters could not be read; "" when they were.
	Err string
}

// NICErrorCounters are the files of a port's counters directory that
// count errors (the InfiniBand PortCounters error fields and VL15
// drops), the keys of NICCounters.Errors.
var NICErrorCounters = []string{
	"symbol_error", "link_error_recovery", "port_rcv_errors", "port_rcv_remote_physical_errors",
	"port_rcv_switch_relay_errors", "port_xmit_discards", "port_xmit_constraint_errors",
	"port_rcv_constraint_errors", "local_link_integrity_errors", "excessive_buffer_overrun_errors",
	"VL15_dropped",
}

// ErrorTotal sums the port's error counters.
func (c NICCounters) ErrorTotal() uint64 {
	var n uint64
	for _, v := range c.Errors {
		n += v
	}
	return n
}

// NICCounterReporter is implemented by transports whose NICs have port
// counters; reading them touches sysfs, so callers ask at scrape or
// report time, never per request.
type NICCounterReporter interface {
	NICCounters() []NICCounters
}

// NICCounters returns the port counters of the NICs of every installed
// transport that has some.
func (e *Engine) NICCounters() []NICCounters {
	e.transports.RLock()
	defer e.transports.RUnlock()
	var out []NICCounters
	for _, in := range e.transports.list {
		if r, ok := in.t.(NICCounterReporter); ok {
			out = append(out, r.NICCounters()...)
		}
	}
	return out
}
