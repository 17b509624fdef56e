package metrics

// StoreCounters are a store client's counters, read at scrape time.
type StoreCounters struct {
	Puts, PutBytes, PutErrors    uint64
	Gets, GetBytes, GetErrors    uint64
	GetMisses                    uint64
	LocalCopies, Remounts        uint64
	MasterSwitches, PingFailures uint64
	GrantPuts, GrantFallbacks    uint64
	GrantAcquires, GrantReturns  uint64
	DiskReads, RemoteDiskReads   uint64
	DiskServed, DiskServeBusy    uint64
}

func (c *StoreCounters) add(o StoreCounters) {
	c.Puts += o.Puts
	c.PutBytes += o.PutBytes
	c.PutErrors += o.PutErrors
	c.Gets += o.Gets
	c.GetBytes += o.GetBytes
	c.GetErrors += o.GetErrors
	c.GetMisses += o.GetMisses
	c.LocalCopies += o.LocalCopies
	c.Remounts += o.Remounts
	c.MasterSwitches += o.MasterSwitches
	c.PingFailures += o.PingFailures
	c.GrantPuts += o.GrantPuts
	c.GrantFallbacks += o.GrantFallbacks
	c.GrantAcquires += o.GrantAcquires
	c.GrantReturns += o.GrantReturns
	c.DiskReads += o.DiskReads
	c.RemoteDiskReads += o.RemoteDiskReads
	c.DiskServed += o.DiskServed
	c.DiskServeBusy += o.DiskServeBusy
}

// StoreClient holds the latency histograms of one store client and reads
// its counters at scrape time. Close folds it into the process totals.
type StoreClient struct {
	counters func() StoreCounters
	// PutDuration and GetDuration are the per-object latencies by size.
	PutDuration, GetDuration SizedHistograms
}

// NewStoreClient returns the metrics of a new store client and adds them
// to the process's collector; counters is called at every scrape.
func NewStoreClient(counters func() StoreCounters) *StoreClient {
	s := &StoreClient{counters: counters}
	hub.addStore(s)
	return s
}

// Close removes the client from the collector, keeping its counters in
// the process totals. A second Close is harmless.
func (s *StoreClient) Close() { hub.retireStore(s) }
