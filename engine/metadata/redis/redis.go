package redis

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/kvferry/kvferry/engine/metadata"
	"github.com/kvferry/kvferry/engine/metadata/connstr"
)

// Scheme and TLSScheme are the connection-string schemes of Redis.
const (
	Scheme    = connstr.RedisScheme
	TLSScheme = connstr.RedissScheme
)

// Defaults of Config.
const (
	DefaultDialTimeout = 5 * time.Second
	DefaultOpTimeout   = 5 * time.Second
	DefaultKeyTTL      = 10 * time.Second
	DefaultPoolSize    = 4
)

// MinKeyTTL is the smallest KeyTTL: the refresh loop renews keys every
// third of it.
const MinKeyTTL = time.Second

// Retry pacing of the refresh loop after a failure.
const (
	retryMin = 100 * time.Millisecond
	retryMax = 2 * time.Second
)

// Config configures a KV. Addr is required; the zero value of every other
// field works.
type Config struct {
	// Addr is the server's "host:port".
	Addr string
	// Username and Password authenticate (AUTH [username] password) when
	// Password is set; an empty Username is Redis's "default" user. Env:
	// MC_REDIS_USERNAME, MC_REDIS_PASSWORD (the URL's user information
	// wins).
	Username, Password string
	// DB is the database index (SELECT). Env: MC_REDIS_DB_INDEX (the
	// URL's path wins). Zero is database 0.
	DB int
	// TLS configures the connection (rediss://); nil means plain TCP.
	TLS *tls.Config
	// DialTimeout bounds each dial and New's first round trip, so that a
	// Redis that is down fails New within it. Zero means
	// DefaultDialTimeout.
	DialTimeout time.Duration
	// OpTimeout bounds a call whose context has no deadline, and each
	// call of the refresh loop. Zero means DefaultOpTimeout.
	OpTimeout time.Duration
	// KeyTTL is the time to live of every key written: a dead engine's
	// keys vanish this long after its last renewal, and a lost key is
	// written again within a third of it. At least MinKeyTTL. Zero means
	// DefaultKeyTTL. Env: KVFERRY_REDIS_KEY_TTL_SEC.
	KeyTTL time.Duration
	// PoolSize is the most connections the KV keeps open. Zero means
	// DefaultPoolSize.
	PoolSize int
	// Logger receives state changes (keys lost and written again); the
	// go-redis client's own logs go to it at Debug. Nil discards them.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.OpTimeout == 0 {
		c.OpTimeout = DefaultOpTimeout
	}
	if c.KeyTTL == 0 {
		c.KeyTTL = DefaultKeyTTL
	}
	if c.PoolSize == 0 {
		c.PoolSize = DefaultPoolSize
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate names the first bad field.
func (c Config) Validate() error {
	host, port, err := net.SplitHostPort(c.Addr)
	if err != nil {
		return fmt.Errorf("redis config: Addr %q: want host:port: %w", c.Addr, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 || host == "" {
		return fmt.Errorf("redis config: Addr %q: want host:port with a port in 1-65535", c.Addr)
	}
	switch {
	case c.Username != "" && c.Password == "":
		return errors.New("redis config: Username without Password")
	case strings.ContainsAny(c.Username+c.Password, "\r\n\x00"):
		return errors.New("redis config: control characters in Username or Password")
	case c.DB < 0:
		return fmt.Errorf("redis config: DB %d is negative", c.DB)
	case c.DialTimeout < 0:
		return fmt.Errorf("redis config: DialTimeout %v is negative", c.DialTimeout)
	case c.OpTimeout < 0:
		return fmt.Errorf("redis config: OpTimeout %v is negative", c.OpTimeout)
	case c.KeyTTL < 0 || (c.KeyTTL > 0 && c.KeyTTL < MinKeyTTL):
		return fmt.Errorf("redis config: KeyTTL %v is below %v", c.KeyTTL, MinKeyTTL)
	case c.PoolSize < 0:
		return fmt.Errorf("redis config: PoolSize %d is negative", c.PoolSize)
	}
	return nil
}

// String returns the effective configuration without the password, for
// the start-up log.
func (c Config) String() string {
	c = c.withDefaults()
	auth := "none"
	if c.Password != "" {
		auth = "password"
		if c.Username != "" {
			auth = "user " + c.Username
		}
	}
	return fmt.Sprintf("addr=%s db=%d tls=%t auth=%s dial_timeout=%v op_timeout=%v key_ttl=%v pool=%d",
		c.Addr, c.DB, c.TLS != nil, auth, c.DialTimeout, c.OpTimeout, c.KeyTTL, c.PoolSize)
}

// Metrics is a snapshot of a KV's counters.
type Metrics struct {
	// Refreshes counts passes of the refresh loop that renewed every key.
	Refreshes uint64
	// RePuts counts keys found missing and written again.
	RePuts uint64
	// Owned is how many keys the KV keeps alive.
	Owned int
}

// KV is a metadata.KV on Redis whose keys expire unless renewed.
type KV struct {
	cfg    Config
	cli    *goredis.Client
	log    *slog.Logger
	ctx    context.Context // root lifecycle context, cancelled in Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
	// redo asks the refresh loop for a pass soon (with backoff), after a
	// caller's Put or Delete failed (capacity 1).
	redo chan struct{}

	mu struct {
		sync.Mutex
		// owned holds every key this KV wrote and has not deleted, with
		// its value, for renewing and writing again.
		owned map[string][]byte
		// unDeleted holds keys whose Delete failed; the refresh loop
		// deletes them.
		unDeleted map[string]struct{}
	}

	refreshes atomic.Uint64
	reputs    atomic.Uint64
}

var _ metadata.KV = (*KV)(nil)

// New connects to Redis (AUTH and SELECT as configured) and checks it
// answers. It fails within DialTimeout (or ctx) with an error matching
// metadata.ErrUnavailable when Redis does not answer, and with a plain
// error when Redis refuses the credentials or the database index.
func New(ctx context.Context, cfg Config) (*KV, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	setLogger(cfg.Logger)
	cli := goredis.NewClient(&goredis.Options{
		Addr:     cfg.Addr,
		Username: cfg.Username,
		Password: cfg.Password,
		DB:       cfg.DB,
		// RESP2 and no CLIENT SETINFO / maintenance notifications: the
		// plain commands Mooncake sends, understood by any Redis (and
		// Redis-compatible server).
		Protocol:                 2,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		TLSConfig:                cfg.TLS,
		DialTimeout:              cfg.DialTimeout,
		DialerRetries:            1,
		ReadTimeout:              cfg.OpTimeout,
		WriteTimeout:             cfg.OpTimeout,
		ContextTimeoutEnabled:    true,
		PoolSize:                 cfg.PoolSize,
		PoolTimeout:              cfg.OpTimeout,
		ConnMaxIdleTime:          time.Minute,
		MaxRetries:               2,
		MinRetryBackoff:          10 * time.Millisecond,
		MaxRetryBackoff:          500 * time.Millisecond,
	})
	pctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	if err := cli.Ping(pctx).Err(); err != nil {
		_ = cli.Close()
		what := "redis " + cfg.Addr
		if errors.Is(pctx.Err(), context.DeadlineExceeded) {
			what = fmt.Sprintf("redis %s: no answer within %v", cfg.Addr, cfg.DialTimeout)
		} else if isRefusal(err) {
			what = fmt.Sprintf("redis %s: refused (check the password, user and database index)", cfg.Addr)
		} else if isTLSRefusal(err) {
			what = fmt.Sprintf("redis %s: TLS handshake refused (check the CA and client certificate)", cfg.Addr)
		}
		return nil, classify(what, pctx, err)
	}
	rctx, rcancel := context.WithCancel(context.Background())
	k := &KV{cfg: cfg, cli: cli, log: cfg.Logger, ctx: rctx, cancel: rcancel, redo: make(chan struct{}, 1)}
	k.mu.owned = make(map[string][]byte)
	k.mu.unDeleted = make(map[string]struct{})
	k.log.Debug("redis connected", "config", cfg.String())
	k.wg.Add(1)
	go k.runRefresh()
	return k, nil
}

// Addr returns the configured server address.
func (k *KV) Addr() string { return k.cfg.Addr }

// Metrics returns a snapshot of the counters.
func (k *KV) Metrics() Metrics {
	k.mu.Lock()
	n := len(k.mu.owned)
	k.mu.Unlock()
	return Metrics{Refreshes: k.refreshes.Load(), RePuts: k.reputs.Load(), Owned: n}
}

// Get returns the value of key, or an error matching metadata.ErrNotFound.
func (k *KV) Get(ctx context.Context, key string) ([]byte, error) {
	if err := k.checkOpen(); err != nil {
		return nil, err
	}
	ctx, cancel := k.opContext(ctx)
	defer cancel()
	v, err := k.cli.Get(ctx, key).Bytes()
	if errors.Is(err, goredis.Nil) {
		return nil, fmt.Errorf("redis get %q: %w", key, metadata.ErrNotFound)
	}
	if err != nil {
		return nil, classify(fmt.Sprintf("redis %s: get %q", k.cfg.Addr, key), ctx, err)
	}
	return v, nil
}

// Put stores value under key with KeyTTL (SET key value PX ttl); the key
// is remembered, renewed and written again whenever it goes missing.
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
	if err := k.cli.Set(ctx, key, value, k.cfg.KeyTTL).Err(); err != nil {
		k.askRedo()
		return classify(fmt.Sprintf("redis %s: set %q", k.cfg.Addr, key), ctx, err)
	}
	return nil
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
	if err := k.cli.Del(ctx, key).Err(); err != nil {
		k.mu.Lock()
		if _, owned := k.mu.owned[key]; !owned {
			k.mu.unDeleted[key] = struct{}{}
		}
		k.mu.Unlock()
		k.askRedo()
		return classify(fmt.Sprintf("redis %s: del %q", k.cfg.Addr, key), ctx, err)
	}
	return nil
}

// Close stops the refresh loop and closes the client. The keys stay until
// their TTL runs out (metadata.KVBackend deletes its entries before it
// closes the KV). A second Close is harmless.
func (k *KV) Close() error {
	var err error
	k.once.Do(func() {
		k.cancel()
		k.wg.Wait()
		k.mu.Lock()
		k.mu.owned = map[string][]byte{}
		k.mu.Unlock()
		if e := k.cli.Close(); e != nil && !errors.Is(e, goredis.ErrClosed) {
			err = fmt.Errorf("close redis client %s: %w", k.cfg.Addr, e)
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

// runRefresh renews every owned key each KeyTTL/3, writes again the keys
// found missing and deletes the keys whose Delete failed; after a failure
// it retries with backoff (retryMin doubling to retryMax). It is owned by
// the KV and stops when Close cancels k.ctx.
func (k *KV) runRefresh() {
	defer k.wg.Done()
	period := k.cfg.KeyTTL / 3
	backoff := retryMin
	t := time.NewTimer(period)
	defer t.Stop()
	retrying := false // the timer is set to a retry, not the period
	down := false     // a failed pass was logged
	for {
		select {
		case <-k.ctx.Done():
			return
		case <-t.C:
		case <-k.redo:
			if !retrying {
				t.Reset(backoff)
				retrying = true
			}
			continue
		}
		if k.refreshAll() {
			if down {
				k.log.Info("redis reachable again, keys renewed", "addr", k.cfg.Addr)
			}
			retrying, down, backoff = false, false, retryMin
			t.Reset(period)
			continue
		}
		if k.ctx.Err() != nil {
			return
		}
		if !down {
			k.log.Warn("redis unreachable, renewing keys with backoff", "addr", k.cfg.Addr)
		}
		retrying, down = true, true
		t.Reset(min(backoff, period))
		backoff = min(2*backoff, retryMax)
	}
}

// refreshAll renews every owned key (one pipeline of PEXPIRE), writes the
// missing ones again and deletes the keys whose Delete failed; it reports
// success. A key changed or deleted meanwhile is written or deleted again,
// so Redis ends with the owner's latest state.
func (k *KV) refreshAll() bool {
	k.mu.Lock()
	keys := make([]string, 0, len(k.mu.owned))
	for key := range k.mu.owned {
		keys = append(keys, key)
	}
	dels := make([]string, 0, len(k.mu.unDeleted))
	for key := range k.mu.unDeleted {
		dels = append(dels, key)
	}
	k.mu.Unlock()
	ctx, cancel := context.WithTimeout(k.ctx, k.cfg.OpTimeout)
	defer cancel()
	var missing []string
	if len(keys) > 0 {
		cmds := make([]*goredis.BoolCmd, len(keys))
		_, err := k.cli.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for i, key := range keys {
				cmds[i] = p.PExpire(ctx, key, k.cfg.KeyTTL)
			}
			return nil
		})
		if err != nil {
			k.log.Debug("redis renew failed", "addr", k.cfg.Addr, "err", err)
			return false
		}
		for i, c := range cmds {
			if !c.Val() {
				missing = append(missing, keys[i])
			}
		}
	}
	for _, key := range missing {
		if !k.rePut(ctx, key) {
			return false
		}
	}
	for _, key := range dels {
		if !k.rePut(ctx, key) {
			return false
		}
	}
	if len(missing) > 0 {
		k.log.Info("redis keys lost, written again", "addr", k.cfg.Addr, "keys", len(missing))
	}
	k.refreshes.Add(1)
	return true
}

// rePut writes key's owned value (or deletes it when no longer owned)
// until what was written is still the owner's state; it reports success.
func (k *KV) rePut(ctx context.Context, key string) bool {
	for {
		k.mu.Lock()
		value, ok := k.mu.owned[key]
		k.mu.Unlock()
		var err error
		if ok {
			err = k.cli.Set(ctx, key, value, k.cfg.KeyTTL).Err()
		} else {
			err = k.cli.Del(ctx, key).Err()
		}
		if err != nil {
			k.log.Debug("redis re-put failed", "key", key, "err", err)
			return false
		}
		k.mu.Lock()
		cur, still := k.mu.owned[key]
		if still == ok && bytes.Equal(cur, value) {
			if ok {
				k.reputs.Add(1)
			} else {
				delete(k.mu.unDeleted, key)
			}
			k.mu.Unlock()
			return true
		}
		k.mu.Unlock()
	}
}

// isRefusal reports whether err is an error reply of Redis that retrying
// cannot fix: at connection set-up, bad credentials (NOAUTH, WRONGPASS),
// missing permission (NOPERM) or a database index out of range.
func isRefusal(err error) bool {
	if !isRedisError(err) {
		return false
	}
	for _, p := range transient {
		if goredis.HasErrorPrefix(err, p) {
			return false
		}
	}
	return true
}

// isTLSRefusal reports whether err is a TLS handshake that failed on a
// certificate (ours refused by the server, or the server's not verified):
// a configuration error, not an outage.
func isTLSRefusal(err error) bool {
	var alert tls.AlertError
	var verify *tls.CertificateVerificationError
	var op *net.OpError // crypto/tls reports a peer's alert as Op "remote error"
	return errors.As(err, &alert) || errors.As(err, &verify) || (errors.As(err, &op) && op.Op == "remote error")
}

func isRedisError(err error) bool {
	var re goredis.Error
	return errors.As(err, &re)
}

// transient lists the error replies of a Redis that is busy, loading,
// failing over or out of memory: retrying later can succeed.
var transient = []string{"LOADING", "READONLY", "MASTERDOWN", "BUSY", "TRYAGAIN", "CLUSTERDOWN", "MISCONF", "OOM"}

// classify wraps err with what failed; a caller's cancellation stays a
// context error, a reply of Redis that retrying cannot fix (bad
// credentials, unknown command) stays as it is, and anything else
// (timeouts, refused or broken connections, a Redis that is loading or
// read-only) matches metadata.ErrUnavailable.
func classify(what string, ctx context.Context, err error) error {
	if errors.Is(err, context.Canceled) && errors.Is(ctx.Err(), context.Canceled) {
		return fmt.Errorf("%s: %w", what, err)
	}
	if isRefusal(err) || isTLSRefusal(err) {
		return fmt.Errorf("%s: %w", what, err)
	}
	return fmt.Errorf("%s: %w: %w", what, metadata.ErrUnavailable, err)
}

// logSink is the logger go-redis's process-wide log goes to: that of the
// most recently created KV with a logger.
var logSink atomic.Pointer[slog.Logger]

var installLogger sync.Once

// setLogger routes go-redis's own log (process-wide, stderr by default)
// to l at Debug, so that the library prints nothing unless asked.
func setLogger(l *slog.Logger) {
	logSink.Store(l)
	installLogger.Do(func() { goredis.SetLogger(sinkLogger{}) })
}

type sinkLogger struct{}

func (sinkLogger) Printf(ctx context.Context, format string, v ...any) {
	l := logSink.Load()
	if l == nil || !l.Enabled(ctx, slog.LevelDebug) {
		return
	}
	l.DebugContext(ctx, "go-redis", "msg", fmt.Sprintf(format, v...))
}
