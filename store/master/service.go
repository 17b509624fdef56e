package master

import (
	"cmp"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/kvferry/kvferry/store/wire"
)

// SegmentInfo describes a mounted segment: a memory range that a client
// registered with its transfer engine and lent to the store.
type SegmentInfo struct {
	// ID is chosen by the client (a UUID) and unique in the cluster.
	ID string
	// Name is the client's transfer-engine segment name: the endpoint
	// readers and writers open to reach the memory.
	Name string
	// Protocol is the transport the client offers ("tcp", "rdma", …).
	Protocol string
	// Base is the absolute address of the range in the client's process.
	Base uint64
	// Size is the length of the range in bytes.
	Size uint64
	// ClientID is the owner; filled in by the master in views.
	ClientID string
	// UsedBytes is the allocated part; filled in by the master in views.
	UsedBytes uint64
}

// Replica is one full copy of an object: one contiguous buffer at an
// absolute address inside a mounted segment.
type Replica struct {
	SegmentID   string
	SegmentName string
	Addr        uint64
	Size        uint64
	Status      wire.ReplicaStatus
	Protocol    string
	// Kind is MEMORY (read at Addr) or LOCAL_DISK (a file on the disk tier
	// of segment SegmentName's client, under directory FilePath).
	Kind     wire.ReplicaKind
	FilePath string
	// Tag names a memory replica (replica.tag); 0 for disk replicas.
	Tag uint64
}

// ReplicaList is the answer to GetReplicaList.
type ReplicaList struct {
	// Size is the object size in bytes.
	Size uint64
	// Replicas are the readable (COMPLETE) replicas.
	Replicas []Replica
	// LeaseTTL is the lease granted with the answer.
	LeaseTTL time.Duration
	// UID names this incarnation of the object (another put of the key,
	// or an upsert, has another).
	UID uint64
	// Version is the object's version (version.go).
	Version uint64
}

// ReplicateConfig is the per-put replication request (specs/mooncake.md §6.5).
type ReplicateConfig struct {
	// ReplicaNum is the number of memory replicas, each on a distinct
	// segment name (best effort: at least one). 0 means 1.
	ReplicaNum int
	// SoftPin is the soft-pin transition applied by the put.
	SoftPin wire.SoftPinAction
	// SoftPinTTL overrides the master's default soft-pin TTL when SoftPin is
	// ENABLE; it is capped at MaxKVSoftPinTTL. 0 means the default.
	SoftPinTTL time.Duration
	// HardPin keeps the object from ever being evicted.
	HardPin bool
	// PreferredSegments are segment names tried first, in order.
	PreferredSegments []string
	// Versioned makes the put conditional on the key's current version
	// being ExpectedVersion (version.go).
	Versioned       bool
	ExpectedVersion uint64
	// GroupIDs are the lifecycle groups of the keys of the call, one per
	// key ("" is ungrouped); nil means the call named none (group.go).
	GroupIDs []string
}

// Service is the master state machine: segments, objects, replicas, leases,
// pins, eviction and client liveness. It does no I/O; Server serves it over
// gRPC. All methods are safe for concurrent use (one lock).
type Service struct {
	cfg   Config
	clock Clock
	log   *slog.Logger

	// viewVersion identifies this master instance (or HA term); clients see
	// it change in Ping answers. Immutable.
	viewVersion uint64

	// jr is the operation log (persist.go); nil when the master keeps
	// nothing across restarts.
	jr *journal

	mu struct {
		sync.Mutex
		rng        *rand.Rand
		clients    map[string]*clientState
		segments   map[string]*segment   // by id
		byName     map[string][]*segment // by transfer-engine segment name
		order      []*segment            // mounted segments, in mount order
		objects    map[objectKey]*object
		processing map[objectKey]*object  // objects between PutStart and PutEnd
		groups     map[groupKey]*objGroup // groups with members
		lru        lruList                // complete objects, least recent first
		discarded  []discardEntry
		capacity   uint64 // sum of mounted segment sizes
		used       uint64 // sum of allocated (aligned) bytes: objects, grants, fences
		counters   counters

		grants    map[uint64]*grant // by id
		lastGrant uint64            // the last grant id handed out (random at first)
		granted   uint64            // bytes reserved in grants and not yet committed
		grantGen  uint64            // bumped by every grant the master took back
		fences    []*fence          // space of taken-back grants, out of use until their time
		// allocFence: no allocation before it (a new HA leader waits out
		// the grants of its predecessor).
		allocFence time.Time
		// remountFence: until then, the segments of clients of a previous
		// master instance (those answered NEED_REMOUNT, listed in
		// remounting) are fenced: nothing is allocated in them, as the
		// grants of the previous instance may still be written into. Zero
		// once passed (unfenceLocked).
		remountFence time.Time
		remounting   map[string]struct{}
		// pressureUntil: clients are asked to return idle grants until then
		// (an allocation failed or eviction ran).
		pressureUntil time.Time
		// awayFiles are the objects whose file is on a disk tier that is
		// unmounted (its holder away), with the file's uid; tombstones
		// the files of those removed or replaced meanwhile, which the
		// returning holder must delete, not offer (tier.go).
		awayFiles, tombstones map[objectKey]uint64
		// skippedForFiles: the last eviction round passed over objects
		// whose disk file was not written yet (tier.go).
		skippedForFiles bool

		// awaiting: logged segments not remounted since a restart, by id;
		// restoreUntil: when those still awaited are dropped (persist.go).
		awaiting     map[string]*awaited
		restoreUntil time.Time

		// Tasks (tasks.go): those handed out and not done, by id; the copy
		// and move tasks of users, by UUID; the last object uid.
		tasks     map[uint64]*task
		lastTask  uint64
		userTasks map[string]*userTask
		lastUID   uint64
		// drainJobs are the drain jobs, by id (drain.go).
		drainJobs map[string]*drainJob

		// Versions (version.go): the last one handed out, and the
		// WaitObject calls waiting for a key.
		lastVersion    uint64
		versionWaiters map[objectKey][]chan struct{}

		// tenants: use and quota of each tenant (quota.go).
		tenants map[string]*tenantState
	}
}

type clientState struct {
	id       string
	expiry   time.Time
	segments map[string]*segment
	grants   map[uint64]*grant
	// grantGen is the Service's grantGen when the master last took back one
	// of this client's grants (or when the client registered).
	grantGen uint64
	// disk is its disk tier, tasks the tasks handed to it and not done,
	// taskWake wakes its FetchTasks (tasks.go).
	disk     *diskSeg
	tasks    []*task
	taskWake chan struct{}
	// previous: the client was answered NEED_REMOUNT before it registered,
	// so it was a client of a previous master instance; its segments are
	// fenced while the remount fence lasts.
	previous bool
}

type segment struct {
	info      SegmentInfo
	alloc     *rangeAllocator
	replicas  map[*replica]struct{}
	grants    map[*grant]struct{}
	unmounted bool
	// fenced: mounted by a client of a previous master instance while the
	// remount fence lasts; nothing is allocated in it until then.
	fenced bool
	// draining: a graceful unmount or a drain job moves its objects out;
	// nothing new is placed in it. leaving: the graceful unmount's. job:
	// the drain job that moves its replicas out (drain.go), and drained:
	// a job emptied it (it waits to be unmounted; statusLocked).
	draining bool
	leaving  bool
	job      *drainJob
	drained  bool
}

