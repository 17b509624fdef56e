package client

import (
	"errors"
	"sync/atomic"
	"time"

	kvmetrics "github.com/kvferry/kvferry/metrics"
	"github.com/kvferry/kvferry/store/wire"
)

type metrics struct {
	puts, putBytes, putErrors atomic.Uint64
	gets, getBytes, getErrors atomic.Uint64
	getMisses                 atomic.Uint64
	localCopies               atomic.Uint64
	remounts, masterSwitches  atomic.Uint64
	pingFailures              atomic.Uint64
	grantPuts, grantFallbacks atomic.Uint64
	grantAcquires             atomic.Uint64
	grantReturns              atomic.Uint64
	grantLapses               atomic.Uint64
	offloads, diskLoads       atomic.Uint64
	promotions                atomic.Uint64
	diskReads, diskReadBytes  atomic.Uint64
	remoteDiskReads           atomic.Uint64
	remoteDiskReadBytes       atomic.Uint64
	remoteDiskWaits           atomic.Uint64
	putWaits, promoteWaits    atomic.Uint64
	stagedBytes               atomic.Uint64
	specReads, specHits       atomic.Uint64
	specMisses                atomic.Uint64
}

// Metrics is a snapshot of a client's counters since New.
type Metrics struct {
	// Puts counts objects put (batch puts count each key).
	Puts uint64
	// PutBytes counts bytes of successful puts (once per object, not per
	// replica).
	PutBytes uint64
	// PutErrors counts failed puts.
	PutErrors uint64
	// Gets counts objects read.
	Gets uint64
	// GetBytes counts bytes of successful reads.
	GetBytes uint64
	// GetErrors counts failed reads.
	GetErrors uint64
	// GetMisses counts reads of keys the store does not hold (also
	// counted in GetErrors).
	GetMisses uint64
	// LocalCopies counts replica reads and writes served by memcpy from
	// this client's own segment.
	LocalCopies uint64
	// Remounts counts re-registrations after NEED_REMOUNT.
	Remounts uint64
	// MasterSwitches counts moves to a new HA leader.
	MasterSwitches uint64
	// PingFailures counts failed heartbeats.
	PingFailures uint64
	// GrantPuts counts puts published with one master round trip
	// (placed in put grants, PutCommit).
	GrantPuts uint64
	// GrantFallbacks counts puts that tried their grants but went the
	// PutStart/PutEnd way (the commit was refused or failed).
	GrantFallbacks uint64
	// GrantAcquires counts AcquireGrants calls.
	GrantAcquires uint64
	// GrantReturns counts grants given back to the master.
	GrantReturns uint64
	// GrantLapses counts puts that stopped writing into their grants
	// before a transfer because the grants' lease or connection lapsed
	// (they went the PutStart way; also counted in GrantFallbacks).
	GrantLapses uint64
	// Offloads counts objects this client wrote to its disk tier;
	// DiskLoads those it read back into its memory; Promotions the reads
	// that asked the master to bring an object back from disk first.
	Offloads   uint64
	DiskLoads  uint64
	Promotions uint64
	// DiskReads counts reads served straight from this client's own disk
	// tier into the caller's buffer (an object whose only replica is a
	// file here; tier.go), DiskReadBytes their bytes.
	DiskReads, DiskReadBytes uint64
	// RemoteDiskReads counts reads served from another client's disk tier
	// through its serve buffer (diskserve.go; what Mooncake's
	// get_offload_rpc_read_count counts), RemoteDiskReadBytes their bytes;
	// RemoteDiskWaits the times a holder's serve buffer was full and the
	// read asked again.
	RemoteDiskReads, RemoteDiskReadBytes, RemoteDiskWaits uint64
	// DiskServed counts reads of this client's files it served to other
	// clients, DiskServedBytes their bytes; DiskServeBusy the requests it
	// answered NO_AVAILABLE_HANDLE (its serve buffer full), DiskServeLapsed
	// the grants it reclaimed unreleased (a reader that died or stalled);
	// DiskServeUsedBytes the bytes of its serve buffer granted now, and
	// DiskServePeakBytes the most granted at once.
	DiskServed, DiskServedBytes, DiskServeBusy, DiskServeLapsed uint64
	DiskServeUsedBytes, DiskServePeakBytes                      uint64
	// PutWaits counts the times a put asked the master again because it
	// could not allocate yet (UNAVAILABLE_IN_CURRENT_STATUS): most often
	// memory waiting for disk-tier writers (backpressure), or a new HA
	// leader's fence.
	PutWaits uint64
	// PromoteWaits counts the times a read asked for a promotion again
	// because the holder's memory had no room yet.
	PromoteWaits uint64
	// StagedBytes counts bytes copied through the staging buffer (data in
	// memory the engine cannot use directly: unregistered or Go memory).
	StagedBytes uint64
	// SpecReads counts speculative gets started (spec.go); SpecHits those
	// whose bytes the master's answer confirmed, SpecMisses those read
	// again (another replica, the key gone, a failed or late read).
	SpecReads, SpecHits, SpecMisses uint64
}

