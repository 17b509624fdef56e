// Package etcd is a metadata.KV on etcd (specs/mooncake.md §3.5), used by
// the engine when the metadata connection string is "etcd://h:p[,h:p]" or
// a bare "h:p".
//
// Unlike Mooncake, which writes plain keys, every key a KV writes lives
// under one lease that the KV keeps alive, so the entries of an engine that
// dies vanish after the lease TTL. When the lease is lost (etcd restarted
// from empty state, or unreachable for longer than the TTL) the KV grants a
// new one and writes its keys again. Readers see ordinary keys and values,
// so Mooncake peers on the same etcd read kvferry entries and vice versa.
//
// A KV owns its etcd client and its lease goroutine; Close stops the
// goroutine, revokes the lease (removing the keys at once) and closes the
// client.
package etcd

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvferry/kvferry/engine/metadata"
	"github.com/kvferry/kvferry/engine/metadata/connstr"
	"github.com/kvferry/kvferry/internal/etcddial"
)

// Scheme is the connection-string scheme of etcd.
const Scheme = connstr.EtcdScheme

// Defaults of Config.
const (
	DefaultDialTimeout = 5 * time.Second
	DefaultOpTimeout   = 5 * time.Second
	DefaultLeaseTTL    = 10 * time.Second
)

// Retry pacing of the lease loop.
const (
	retryMin = 100 * time.Millisecond
	retryMax = 2 * time.Second
)

// Config configures a KV. Endpoints is required; the zero value of every
// other field works.
type Config struct {
	// Endpoints lists "host:port" (or "http[s]://host:port") etcd client
	// endpoints.
	Endpoints []string
	// DialTimeout bounds New: the first lease grant must succeed within it,
	// so an unreachable etcd fails New. Zero means DefaultDialTimeout.
	DialTimeout time.Duration
	// OpTimeout bounds a call whose context has no deadline, and each call
	// of the lease loop. Zero means DefaultOpTimeout.
	OpTimeout time.Duration
	// LeaseTTL is the lease's time to live, rounded up to whole seconds
	// (etcd may raise it to its minimum, about 2 s): a dead engine's keys
	// vanish this long after its last keep-alive. Zero means
	// DefaultLeaseTTL.
	LeaseTTL time.Duration
	// Username and Password authenticate, when set.
	Username, Password string
	// TLS configures the client connection; nil means plain TCP.
	TLS *tls.Config
	// Logger receives lease state changes; the etcd client's own logs go
	// to it at Debug (errors at Warn). Nil discards them.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.OpTimeout == 0 {
		c.OpTimeout = DefaultOpTimeout
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate names the first bad field.
func (c Config) Validate() error {
	if len(c.Endpoints) == 0 {
		return errors.New("etcd config: no endpoints")
	}
	for _, ep := range c.Endpoints {
		if err := connstr.CheckEtcdEndpoint(ep); err != nil {
			return fmt.Errorf("etcd config: %w", err)
		}
	}
	switch {
	case c.DialTimeout < 0:
		return fmt.Errorf("etcd config: DialTimeout %v is negative", c.DialTimeout)
	case c.OpTimeout < 0:
		return fmt.Errorf("etcd config: OpTimeout %v is negative", c.OpTimeout)
	case c.LeaseTTL < 0:
		return fmt.Errorf("etcd config: LeaseTTL %v is negative", c.LeaseTTL)
	}
	return nil
}

// ParseEndpoints parses Mooncake's etcd connection string:
// "etcd://h:p[,h:p…]" or the bare list "h:p[,h:p…]" (';' also separates)
// (connstr.ParseEtcdEndpoints).
func ParseEndpoints(conn string) ([]string, error) { return connstr.ParseEtcdEndpoints(conn) }

// Metrics is a snapshot of a KV's counters.
type Metrics struct {
	// Lease is the current lease id.
	Lease int64
	// LeaseGrants counts leases granted, the first included.
	LeaseGrants uint64
	// LeaseLosses counts leases found lost.
	LeaseLosses uint64
	// RePuts counts keys written again under a new lease.
	RePuts uint64
}

// KV is a metadata.KV on etcd whose keys live under a lease kept alive.
type KV struct {
	cfg    Config
	cli    *clientv3.Client
	log    *slog.Logger
	ctx    context.Context // root lifecycle context, cancelled in Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
	// lost carries a lease id that a Put found missing (capacity 1).
	lost chan clientv3.LeaseID
	// redo asks the lease loop to write the owned keys again and retry
	// failed deletes, after a caller's Put or Delete failed (capacity 1).
	redo chan struct{}

	mu struct {
		sync.Mutex
		// lease is the lease new keys are attached to.
		lease clientv3.LeaseID
		// owned holds every key this KV wrote and has not deleted, with
		// its value, for writing again under a new lease.
		owned map[string][]byte
		// unDeleted holds keys whose Delete failed; the lease loop
		// deletes them.
		unDeleted map[string]struct{}
	}

	grants atomic.Uint64
	losses atomic.Uint64
	reputs atomic.Uint64
}

var _ metadata.KV = (*KV)(nil)

// New connects to etcd and grants the lease. It fails with an error
// matching metadata.ErrUnavailable when etcd does not answer within
// DialTimeout (or ctx).
func New(ctx context.Context, cfg Config) (*KV, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:            cfg.Endpoints,
		DialTimeout:          cfg.DialTimeout,
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 3 * time.Second,
		PermitWithoutStream:  true,
		Username:             cfg.Username,
		Password:             cfg.Password,
		TLS:                  cfg.TLS,
		Logger:               zap.New(newSlogCore(cfg.Logger)),
		// Reconnect within about two seconds of etcd coming back, however
		// long it was away (gRPC's default backoff grows to two minutes).
		DialOptions: etcddial.Options(cfg.DialTimeout),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd %v: %w: %w", cfg.Endpoints, metadata.ErrUnavailable, err)
	}
	gctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	lease, err := grant(gctx, cli, cfg.LeaseTTL)
	if err != nil {
		_ = cli.Close()
		what := fmt.Sprintf("etcd %v: grant lease", cfg.Endpoints)
		if errors.Is(gctx.Err(), context.DeadlineExceeded) {
			what = fmt.Sprintf("etcd %v: no answer within %v", cfg.Endpoints, cfg.DialTimeout)
		}
		return nil, classify(what, gctx, err)
	}
	rctx, rcancel := context.WithCancel(context.Background())
	k := &KV{cfg: cfg, cli: cli, log: cfg.Logger, ctx: rctx, cancel: rcancel, lost: make(chan clientv3.LeaseID, 1), redo: make(chan struct{}, 1)}
	k.mu.lease = lease
	k.mu.owned = make(map[string][]byte)
	k.mu.unDeleted = make(map[string]struct{})
	k.grants.Add(1)
	k.log.Debug("etcd lease granted", "lease", int64(lease), "ttl", cfg.LeaseTTL)
	k.wg.Add(1)
	go k.runLease(lease)
	return k, nil
}