type replica struct {
	seg  *segment
	off  uint64 // offset from seg base
	size uint64
	obj  *object // nil once detached (discarded)
	// tag names this replica among every replica and object incarnation
	// this instance made (newReplicaLocked): a replica placed again at the
	// same address, even of the same incarnation, has another. A client
	// that reads a replica before the master named it (a speculative get,
	// store/client spec.go) trusts what it read only if the answer names
	// the same tag.
	tag uint64
}

// newReplicaLocked returns a replica of size bytes at off in seg, with a
// fresh tag.
func (s *Service) newReplicaLocked(seg *segment, off, size uint64) *replica {
	return s.initReplicaLocked(new(replica), seg, off, size)
}

// initReplicaLocked makes r a new replica of size bytes at off in seg.
func (s *Service) initReplicaLocked(r *replica, seg *segment, off, size uint64) *replica {
	s.mu.lastUID++
	*r = replica{seg: seg, off: off, size: size, tag: s.mu.lastUID}
	return r
}

// objectRecord is an object of one replica, with that replica and its
// list, in one allocation: a put's commit of one replica (the common
// case) makes no other record. Its parts are used as any object's and
// replica's are (the list may grow elsewhere, the replica move to a
// discard list); they are never reused for another object.
type objectRecord struct {
	obj  object
	rep  replica
	reps [1]*replica
}

type object struct {
	id       objectKey
	size     uint64
	replicas []*replica
	writer   string
	complete bool
	putStart time.Time
	// leaseExpiry is the end of the latest read lease granted to o itself;
	// leaseEnd adds its group's.
	leaseExpiry time.Time
	// group is o's group, nil when ungrouped; joinSeq orders its joining
	// against the group's leases (group.go).
	group   *objGroup
	joinSeq uint64
	// softPinTTL is non-zero when the put enabled soft pin; softPinExpiry is
	// set at PutEnd.
	softPinTTL    time.Duration
	softPinExpiry time.Time
	hardPin       bool
	// lastAccess orders eviction (least recent first).
	lastAccess uint64
	// pending are restored replicas whose segments were not remounted yet
	// (persist.go).
	pending []pendingReplica
	// version is the object's version (0 unless versioned publish).
	version uint64
	// uid names this incarnation of the key (set when it completes): a
	// disk file or a task of an older one does not apply to it.
	uid uint64
	// disk are its files on disk tiers (tier.go); offloading: an OFFLOAD
	// task is out; noOffloadUntil: the last one failed; loading: the LOAD
	// task bringing it back into memory.
	disk           []*diskReplica
	offloading     bool
	noOffloadUntil time.Time
	loading        *task
	// busyUntil: a task reads its memory until then (tasks.go): eviction
	// skips it and its memory is freed no earlier.
	busyUntil time.Time
	busyTasks int

	prev, next *object // lru links
	inLRU      bool
}

type discardEntry struct {
	replicas []*replica
	release  time.Time
	id       objectKey
}

// NewService returns a master state machine. viewVersion identifies this
// instance to clients (use a value that grows across restarts, such as the
// start time in nanoseconds or the HA election revision). It assumes no
// previous instance had clients: NewServer fences (see startFence).
func NewService(cfg Config, viewVersion uint64) (*Service, error) {
	return newService(cfg, viewVersion, fenceNone)
}

// startFence says what a new Service keeps out of use for its first
// GrantLease, so that no put grant of a previous master instance, which
// its clients may still write into, is handed out again.
type startFence int

const (
	// fenceNone: no previous instance can have had clients (tests, and
	// callers of NewService).
	fenceNone startFence = iota
	// fenceRemounted: a plain master, which may have been restarted: the
	// segments of the clients it answers NEED_REMOUNT (clients of the
	// previous instance) are fenced; fresh clients' segments are not, so
	// a master that has no predecessor (an embedded one, a first start)
	// serves at once.
	fenceRemounted
	// fenceAll: a new HA leader, whose predecessor may still have been
	// answering: it allocates nothing at all.
	fenceAll
)

// newService is NewService with a fence for the first GrantLease.
func newService(cfg Config, viewVersion uint64, fence startFence) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Service{cfg: cfg, clock: cfg.Clock, log: cfg.Logger, viewVersion: viewVersion}
	seed := cfg.Seed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	s.mu.rng = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	s.mu.clients = make(map[string]*clientState)
	s.mu.segments = make(map[string]*segment)
	s.mu.byName = make(map[string][]*segment)
	s.mu.objects = make(map[objectKey]*object)
	s.mu.processing = make(map[objectKey]*object)
	s.mu.groups = make(map[groupKey]*objGroup)
	s.mu.grants = make(map[uint64]*grant)
	s.mu.tasks = make(map[uint64]*task)
	s.mu.userTasks = make(map[string]*userTask)
	s.mu.drainJobs = make(map[string]*drainJob)
	s.mu.versionWaiters = make(map[objectKey][]chan struct{})
	s.mu.tenants = make(map[string]*tenantState)
	s.mu.lastUID = rand.Uint64() >> 1
	// Grant ids start at a random point (of the runtime-seeded source, not
	// cfg.Seed, which may be the same in every instance), so that ids of
	// different master instances (restarts, HA terms) do not collide: a
	// client that returns an id of a previous instance must not free a
	// grant of this one. 2^63 ids are left before a wrap.
	s.mu.lastGrant = rand.Uint64() >> 1
	if !cfg.DisableGrants {
		switch fence {
		case fenceAll:
			s.mu.allocFence = s.clock.Now().Add(cfg.GrantLease)
		case fenceRemounted:
			s.mu.remountFence = s.clock.Now().Add(cfg.GrantLease)
			s.mu.remounting = make(map[string]struct{})
		}
	}
	return s, nil
}

// Config returns the effective configuration.
func (s *Service) Config() Config { return s.cfg }

// ViewVersion returns the instance identifier given to NewService.
func (s *Service) ViewVersion() uint64 { return s.viewVersion }

// ---------------------------------------------------------------------------
// Clients and segments

// Ping records a heartbeat. A client the master does not know (never mounted,
// expired, or a master restart) is told NEED_REMOUNT and must call
// ReMountSegments.
func (s *Service) Ping(clientID string) (wire.ClientStatus, error) {
	p, err := s.Heartbeat(clientID)
	return p.Status, err
}

// PingInfo is the master's answer to a heartbeat.
type PingInfo struct {
	// Status is OK or NEED_REMOUNT.
	Status wire.ClientStatus
	// GrantGeneration is the client's grant generation (grants.go).
	GrantGeneration uint64
	// ReturnGrants asks the client to return the grants it is not writing
	// into: the master is short of space.
	ReturnGrants bool
}

// Heartbeat is Ping with what a client holding put grants needs to know.
func (s *Service) Heartbeat(clientID string) (PingInfo, error) {
	if clientID == "" {
		return PingInfo{}, fmt.Errorf("ping: empty client id: %w", wire.ErrInvalidParams)
	}
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unfenceLocked(now)
	c, ok := s.mu.clients[clientID]
	if !ok {
		if s.mu.remounting != nil {
			s.mu.remounting[clientID] = struct{}{}
		}
		return PingInfo{Status: wire.ClientStatus_CLIENT_STATUS_NEED_REMOUNT}, nil
	}
	c.expiry = now.Add(s.cfg.ClientTTL)
	return PingInfo{Status: wire.ClientStatus_CLIENT_STATUS_OK, GrantGeneration: c.grantGen,
		ReturnGrants: len(c.grants) > 0 && now.Before(s.mu.pressureUntil)}, nil
}