// Metrics returns a snapshot.
func (c *Client) Metrics() Metrics {
	m := &c.metrics
	out := Metrics{
		Puts: m.puts.Load(), PutBytes: m.putBytes.Load(), PutErrors: m.putErrors.Load(),
		Gets: m.gets.Load(), GetBytes: m.getBytes.Load(), GetErrors: m.getErrors.Load(), GetMisses: m.getMisses.Load(),
		LocalCopies: m.localCopies.Load(), Remounts: m.remounts.Load(),
		MasterSwitches: m.masterSwitches.Load(), PingFailures: m.pingFailures.Load(),
		GrantPuts: m.grantPuts.Load(), GrantFallbacks: m.grantFallbacks.Load(),
		GrantAcquires: m.grantAcquires.Load(), GrantReturns: m.grantReturns.Load(),
		GrantLapses: m.grantLapses.Load(),
		Offloads:    m.offloads.Load(), DiskLoads: m.diskLoads.Load(), Promotions: m.promotions.Load(),
		DiskReads: m.diskReads.Load(), DiskReadBytes: m.diskReadBytes.Load(),
		RemoteDiskReads: m.remoteDiskReads.Load(), RemoteDiskReadBytes: m.remoteDiskReadBytes.Load(),
		RemoteDiskWaits: m.remoteDiskWaits.Load(),
		PutWaits:        m.putWaits.Load(), PromoteWaits: m.promoteWaits.Load(),
		StagedBytes: m.stagedBytes.Load(),
		SpecReads:   m.specReads.Load(), SpecHits: m.specHits.Load(), SpecMisses: m.specMisses.Load(),
	}
	if s := c.diskSrv; s != nil {
		out.DiskServed, out.DiskServedBytes = s.served.Load(), s.servedBytes.Load()
		out.DiskServeBusy, out.DiskServeLapsed = s.busy.Load(), s.lapsed.Load()
		out.DiskServeUsedBytes, out.DiskServePeakBytes = s.usedBytes(), s.peak.Load()
	}
	return out
}

// countGetErr counts a failed read (and a miss when the key is absent).
func (c *Client) countGetErr(err error) {
	c.metrics.getErrors.Add(1)
	if errors.Is(err, wire.ErrObjectNotFound) {
		c.metrics.getMisses.Add(1)
	}
}

// observeBatch records, for each object of a batch call that began at
// start, the batch's time as its latency.
func (c *Client) observeBatch(h *kvmetrics.SizedHistograms, sizes []uint64, start time.Time) {
	d := time.Since(start)
	for _, n := range sizes {
		h.Observe(n, d)
	}
}

// counters reads the counters for the process's metrics collector.
func (c *Client) counters() kvmetrics.StoreCounters {
	m := c.Metrics()
	return kvmetrics.StoreCounters{
		Puts: m.Puts, PutBytes: m.PutBytes, PutErrors: m.PutErrors,
		Gets: m.Gets, GetBytes: m.GetBytes, GetErrors: m.GetErrors, GetMisses: m.GetMisses,
		LocalCopies: m.LocalCopies, Remounts: m.Remounts, MasterSwitches: m.MasterSwitches, PingFailures: m.PingFailures,
		GrantPuts: m.GrantPuts, GrantFallbacks: m.GrantFallbacks, GrantAcquires: m.GrantAcquires, GrantReturns: m.GrantReturns,
		DiskReads: m.DiskReads, RemoteDiskReads: m.RemoteDiskReads, DiskServed: m.DiskServed, DiskServeBusy: m.DiskServeBusy,
	}
}