func grant(ctx context.Context, cli *clientv3.Client, ttl time.Duration) (clientv3.LeaseID, error) {
	secs := int64((ttl + time.Second - 1) / time.Second)
	resp, err := cli.Grant(ctx, secs)
	if err != nil {
		return 0, err
	}
	return resp.ID, nil
}

// Endpoints returns the configured endpoints.
func (k *KV) Endpoints() []string { return append([]string(nil), k.cfg.Endpoints...) }

// Metrics returns a snapshot of the counters.
func (k *KV) Metrics() Metrics {
	k.mu.Lock()
	lease := k.mu.lease
	k.mu.Unlock()
	return Metrics{Lease: int64(lease), LeaseGrants: k.grants.Load(), LeaseLosses: k.losses.Load(), RePuts: k.reputs.Load()}
}

// Get returns the value of key, or an error matching metadata.ErrNotFound.
func (k *KV) Get(ctx context.Context, key string) ([]byte, error) {
	if err := k.checkOpen(); err != nil {
		return nil, err
	}
	ctx, cancel := k.opContext(ctx)
	defer cancel()
	resp, err := k.cli.Get(ctx, key)
	if err != nil {
		return nil, classify(fmt.Sprintf("etcd get %q", key), ctx, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("etcd get %q: %w", key, metadata.ErrNotFound)
	}
	return resp.Kvs[0].Value, nil
}

// Put stores value under key, attached to the KV's lease; the key is
// remembered and written again whenever the lease is replaced.
func (k *KV) Put(ctx context.Context, key string, value []byte) error {
	if err := k.checkOpen(); err != nil {
		return err
	}
	value = bytes.Clone(value)
	k.mu.Lock()
	k.mu.owned[key] = value
	delete(k.mu.unDeleted, key)
	k.mu.Unlock()
	ctx, cancel := k.opContext(ctx)
	defer cancel()
	for {
		k.mu.Lock()
		lease := k.mu.lease
		k.mu.Unlock()
		if _, err := k.cli.Put(ctx, key, string(value), clientv3.WithLease(lease)); err != nil {
			if isLeaseNotFound(err) {
				select {
				case k.lost <- lease:
				default:
				}
			}
			k.askRedo()
			return classify(fmt.Sprintf("etcd put %q", key), ctx, err)
		}
		// A lease replaced while the Put was in flight may have missed
		// this value; write it again under the new lease.
		k.mu.Lock()
		same := k.mu.lease == lease
		k.mu.Unlock()
		if same {
			return nil
		}
	}
}

// Delete removes key; a missing key is not an error.
func (k *KV) Delete(ctx context.Context, key string) error {
	if err := k.checkOpen(); err != nil {
		return err
	}
	k.mu.Lock()
	delete(k.mu.owned, key)
	k.mu.Unlock()
	ctx, cancel := k.opContext(ctx)
	defer cancel()
	if _, err := k.cli.Delete(ctx, key); err != nil {
		k.mu.Lock()
		if _, owned := k.mu.owned[key]; !owned {
			k.mu.unDeleted[key] = struct{}{}
		}
		k.mu.Unlock()
		k.askRedo()
		return classify(fmt.Sprintf("etcd delete %q", key), ctx, err)
	}
	return nil
}

// Close stops the lease loop, revokes the lease (the KV's keys vanish at
// once; bounded by OpTimeout) and closes the client. A second Close is
// harmless.
func (k *KV) Close() error {
	var err error
	k.once.Do(func() {
		k.cancel()
		k.wg.Wait()
		k.mu.Lock()
		lease := k.mu.lease
		k.mu.owned = map[string][]byte{}
		k.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), k.cfg.OpTimeout)
		if _, e := k.cli.Revoke(ctx, lease); e != nil && !isLeaseNotFound(e) {
			k.log.Debug("etcd revoke lease failed", "lease", int64(lease), "err", e)
		}
		cancel()
		if e := k.cli.Close(); e != nil && !errors.Is(e, context.Canceled) {
			err = fmt.Errorf("close etcd client: %w", e)
		}
	})
	return err
}