// MountSegment lends a memory range of a client to the store. Mounting the
// same segment again (same id, owner and range) is a no-op.
func (s *Service) MountSegment(clientID string, seg SegmentInfo) (err error) {
	if clientID == "" {
		return fmt.Errorf("mount segment: empty client id: %w", wire.ErrInvalidParams)
	}
	now := s.clock.Now()
	defer s.durable(&err)
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.checkLocked()
	c := s.touchClientLocked(clientID, now)
	return s.mountLocked(c, seg)
}

// ReMountSegments registers a client again with all its segments, after the
// master answered NEED_REMOUNT. Segments the master still has are kept; the
// first error is returned after every segment was tried.
func (s *Service) ReMountSegments(clientID string, segs []SegmentInfo) (err error) {
	if clientID == "" {
		return fmt.Errorf("remount segments: empty client id: %w", wire.ErrInvalidParams)
	}
	now := s.clock.Now()
	defer s.durable(&err)
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.checkLocked()
	c := s.touchClientLocked(clientID, now)
	var first error
	for _, seg := range segs {
		if err := s.mountLocked(c, seg); err != nil && first == nil {
			first = err
		}
	}
	if len(segs) > 0 {
		s.log.Info("client remounted", "client", clientID, "segments", len(segs))
	}
	return first
}

func (s *Service) touchClientLocked(id string, now time.Time) *clientState {
	s.unfenceLocked(now)
	c, ok := s.mu.clients[id]
	if !ok {
		_, previous := s.mu.remounting[id]
		c = &clientState{id: id, segments: make(map[string]*segment), grants: make(map[uint64]*grant), taskWake: make(chan struct{}, 1),
			grantGen: s.mu.grantGen, previous: previous}
		s.mu.clients[id] = c
		s.log.Info("client registered", "client", id)
	}
	c.expiry = now.Add(s.cfg.ClientTTL)
	return c
}

func (s *Service) mountLocked(c *clientState, info SegmentInfo) error {
	if info.ID == "" || info.Name == "" || info.Size == 0 || info.Base+info.Size < info.Base {
		return fmt.Errorf("mount segment %q (%q, base %#x, size %d): %w",
			info.ID, info.Name, info.Base, info.Size, wire.ErrInvalidParams)
	}
	if old, ok := s.mu.segments[info.ID]; ok {
		if old.info.ClientID == c.id && old.info.Name == info.Name &&
			old.info.Base == info.Base && old.info.Size == info.Size {
			return nil
		}
		return fmt.Errorf("mount segment %q: %w", info.ID, wire.ErrSegmentAlreadyExists)
	}
	for _, other := range s.mu.byName[info.Name] {
		if info.Base < other.info.Base+other.info.Size && other.info.Base < info.Base+info.Size {
			return fmt.Errorf("mount segment %q: range [%#x, +%d) of %q overlaps segment %q: %w",
				info.ID, info.Base, info.Size, info.Name, other.info.ID, wire.ErrInvalidParams)
		}
	}
	info.ClientID = c.id
	info.UsedBytes = 0
	seg := &segment{info: info, alloc: newRangeAllocator(info.Size), replicas: make(map[*replica]struct{}),
		grants: make(map[*grant]struct{}), fenced: c.previous}
	s.mu.segments[info.ID] = seg
	s.mu.byName[info.Name] = append(s.mu.byName[info.Name], seg)
	s.mu.order = append(s.mu.order, seg)
	s.mu.capacity += info.Size
	c.segments[info.ID] = seg
	s.attachRestoredLocked(seg)
	s.fenceMountedLocked(seg)
	s.logSegMountLocked(info)
	s.mu.counters.mounts++
	s.log.Info("segment mounted", "client", c.id, "segment", info.Name, "id", info.ID, "bytes", info.Size)
	return nil
}

// UnmountSegment removes a segment of the calling client and drops every
// replica on it; objects left without replicas are removed. The id of the
// client's disk tier unmounts the tier (Mooncake's drainLocalDiskSegment):
// its files are no longer replicas, and objects left without any are
// removed.
func (s *Service) UnmountSegment(clientID, segmentID string) (err error) {
	defer s.durable(&err)
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.checkLocked()
	seg, ok := s.mu.segments[segmentID]
	if !ok {
		if c := s.mu.clients[clientID]; c != nil && c.disk != nil && c.disk.info.ID == segmentID {
			s.unmountDiskLocked(c.disk)
			return nil
		}
		return fmt.Errorf("unmount segment %q: %w", segmentID, wire.ErrSegmentNotFound)
	}
	if seg.info.ClientID != clientID {
		return fmt.Errorf("unmount segment %q: owned by client %q, not %q: %w",
			segmentID, seg.info.ClientID, clientID, wire.ErrIllegalClient)
	}
	s.unmountLocked(seg, s.clock.Now())
	return nil
}

func (s *Service) unmountLocked(seg *segment, now time.Time) {
	// Grants on the segment go with it: their holders learn it from the
	// grant generation, and their ranges stay fenced under the segment's
	// name should it come back before the holders stop writing.
	for _, g := range sortedGrants(seg.grants) {
		s.takeBackGrantLocked(g, now)
	}
	for _, f := range s.mu.fences {
		if f.seg == seg {
			f.seg = nil
		}
	}
	seg.unmounted = true
	delete(s.mu.segments, seg.info.ID)
	if c, ok := s.mu.clients[seg.info.ClientID]; ok {
		delete(c.segments, seg.info.ID)
	}
	s.mu.byName[seg.info.Name] = slices.DeleteFunc(s.mu.byName[seg.info.Name], func(x *segment) bool { return x == seg })
	if len(s.mu.byName[seg.info.Name]) == 0 {
		delete(s.mu.byName, seg.info.Name)
	}
	s.mu.order = slices.DeleteFunc(s.mu.order, func(x *segment) bool { return x == seg })
	s.mu.capacity -= seg.info.Size
	s.mu.used -= seg.alloc.used
	if seg.job != nil {
		seg.job.segmentGoneLocked(seg)
	}
	dropped := 0
	for r := range seg.replicas {
		o := r.obj
		if o == nil {
			continue // a discarded replica: its space goes with the segment
		}
		o.replicas = slices.DeleteFunc(o.replicas, func(x *replica) bool { return x == r })
		dropped++
		switch {
		case len(o.replicas) == 0 && len(o.pending) == 0 && len(o.disk) == 0:
			s.forgetObjectLocked(o)
		case len(o.replicas) == 0:
			s.mu.lru.remove(o) // restored replicas elsewhere may still come back
		}
	}
	clear(seg.replicas)
	s.logLocked(encodeSegGone(seg.info.ID))
	s.mu.counters.unmounts++
	s.log.Info("segment unmounted", "client", seg.info.ClientID, "segment", seg.info.Name,
		"id", seg.info.ID, "replicas", dropped)
}

// Segments returns the mounted segments, in mount order.
func (s *Service) Segments() []SegmentInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]SegmentInfo, 0, len(s.mu.order))
	for _, seg := range s.mu.order {
		info := seg.info
		info.UsedBytes = seg.alloc.used
		out = append(out, info)
	}
	return out
}

