package client

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/peerauth"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/internal/spin"
	kvmetrics "github.com/kvferry/kvferry/metrics"
	"github.com/kvferry/kvferry/store/ha"
	"github.com/kvferry/kvferry/store/ssd"
	"github.com/kvferry/kvferry/store/wire"
	"github.com/kvferry/kvferry/store/wire/coro"
)

// ErrClosed is returned by every call after Close.
var ErrClosed = errors.New("store client closed")

// Client is a store client: it lends a global segment to the store, keeps
// a registered staging buffer, talks to the master over gRPC and moves data
// directly to and from the holders of replicas with the transfer engine.
// All methods are safe for concurrent use.
type Client struct {
	cfg      Config
	log      *slog.Logger
	e        *engine.Engine
	ownsEng  bool
	clientID string
	tenant   string         // Config.TenantID, on every key request
	segName  string         // this client's transfer-engine segment name
	auth     *peerauth.Keys // the cluster key, or nil
	tls      *tls.Config    // control-plane TLS toward the master, or nil

	global  segmentMemory // the mounted segment's memory (nil: none)
	staging *staging      // nil with NoLocalBuffer

	// segMu guards segments (every segment lent, re-mounted with the
	// client: the global one first, then those mounted after setup), extra
	// (those mounted after setup, by id; segments.go) and tasks once New
	// has returned.
	segMu    sync.Mutex
	segments []*wire.Segment
	extra    map[string]*extraSegment
	// diskDrained is set once DrainDiskSegment took the disk tier off the
	// master: remounts no longer announce it.
	diskDrained atomic.Bool

	embedded io.Closer        // the embedded master, if any
	etcd     *clientv3.Client // HA leader lookups, if any

	conn    atomic.Pointer[masterConn]
	connMu  sync.Mutex // serializes re-resolving the master
	kick    chan struct{}
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	closed  atomic.Bool
	metrics metrics
	obs     *kvmetrics.StoreClient
	grants  grantPool
	disk    *ssd.Store // the disk tier (tier.go); nil without one
	// diskSrv serves other clients' reads of the disk tier (diskserve.go);
	// nil without a tier, or when another client of a shared engine does.
	diskSrv *diskServer
	// diskLogAt is when a failed disk-replica read was last logged
	// (UnixNano; tier.go logDiskFailure).
	diskLogAt atomic.Int64
	hot       *hotCache // the local hot cache (hotcache.go); nil when off
	hints     *hints    // where keys were last seen (spec.go); nil when off
	tasks     *tasks    // the task loop's workers; nil without a segment or tier
	sessions  sessions  // open put and get sessions (ranges.go)
}

// masterConn is one connection to a master: mux, gRPC, or (closer nil) an
// embedded master called directly.
type masterConn struct {
	addr   string
	rpc    string // MasterRPCMux, MasterRPCGRPC or MasterRPCMooncake; "" in process
	closer io.Closer
	mc     wire.MasterClient
	// version is the master's view version last seen in a Ping.
	version atomic.Uint64
}

// session returns the mux session of the connection and whether it is up
// (wire.MuxClient.Session); false for gRPC and in-process masters.
func (mc *masterConn) session() (uint64, bool) {
	if m, ok := mc.mc.(*wire.MuxClient); ok {
		return m.Session()
	}
	return 0, false
}

// sessionKnown is session without the socket peek
// (wire.MuxClient.SessionKnown): no system call.
func (mc *masterConn) sessionKnown() (uint64, bool) {
	if m, ok := mc.mc.(*wire.MuxClient); ok {
		return m.SessionKnown()
	}
	return 0, false
}