func (k *KV) askRedo() {
	select {
	case k.redo <- struct{}{}:
	default:
	}
}

func (k *KV) checkOpen() error {
	if k.ctx.Err() != nil {
		return metadata.ErrClosed
	}
	return nil
}

func (k *KV) opContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, k.cfg.OpTimeout)
}

// runLease keeps the lease alive; when it is lost it grants a new one and
// writes every owned key again. It is owned by the KV and stops when Close
// cancels k.ctx.
func (k *KV) runLease(lease clientv3.LeaseID) {
	defer k.wg.Done()
	dirty := false             // owned keys not yet all written under lease
	var stale clientv3.LeaseID // replaced lease, revoked once the keys moved
	for {
		k.watchLease(lease, dirty, stale)
		if k.ctx.Err() != nil {
			return
		}
		k.losses.Add(1)
		k.log.Warn("etcd lease keep-alive lost", "lease", int64(lease))
		next, ok := k.renew(lease)
		if !ok {
			return
		}
		// Write the keys again either way: Puts may have failed during
		// the outage, and a new lease holds none of them.
		dirty = true
		if next == lease {
			k.log.Info("etcd lease still alive", "lease", int64(lease))
			continue
		}
		stale, lease = lease, next
		k.mu.Lock()
		k.mu.lease = lease
		k.mu.Unlock()
		k.grants.Add(1)
		k.log.Info("etcd lease granted", "lease", int64(lease), "previous", int64(stale))
	}
}

// watchLease returns when lease is lost or k.ctx is done. While dirty it
// writes the owned keys under lease, retrying with backoff; once that
// succeeds it revokes stale (a replaced lease that may still exist, when
// etcd was unreachable but kept its state), which is safe only after the
// keys moved to lease.
func (k *KV) watchLease(lease clientv3.LeaseID, dirty bool, stale clientv3.LeaseID) {
	kctx, kcancel := context.WithCancel(k.ctx)
	defer kcancel()
	ch, err := k.cli.KeepAlive(kctx, lease)
	if err != nil {
		k.log.Debug("etcd keepalive failed to start", "lease", int64(lease), "err", err)
		return
	}
	backoff := retryMin
	retry := time.NewTimer(0)
	defer retry.Stop()
	if !dirty {
		retry.Stop()
	}
	for {
		select {
		case <-k.ctx.Done():
			return
		case _, ok := <-ch:
			if !ok {
				return
			}
		case id := <-k.lost:
			if id == lease {
				return
			}
		case <-k.redo:
			retry.Reset(backoff)
		case <-retry.C:
			if k.rePutAll(lease) {
				backoff = retryMin
				if stale != 0 {
					ctx, cancel := context.WithTimeout(k.ctx, k.cfg.OpTimeout)
					_, _ = k.cli.Revoke(ctx, stale)
					cancel()
					stale = 0
				}
				continue
			}
			retry.Reset(backoff)
			backoff = min(2*backoff, retryMax)
		}
	}
}