// Keys returns the keys of all objects of tenant ("" is the default),
// sorted.
func (s *Service) Keys(tenant string) ([]string, error) {
	t, err := tenantOf(tenant)
	if err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for id := range s.mu.objects {
		if id.tenant == t {
			out = append(out, id.key)
		}
	}
	slices.Sort(out)
	return out, nil
}

// ---------------------------------------------------------------------------
// Reads

// ExistKey reports whether key has a readable replica in tenant's
// namespace ("" is the default tenant); a yes grants a read lease
// (specs/mooncake.md §7.4).
func (s *Service) ExistKey(tenant, key string) (bool, error) {
	id, err := objectKeyOf(tenant, key)
	if err != nil {
		return false, fmt.Errorf("exist key %q: %w", key, err)
	}
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.existLocked(id, now), nil
}

// BatchExistKey is ExistKey for many keys: 1, 0 or a negative code each.
func (s *Service) BatchExistKey(tenant string, keys []string) []int32 {
	out := make([]int32, len(keys))
	ids, err := objectKeys(tenant, keys)
	if err != nil {
		for i := range out {
			out[i] = codeOf(err)
		}
		return out
	}
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, id := range ids {
		if s.existLocked(id, now) {
			out[i] = 1
		}
	}
	return out
}

func (s *Service) existLocked(id objectKey, now time.Time) bool {
	s.mu.counters.exists++
	o, ok := s.mu.objects[id]
	if !ok || !o.complete || len(o.replicas) == 0 && len(o.disk) == 0 {
		return false
	}
	s.leaseLocked(o, now)
	return true
}

// GetReplicaList returns the readable replicas of key in tenant's
// namespace and grants a read lease. Errors: OBJECT_NOT_FOUND,
// REPLICA_IS_NOT_READY (put in progress), INVALID_PARAMS (tenant).
func (s *Service) GetReplicaList(tenant, key string) (ReplicaList, error) {
	id, err := objectKeyOf(tenant, key)
	if err != nil {
		return ReplicaList{}, fmt.Errorf("get replica list %q: %w", key, err)
	}
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.getLocked(id, now)
}

// BatchGetReplicaList is GetReplicaList for many keys.
func (s *Service) BatchGetReplicaList(tenant string, keys []string) ([]ReplicaList, []error) {
	lists := make([]ReplicaList, len(keys))
	errs := make([]error, len(keys))
	ids, err := objectKeys(tenant, keys)
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
		return lists, errs
	}
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, id := range ids {
		lists[i], errs[i] = s.getLocked(id, now)
	}
	return lists, errs
}

func (s *Service) getLocked(id objectKey, now time.Time) (ReplicaList, error) {
	o := s.mu.objects[id]
	if err := s.readLocked(o, now); err != nil {
		return ReplicaList{}, fmt.Errorf("get replica list %v: %w", id, err)
	}
	return ReplicaList{Size: o.size, Replicas: o.descriptors(), LeaseTTL: s.cfg.DefaultKVLeaseTTL, UID: o.uid,
		Version: o.version}, nil
}

// readLocked counts a get of object o (nil: none under the key) and
// leases it, or returns why it cannot be read (unwrapped).
func (s *Service) readLocked(o *object, now time.Time) error {
	s.mu.counters.gets++
	if o == nil {
		return wire.ErrObjectNotFound
	}
	if !o.complete || len(o.replicas) == 0 && len(o.disk) == 0 {
		return wire.ErrReplicaIsNotReady
	}
	s.mu.counters.getHits++
	if len(o.replicas) > 0 {
		s.mu.counters.memHits++ // (CalcCacheStats: by the first replica's kind)
	} else {
		s.mu.counters.diskHits++
	}
	s.leaseLocked(o, now)
	return nil
}

// AppendReplicaList is GetReplicaList with its answer appended to b as an
// encoded wire.GetReplicaListResponse (the mux's get: no strings made of
// tenant and key, no messages built). tenant and key are valid UTF-8.
func (s *Service) AppendReplicaList(b []byte, tenant, key []byte) ([]byte, error) {
	if err := wire.CheckTenantID(tenant); err != nil {
		return b, fmt.Errorf("get replica list %q: %w", key, err)
	}
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var o *object
	if len(tenant) == 0 {
		o = s.mu.objects[objectKey{tenant: wire.DefaultTenant, key: string(key)}]
	} else {
		o = s.mu.objects[objectKey{tenant: string(tenant), key: string(key)}]
	}
	if err := s.readLocked(o, now); err != nil {
		t, _ := tenantOf(string(tenant))
		return b, fmt.Errorf("get replica list %v: %w", objectKey{tenant: t, key: string(key)}, err)
	}
	b = o.appendDescriptors(b)
	return wire.AppendReplicaListTail(b, uint64(s.cfg.DefaultKVLeaseTTL/time.Millisecond), o.size, o.uid,
		o.version, s.ViewVersion()), nil
}

func (s *Service) leaseLocked(o *object, now time.Time) {
	s.leaseForLocked(o, now, s.cfg.DefaultKVLeaseTTL)
}

// leaseForLocked grants o a read lease of ttl. An object only on disk gets
// none: no memory of it needs protecting (a file is replaced by rename, and
// a reader holds it open), and a lease would keep the memory a promotion
// then gives it for the full ttl.
func (s *Service) leaseForLocked(o *object, now time.Time, ttl time.Duration) {
	if len(o.replicas) == 0 {
		return
	}
	exp := now.Add(ttl)
	if exp.After(o.leaseExpiry) {
		o.leaseExpiry = exp
	}
	leaseGroupLocked(o, exp)
	if len(o.replicas) > 0 {
		s.mu.lru.touch(o)
	}
}

func (o *object) descriptors() []Replica {
	st := wire.ReplicaStatus_REPLICA_STATUS_PROCESSING
	if o.complete {
		st = wire.ReplicaStatus_REPLICA_STATUS_COMPLETE
	}
	out := make([]Replica, len(o.replicas), len(o.replicas)+len(o.disk))
	for i, r := range o.replicas {
		out[i] = Replica{
			SegmentID:   r.seg.info.ID,
			SegmentName: r.seg.info.Name,
			Addr:        r.seg.info.Base + r.off,
			Size:        r.size,
			Status:      st,
			Protocol:    r.seg.info.Protocol,
			Tag:         r.tag,
		}
	}
	for _, d := range o.disk {
		out = append(out, Replica{SegmentID: d.seg.info.ID, SegmentName: d.seg.info.Name, Size: o.size, Status: st,
			Kind: wire.ReplicaKind_REPLICA_KIND_LOCAL_DISK, FilePath: d.seg.info.Path})
	}
	return out
}

// appendDescriptors appends descriptors() to b, encoded as the replicas of
// a wire.GetReplicaListResponse (replicasToWire's fields).
func (o *object) appendDescriptors(b []byte) []byte {
	st := wire.ReplicaStatus_REPLICA_STATUS_PROCESSING
	if o.complete {
		st = wire.ReplicaStatus_REPLICA_STATUS_COMPLETE
	}
	for _, r := range o.replicas {
		b = wire.AppendReplica(b, &wire.ReplicaFields{SegmentID: r.seg.info.ID, SegmentName: r.seg.info.Name,
			Address: r.seg.info.Base + r.off, Size: r.size, Status: st, Protocol: r.seg.info.Protocol, Tag: r.tag})
	}
	for _, d := range o.disk {
		b = wire.AppendReplica(b, &wire.ReplicaFields{SegmentID: d.seg.info.ID, SegmentName: d.seg.info.Name,
			Size: o.size, Status: st, Kind: wire.ReplicaKind_REPLICA_KIND_LOCAL_DISK, FilePath: d.seg.info.Path})
	}
	return b
}

