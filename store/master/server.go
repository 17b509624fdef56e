package master

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/kvferry/kvferry/engine/peerauth"
	"github.com/kvferry/kvferry/engine/tlsconf"
	"github.com/kvferry/kvferry/internal/netguard"
	"github.com/kvferry/kvferry/internal/ratelog"
	"github.com/kvferry/kvferry/store/ha"
	"github.com/kvferry/kvferry/store/oplog"
	"github.com/kvferry/kvferry/store/wire"
)

// Roles reported by Server.Role and the /role endpoint.
const (
	RoleLeader   = "leader"
	RoleStandby  = "standby"
	RoleStopped  = "stopped"
	roleStarting = "starting"
)

// ErrNotLeader is returned (as UNAVAILABLE_IN_CURRENT_STATUS) by a server
// that does not lead its HA cluster.
var ErrNotLeader = fmt.Errorf("store master is not the leader: %w", wire.ErrUnavailableInStatus)

// Server serves a Service over gRPC, runs its maintenance loop, and
// optionally serves admin HTTP and campaigns for HA leadership in etcd.
// Without HA it serves one Service for its whole life; with HA it serves a
// fresh Service each time it wins the election, so a new leader rebuilds its
// view from client re-mounts (specs/mooncake.md §7.6).
type Server struct {
	cfg Config
	log *slog.Logger

	lis      net.Listener
	grpcLis  *connListener // the connections that speak gRPC
	grpc     *grpc.Server
	httpSrv  *http.Server
	httpLis  net.Listener
	registry *prometheus.Registry
	rpc      rpcStats
	advert   string
	// oplog is the local operation log (OplogDir), closed by Close.
	oplog oplog.Backend

	active atomic.Pointer[Service]
	role   atomic.Value // string
	leader atomic.Value // ha.View last seen or held

	// conns are the accepted connections not handed to gRPC: those still
	// sending their first bytes and those speaking mux. Close closes them.
	conns struct {
		sync.Mutex
		m      map[net.Conn]struct{}
		closed bool
	}
	// refused rate-limits the log lines of refused connections (refuse).
	refused struct {
		sync.Mutex
		last time.Time // the last Warn line
		n    int       // refusals since
	}

	limit  *netguard.Limiter // connections of the RPC port
	guard  *peerauth.Guard   // nil without a cluster key
	budget *netguard.Budget  // bytes of large requests in flight
	logs   ratelog.Every

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// NewServer validates cfg, listens on cfg.RPCAddr (and cfg.MetricsAddr), and
// starts serving. Close stops it. Without HA it may be a restarted master
// whose predecessor's clients still write into their put grants: for its
// first GrantLease it allocates nothing in the segments of clients it
// answers NEED_REMOUNT (grants.go).
func NewServer(cfg Config) (*Server, error) {
	return newServer(cfg, fenceRemounted)
}

// newServer is NewServer; fence applies to the Service of a master without
// HA (an HA leader always fences all).
func newServer(cfg Config, fence startFence) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if cfg.Auth == nil && cfg.AuthKeyFile != "" {
		ks, err := peerauth.LoadKeyFile(cfg.AuthKeyFile)
		if err != nil {
			return nil, fmt.Errorf("store master: %w", err)
		}
		cfg.Auth = ks
	}
	if cfg.TLS == nil && cfg.TLSFiles.Enabled() {
		p, err := tlsconf.Load(cfg.TLSFiles)
		if err != nil {
			return nil, fmt.Errorf("store master: %w", err)
		}
		if p.Server == nil {
			return nil, fmt.Errorf("store master: %w: TLS needs a certificate and key", tlsconf.ErrFiles)
		}
		cfg.TLS = p.Server
	}
	lis, err := net.Listen("tcp", cfg.RPCAddr)
	if err != nil {
		return nil, fmt.Errorf("store master listen %s: %w", cfg.RPCAddr, err)
	}
	s := &Server{cfg: cfg, log: cfg.Logger, lis: lis, registry: prometheus.NewRegistry()}
	s.role.Store(roleStarting)
	s.leader.Store(ha.View{})
	s.advert = cfg.AdvertiseAddr
	if s.advert == "" {
		s.advert = advertiseAddr(lis.Addr().(*net.TCPAddr))
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.registry.MustRegister(newCollector(s))

	if cfg.MetricsAddr != "" {
		hl, err := net.Listen("tcp", cfg.MetricsAddr)
		if err != nil {
			lis.Close()
			return nil, fmt.Errorf("store master metrics listen %s: %w", cfg.MetricsAddr, err)
		}
		s.httpLis = netguard.Listen(hl, netguard.NewLimiter(256, 32).WithFrames(4096, netguard.HTTPHeaderComplete), cfg.Logger, "store master admin")
		s.httpSrv = &http.Server{Handler: s.adminHandler(), ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout: 30 * time.Second, WriteTimeout: time.Minute, IdleTimeout: time.Minute, MaxHeaderBytes: 64 << 10}
	}

	if cfg.EnableHA {
		cli, err := ha.Dial(cfg.EtcdEndpoints, 5*time.Second)
		if err != nil {
			s.closeListeners()
			return nil, err
		}
		s.role.Store(RoleStandby)
		s.wg.Add(1)
		go s.runHA(cli) // owned by s; stops on Close (ctx)
	} else {
		svc, err := newService(cfg, uint64(time.Now().UnixNano()), fence)
		if err == nil && cfg.OplogDir != "" {
			err = s.openOplog(svc)
		}
		if err != nil {
			s.closeListeners()
			return nil, err
		}
		s.active.Store(svc)
		s.role.Store(RoleLeader)
		s.leader.Store(ha.View{Address: s.advert, Version: svc.ViewVersion()})
		s.wg.Add(1)
		go s.runMaintenance(s.ctx, svc) // owned by s; stops on Close
	}

	s.limit = netguard.NewLimiter(cfg.MaxConns, cfg.MaxConnsPerIP).WithFrames(len(http2Preface), wholeHello)
	s.guard = peerauth.NewGuard(cfg.Auth, peerauth.RoleMaster, 0, s.log)
	s.budget = netguard.NewBudget(cfg.MaxInflightBytes)
	s.grpc = grpc.NewServer(append(s.grpcLimitOptions(), grpc.ChainUnaryInterceptor(s.statusInterceptor))...)
	wire.RegisterMasterServer(s.grpc, &handlers{s: s})
	s.grpcLis = newConnListener(s.lis.Addr())
	s.conns.m = make(map[net.Conn]struct{})
	s.wg.Add(2)
	go func() { // owned by s; stops when Close calls grpc.Stop
		defer s.wg.Done()
		if err := s.grpc.Serve(s.grpcLis); err != nil && !errors.Is(err, grpc.ErrServerStopped) && !errors.Is(err, net.ErrClosed) {
			s.log.Error("store master grpc serve", "err", err)
		}
	}()
	go s.runAccept() // owned by s; stops when Close closes the listener
	if s.httpSrv != nil {
		s.wg.Add(1)
		go func() { // owned by s; stops when Close shuts the HTTP server
			defer s.wg.Done()
			if err := s.httpSrv.Serve(s.httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("store master http serve", "err", err)
			}
		}()
	}
	s.log.Info("store master started", "addr", s.Addr(), "advertise", s.advert, "config", cfg.String())
	return s, nil
}

// Addr returns the gRPC listen address ("host:port").
func (s *Server) Addr() string { return s.lis.Addr().String() }

// AdvertiseAddr returns the address published as HA leader.
func (s *Server) AdvertiseAddr() string { return s.advert }

// MetricsAddr returns the admin HTTP address, or "" when there is none.
func (s *Server) MetricsAddr() string {
	if s.httpLis == nil {
		return ""
	}
	return s.httpLis.Addr().String()
}

// Registry returns the server's private Prometheus registry.
func (s *Server) Registry() *prometheus.Registry { return s.registry }

// Service returns the Service being served, or nil while not leading.
func (s *Server) Service() *Service { return s.active.Load() }

// Role returns RoleLeader, RoleStandby or RoleStopped.
func (s *Server) Role() string { return s.role.Load().(string) }

// Leader returns the last leader view seen (this server's own when it
// leads).
func (s *Server) Leader() ha.View { return s.leader.Load().(ha.View) }

// Close stops serving, gives up HA leadership and waits for every goroutine.
// A second Close is harmless.
func (s *Server) Close() error {
	s.once.Do(func() {
		s.cancel()
		s.lis.Close()
		s.closeConns(true)
		s.grpcLis.Close()
		s.grpc.Stop()
		if s.httpSrv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = s.httpSrv.Shutdown(ctx)
			cancel()
		}
		s.wg.Wait()
		if svc := s.active.Load(); svc != nil && s.oplog != nil {
			if err := svc.Snapshot(true); err != nil {
				s.log.Error("store master final snapshot failed", "err", err)
			}
		}
		if s.oplog != nil {
			_ = s.oplog.Close()
		}
		s.active.Store(nil)
		s.role.Store(RoleStopped)
		s.log.Info("store master stopped", "addr", s.Addr())
	})
	return nil
}

