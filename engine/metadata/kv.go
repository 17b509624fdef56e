package metadata

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvferry/kvferry/engine/descriptor"
	"github.com/kvferry/kvferry/engine/metadata/connstr"
)

// ErrConflict means the metadata service refused a write because another
// engine holds the key: Mooncake's master HTTP store answers 400 to a PUT of
// an rpc_meta key whose stored body differs (specs/mooncake.md §3.4, §9.7).
var ErrConflict = errors.New("metadata key held by another engine")

// Key layout (specs/mooncake.md §3.2).
const (
	// KeyRoot is the first component of every key.
	KeyRoot = "mooncake/"
	// SegmentDir holds segment descriptors of names without '/'.
	SegmentDir = "ram/"
	// RPCMetaDir holds rpc_meta records.
	RPCMetaDir = "rpc_meta/"
)

// KeyPrefix returns "mooncake/" or "mooncake/<clusterID>/" (a trailing '/'
// on clusterID is not doubled), as Mooncake builds it from
// MC_METADATA_CLUSTER_ID.
func KeyPrefix(clusterID string) string {
	if clusterID == "" {
		return KeyRoot
	}
	if !strings.HasSuffix(clusterID, "/") {
		clusterID += "/"
	}
	return KeyRoot + clusterID
}

// SegmentKey returns the key of a segment's descriptor:
// "<prefix>ram/<name>", or "<prefix><name>" when name contains '/'.
func SegmentKey(clusterID, name string) string {
	if strings.Contains(name, "/") {
		return KeyPrefix(clusterID) + name
	}
	return KeyPrefix(clusterID) + SegmentDir + name
}

// RPCMetaKey returns the key of a segment's rpc_meta record.
func RPCMetaKey(clusterID, name string) string {
	return KeyPrefix(clusterID) + RPCMetaDir + name
}

// Defaults of KVConfig.
const (
	DefaultRepublishInterval = 10 * time.Second
	DefaultRetryInterval     = 500 * time.Millisecond
	DefaultOpTimeout         = 5 * time.Second
)

// KVConfig configures a KVBackend. The zero value works.
type KVConfig struct {
	// ClusterID isolates tenants sharing one metadata service: keys become
	// "mooncake/<ClusterID>/…". Empty (the default) means "mooncake/…".
	// Env: MC_METADATA_CLUSTER_ID.
	ClusterID string
	// RepublishInterval is how often every published entry is written
	// again, so that a metadata service that lost its state (restart
	// without snapshot, expired TTL) gets it back. Zero means
	// DefaultRepublishInterval.
	RepublishInterval time.Duration
	// RetryInterval is the first delay before a failed re-publish is
	// retried; it doubles up to RepublishInterval. Zero means
	// DefaultRetryInterval.
	RetryInterval time.Duration
	// OpTimeout bounds each KV call the backend makes on its own
	// (re-publish, cleanup at Close) and each caller's call whose context
	// has no deadline. Zero means DefaultOpTimeout.
	OpTimeout time.Duration
	// Logger receives state changes (service lost, service back, conflict).
	// Nil discards them.
	Logger *slog.Logger
}