// ---------------------------------------------------------------------------
// Writes

// PutStart allocates the replicas of a new object of size bytes under key
// in tenant's namespace ("" is the default tenant), written by clientID.
// The object is not readable until PutEnd. A key that exists is
// OBJECT_ALREADY_EXISTS (objects are immutable) unless upsert, or unless the
// existing object is an unfinished put older than PutStartDiscardTimeout,
// which is preempted. With upsert an existing object is replaced; its memory
// is freed once no reader's lease covers it. No space is NO_AVAILABLE_HANDLE
// after one synchronous eviction round.
func (s *Service) PutStart(clientID, tenant, key string, size uint64, cfg ReplicateConfig, upsert bool) (_ []Replica, err error) {
	id, err := objectKeyOf(tenant, key)
	if err != nil {
		return nil, fmt.Errorf("put start %q: %w", key, err)
	}
	g, err := groupOf(cfg)
	if err != nil {
		return nil, fmt.Errorf("put start %q: %w", key, err)
	}
	now := s.clock.Now()
	defer s.durable(&err)
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.checkLocked()
	return s.putStartLocked(clientID, id, size, cfg, g, upsert, now)
}

// BatchPutStart is PutStart for many keys under one lock.
func (s *Service) BatchPutStart(clientID, tenant string, keys []string, sizes []uint64, cfg ReplicateConfig, upsert bool) ([][]Replica, []error) {
	reps := make([][]Replica, len(keys))
	errs := make([]error, len(keys))
	ids, err := objectKeys(tenant, keys)
	var groups []groupChoice
	if err == nil {
		groups, err = groupsOf(cfg, len(keys))
	}
	if err != nil {
		for i := range errs {
			errs[i] = fmt.Errorf("put start: %w", err)
		}
		return reps, errs
	}
	now := s.clock.Now()
	defer func() { s.durableAll(errs) }()
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.checkLocked()
	for i, id := range ids {
		if i >= len(sizes) {
			errs[i] = fmt.Errorf("put start %v: no size: %w", id, wire.ErrInvalidParams)
			continue
		}
		reps[i], errs[i] = s.putStartLocked(clientID, id, sizes[i], cfg, groups[i], upsert, now)
	}
	return reps, errs
}

func (s *Service) putStartLocked(clientID string, id objectKey, size uint64, cfg ReplicateConfig, g groupChoice,
	upsert bool, now time.Time) ([]Replica, error) {
	s.mu.counters.putStarts++
	if id.key == "" || size == 0 || cfg.ReplicaNum < 0 || clientID == "" {
		s.mu.counters.putStartFails++
		return nil, fmt.Errorf("put start %v (size %d, replicas %d, client %q): %w",
			id, size, cfg.ReplicaNum, clientID, wire.ErrInvalidParams)
	}
	if err := s.fencedLocked(now); err != nil {
		s.mu.counters.putStartFails++
		return nil, fmt.Errorf("put start %v: %w", id, err)
	}
	s.unfenceLocked(now)
	if cfg.Versioned {
		if err := s.checkVersionLocked(id, cfg.ExpectedVersion); err != nil {
			s.mu.counters.putStartFails++
			return nil, err
		}
		upsert = true
	}
	if err := s.quotaLocked(id, size); err != nil {
		s.mu.counters.putStartFails++
		return nil, err
	}
	gid, err := s.effectiveGroupLocked(id, g, upsert)
	if err != nil {
		s.mu.counters.putStartFails++
		return nil, fmt.Errorf("put start %v: %w", id, err)
	}
	if err := s.claimKeyLocked(id, upsert, now); err != nil {
		s.mu.counters.putStartFails++
		return nil, fmt.Errorf("put start %v: %w", id, err)
	}
	n := max(cfg.ReplicaNum, 1)
	reps := s.placeLocked(size, n, cfg.PreferredSegments)
	if len(reps) == 0 && s.anyFencedLocked() {
		// Space may be in the fenced segments soon: the client asks again
		// (nothing is evicted for want of them).
		s.mu.counters.putStartFails++
		return nil, fmt.Errorf("put start %v: %w", id, s.remountFencedErrLocked(now))
	}
	awaiting := false // eviction passed over objects whose files are being written
	if len(reps) == 0 && s.fitsSomeSegmentLocked(size) {
		// Allocation failure triggers eviction (specs/mooncake.md §7.4); we
		// evict synchronously and try once more.
		need := mulSat(alignedLen(size), uint64(n))
		target := max(uint64(s.cfg.EvictionRatio*float64(s.mu.capacity)), need)
		// What one round frees may lie in pieces too small for the
		// object (objects of mixed sizes): a few more rounds then.
		for round := 0; len(reps) == 0 && round < maxEvictRounds; round++ {
			freed := s.evictLocked(target, now)
			awaiting = awaiting || s.mu.skippedForFiles
			if freed == 0 {
				break
			}
			reps = s.placeLocked(size, n, cfg.PreferredSegments)
		}
	}
	if len(reps) == 0 && awaiting {
		// Memory holds objects that eviction may take only once their
		// disk files are written: the client asks again (backpressure,
		// bounded by its RPC timeout; tier.go).
		s.mu.counters.putStartFails++
		s.mu.counters.offloadWaits++
		s.mu.pressureUntil = now.Add(s.cfg.GrantLease)
		s.scheduleOffloadsLocked(now)
		return nil, fmt.Errorf("put start %v: %d bytes: memory holds objects whose disk files are still being written: %w",
			id, size, wire.ErrUnavailableInStatus)
	}
	if len(reps) == 0 {
		s.mu.counters.putStartFails++
		s.mu.counters.noSpace++
		s.mu.pressureUntil = now.Add(s.cfg.GrantLease)
		return nil, fmt.Errorf("put start %v: %d bytes in %d segments: %w",
			id, size, len(s.mu.order), wire.ErrNoAvailableHandle)
	}
	o := s.newObjectLocked(clientID, id, size, reps, cfg, gid, now)
	s.mu.processing[id] = o
	return o.descriptors(), nil
}

// maxEvictRounds bounds the eviction rounds one allocation may run.
const maxEvictRounds = 8

// claimKeyLocked makes way for a new object under id: an existing object
// is OBJECT_ALREADY_EXISTS (objects are immutable) unless upsert, which
// replaces it, or unless it is an unfinished put older than
// PutStartDiscardTimeout, which is preempted.
func (s *Service) claimKeyLocked(id objectKey, upsert bool, now time.Time) error {
	o, ok := s.mu.objects[id]
	if !ok {
		return nil
	}
	switch {
	case upsert:
		s.replaceLocked(o, now)
	case o.complete || now.Sub(o.putStart) <= s.cfg.PutStartDiscardTimeout:
		return wire.ErrObjectAlreadyExists
	default:
		// A zombie put: its writer may still be writing, so its space is
		// released only after PutStartReleaseTimeout.
		s.log.Info("zombie put preempted", "key", id.key, "tenant", id.tenant, "client", o.writer, "age", now.Sub(o.putStart))
		s.mu.counters.zombiePuts++
		s.dropObjectLocked(o, o.putStart.Add(s.cfg.PutStartReleaseTimeout), now)
	}
	return nil
}