// renew returns lease when etcd still knows it (it was unreachable for a
// while but kept its state), else a newly granted lease. It retries with
// backoff until one of them succeeds or k.ctx is done.
func (k *KV) renew(lease clientv3.LeaseID) (clientv3.LeaseID, bool) {
	backoff := retryMin
	for {
		ctx, cancel := context.WithTimeout(k.ctx, k.cfg.OpTimeout)
		resp, err := k.cli.KeepAliveOnce(ctx, lease)
		if err == nil && resp.TTL > 0 {
			cancel()
			return lease, true
		}
		if err == nil || isLeaseNotFound(err) {
			next, gerr := grant(ctx, k.cli, k.cfg.LeaseTTL)
			cancel()
			if gerr == nil {
				return next, true
			}
			err = gerr
		} else {
			cancel()
		}
		k.log.Debug("etcd lease renewal failed", "lease", int64(lease), "err", err)
		select {
		case <-k.ctx.Done():
			return 0, false
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, retryMax)
	}
}

// rePutAll writes every owned key under lease and deletes the keys whose
// Delete failed; it reports success. A key deleted or changed meanwhile is
// deleted or written again, so the store ends with the owner's latest
// state.
func (k *KV) rePutAll(lease clientv3.LeaseID) bool {
	k.mu.Lock()
	keys := make([]string, 0, len(k.mu.owned)+len(k.mu.unDeleted))
	for key := range k.mu.owned {
		keys = append(keys, key)
	}
	for key := range k.mu.unDeleted {
		keys = append(keys, key)
	}
	k.mu.Unlock()
	for _, key := range keys {
		for {
			k.mu.Lock()
			value, ok := k.mu.owned[key]
			k.mu.Unlock()
			ctx, cancel := context.WithTimeout(k.ctx, k.cfg.OpTimeout)
			var err error
			if ok {
				_, err = k.cli.Put(ctx, key, string(value), clientv3.WithLease(lease))
			} else {
				_, err = k.cli.Delete(ctx, key)
			}
			cancel()
			if err != nil {
				k.log.Debug("etcd re-put failed", "key", key, "err", err)
				return false
			}
			k.mu.Lock()
			cur, still := k.mu.owned[key]
			k.mu.Unlock()
			if still == ok && bytes.Equal(cur, value) {
				if !ok {
					k.mu.Lock()
					delete(k.mu.unDeleted, key)
					k.mu.Unlock()
				}
				break
			}
		}
		k.reputs.Add(1)
	}
	k.log.Info("etcd keys written again", "lease", int64(lease), "keys", len(keys))
	return true
}

func isLeaseNotFound(err error) bool {
	var ce interface{ Code() codes.Code }
	if errors.As(err, &ce) && ce.Code() == codes.NotFound {
		return true
	}
	return status.Code(err) == codes.NotFound
}

// classify wraps err with what failed; a caller's cancellation stays a
// context error, a refusal that retrying cannot fix stays as it is, and
// anything else (timeouts, no leader, connection failures, lost lease)
// matches metadata.ErrUnavailable.
func classify(what string, ctx context.Context, err error) error {
	if errors.Is(err, context.Canceled) && errors.Is(ctx.Err(), context.Canceled) {
		return fmt.Errorf("%s: %w", what, err)
	}
	code := status.Code(err)
	var ce interface{ Code() codes.Code }
	if errors.As(err, &ce) {
		code = ce.Code()
	}
	switch code {
	case codes.InvalidArgument, codes.PermissionDenied, codes.Unauthenticated, codes.FailedPrecondition, codes.OutOfRange:
		return fmt.Errorf("%s: %w", what, err)
	}
	return fmt.Errorf("%s: %w: %w", what, metadata.ErrUnavailable, err)
}