// New sets up a client: it starts (or takes) a transfer engine, starts the
// embedded master or finds the master, maps, registers and mounts
// GlobalSegmentSize bytes, registers the staging buffer, and starts the
// heartbeat. ctx bounds the setup.
func New(ctx context.Context, cfg Config) (_ *Client, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	c := &Client{cfg: cfg, log: cfg.Logger, kick: make(chan struct{}, 1), clientID: newUUID(), tenant: cfg.TenantID,
		extra: map[string]*extraSegment{}}
	c.obs = kvmetrics.NewStoreClient(c.counters)
	// The cluster key authenticates the master connections and the
	// engine's; the engine's own, when one is given.
	switch {
	case cfg.Engine != nil:
		c.auth, c.tls = cfg.Engine.Auth(), cfg.Engine.TLS().ClientConfig()
	default:
		if err := cfg.Stack.Engine.LoadSecurity(); err != nil {
			return nil, fmt.Errorf("store client: %w", err)
		}
		c.auth, c.tls = cfg.Stack.Engine.Auth, cfg.Stack.Engine.TLS.ClientConfig()
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.hot = newHotCache(cfg.HotCacheBytes, cfg.HotCacheAdmission)
	c.hints = newHints(cfg.NoSpeculativeGets, cfg.SpeculativeGetMax)
	defer func() {
		if err != nil {
			c.teardown()
		}
	}()

	// The master.
	addr := cfg.MasterServerAddr
	var mc *masterConn
	switch {
	case isEmbedded(addr):
		em, err := cfg.StartEmbeddedMaster()
		if err != nil {
			return nil, fmt.Errorf("store client: start embedded master: %w", err)
		}
		c.embedded, addr = em.Stop, em.Addr
		if em.Client != nil {
			mc = &masterConn{addr: em.Addr, mc: em.Client}
		}
	case strings.HasPrefix(addr, ha.Scheme):
		eps, _ := ha.ParseEndpoints(addr)
		cli, err := ha.Dial(eps, cfg.RPCTimeout)
		if err != nil {
			return nil, fmt.Errorf("store client: %w", err)
		}
		c.etcd = cli
		view, err := c.leader(ctx)
		if err != nil {
			return nil, fmt.Errorf("store client: find master: %w", err)
		}
		addr = view.Address
	}
	if mc == nil {
		if mc, err = c.dialMaster(ctx, addr); err != nil {
			return nil, err
		}
	}
	c.conn.Store(mc)
	if mc.rpc == MasterRPCMooncake {
		// A Mooncake master names no object incarnations (uid) and no view
		// in its answers, which speculative reads check hints against.
		c.hints = nil
	}

	// The transfer engine.
	if cfg.Engine != nil {
		c.e = cfg.Engine
	} else {
		sc := cfg.Stack
		sc.Engine.MetadataConn = cfg.MetadataServer
		sc.Engine.LocalServerName = cfg.LocalHostname
		if sc.Engine.Logger == nil {
			sc.Engine.Logger = cfg.Logger
		}
		if len(sc.Engine.Transports) == 0 {
			sc.AutoDiscover = true
		}
		// Installed when it can run here; otherwise the engine logs once
		// which transport it uses instead, and why (Mooncake's setup
		// falls back the same way).
		sc.Protocol = cfg.Protocol
		e, err := stack.New(ctx, sc)
		if err != nil {
			return nil, fmt.Errorf("store client: start transfer engine: %w", err)
		}
		c.e, c.ownsEng = e, true
	}
	c.segName = c.e.SegmentName()

	// Memory.
	if !cfg.NoLocalBuffer {
		st, err := newStaging(c.e, cfg.LocalBufferSize)
		if err != nil {
			return nil, fmt.Errorf("store client: local buffer: %w", err)
		}
		c.staging = st
	}
	if cfg.GlobalSegmentSize > 0 {
		m, err := mapGlobal(cfg.GlobalSegmentSize, !cfg.LazySegment, !cfg.NoHugePages, !cfg.Stack.SameHost.NoMap)
		if err != nil {
			return nil, fmt.Errorf("store client: global segment: %w", err)
		}
		c.global = m
		if _, anon := m.(*cmem.Map); anon && !cfg.Stack.SameHost.NoMap && !cfg.LazySegment {
			c.log.Info("lent segment is anonymous memory: this host faults on first touches of populated pages, "+
				"so same-host peers copy with process_vm_* rather than through a mapping", "bytes", m.Len())
		}
		if err := c.e.RegisterMemory(m.Addr(), m.Len(), "*", true); err != nil {
			return nil, fmt.Errorf("store client: register global segment: %w", err)
		}
		seg := &wire.Segment{Id: newUUID(), Name: c.segName, Base: uint64(m.Addr()), Size: m.Len(), Protocol: cfg.Protocol}
		c.segments = append(c.segments, seg)
	}
	// ReMountSegments registers the client even without a segment, so the
	// master tracks its liveness from the start.
	rctx, cancel := context.WithTimeout(ctx, cfg.RPCTimeout)
	mresp, err := mc.mc.ReMountSegments(rctx, &wire.ReMountSegmentsRequest{ClientId: c.clientID, Segments: c.segmentList()})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("store client: mount segment at master %s: %w", mc.addr, wire.FromStatus(err))
	}
	if !cfg.NoPutGrants {
		c.grants.offer(mc, mresp)
	}
	if err := c.openDisk(); err != nil {
		return nil, err
	}
	if err := c.mountDisk(ctx, mc); err != nil {
		return nil, fmt.Errorf("store client: %w", err)
	}
	c.startTasks()

	c.wg.Add(1)
	go c.runHeartbeat() // owned by c; stops on Close
	c.log.Info("store client started", "segment", c.segName, "client", c.clientID, "master", mc.addr,
		"master_rpc", mc.rpc, "config", cfg.String())
	return c, nil
}