func (s *Server) closeListeners() {
	s.lis.Close()
	if s.httpLis != nil {
		s.httpLis.Close()
	}
}

// runMaintenance calls svc.Tick every MaintenanceInterval until ctx is done.
// Its owner (NewServer or a leadership term in runHA) waits for it.
func (s *Server) runMaintenance(ctx context.Context, svc *Service) {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.MaintenanceInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			svc.Tick()
			if err := svc.Snapshot(false); err != nil {
				s.log.Error("store master snapshot failed", "err", err)
			}
		}
	}
}

// runHA campaigns until Close; each won term serves a fresh Service. It
// closes cli when it returns.
func (s *Server) runHA(cli *clientv3.Client) {
	defer s.wg.Done()
	defer cli.Close()
	err := ha.Campaign(s.ctx, cli, s.cfg.ClusterID, s.advert, s.cfg.MasterViewLeaseTTL, s.log,
		func(ctx context.Context, view ha.View) {
			// Fenced: the previous leader may have handed out grants that
			// its clients still write into for up to GrantLease.
			svc, err := newService(s.cfg, view.Version, fenceAll)
			if err != nil { // cannot happen: cfg was validated
				s.log.Error("store master service", "err", err)
				return
			}
			if s.cfg.EnableOplog {
				if err := restoreFromEtcd(ctx, svc, cli, s.cfg.ClusterID, view); err != nil {
					// Serving without the committed objects would lose
					// them: give the leadership up and try again.
					s.log.Error("store master: cannot load the oplog from etcd; stepping down", "err", err)
					sleepCtx(ctx, time.Second)
					return
				}
			}
			s.leader.Store(view)
			s.active.Store(svc)
			s.role.Store(RoleLeader)
			s.wg.Add(1)
			go s.runMaintenance(ctx, svc) // owned by this term; stops with ctx
			<-ctx.Done()
			s.active.Store(nil)
			s.role.Store(RoleStandby)
			s.closeConns(false)
		})
	if err != nil && !errors.Is(err, context.Canceled) {
		s.log.Error("store master campaign", "err", err)
	}
}