func (c KVConfig) withDefaults() KVConfig {
	if c.RepublishInterval == 0 {
		c.RepublishInterval = DefaultRepublishInterval
	}
	if c.RetryInterval == 0 {
		c.RetryInterval = DefaultRetryInterval
	}
	if c.RetryInterval > c.RepublishInterval {
		c.RetryInterval = c.RepublishInterval
	}
	if c.OpTimeout == 0 {
		c.OpTimeout = DefaultOpTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate names the first bad field.
func (c KVConfig) Validate() error {
	switch {
	case c.RepublishInterval < 0:
		return fmt.Errorf("metadata config: RepublishInterval %v is negative", c.RepublishInterval)
	case c.RetryInterval < 0:
		return fmt.Errorf("metadata config: RetryInterval %v is negative", c.RetryInterval)
	case c.OpTimeout < 0:
		return fmt.Errorf("metadata config: OpTimeout %v is negative", c.OpTimeout)
	case strings.ContainsFunc(c.ClusterID, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return fmt.Errorf("metadata config: ClusterID %q contains control characters", c.ClusterID)
	case strings.HasPrefix(c.ClusterID, "/") || strings.Contains(c.ClusterID, "//"):
		return fmt.Errorf("metadata config: ClusterID %q has an empty path component", c.ClusterID)
	}
	return nil
}

// String returns the effective configuration, for the start-up log.
func (c KVConfig) String() string {
	c = c.withDefaults()
	return fmt.Sprintf("prefix=%s republish=%v retry=%v op_timeout=%v",
		KeyPrefix(c.ClusterID), c.RepublishInterval, c.RetryInterval, c.OpTimeout)
}

// KVMetrics is a snapshot of a KVBackend's counters.
type KVMetrics struct {
	// Publishes counts Publish calls that stored their entry.
	Publishes uint64
	// Republishes counts entries written again by the background loop.
	Republishes uint64
	// WriteFailures counts failed KV writes (caller's and background).
	WriteFailures uint64
	// Fetches counts Fetch and Endpoint calls that returned a result.
	Fetches uint64
	// Reconnects counts transitions from unreachable to reachable.
	Reconnects uint64
	// Unreachable reports whether the last KV call found the service down.
	Unreachable bool
}

// KVBackend is the Backend over a KV store with Mooncake's key layout
// (specs/mooncake.md §3.2). It remembers what it published and a
// background loop writes it again every RepublishInterval, and at once
// after the store comes back from an outage, so that a restarted metadata
// service regains the entries without an engine restart.
//
// KV implementations wrap errors of an unreachable service in
// ErrUnavailable and of a missing key in ErrNotFound; the backend uses the
// former to notice outages and reconnections.
type KVBackend struct {
	kv     KV
	cfg    KVConfig
	log    *slog.Logger
	ctx    context.Context // root lifecycle context, cancelled in Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once

	// writeSem serializes writes to kv, so that the last write of a key
	// always carries its newest value. It is held across one Publish's or
	// one entry's KV calls (each bounded by a deadline) and acquired with a
	// context, so no caller waits on it past its deadline.
	writeSem chan struct{}
	// kick asks runRepublish for an immediate pass (capacity 1).
	kick chan struct{}

	mu struct {
		sync.Mutex
		// entries holds what this backend published, by segment name.
		entries map[string]*kvEntry
		// closed is set by Close.
		closed bool
	}

	down        atomic.Bool
	conflicted  atomic.Bool
	publishes   atomic.Uint64
	republishes atomic.Uint64
	writeFails  atomic.Uint64
	fetches     atomic.Uint64
	reconnects  atomic.Uint64
}

// kvEntry is one published segment: its encoded descriptor and rpc_meta.
type kvEntry struct {
	seg, rpc []byte
	// rpcStored is set once rpc has been written, and cleared when it
	// changes, so that Publish writes rpc_meta only when needed.
	rpcStored bool
}

var _ Backend = (*KVBackend)(nil)

// NewKVBackend returns a backend over kv; it owns kv and closes it in Close.
func NewKVBackend(kv KV, cfg KVConfig) (*KVBackend, error) {
	if kv == nil {
		return nil, errors.New("new metadata backend: nil KV")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	b := &KVBackend{
		kv:       kv,
		cfg:      cfg,
		log:      cfg.Logger,
		ctx:      ctx,
		cancel:   cancel,
		writeSem: make(chan struct{}, 1),
		kick:     make(chan struct{}, 1),
	}
	b.mu.entries = make(map[string]*kvEntry)
	b.wg.Add(1)
	go b.runRepublish()
	return b, nil
}

// Config returns the effective configuration.
func (b *KVBackend) Config() KVConfig { return b.cfg }

// P2P reports false.
func (b *KVBackend) P2P() bool { return false }

// Metrics returns a snapshot of the counters.
func (b *KVBackend) Metrics() KVMetrics {
	return KVMetrics{
		Publishes:     b.publishes.Load(),
		Republishes:   b.republishes.Load(),
		WriteFailures: b.writeFails.Load(),
		Fetches:       b.fetches.Load(),
		Reconnects:    b.reconnects.Load(),
		Unreachable:   b.down.Load(),
	}
}

// Publish stores seg under SegmentKey and rpc under RPCMetaKey (rpc_meta
// first, so that a peer that finds the descriptor also finds the
// endpoint). rpc_meta is written only when it changed or was never stored.
//
// Publish is all or nothing for the caller: when the write fails, the
// entry goes back to what was published before (or is forgotten if there
// was nothing), so a caller that undoes its own change on error (the
// engine un-registers the memory) stays consistent with what the
// re-publish loop keeps writing.
func (b *KVBackend) Publish(ctx context.Context, seg *descriptor.Segment, rpc descriptor.RPCMeta) error {
	if seg == nil || seg.Name == "" {
		return errors.New("publish segment: empty segment name")
	}
	if rpc.IPOrHostName == "" || rpc.RPCPort <= 0 || rpc.RPCPort > 65535 {
		return fmt.Errorf("publish segment %q: bad rpc endpoint %q:%d", seg.Name, rpc.IPOrHostName, rpc.RPCPort)
	}
	segJSON, err := descriptor.Marshal(seg)
	if err != nil {
		return fmt.Errorf("publish segment %q: %w", seg.Name, err)
	}
	rpcJSON, err := descriptor.MarshalRPCMeta(rpc)
	if err != nil {
		return fmt.Errorf("publish segment %q: %w", seg.Name, err)
	}
	b.mu.Lock()
	if b.mu.closed {
		b.mu.Unlock()
		return ErrClosed
	}
	e := b.mu.entries[seg.Name]
	var prev *kvEntry
	if e == nil {
		e = &kvEntry{}
		b.mu.entries[seg.Name] = e
	} else {
		p := *e
		prev = &p
	}
	if !bytes.Equal(e.rpc, rpcJSON) {
		e.rpc, e.rpcStored = rpcJSON, false
	}
	e.seg = segJSON
	b.mu.Unlock()

	ctx, cancel := b.opContext(ctx)
	defer cancel()
	if err := b.store(ctx, seg.Name, false); err != nil {
		b.mu.Lock()
		if cur := b.mu.entries[seg.Name]; cur == e && bytes.Equal(e.seg, segJSON) && bytes.Equal(e.rpc, rpcJSON) {
			if prev == nil {
				delete(b.mu.entries, seg.Name)
			} else {
				*e = *prev
				e.rpcStored = false
			}
		}
		b.mu.Unlock()
		return fmt.Errorf("publish segment %q: %w", seg.Name, err)
	}
	b.publishes.Add(1)
	return nil
}

// store writes the current value of the entry name (if it still exists).
// With force, rpc_meta is written even when already stored.
func (b *KVBackend) store(ctx context.Context, name string, force bool) error {
	select {
	case b.writeSem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("wait for metadata writer: %w", ctx.Err())
	}
	defer func() { <-b.writeSem }()

	b.mu.Lock()
	e := b.mu.entries[name]
	if e == nil { // unpublished meanwhile
		b.mu.Unlock()
		return nil
	}
	seg, rpc, writeRPC := e.seg, e.rpc, force || !e.rpcStored
	b.mu.Unlock()

	if writeRPC {
		if err := b.put(ctx, RPCMetaKey(b.cfg.ClusterID, name), rpc); err != nil {
			return err
		}
		b.mu.Lock()
		if cur := b.mu.entries[name]; cur != nil && bytes.Equal(cur.rpc, rpc) {
			cur.rpcStored = true
		}
		b.mu.Unlock()
	}
	return b.put(ctx, SegmentKey(b.cfg.ClusterID, name), seg)
}

func (b *KVBackend) put(ctx context.Context, key string, value []byte) error {
	err := b.kv.Put(ctx, key, value)
	b.noteResult(err)
	if err != nil {
		b.writeFails.Add(1)
		select { // let runRepublish retry soon, with backoff
		case b.kick <- struct{}{}:
		default:
		}
		if errors.Is(err, ErrConflict) {
			if !b.conflicted.Swap(true) {
				b.log.Error("metadata key held by another engine", "key", key, "err", err)
			}
			return fmt.Errorf("put %q: %w (another engine uses this segment name): %w", key, ErrConflict, err)
		}
		return fmt.Errorf("put %q: %w", key, err)
	}
	b.conflicted.Store(false)
	return nil
}

// Unpublish forgets the entry name and deletes both of its keys. A key
// that is already gone is not an error.
func (b *KVBackend) Unpublish(ctx context.Context, name string) error {
	b.mu.Lock()
	if b.mu.closed {
		b.mu.Unlock()
		return ErrClosed
	}
	delete(b.mu.entries, name)
	b.mu.Unlock()
	ctx, cancel := b.opContext(ctx)
	defer cancel()
	if err := b.remove(ctx, name); err != nil {
		return fmt.Errorf("unpublish segment %q: %w", name, err)
	}
	return nil
}

// remove deletes name's keys under writeSem.
func (b *KVBackend) remove(ctx context.Context, name string) error {
	select {
	case b.writeSem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("wait for metadata writer: %w", ctx.Err())
	}
	defer func() { <-b.writeSem }()
	var errs []error
	for _, key := range []string{SegmentKey(b.cfg.ClusterID, name), RPCMetaKey(b.cfg.ClusterID, name)} {
		err := b.kv.Delete(ctx, key)
		b.noteResult(err)
		if err != nil && !errors.Is(err, ErrNotFound) {
			errs = append(errs, fmt.Errorf("delete %q: %w", key, err))
		}
	}
	return errors.Join(errs...)
}

// Fetch reads and decodes a segment's descriptor.
func (b *KVBackend) Fetch(ctx context.Context, name string) (*descriptor.Segment, error) {
	if b.isClosed() {
		return nil, ErrClosed
	}
	if name == "" {
		return nil, errors.New("fetch segment: empty segment name")
	}
	ctx, cancel := b.opContext(ctx)
	defer cancel()
	key := SegmentKey(b.cfg.ClusterID, name)
	data, err := b.kv.Get(ctx, key)
	b.noteResult(err)
	if err != nil {
		return nil, fmt.Errorf("fetch segment %q: get %q: %w", name, key, err)
	}
	seg, err := descriptor.Unmarshal(data)
	if err != nil {
		return nil, fmt.Errorf("fetch segment %q: %w", name, err)
	}
	b.fetches.Add(1)
	return seg, nil
}

// Endpoint reads and decodes a segment's rpc_meta record.
func (b *KVBackend) Endpoint(ctx context.Context, name string) (descriptor.RPCMeta, error) {
	if b.isClosed() {
		return descriptor.RPCMeta{}, ErrClosed
	}
	if name == "" {
		return descriptor.RPCMeta{}, errors.New("segment endpoint: empty segment name")
	}
	ctx, cancel := b.opContext(ctx)
	defer cancel()
	key := RPCMetaKey(b.cfg.ClusterID, name)
	data, err := b.kv.Get(ctx, key)
	b.noteResult(err)
	if err != nil {
		return descriptor.RPCMeta{}, fmt.Errorf("segment %q endpoint: get %q: %w", name, key, err)
	}
	m, err := descriptor.UnmarshalRPCMeta(data)
	if err != nil {
		return descriptor.RPCMeta{}, fmt.Errorf("segment %q endpoint: %w", name, err)
	}
	b.fetches.Add(1)
	return m, nil
}

// Close stops the re-publish loop, deletes the entries still published
// (bounded by OpTimeout in all; skipped when the service is known to be
// unreachable, so Close does not wait on a dead service) and closes the
// KV. A second Close is harmless and returns nil.
func (b *KVBackend) Close() error {
	var err error
	b.once.Do(func() {
		b.mu.Lock()
		b.mu.closed = true
		names := make([]string, 0, len(b.mu.entries))
		for name := range b.mu.entries {
			names = append(names, name)
		}
		b.mu.entries = map[string]*kvEntry{}
		b.mu.Unlock()
		b.cancel()
		b.wg.Wait()

		ctx, cancel := context.WithTimeout(context.Background(), b.cfg.OpTimeout)
		var errs []error
		if b.down.Load() && len(names) > 0 {
			b.log.Warn("metadata service unreachable at close, entries left to expire", "segments", len(names))
			names = nil
		}
		for _, name := range names {
			if e := b.remove(ctx, name); e != nil {
				errs = append(errs, fmt.Errorf("close metadata backend: unpublish %q: %w", name, e))
			}
		}
		cancel()
		if e := b.kv.Close(); e != nil {
			errs = append(errs, fmt.Errorf("close metadata backend: %w", e))
		}
		err = errors.Join(errs...)
	})
	return err
}

func (b *KVBackend) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mu.closed
}

// opContext bounds ctx by OpTimeout when it has no deadline of its own.
func (b *KVBackend) opContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, b.cfg.OpTimeout)
}

// noteResult tracks reachability: an ErrUnavailable marks the service
// down; any answer from the service after that marks it up again and asks
// for an immediate re-publish.
func (b *KVBackend) noteResult(err error) {
	if errors.Is(err, ErrUnavailable) {
		if !b.down.Swap(true) {
			b.log.Warn("metadata service unreachable", "err", err)
		}
		return
	}
	if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrConflict) {
		return // unclassified failure: no news about reachability
	}
	if b.down.Swap(false) {
		b.reconnects.Add(1)
		b.log.Info("metadata service reachable again, re-publishing")
		select {
		case b.kick <- struct{}{}:
		default:
		}
	}
}