// spinWait is how long master calls poll for their answer before they
// block: the engine's setting (KVFERRY_SPIN_US).
func (c *Client) spinWait() time.Duration {
	if c.cfg.Engine != nil {
		return c.cfg.Engine.SpinBudget()
	}
	return spin.Budget(c.cfg.Stack.Engine.SpinWait)
}

// dialMaster connects to the master at addr over mux (Config.MasterRPC
// "auto", "kvferry" or "mux"), gRPC, or Mooncake's coro_rpc ("mooncake").
// In "auto" (without a cluster key or TLS, which mooncake_master does not
// speak) it first calls kvferry_master_info over coro_rpc (probeMaster):
// kvferry-master answers it and mooncake_master answers "function not
// registered", both at once, so no path waits on a timeout. A Mooncake
// master is used over coro_rpc; any other master, including one that did
// not answer the probe in time, is used natively. Natively, a master that
// answers but does not speak mux is used over gRPC; one that cannot be
// reached now is kept on mux, which dials again on the next call.
func (c *Client) dialMaster(ctx context.Context, addr string) (*masterConn, error) {
	timeout := min(c.cfg.RPCTimeout, wire.DefaultMuxDialTimeout)
	if c.cfg.MasterRPC == MasterRPCMooncake {
		return c.dialMooncake(ctx, addr, "configured (KVFERRY_MASTER_PROTOCOL=mooncake)")
	}
	if c.cfg.MasterRPC != MasterRPCGRPC {
		probe := "not probed (KVFERRY_MASTER_PROTOCOL=" + c.cfg.MasterRPC + ")"
		if c.auth != nil || c.tls != nil {
			probe = "not probed (cluster key or TLS)"
		}
		if c.cfg.MasterRPC == MasterRPCAuto && c.auth == nil && c.tls == nil {
			var kind masterKind
			kind, probe = probeMaster(ctx, addr, timeout)
			if kind == masterMooncake {
				return c.dialMooncake(ctx, addr, probe)
			}
		}
		mux := wire.NewMuxClient(wire.MuxClientConfig{Addr: addr, DialTimeout: timeout, Auth: c.auth, TLS: c.tls,
			SpinWait: c.spinWait(), StallTimeout: c.cfg.MasterStallTimeout, CallTimeout: c.cfg.RPCTimeout})
		dctx, cancel := context.WithTimeout(ctx, timeout)
		err := mux.Connect(dctx)
		cancel()
		if err == nil {
			c.log.Info("store master protocol chosen", "master", addr, "protocol", MasterRPCMux,
				"why", "answered the mux hello", "probe", probe)
			return &masterConn{addr: addr, rpc: MasterRPCMux, closer: mux, mc: mux}, nil
		}
		if c.cfg.MasterRPC != MasterRPCMux && !errors.Is(err, wire.ErrMuxRefused) {
			c.log.Debug("store master not answering now, kept on mux, which dials again on the next call",
				"master", addr, "probe", probe, "err", err)
			return &masterConn{addr: addr, rpc: MasterRPCMux, closer: mux, mc: mux}, nil
		}
		mux.Close()
		if c.cfg.MasterRPC == MasterRPCMux {
			return nil, fmt.Errorf("store client: connect to master %s over mux: %w", addr, err)
		}
		c.log.Info("store master does not speak mux, using grpc", "master", addr, "err", err)
	}
	creds := insecure.NewCredentials()
	if c.tls != nil {
		creds = credentials.NewTLS(c.tls)
	}
	redial := newGRPCRedial(min(c.cfg.RPCTimeout, wire.DefaultMuxDialTimeout))
	cc, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(creds),
		grpc.WithContextDialer(redial.dialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return peerauth.Dialer(&net.Dialer{}, c.auth, peerauth.RoleMaster)(ctx, "tcp", addr)
		})),
		grpc.WithChainUnaryInterceptor(c.rpcDeadline, redial.unary),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 2 * time.Second,
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("store client: dial master %s: %w", addr, err)
	}
	return &masterConn{addr: addr, rpc: MasterRPCGRPC, closer: cc, mc: wire.NewMasterClient(cc)}, nil
}