// advertiseAddr turns a listen address into one peers can dial.
func advertiseAddr(a *net.TCPAddr) string {
	host := a.IP.String()
	if a.IP.IsUnspecified() {
		host = firstNonLoopbackIPv4()
	}
	return net.JoinHostPort(host, strconv.Itoa(a.Port))
}

func firstNonLoopbackIPv4() string {
	addrs, err := net.InterfaceAddrs()
	if err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
				return n.IP.String()
			}
		}
	}
	return "127.0.0.1"
}

// openOplog opens the local operation log and restores svc from it.
func (s *Server) openOplog(svc *Service) error {
	be, err := oplog.OpenDir(oplog.DirConfig{Path: s.cfg.OplogDir, Fsync: s.cfg.OplogFsync})
	if err != nil {
		return fmt.Errorf("store master: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.PersistTimeout)
	st, err := be.Load(ctx)
	cancel()
	if err == nil {
		err = svc.restore(st, be)
	}
	if err != nil {
		be.Close()
		return fmt.Errorf("store master: restore from %s: %w", s.cfg.OplogDir, err)
	}
	s.oplog = be
	return nil
}

// restoreFromEtcd loads a new HA leader's state from the cluster's log in
// etcd; its writes are guarded by the leadership it won (view).
func restoreFromEtcd(ctx context.Context, svc *Service, cli *clientv3.Client, clusterID string, view ha.View) error {
	guard := clientv3.Compare(clientv3.CreateRevision(ha.MasterViewKey(clusterID)), "=", int64(view.Version))
	be := oplog.NewEtcd(oplog.EtcdConfig{Client: cli, Prefix: oplog.EtcdPrefix(clusterID), Guard: &guard})
	lctx, cancel := context.WithTimeout(ctx, svc.cfg.PersistTimeout)
	defer cancel()
	st, err := be.Load(lctx)
	if err != nil {
		return err
	}
	return svc.restore(st, be)
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
