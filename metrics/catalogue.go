package metrics

import (
	"strings"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// Kind is a metric's Prometheus type.
type Kind int

// Metric kinds.
const (
	Counter Kind = iota
	Gauge
	HistogramKind
)

func (k Kind) String() string {
	switch k {
	case Counter:
		return "counter"
	case Gauge:
		return "gauge"
	}
	return "histogram"
}

// Spec is one metric of the catalogue: its name, type, help text and
// labels. Every metric kvferry exports is declared here, once.
type Spec struct {
	// Component is who exports it: engine, transport, store client,
	// store master or metadata server.
	Component string
	Name      string
	Kind      Kind
	Help      string
	Labels    []string
	desc      *prometheus.Desc
}

// Desc returns the metric's Prometheus descriptor.
func (s *Spec) Desc() *prometheus.Desc { return s.desc }

// Value builds a counter or gauge sample with the label values lvs (in the
// order of Labels).
func (s *Spec) Value(v float64, lvs ...string) prometheus.Metric {
	t := prometheus.GaugeValue
	if s.Kind == Counter {
		t = prometheus.CounterValue
	}
	return prometheus.MustNewConstMetric(s.desc, t, v, validLabels(lvs)...)
}

// Hist builds a histogram sample from h.
func (s *Spec) Hist(h *HistogramSnapshot, lvs ...string) prometheus.Metric {
	return prometheus.MustNewConstHistogram(s.desc, h.Count(), float64(h.SumNanos)/1e9, h.cumulative(), validLabels(lvs)...)
}

// validLabels returns lvs with invalid UTF-8 replaced: label values come
// from names callers and peers choose (segments, peers, tenants), and one
// that is not UTF-8 would make the collector panic and every scrape of
// the process fail from then on (a dead engine's counters are kept).
func validLabels(lvs []string) []string {
	for i, v := range lvs {
		if !utf8.ValidString(v) {
			out := append([]string(nil), lvs...)
			for j := i; j < len(out); j++ {
				out[j] = strings.ToValidUTF8(out[j], "\uFFFD")
			}
			return out
		}
	}
	return lvs
}

var catalogue []*Spec

func def(component, name string, kind Kind, help string, labels ...string) *Spec {
	s := &Spec{Component: component, Name: name, Kind: kind, Help: help, Labels: labels,
		desc: prometheus.NewDesc(name, help, labels, nil)}
	catalogue = append(catalogue, s)
	return s
}

// Catalogue returns every metric, in declaration order.
func Catalogue() []*Spec { return append([]*Spec(nil), catalogue...) }

// Lookup returns the metric called name, or nil.
func Lookup(name string) *Spec {
	for _, s := range catalogue {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// Components, in the order docs/METRICS.md lists them.
const (
	CompEngine    = "engine"
	CompTransport = "transport"
	CompStore     = "store client"
	CompMaster    = "store master"
	CompMetadata  = "metadata server"
)

// Transfer engine (every process that loads the library or embeds the
// engine). peer is the remote segment name, folded into "other" beyond
// KVFERRY_METRICS_MAX_PEERS distinct peers.
var (
	EngineTasks = def(CompEngine, "kvferry_engine_tasks_total", Counter,
		"Transfer requests (tasks) that reached a terminal state.", "transport", "peer", "op", "state")
	EngineBytes = def(CompEngine, "kvferry_engine_transferred_bytes_total", Counter,
		"Bytes of completed transfer requests.", "transport", "peer", "op")
	EngineSlices = def(CompEngine, "kvferry_engine_slices_total", Counter,
		"Slices (stripes) handed to a transport; shows which transport the selector picked.", "transport", "peer")
	EngineErrors = def(CompEngine, "kvferry_engine_errors_total", Counter,
		"Transfer requests that did not complete, by cause: timeout, refused_range (outside registered memory), "+
			"peer_gone (connection lost or refused), canceled, auth, invalid, closed, other.", "transport", "peer", "cause")
	EngineFailovers = def(CompEngine, "kvferry_engine_failovers_total", Counter,
		"Slices moved to another transport after a path failure (failover), by the transport that failed (from), "+
			"the one taking over (to) and cause: completion, refused, reset, access, mapping, no_path.", "from", "to", "cause")
	EngineInFlight = def(CompEngine, "kvferry_engine_tasks_in_flight", Gauge,
		"Transfer requests submitted and not yet terminal.", "transport", "peer")
	EngineTaskDuration = def(CompEngine, "kvferry_engine_task_duration_seconds", HistogramKind,
		"Submit-to-terminal time of transfer requests, by request size class.", "transport", "size_class")
	EngineRegisteredBytes = def(CompEngine, "kvferry_engine_registered_bytes", Gauge,
		"Bytes of registered local memory, by memory kind (host, device, ...).", "kind")
	EngineRegisteredRegions = def(CompEngine, "kvferry_engine_registered_regions", Gauge,
		"Registered local memory regions, by memory kind.", "kind")
	EngineSegments = def(CompEngine, "kvferry_engine_open_segments", Gauge,
		"Opened remote segments.")
	EngineBatches = def(CompEngine, "kvferry_engine_batches", Gauge,
		"Allocated, not yet freed batches.")
	Engines = def(CompEngine, "kvferry_engines", Gauge,
		"Live transfer engines in this process.")
	EngineNotifications = def(CompEngine, "kvferry_engine_notifications_total", Counter,
		"Notifications by direction: sent, received, failed (not accepted by the peer).", "direction")
)

// Transports: connections and the serving side.
var (
	TransportConnections = def(CompTransport, "kvferry_transport_connections", Gauge,
		"Open data connections (TCP lanes, RDMA queue pairs, ...) to a peer.", "transport", "peer")
	TransportDials = def(CompTransport, "kvferry_transport_dials_total", Counter,
		"Connection attempts to a peer, by result (ok, error).", "transport", "peer", "result")
	TransportRedials = def(CompTransport, "kvferry_transport_redials_total", Counter,
		"Connections re-established after one to the same peer was lost or retired.", "transport", "peer")
	TransportRetries = def(CompTransport, "kvferry_transport_slice_retries_total", Counter,
		"Slices resubmitted after a connection-level failure.", "transport", "peer")
	TransportServedRequests = def(CompTransport, "kvferry_transport_served_requests_total", Counter,
		"Requests served to peers (this process as the target), by op.", "transport", "op")
	TransportServedBytes = def(CompTransport, "kvferry_transport_served_bytes_total", Counter,
		"Bytes served to peers (this process as the target), by op.", "transport", "op")
	TransportRefused = def(CompTransport, "kvferry_transport_refused_total", Counter,
		"Requests or connections from peers refused, by cause: range (outside registered memory), auth, malformed, limit (connection caps), stale (a TCP data connection that expected another incarnation of the segment).",
		"transport", "cause")
)

// RDMA NICs (the RDMA transport's, as getNicLoadStats reports them; summed
// over the engines of the process that use a NIC).
var (
	RDMANICUp = def(CompTransport, "kvferry_rdma_nic_up", Gauge,
		"1 while an RDMA NIC's port is active and in use, 0 while it is down.", "device")
	RDMANICInFlight = def(CompTransport, "kvferry_rdma_nic_inflight_bytes", Gauge,
		"Bytes posted on an RDMA NIC and not completed yet.", "device")
	RDMANICBandwidth = def(CompTransport, "kvferry_rdma_nic_bandwidth_bytes_per_second", Gauge,
		"Moving average of the bytes an RDMA NIC completed per second.", "device")
	RDMANICEndpoints = def(CompTransport, "kvferry_rdma_nic_endpoints", Gauge,
		"Connected endpoints (peer NICs) of an RDMA NIC.", "device")
	RDMANICGPURegions = def(CompTransport, "kvferry_rdma_nic_gpu_regions", Gauge,
		"GPU memory regions registered with an RDMA NIC (GPUDirect RDMA: dma-buf or peer memory).", "device")
)

// RDMA NIC ports, as the kernel counts them (sysfs
// class/infiniband/<device>/ports/<port>/counters and hw_counters, read
// through rdmamap at scrape time): the port's whole traffic, every
// process's, beside the engine's own figures above.
var (
	RDMAPortXmitBytes = def(CompTransport, "kvferry_rdma_port_xmit_bytes_total", Counter,
		"Bytes an RDMA NIC port sent, all traffic of the host (sysfs port_xmit_data, 4-byte words, times 4).", "device", "port")
	RDMAPortRcvBytes = def(CompTransport, "kvferry_rdma_port_rcv_bytes_total", Counter,
		"Bytes an RDMA NIC port received, all traffic of the host (sysfs port_rcv_data, 4-byte words, times 4).", "device", "port")
	RDMAPortXmitPackets = def(CompTransport, "kvferry_rdma_port_xmit_packets_total", Counter,
		"Packets an RDMA NIC port sent (sysfs port_xmit_packets).", "device", "port")
	RDMAPortRcvPackets = def(CompTransport, "kvferry_rdma_port_rcv_packets_total", Counter,
		"Packets an RDMA NIC port received (sysfs port_rcv_packets).", "device", "port")
	RDMAPortLinkDowned = def(CompTransport, "kvferry_rdma_port_link_downed_total", Counter,
		"Times an RDMA NIC port's link went down (sysfs link_downed).", "device", "port")
	RDMAPortErrors = def(CompTransport, "kvferry_rdma_port_errors_total", Counter,
		"Errors an RDMA NIC port counted, by sysfs counter (symbol_error, port_rcv_errors, port_xmit_discards, ...).",
		"device", "port", "counter")
	RDMAPortHWCounters = def(CompTransport, "kvferry_rdma_port_hw_counters_total", Counter,
		"The NIC driver's own per-port counters, by sysfs hw_counters file (mlx5: out_of_buffer, rnr_nak_retry_err, ...).",
		"device", "port", "counter")
)

// Store client (processes that use the store).
var (
	StoreClients = def(CompStore, "kvferry_store_clients", Gauge,
		"Live, set-up store clients in this process.")
	StorePuts     = def(CompStore, "kvferry_store_client_puts_total", Counter, "Objects put.")
	StorePutBytes = def(CompStore, "kvferry_store_client_put_bytes_total", Counter,
		"Bytes of successful puts (once per object, not per replica).")
	StorePutErrors = def(CompStore, "kvferry_store_client_put_errors_total", Counter, "Failed puts.")
	StoreGets      = def(CompStore, "kvferry_store_client_gets_total", Counter, "Objects read (hits, misses and errors).")
	StoreGetBytes  = def(CompStore, "kvferry_store_client_get_bytes_total", Counter, "Bytes of successful reads.")
	StoreGetErrors = def(CompStore, "kvferry_store_client_get_errors_total", Counter,
		"Failed reads, misses included.")
	StoreGetMisses = def(CompStore, "kvferry_store_client_get_misses_total", Counter,
		"Reads of keys the store does not hold (also counted in get_errors_total).")
	StoreLocalCopies = def(CompStore, "kvferry_store_client_local_copies_total", Counter,
		"Replica reads and writes served by memcpy from the client's own segment.")
	StoreRemounts = def(CompStore, "kvferry_store_client_remounts_total", Counter,
		"Segment re-mounts after the master asked for them.")
	StoreMasterSwitches = def(CompStore, "kvferry_store_client_master_switches_total", Counter,
		"Moves to a new HA master leader.")
	StorePingFailures = def(CompStore, "kvferry_store_client_ping_failures_total", Counter, "Failed master heartbeats.")
	StoreGrantPuts    = def(CompStore, "kvferry_store_client_grant_puts_total", Counter,
		"Puts placed in put grants and published with one master round trip.")
	StoreGrantFallbacks = def(CompStore, "kvferry_store_client_grant_fallbacks_total", Counter,
		"Puts that tried their grants but went the PutStart/PutEnd way.")
	StoreGrantAcquires = def(CompStore, "kvferry_store_client_grant_acquires_total", Counter, "AcquireGrants calls.")
	StoreGrantReturns  = def(CompStore, "kvferry_store_client_grant_returns_total", Counter,
		"Put grants given back to the master.")
	StoreDiskReads = def(CompStore, "kvferry_store_client_disk_reads_total", Counter,
		"Reads served from a file of the client's own disk tier.")
	StoreRemoteDiskReads = def(CompStore, "kvferry_store_client_remote_disk_reads_total", Counter,
		"Reads served from another client's disk tier through its serve buffer (Mooncake's offload RPC reads).")
	StoreDiskServed = def(CompStore, "kvferry_store_client_disk_served_total", Counter,
		"Reads of this client's disk-tier files served to other clients.")
	StoreDiskServeBusy = def(CompStore, "kvferry_store_client_disk_serve_busy_total", Counter,
		"Disk reads of other clients answered NO_AVAILABLE_HANDLE because the serve buffer was full.")
	StorePutDuration = def(CompStore, "kvferry_store_client_put_duration_seconds", HistogramKind,
		"Put latency (one object, call to return), by object size class.", "size_class")
	StoreGetDuration = def(CompStore, "kvferry_store_client_get_duration_seconds", HistogramKind,
		"Get latency (one object, call to return), by object size class.", "size_class")
)

// Store master.
var (
	MasterLeader = def(CompMaster, "kvferry_store_master_leader", Gauge,
		"1 while this master serves (the HA leader, or a master without HA), 0 while it follows.")
	MasterClients    = def(CompMaster, "kvferry_store_master_clients", Gauge, "Live store clients.")
	MasterSegments   = def(CompMaster, "kvferry_store_master_segments", Gauge, "Mounted segments.")
	MasterObjects    = def(CompMaster, "kvferry_store_master_objects", Gauge, "Objects, complete or being written.")
	MasterProcessing = def(CompMaster, "kvferry_store_master_processing_objects", Gauge,
		"Puts between PutStart and PutEnd.")
	MasterLeased = def(CompMaster, "kvferry_store_master_leased_objects", Gauge,
		"Objects under a read lease.")
	MasterPinned = def(CompMaster, "kvferry_store_master_pinned_objects", Gauge,
		"Objects kept from eviction, by pin (hard, soft).", "pin")
	MasterCapacity = def(CompMaster, "kvferry_store_master_capacity_bytes", Gauge, "Total size of the mounted segments.")
	MasterUsed     = def(CompMaster, "kvferry_store_master_used_bytes", Gauge,
		"Allocated bytes in the mounted segments (objects, grants, fences).")
	MasterSegmentCapacity = def(CompMaster, "kvferry_store_master_segment_capacity_bytes", Gauge,
		"Size of each mounted segment (transfer-engine segment name; folded into \"other\" beyond a cap).", "segment")
	MasterSegmentUsed = def(CompMaster, "kvferry_store_master_segment_used_bytes", Gauge,
		"Allocated bytes of each mounted segment.", "segment")
	MasterTenantObjects = def(CompMaster, "kvferry_store_master_tenant_objects", Gauge,
		"Objects of a tenant (folded into \"other\" beyond a cap).", "tenant")
	MasterTenantBytes = def(CompMaster, "kvferry_store_master_tenant_bytes", Gauge,
		"Bytes (object sizes) of a tenant.", "tenant")
	MasterTenantQuotaBytes = def(CompMaster, "kvferry_store_master_tenant_quota_bytes", Gauge,
		"A tenant's byte quota (0: none).", "tenant")
	MasterTenantQuotaObjects = def(CompMaster, "kvferry_store_master_tenant_quota_objects", Gauge,
		"A tenant's object quota (0: none).", "tenant")
	MasterTenantRefused = def(CompMaster, "kvferry_store_master_tenant_quota_refused_total", Counter,
		"Puts a tenant's quota refused.", "tenant")
	MasterDiscarded = def(CompMaster, "kvferry_store_master_discarded_bytes", Gauge,
		"Bytes held for preempted or removed objects until no writer or lease can touch them.")
	MasterMounts               = def(CompMaster, "kvferry_store_master_mounts_total", Counter, "Segment mounts.")
	MasterUnmounts             = def(CompMaster, "kvferry_store_master_unmounts_total", Counter, "Segment unmounts, explicit or by client expiry.")
	MasterPutStarts            = def(CompMaster, "kvferry_store_master_put_starts_total", Counter, "PutStart requests.")
	MasterPutStartFails        = def(CompMaster, "kvferry_store_master_put_start_failures_total", Counter, "PutStart requests that failed.")
	MasterPutEnds              = def(CompMaster, "kvferry_store_master_put_ends_total", Counter, "Completed puts.")
	MasterPutRevokes           = def(CompMaster, "kvferry_store_master_put_revokes_total", Counter, "Revoked puts.")
	MasterGets                 = def(CompMaster, "kvferry_store_master_gets_total", Counter, "GetReplicaList requests.")
	MasterGetHits              = def(CompMaster, "kvferry_store_master_get_hits_total", Counter, "GetReplicaList requests that returned replicas.")
	MasterExists               = def(CompMaster, "kvferry_store_master_exists_total", Counter, "ExistKey requests (per key).")
	MasterRemoves              = def(CompMaster, "kvferry_store_master_removes_total", Counter, "Objects removed by Remove, RemoveByRegex and RemoveAll.")
	MasterEvictionRounds       = def(CompMaster, "kvferry_store_master_eviction_rounds_total", Counter, "Eviction rounds.")
	MasterEvictedObjects       = def(CompMaster, "kvferry_store_master_evicted_objects_total", Counter, "Objects evicted.")
	MasterEvictedBytes         = def(CompMaster, "kvferry_store_master_evicted_bytes_total", Counter, "Bytes freed by eviction.")
	MasterExpiredClients       = def(CompMaster, "kvferry_store_master_expired_clients_total", Counter, "Clients expired for missing heartbeats.")
	MasterZombiePuts           = def(CompMaster, "kvferry_store_master_zombie_puts_total", Counter, "Unfinished puts preempted or reclaimed.")
	MasterNoSpace              = def(CompMaster, "kvferry_store_master_no_space_total", Counter, "Puts and grant requests that failed for lack of space.")
	MasterGrants               = def(CompMaster, "kvferry_store_master_grants", Gauge, "Put grants held by clients.")
	MasterGrantedBytes         = def(CompMaster, "kvferry_store_master_granted_bytes", Gauge, "Bytes reserved in put grants and not yet committed.")
	MasterFencedBytes          = def(CompMaster, "kvferry_store_master_fenced_bytes", Gauge, "Bytes of taken-back grants kept out of use until their clients stop writing.")
	MasterGrantRequests        = def(CompMaster, "kvferry_store_master_grant_requests_total", Counter, "AcquireGrants requests.")
	MasterGrantsHanded         = def(CompMaster, "kvferry_store_master_grants_total", Counter, "Put grants handed out.")
	MasterGrantReturns         = def(CompMaster, "kvferry_store_master_grant_returns_total", Counter, "Put grants returned by their clients.")
	MasterGrantsTakenBack      = def(CompMaster, "kvferry_store_master_grants_taken_back_total", Counter, "Put grants taken back by the master (segment unmounted, client expired).")
	MasterPutCommits           = def(CompMaster, "kvferry_store_master_put_commits_total", Counter, "PutCommit requests (one-round-trip puts).")
	MasterPutCommitFails       = def(CompMaster, "kvferry_store_master_put_commit_failures_total", Counter, "PutCommit requests that failed.")
	MasterDiskCapacity         = def(CompMaster, "kvferry_store_master_disk_capacity_bytes", Gauge, "Total size of the mounted disk tiers.")
	MasterDiskUsed             = def(CompMaster, "kvferry_store_master_disk_used_bytes", Gauge, "Bytes of the disk tiers taken by files and offloads in flight.")
	MasterDiskObjects          = def(CompMaster, "kvferry_store_master_disk_objects", Gauge, "Disk replicas (LOCAL_DISK).")
	MasterOffloadQueue         = def(CompMaster, "kvferry_store_master_offload_queue", Gauge, "OFFLOAD tasks handed to disk tier writers and not yet done.")
	MasterOffloadWaits         = def(CompMaster, "kvferry_store_master_offload_waits_total", Counter, "Puts asked to retry because memory held only objects whose disk files were still being written.")
	MasterEvictSkippedForFiles = def(CompMaster, "kvferry_store_master_evict_skipped_for_files_total", Counter, "Objects eviction passed over because their disk file was not written yet.")
	MasterTasks                = def(CompMaster, "kvferry_store_master_tasks_total", Counter, "Tasks handed to clients (offload, load, delete, copy).")
	MasterTaskFailures         = def(CompMaster, "kvferry_store_master_task_failures_total", Counter, "Tasks that failed or timed out.")
	MasterOffloads             = def(CompMaster, "kvferry_store_master_offloads_total", Counter, "Objects written to disk tiers.")
	MasterOffloadedBytes       = def(CompMaster, "kvferry_store_master_offloaded_bytes_total", Counter, "Bytes written to disk tiers.")
	MasterPromotions           = def(CompMaster, "kvferry_store_master_promotions_total", Counter, "Objects loaded back into memory from disk tiers.")
	MasterDiskTierCapacity     = def(CompMaster, "kvferry_store_master_disk_tier_capacity_bytes", Gauge,
		"Size of each mounted disk tier (its client's transfer-engine segment name; folded into \"other\" beyond a cap).", "segment")
	MasterDiskTierUsed = def(CompMaster, "kvferry_store_master_disk_tier_used_bytes", Gauge,
		"Bytes of each disk tier taken by files and offloads in flight.", "segment")
	MasterDiskTierObjects = def(CompMaster, "kvferry_store_master_disk_tier_objects", Gauge,
		"Disk replicas on each disk tier.", "segment")
	MasterDiskTierQueue = def(CompMaster, "kvferry_store_master_disk_tier_offload_queue", Gauge,
		"OFFLOAD tasks handed to each disk tier's writers and not yet done.", "segment")
	MasterMemoryHits = def(CompMaster, "kvferry_store_master_memory_hits_total", Counter,
		"GetReplicaList answers whose first replica is in memory (CalcCacheStats).")
	MasterDiskHits = def(CompMaster, "kvferry_store_master_disk_hits_total", Counter,
		"GetReplicaList answers for objects only on disk tiers (CalcCacheStats).")
	MasterDrainJobs = def(CompMaster, "kvferry_store_master_drain_jobs", Gauge,
		"Drain jobs not ended (created, planning or running).")
	MasterDrainMoved = def(CompMaster, "kvferry_store_master_drain_moved_total", Counter,
		"Replicas drain jobs moved off their segments (or dropped as one too many).")
	MasterDrainMovedBytes = def(CompMaster, "kvferry_store_master_drain_moved_bytes_total", Counter,
		"Bytes of the replicas drain jobs moved.")
	MasterRPCDuration = def(CompMaster, "kvferry_store_master_rpc_duration_seconds", HistogramKind,
		"Time to serve a master RPC (gRPC or mux), by method.", "method")
	MasterRPCErrors = def(CompMaster, "kvferry_store_master_rpc_errors_total", Counter,
		"Master RPCs answered with an error code, by method.", "method")
)

// Metadata server (kvferry-metadata, Mooncake's HTTP metadata protocol).
var (
	MetadataRequests = def(CompMetadata, "kvferry_metadata_requests_total", Counter,
		"HTTP metadata requests, by method and status code.", "method", "code")
	MetadataRequestDuration = def(CompMetadata, "kvferry_metadata_request_duration_seconds", HistogramKind,
		"Time to serve an HTTP metadata request, by method.", "method")
	MetadataKeys = def(CompMetadata, "kvferry_metadata_keys", Gauge, "Keys held by the metadata server.")
)