// dialMooncake connects to a master over Mooncake's protocol: it checks
// the store version the master answers to ServiceReady (Mooncake's client
// refuses another one the same way: the struct_pack types differ between
// releases) and keeps a pool of coro_rpc connections.
func (c *Client) dialMooncake(ctx context.Context, addr, why string) (*masterConn, error) {
	if c.auth != nil || c.tls != nil {
		return nil, fmt.Errorf("store client: master %s over mooncake's protocol: a cluster key or TLS is set, which mooncake_master does not speak: %w",
			addr, ErrNotSupportedByMooncakeMaster)
	}
	timeout := min(c.cfg.RPCTimeout, wire.DefaultMuxDialTimeout)
	ver, err := probeMooncake(ctx, addr, max(timeout, c.cfg.RPCTimeout))
	if err != nil {
		return nil, fmt.Errorf("store client: connect to master %s over mooncake's protocol: %w", addr, err)
	}
	if ver != coro.StoreVersion {
		return nil, fmt.Errorf("store client: master %s is mooncake store version %q, this client speaks %q: %w",
			addr, ver, coro.StoreVersion, wire.ErrInvalidVersion)
	}
	c.log.Info("store master protocol chosen", "master", addr, "protocol", MasterRPCMooncake, "why", why)
	mm := newMoonMaster(addr, timeout)
	return &masterConn{addr: addr, rpc: MasterRPCMooncake, closer: mm, mc: mm}, nil
}

func (c *Client) leader(ctx context.Context) (ha.View, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RPCTimeout)
	defer cancel()
	return ha.Leader(ctx, c.etcd, c.cfg.ClusterID)
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	s := hex.EncodeToString(b[:])
	return s[:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:]
}

// Engine returns the client's transfer engine.
func (c *Client) Engine() *engine.Engine { return c.e }

// Hostname returns the client's transfer-engine segment name ("host:port"
// in P2P mode), the name under which its segment is mounted.
func (c *Client) Hostname() string { return c.segName }

// TenantID returns the tenant whose namespace the client's keys are in.
func (c *Client) TenantID() string { return c.tenant }

// ClientID returns the id the master knows this client by.
func (c *Client) ClientID() string { return c.clientID }

// MasterAddr returns the address of the master in use.
func (c *Client) MasterAddr() string { return c.conn.Load().addr }

// Close unmounts the segment, stops the heartbeat, unregisters and frees
// the memory, and closes the engine it created and the embedded master. A
// second Close is harmless.
func (c *Client) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	if mc := c.conn.Load(); mc != nil {
		c.grants.retireAll()
		ctx, cancel := context.WithTimeout(context.Background(), min(c.cfg.RPCTimeout, 2*time.Second))
		c.returnGrants(ctx, mc, time.Now())
		cancel()
		for _, seg := range c.segmentList() {
			timeout, req := min(c.cfg.RPCTimeout, 2*time.Second), &wire.UnmountSegmentRequest{ClientId: c.clientID, SegmentId: seg.GetId()}
			if grace := c.closeGrace(); grace > 0 {
				// Graceful: the master moves this segment's objects
				// elsewhere first, or writes them to the disk tier (the
				// task loop still runs).
				timeout, req.Graceful, req.GraceMs = grace+timeout, true, uint64(grace/time.Millisecond)
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			_, err := mc.mc.UnmountSegment(ctx, req)
			cancel()
			if err != nil {
				c.log.Warn("unmount at close failed", "segment", c.segName, "err", wire.FromStatus(err))
			}
		}
	}
	c.teardown()
	c.log.Info("store client closed", "segment", c.segName)
	return nil
}