// newObjectLocked indexes a new object with replicas reps under id (not
// yet complete), a member of group gid ("" is none).
func (s *Service) newObjectLocked(clientID string, id objectKey, size uint64, reps []*replica, cfg ReplicateConfig,
	gid string, now time.Time) *object {
	return s.initObjectLocked(new(object), clientID, id, size, reps, cfg, gid, now)
}

// initObjectLocked is newObjectLocked making o the new object.
func (s *Service) initObjectLocked(o *object, clientID string, id objectKey, size uint64, reps []*replica, cfg ReplicateConfig,
	gid string, now time.Time) *object {
	*o = object{id: id, size: size, replicas: reps, writer: clientID, putStart: now, hardPin: cfg.HardPin}
	if cfg.SoftPin == wire.SoftPinAction_SOFT_PIN_ENABLE {
		o.softPinTTL = cfg.SoftPinTTL
		if o.softPinTTL <= 0 {
			o.softPinTTL = s.cfg.DefaultKVSoftPinTTL
		}
		o.softPinTTL = min(o.softPinTTL, s.cfg.MaxKVSoftPinTTL)
	}
	for _, r := range reps {
		r.obj = o
	}
	s.supersedeAwayLocked(id) // a file of an earlier object under id is stale now
	s.mu.objects[id] = o
	s.chargeLocked(o)
	s.joinGroupLocked(o, gid)
	return o
}

// fitsSomeSegmentLocked reports whether an object of size bytes could fit in
// an empty mounted segment (so evicting could help).
func (s *Service) fitsSomeSegmentLocked(size uint64) bool {
	need := alignedLen(size)
	if need < size { // overflow: fits nowhere
		return false
	}
	for _, seg := range s.mu.order {
		if need <= seg.info.Size {
			return true
		}
	}
	return false
}

// replaceLocked takes an existing object out for an upsert: an unfinished
// put is preempted at once (its writer may still write, so its space waits
// PutStartReleaseTimeout), a complete object is freed once its lease ends.
func (s *Service) replaceLocked(o *object, now time.Time) {
	release := o.leaseEnd()
	if !o.complete {
		release = o.putStart.Add(s.cfg.PutStartReleaseTimeout)
		s.mu.counters.zombiePuts++
	}
	s.dropObjectLocked(o, release, now)
	s.supersedeAwayLocked(o.id)
}

// placeLocked allocates up to n replicas of size bytes on distinct segment
// names: preferred names first, then by the allocation strategy.
func (s *Service) placeLocked(size uint64, n int, preferred []string) []*replica {
	var out []*replica
	s.pickSegmentsLocked(n, preferred, nil, func(seg *segment) bool {
		off, ok := seg.alloc.alloc(size)
		if !ok {
			return false
		}
		r := s.newReplicaLocked(seg, off, size)
		seg.replicas[r] = struct{}{}
		s.mu.used += alignedLen(size)
		out = append(out, r)
		return true
	})
	return out
}

// pickSegmentsLocked offers segments to take until n took one, on distinct
// segment names and none in exclude: the preferred names first, then in
// the order of the allocation strategy. It returns how many took.
func (s *Service) pickSegmentsLocked(n int, preferred, exclude []string, take func(*segment) bool) int {
	usedNames := make(map[string]bool, n+len(exclude))
	for _, name := range exclude {
		usedNames[name] = true
	}
	got := 0
	try := func(seg *segment) bool {
		if usedNames[seg.info.Name] || seg.fenced || seg.draining || !take(seg) {
			return false
		}
		usedNames[seg.info.Name] = true
		got++
		return true
	}
	for _, name := range preferred {
		if got == n {
			return got
		}
		for _, seg := range s.mu.byName[name] {
			if try(seg) {
				break
			}
		}
	}
	if got == n || len(s.mu.order) == 0 {
		return got
	}
	switch s.cfg.AllocationStrategy {
	case StrategyFreeRatioFirst:
		cands := slices.Clone(s.mu.order)
		slices.SortStableFunc(cands, func(a, b *segment) int {
			// Larger free fraction first: compare free_a/size_a with free_b/size_b.
			fa := float64(a.info.Size-a.alloc.used) / float64(a.info.Size)
			fb := float64(b.info.Size-b.alloc.used) / float64(b.info.Size)
			return cmp.Compare(fb, fa)
		})
		for _, seg := range cands {
			if got == n {
				break
			}
			try(seg)
		}
	default: // StrategyRandom
		start := s.mu.rng.IntN(len(s.mu.order))
		for i := range s.mu.order {
			if got == n {
				break
			}
			try(s.mu.order[(start+i)%len(s.mu.order)])
		}
	}
	return got
}

// PutEnd completes a put of key in tenant's namespace: the replicas
// become readable.
func (s *Service) PutEnd(clientID, tenant, key string) (err error) {
	id, err := objectKeyOf(tenant, key)
	if err != nil {
		return fmt.Errorf("put end %q: %w", key, err)
	}
	now := s.clock.Now()
	defer s.durable(&err)
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.checkLocked()
	return s.putEndLocked(clientID, id, now)
}

// PutRevoke abandons a put whose write failed: its space is freed at once.
func (s *Service) PutRevoke(clientID, tenant, key string) (err error) {
	id, err := objectKeyOf(tenant, key)
	if err != nil {
		return fmt.Errorf("put revoke %q: %w", key, err)
	}
	now := s.clock.Now()
	defer s.durable(&err)
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.checkLocked()
	return s.putRevokeLocked(clientID, id, now)
}

// BatchPutEnd is PutEnd (or PutRevoke with revoke) for many keys.
func (s *Service) BatchPutEnd(clientID, tenant string, keys []string, revoke bool) []error {
	errs := make([]error, len(keys))
	ids, err := objectKeys(tenant, keys)
	if err != nil {
		for i := range errs {
			errs[i] = fmt.Errorf("put end: %w", err)
		}
		return errs
	}
	now := s.clock.Now()
	defer func() { s.durableAll(errs) }()
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.checkLocked()
	for i, id := range ids {
		if revoke {
			errs[i] = s.putRevokeLocked(clientID, id, now)
		} else {
			errs[i] = s.putEndLocked(clientID, id, now)
		}
	}
	return errs
}

func (s *Service) putEndLocked(clientID string, id objectKey, now time.Time) error {
	o, ok := s.mu.objects[id]
	if !ok {
		return fmt.Errorf("put end %v: %w", id, wire.ErrObjectNotFound)
	}
	if o.writer != clientID {
		return fmt.Errorf("put end %v: written by client %q, not %q: %w", id, o.writer, clientID, wire.ErrIllegalClient)
	}
	if o.complete {
		return nil
	}
	s.completeLocked(o, now)
	s.mu.counters.putEnds++
	return nil
}

func (s *Service) putRevokeLocked(clientID string, id objectKey, now time.Time) error {
	o, ok := s.mu.objects[id]
	if !ok {
		return fmt.Errorf("put revoke %v: %w", id, wire.ErrObjectNotFound)
	}
	if o.writer != clientID {
		return fmt.Errorf("put revoke %v: written by client %q, not %q: %w", id, o.writer, clientID, wire.ErrIllegalClient)
	}
	if o.complete {
		return fmt.Errorf("put revoke %v: already complete: %w", id, wire.ErrInvalidWrite)
	}
	s.dropObjectLocked(o, now, now)
	s.mu.counters.putRevokes++
	return nil
}