// runRepublish writes every entry again each RepublishInterval, and soon
// after a failure (RetryInterval, doubling) or a reconnection. It is owned
// by the KVBackend and stops when Close cancels b.ctx.
func (b *KVBackend) runRepublish() {
	defer b.wg.Done()
	backoff := b.cfg.RetryInterval
	t := time.NewTimer(b.cfg.RepublishInterval)
	defer t.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
		case <-b.kick:
		}
		next := b.cfg.RepublishInterval
		ok := b.republishAll()
		select { // the pass's own failures kicked; the backoff decides
		case <-b.kick:
		default:
		}
		if ok {
			backoff = b.cfg.RetryInterval
		} else {
			next, backoff = backoff, min(2*backoff, b.cfg.RepublishInterval)
		}
		t.Reset(next)
	}
}

// republishAll writes every entry once; it reports whether all succeeded.
func (b *KVBackend) republishAll() bool {
	b.mu.Lock()
	names := make([]string, 0, len(b.mu.entries))
	for name := range b.mu.entries {
		names = append(names, name)
	}
	b.mu.Unlock()
	ok := true
	for _, name := range names {
		ctx, cancel := context.WithTimeout(b.ctx, b.cfg.OpTimeout)
		err := b.store(ctx, name, true)
		cancel()
		if b.ctx.Err() != nil {
			return true
		}
		if err != nil {
			ok = false
			b.log.Debug("metadata re-publish failed", "segment", name, "err", err)
			continue
		}
		b.republishes.Add(1)
	}
	return ok
}

// IsLoopbackOrLinkLocal reports whether host is an IP literal (or
// "localhost") that other machines cannot reach: loopback, link-local or
// unspecified (connstr.IsLoopbackOrLinkLocal).
func IsLoopbackOrLinkLocal(host string) bool { return connstr.IsLoopbackOrLinkLocal(host) }