// closeGrace is how long Close lets the master drain the segment:
// DrainOnClose, or with a disk tier at least RPCTimeout, so that objects
// acknowledged but not yet written to disk are written before the memory
// goes (issue 32: nothing acknowledged is lost to a burst).
func (c *Client) closeGrace() time.Duration {
	if c.disk != nil {
		return max(c.cfg.DrainOnClose, c.cfg.RPCTimeout)
	}
	return c.cfg.DrainOnClose
}

// teardown releases everything New may have acquired.
func (c *Client) teardown() {
	defer c.obs.Close()
	c.cancel()
	c.wg.Wait()
	c.segMu.Lock()
	t := c.tasks
	c.segMu.Unlock()
	if t != nil {
		t.wg.Wait()
	}
	c.hot.clear()
	c.hints.clear()
	if mc := c.conn.Swap(nil); mc != nil && mc.closer != nil {
		mc.closer.Close()
	}
	c.closeExtras()
	if c.diskSrv != nil {
		c.diskSrv.close()
	}
	if c.e != nil {
		if c.global != nil {
			_ = c.e.UnregisterMemory(c.global.Addr())
		}
		if c.staging != nil {
			_ = c.e.UnregisterMemory(c.staging.mem.Addr())
		}
		if c.ownsEng {
			_ = c.e.Close()
		}
	}
	if c.global != nil {
		_ = c.global.Close()
	}
	if c.staging != nil {
		_ = c.staging.mem.Close()
	}
	if c.etcd != nil {
		_ = c.etcd.Close()
	}
	if c.embedded != nil {
		_ = c.embedded.Close()
	}
}

// master returns the connection to use, or ErrClosed.
func (c *Client) master() (*masterConn, error) {
	if c.closed.Load() {
		return nil, ErrClosed
	}
	mc := c.conn.Load()
	if mc == nil {
		return nil, ErrClosed
	}
	return mc, nil
}

// rpcErr converts a gRPC error, and asks the heartbeat to check the master
// at once when the error says the master is gone or no longer leads.
func (c *Client) rpcErr(err error) error {
	if err == nil {
		return nil
	}
	err = wire.FromStatus(err)
	switch wire.CodeOf(err) {
	case wire.ErrRPCFail, wire.ErrRPCTimeout, wire.ErrUnavailableInStatus:
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
	return err
}

// readCall runs a read-only master call fn. With an etcd:// master, a call
// that failed because the master is gone or no longer leads is retried once
// on the current leader, so a reader does not wait for the heartbeat to
// notice a failover. fn returns the converted error (rpcErr).
func (c *Client) readCall(fn func(mc *masterConn) error) error {
	mc, err := c.master()
	if err != nil {
		return err
	}
	err = fn(mc)
	if err == nil || c.etcd == nil {
		return err
	}
	if code := wire.CodeOf(err); code != wire.ErrRPCFail && code != wire.ErrUnavailableInStatus {
		return err
	}
	if !c.switchLeader(mc) {
		return err
	}
	mc2, err2 := c.master()
	if err2 != nil || mc2 == mc {
		return err
	}
	return fn(mc2)
}

// rpcCtx bounds a master call made with ctx by RPCTimeout. A ctx that
// can neither be canceled nor expire (no Done channel, as
// context.Background) is returned as it is: both wires bound a call
// without a deadline by RPCTimeout themselves (wire.MuxClientConfig's
// CallTimeout, and the gRPC client's interceptor rpcDeadline), and the
// mux does so without allocating (issue 38).
func (c *Client) rpcCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Done() == nil {
		return ctx, noCancel
	}
	return context.WithTimeout(ctx, c.cfg.RPCTimeout)
}

// noCancel is rpcCtx's cancel for a ctx it returned as it is.
func noCancel() {}

// rpcDeadline is the gRPC client's interceptor that bounds a call whose
// ctx has no deadline by RPCTimeout (rpcCtx leaves such a ctx alone).
func (c *Client) rpcDeadline(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.RPCTimeout)
		defer cancel()
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// HealthCheck reports whether the master answers a heartbeat: nil when it
// does, ErrClosed after Close, the RPC error otherwise.
func (c *Client) HealthCheck(ctx context.Context) error {
	mc, err := c.master()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, min(c.cfg.RPCTimeout, 2*time.Second))
	defer cancel()
	_, err = mc.mc.Ping(ctx, &wire.PingRequest{ClientId: c.clientID})
	return c.rpcErr(err)
}