// ---------------------------------------------------------------------------
// Removal

// Remove deletes the object under key in tenant's namespace. A leased object fails with OBJECT_HAS_LEASE
// unless force; with force its memory is freed only when the lease ends, so
// a reader in flight never sees it reused. An unfinished put fails with
// REPLICA_IS_NOT_READY even with force (as Mooncake).
func (s *Service) Remove(tenant, key string, force bool) (err error) {
	id, err := objectKeyOf(tenant, key)
	if err != nil {
		return fmt.Errorf("remove %q: %w", key, err)
	}
	now := s.clock.Now()
	defer s.durable(&err)
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.checkLocked()
	return s.removeLocked(id, force, now)
}

// BatchRemove is Remove for many keys.
func (s *Service) BatchRemove(tenant string, keys []string, force bool) []error {
	errs := make([]error, len(keys))
	ids, err := objectKeys(tenant, keys)
	if err != nil {
		for i := range errs {
			errs[i] = fmt.Errorf("remove: %w", err)
		}
		return errs
	}
	now := s.clock.Now()
	defer func() { s.durableAll(errs) }()
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.checkLocked()
	for i, id := range ids {
		errs[i] = s.removeLocked(id, force, now)
	}
	return errs
}

func (s *Service) removeLocked(id objectKey, force bool, now time.Time) error {
	o, ok := s.mu.objects[id]
	if !ok {
		if s.supersedeAwayLocked(id) {
			// Known only as a file on a disk tier that is away: it is
			// gone for good (the holder deletes the file on its return).
			s.mu.counters.removes++
			return nil
		}
		return fmt.Errorf("remove %v: %w", id, wire.ErrObjectNotFound)
	}
	if lease := o.leaseEnd(); !force && lease.After(now) {
		return fmt.Errorf("remove %v: leased for %v: %w", id, lease.Sub(now), wire.ErrObjectHasLease)
	}
	if !o.complete {
		return fmt.Errorf("remove %v: %w", id, wire.ErrReplicaIsNotReady)
	}
	s.dropObjectLocked(o, o.leaseEnd(), now)
	s.supersedeAwayLocked(id)
	s.mu.counters.removes++
	return nil
}

// RemoveByRegex deletes every complete object of tenant whose key matches
// pattern (Go RE2 syntax, unanchored search like Mooncake's
// std::regex_search). Leased objects are skipped unless force. Returns how
// many were removed; a bad pattern or tenant is INVALID_PARAMS.
func (s *Service) RemoveByRegex(tenant, pattern string, force bool) (int64, error) {
	t, err := tenantOf(tenant)
	if err != nil {
		return 0, fmt.Errorf("remove by regex %q: %w", pattern, err)
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return 0, fmt.Errorf("remove by regex %q: %v: %w", pattern, err, wire.ErrInvalidParams)
	}
	return s.removeMatching(t, re.MatchString, force), nil
}

// RemoveAll deletes every complete object of tenant, skipping leased ones
// unless force. Returns how many were removed; a bad tenant is
// INVALID_PARAMS.
func (s *Service) RemoveAll(tenant string, force bool) (int64, error) {
	t, err := tenantOf(tenant)
	if err != nil {
		return 0, fmt.Errorf("remove all: %w", err)
	}
	return s.removeMatching(t, func(string) bool { return true }, force), nil
}

func (s *Service) removeMatching(tenant string, match func(string) bool, force bool) int64 {
	now := s.clock.Now()
	defer s.flushLog()
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.checkLocked()
	var victims []*object
	for id, o := range s.mu.objects {
		if id.tenant != tenant || !match(id.key) || !o.complete || (!force && o.leaseEnd().After(now)) {
			continue
		}
		victims = append(victims, o)
	}
	for _, o := range victims {
		s.dropObjectLocked(o, o.leaseEnd(), now)
		s.supersedeAwayLocked(o.id)
	}
	n := int64(len(victims))
	var away []objectKey
	for id := range s.mu.awayFiles {
		if id.tenant == tenant && match(id.key) && s.mu.objects[id] == nil {
			away = append(away, id)
		}
	}
	for _, id := range away {
		s.supersedeAwayLocked(id)
		n++
	}
	s.mu.counters.removes += uint64(n)
	return n
}

// ---------------------------------------------------------------------------
// Object bookkeeping

// dropObjectLocked removes o from every index and frees its replicas: now if
// release is not after now, else at release (the discard list).
func (s *Service) dropObjectLocked(o *object, release, now time.Time) {
	if o.complete && s.mu.objects[o.id] == o {
		s.logLocked(encodeRemove(o.id))
	}
	release = later(release, o.busyUntil)
	s.dropDiskReplicasLocked(o, now)
	s.forgetPendingLocked(o)
	s.forgetObjectLocked(o)
	for _, r := range o.replicas {
		r.obj = nil
	}
	if release.After(now) {
		s.mu.discarded = append(s.mu.discarded, discardEntry{replicas: o.replicas, release: release, id: o.id})
	} else {
		for _, r := range o.replicas {
			s.freeLocked(r)
		}
	}
	o.replicas = nil
}

// forgetObjectLocked removes o from the indexes without touching replicas.
func (s *Service) forgetObjectLocked(o *object) {
	if cur, ok := s.mu.objects[o.id]; ok && cur == o {
		delete(s.mu.objects, o.id)
		s.refundLocked(o)
	}
	if cur, ok := s.mu.processing[o.id]; ok && cur == o {
		delete(s.mu.processing, o.id)
	}
	s.leaveGroupLocked(o)
	s.mu.lru.remove(o)
}

func (s *Service) freeLocked(r *replica) {
	if r.seg.unmounted {
		return // the space left with the segment
	}
	if _, ok := r.seg.replicas[r]; !ok {
		return
	}
	delete(r.seg.replicas, r)
	r.seg.alloc.release(r.off, r.size)
	s.mu.used -= alignedLen(r.size)
}

// ---------------------------------------------------------------------------
// Maintenance