// runHeartbeat pings the master every PingInterval (and at once when an
// operation saw the master fail). It re-mounts the segments when the master
// answers NEED_REMOUNT (a restarted master, a new HA leader, or an expiry),
// and re-resolves an etcd:// master after PingFailures failures or a "not
// the leader" answer. Owned by the Client; stops on Close.
func (c *Client) runHeartbeat() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.PingInterval)
	defer t.Stop()
	failures := 0
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		case <-c.kick:
		}
		mc := c.conn.Load()
		if mc == nil {
			return
		}
		ctx, cancel := context.WithTimeout(c.ctx, max(c.cfg.PingInterval, 500*time.Millisecond))
		sent := time.Now()
		resp, err := mc.mc.Ping(ctx, &wire.PingRequest{ClientId: c.clientID})
		cancel()
		if err != nil {
			if c.ctx.Err() != nil {
				return
			}
			failures++
			c.metrics.pingFailures.Add(1)
			err = wire.FromStatus(err)
			if failures == 1 || failures%10 == 0 {
				c.log.Warn("master heartbeat failed", "master", mc.addr, "failures", failures, "err", err)
			}
			if c.etcd != nil && (failures >= c.cfg.PingFailures || wire.CodeOf(err) == wire.ErrUnavailableInStatus) {
				if c.switchLeader(mc) {
					failures = 0
				}
			}
			continue
		}
		if failures > 0 {
			c.log.Info("master reachable again", "master", mc.addr, "after_failures", failures)
		}
		failures = 0
		if old := mc.version.Swap(resp.GetViewVersion()); old != 0 && old != resp.GetViewVersion() {
			c.log.Info("master view changed", "master", mc.addr, "version", resp.GetViewVersion())
		}
		c.grants.heartbeat(mc, sent, resp)
		if resp.GetStatus() == wire.ClientStatus_CLIENT_STATUS_NEED_REMOUNT {
			c.remount(mc)
		}
		c.returnGrants(c.ctx, mc, time.Now().Add(-grantIdle))
	}
}

// remount registers the client and its segments again.
func (c *Client) remount(mc *masterConn) {
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.RPCTimeout)
	defer cancel()
	segs := c.segmentList()
	resp, err := mc.mc.ReMountSegments(ctx, &wire.ReMountSegmentsRequest{ClientId: c.clientID, Segments: segs})
	if err != nil {
		c.log.Warn("remount failed", "master", mc.addr, "err", wire.FromStatus(err))
		return
	}
	if !c.cfg.NoPutGrants {
		c.grants.offer(mc, resp)
	}
	// A disk tier DrainDiskSegment took off the master is not announced again.
	if !c.diskDrained.Load() {
		if err := c.mountDisk(ctx, mc); err != nil {
			c.log.Warn("disk tier remount failed", "master", mc.addr, "err", err)
		}
	}
	c.metrics.remounts.Add(1)
	c.log.Info("segments remounted", "master", mc.addr, "segments", len(segs))
}

// switchLeader reads the HA leader and, when it moved, connects to it.
// Reports whether a leader was found.
func (c *Client) switchLeader(old *masterConn) bool {
	c.connMu.Lock()
	defer c.connMu.Unlock()
	view, err := c.leader(c.ctx)
	if err != nil {
		c.log.Warn("find master leader failed", "err", err)
		return false
	}
	if view.Address == old.addr {
		return true
	}
	mc, err := c.dialMaster(c.ctx, view.Address)
	if err != nil {
		c.log.Warn("connect to new master leader failed", "master", view.Address, "err", err)
		return false
	}
	if !c.conn.CompareAndSwap(old, mc) {
		mc.closer.Close()
		return true
	}
	c.metrics.masterSwitches.Add(1)
	c.log.Info("following new master leader", "master", view.Address, "version", view.Version, "previous", old.addr)
	// Calls in flight on the old connection fail; new calls use the new one.
	if old.closer != nil {
		old.closer.Close()
	}
	c.remount(mc)
	return true
}

// segmentMemory is the lent segment's memory: anonymous (cmem.Map) or
// memfd-backed (memfd.Map).
type segmentMemory interface {
	Addr() uintptr
	Len() uint64
	Bytes() []byte
	Close() error
}