// Tick runs the periodic work at the clock's current time: it expires
// clients whose last Ping is older than ClientTTL (unmounting their
// segments), releases the space of discarded and abandoned puts, and evicts
// when usage is above the high watermark. Server calls it every
// MaintenanceInterval; tests call it after moving a fake clock.
func (s *Service) Tick() {
	now := s.clock.Now()
	defer s.flushLog()
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.checkLocked()

	var expired []*clientState
	for _, c := range s.mu.clients {
		if now.After(c.expiry) {
			expired = append(expired, c)
		}
	}
	slices.SortFunc(expired, func(a, b *clientState) int { return cmp.Compare(a.id, b.id) })
	for _, c := range expired {
		s.log.Warn("client expired", "client", c.id, "segments", len(c.segments), "grants", len(c.grants))
		// Its grants are taken back (fenced: it may be alive behind a
		// partition, though its lease ran out long ago).
		for _, g := range sortedGrantsByID(c.grants) {
			s.takeBackGrantLocked(g, now)
		}
		segs := make([]*segment, 0, len(c.segments))
		for _, seg := range c.segments {
			segs = append(segs, seg)
		}
		slices.SortFunc(segs, func(a, b *segment) int { return cmp.Compare(a.info.ID, b.info.ID) })
		for _, seg := range segs {
			s.unmountLocked(seg, now)
		}
		s.failClientTasksLocked(c, now)
		if c.disk != nil {
			s.unmountDiskLocked(c.disk)
		}
		s.dropExpiredPutsLocked(c, now)
		delete(s.mu.clients, c.id)
		s.mu.counters.expiredClients++
	}
	s.releaseFencesLocked(now)
	s.expireRestoredLocked(now)
	s.expireTasksLocked(now)
	s.scheduleOffloadsLocked(now)
	s.runDrainJobsLocked(now)

	// Release discarded replicas whose time has come.
	kept := s.mu.discarded[:0]
	for _, d := range s.mu.discarded {
		if d.release.After(now) {
			kept = append(kept, d)
			continue
		}
		for _, r := range d.replicas {
			s.freeLocked(r)
		}
	}
	clear(s.mu.discarded[len(kept):])
	s.mu.discarded = kept

	// Abandoned puts: past PutStartReleaseTimeout their space is reclaimed.
	var abandoned []*object
	for _, o := range s.mu.processing {
		if now.Sub(o.putStart) > s.cfg.PutStartReleaseTimeout {
			abandoned = append(abandoned, o)
		}
	}
	for _, o := range abandoned {
		s.log.Info("abandoned put released", "key", o.id.key, "tenant", o.id.tenant, "client", o.writer)
		s.dropObjectLocked(o, now, now)
		s.mu.counters.zombiePuts++
	}

	if s.mu.capacity > 0 {
		// Space put grants hold but no commit took, and the fences of
		// taken-back grants, are no pressure to evict objects for: they come
		// back when clients return idle grants (which they are asked to do
		// meanwhile) and when the fences expire.
		idle := s.mu.granted
		for _, f := range s.mu.fences {
			if f.seg != nil {
				idle += f.n
			}
		}
		held := float64(s.mu.used) / float64(s.mu.capacity)
		ratio := float64(s.mu.used-min(idle, s.mu.used)) / float64(s.mu.capacity)
		if held > s.cfg.EvictionHighWatermarkRatio && idle > 0 {
			s.mu.pressureUntil = now.Add(s.cfg.GrantLease)
		}
		if ratio > s.cfg.EvictionHighWatermarkRatio {
			frac := max(s.cfg.EvictionRatio, ratio-s.cfg.EvictionHighWatermarkRatio+s.cfg.EvictionRatio)
			s.evictLocked(uint64(frac*float64(s.mu.capacity)), now)
		}
	}
}

// dropExpiredPutsLocked preempts the unfinished puts of an expired client
// whose replicas lie on other clients' segments (those on its own went
// with them): it can never end them, so their keys are free for a new put
// at once rather than after PutStartDiscardTimeout (a client SIGKILLed
// mid-put, tests/interop/store-mooncake-faults.sh). It may still be alive
// behind a partition and writing, so their space waits
// PutStartReleaseTimeout, as a preempted zombie put's does; its PutEnd
// then finds no put of its own.
func (s *Service) dropExpiredPutsLocked(c *clientState, now time.Time) {
	var puts []*object
	for _, o := range s.mu.processing {
		if o.writer == c.id {
			puts = append(puts, o)
		}
	}
	slices.SortFunc(puts, func(a, b *object) int {
		return cmp.Or(cmp.Compare(a.id.tenant, b.id.tenant), cmp.Compare(a.id.key, b.id.key))
	})
	for _, o := range puts {
		s.log.Info("put of an expired client dropped", "key", o.id.key, "tenant", o.id.tenant, "client", c.id,
			"age", now.Sub(o.putStart))
		s.mu.counters.zombiePuts++
		s.dropObjectLocked(o, o.putStart.Add(s.cfg.PutStartReleaseTimeout), now)
	}
}

// evictLocked frees at least target bytes by removing complete objects in
// least-recently-used order, if it can. It never evicts a leased, hard-pinned
// or unfinished object; soft-pinned objects go only in a second pass, and
// never with KeepSoftPinned. Returns the bytes freed.
func (s *Service) evictLocked(target uint64, now time.Time) uint64 {
	if target == 0 {
		return 0
	}
	s.mu.counters.evictionRounds++
	s.mu.skippedForFiles = false
	var freed uint64
	n := 0
	// Pass 0: objects with a disk replica lose only their memory (they
	// stay readable from disk; tier.go); passes 1 and 2: the others, the
	// soft-pinned ones last.
	for pass := range 3 {
		if pass == 2 && s.cfg.KeepSoftPinned {
			break
		}
		for o := s.mu.lru.head; o != nil && freed < target; {
			next := o.next
			softPinned := o.softPinExpiry.After(now)
			if o.hardPin || o.leaseEnd().After(now) || o.busyUntil.After(now) ||
				(pass == 0) != (len(o.disk) > 0) || pass > 0 && softPinned != (pass == 2) {
				if pass > 0 && o.offloading {
					s.mu.skippedForFiles = true // its file is being written
				}
				o = next
				continue
			}
			if pass > 0 && o.group == nil && s.awaitingFileLocked(o, now) {
				// Its disk file is being (or about to be) written: it must
				// not go before it is durable (tier.go).
				s.mu.counters.evictSkippedForFiles++
				s.mu.skippedForFiles = true
				o = next
				continue
			}
			if g := o.group; g != nil && (pass > 0 || groupLeasedLocked(g, now)) {
				// A group's objects go as a whole, or not at all while a
				// member is leased (pass 0 only drops the memory of
				// objects a disk replica keeps readable, one at a time).
				// next must not be one of the victims (they leave the
				// list), all of which are members.
				for next != nil && next.group == g {
					next = next.next
				}
				if pass > 0 && !groupLeasedLocked(g, now) && s.groupAwaitingFilesLocked(g, now) {
					s.mu.counters.evictSkippedForFiles++
					s.mu.skippedForFiles = true
				} else if pass > 0 && !groupLeasedLocked(g, now) {
					for _, m := range evictableMembers(g, now, pass == 2) {
						freed += alignedLen(m.size) * uint64(len(m.replicas))
						n++
						s.dropObjectLocked(m, now, now)
					}
				}
				o = next
				continue
			}
			if pass == 0 {
				freed += s.dropMemoryLocked(o, now)
			} else {
				freed += alignedLen(o.size) * uint64(len(o.replicas))
				s.dropObjectLocked(o, now, now)
			}
			n++
			o = next
		}
		if freed >= target {
			break
		}
	}
	s.mu.pressureUntil = now.Add(s.cfg.GrantLease)
	if n > 0 {
		s.mu.counters.evictedObjects += uint64(n)
		s.mu.counters.evictedBytes += freed
		s.log.Info("evicted", "objects", n, "bytes", freed, "target", target)
	}
	return freed
}

// ---------------------------------------------------------------------------
// LRU list of complete objects (head = least recently used).

type lruList struct {
	head, tail *object
	clock      uint64
}

func (l *lruList) touch(o *object) {
	l.clock++
	o.lastAccess = l.clock
	if o.inLRU {
		if l.tail == o {
			return
		}
		l.remove(o)
	}
	o.inLRU = true
	o.prev, o.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = o
	} else {
		l.head = o
	}
	l.tail = o
}

func (l *lruList) remove(o *object) {
	if !o.inLRU {
		return
	}
	if o.prev != nil {
		o.prev.next = o.next
	} else {
		l.head = o.next
	}
	if o.next != nil {
		o.next.prev = o.prev
	} else {
		l.tail = o.prev
	}
	o.prev, o.next, o.inLRU = nil, nil, false
}
