package engine

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/kvferry/kvferry/engine/metadata"
	"github.com/kvferry/kvferry/engine/metadata/connstr"
	"github.com/kvferry/kvferry/engine/peerauth"
	"github.com/kvferry/kvferry/engine/tlsconf"
)

// Defaults (Mooncake's where one exists, specs/mooncake.md §2.4, §2.6).
const (
	DefaultMinRPCPort       = 15000
	DefaultMaxRPCPort       = 17000
	DefaultConnectTimeout   = 5 * time.Second
	DefaultTransferTimeout  = 30 * time.Second
	DefaultHandshakeMaxLen  = 1 << 20
	DefaultMetadataTimeout  = 10 * time.Second
	DefaultNotifyQueueLimit = 1 << 16
)

// TransportFactory creates the transport called name for e. It returns an
// error wrapping ErrNotSupported when the transport cannot run here.
type TransportFactory func(name string, e *Engine) (Transport, error)

// Config configures an Engine. The zero value (plus Metadata) works; every
// field names its default and the environment variable stack.ConfigFromEnv
// reads for it.
type Config struct {
	// MetadataConn is the metadata connection string, for diagnostics
	// ("P2PHANDSHAKE", "http://...", "etcd://..."). Default P2PHANDSHAKE.
	MetadataConn string
	// Metadata is the metadata backend (required; engine/stack builds it
	// from MetadataConn). The engine closes it.
	Metadata metadata.Backend
	// LocalServerName is the segment name (non-P2P), or the host whose
	// address the segment name starts with (P2P). A ":port" suffix is
	// dropped in P2P mode. Default "127.0.0.1".
	LocalServerName string
	// BindAddress is the IP the RPC and data listeners bind to and that
	// rpc_meta advertises in non-P2P mode (MC_TCP_BIND_ADDRESS). Default:
	// the P2P host when it is an IP literal, else all interfaces.
	BindAddress string
	// ListenIP, when set, is where the listeners bind instead, without
	// changing what is advertised (KVFERRY_BIND_ADDR; "0.0.0.0" or "::"
	// for all interfaces).
	ListenIP string
	// AuthKeyFile names the cluster key file (KVFERRY_AUTH_KEY_FILE). With
	// a key every connection of this engine (socket RPC, TCP data,
	// same-host) authenticates both sides before any payload
	// (engine/peerauth), and memory registered as not remotely accessible
	// is never served to a peer. Empty: no authentication, and the wire is
	// exactly Mooncake's.
	AuthKeyFile string
	// Auth is the cluster key itself; New loads AuthKeyFile into it when
	// nil.
	Auth *peerauth.Keys
	// TLSFiles name the PEM files of TLS on the socket RPC port (P2P
	// handshake, notifications, probes, RDMA connect) and on the engine's
	// connections to an https metadata server and a store master
	// (KVFERRY_TLS_CERT_FILE, KVFERRY_TLS_KEY_FILE, KVFERRY_TLS_CA_FILE;
	// engine/tlsconf). TLS is kvferry-to-kvferry only; the data port is
	// not encrypted. TLS is the loaded form; New loads TLSFiles into it
	// when nil.
	TLSFiles tlsconf.Files
	TLS      *tlsconf.Pair
	// MinRPCPort and MaxRPCPort bound the random RPC and data ports
	// (MC_MIN_RPC_PORT, MC_MAX_RPC_PORT; default 15000-17000).
	MinRPCPort, MaxRPCPort int
	// ConnectTimeout bounds dials of RPC and data connections
	// (MC_HANDSHAKE_CONNECT_TIMEOUT, default 5 s).
	ConnectTimeout time.Duration
	// HandshakeMaxLength caps RPC frames (MC_HANDSHAKE_MAX_LENGTH, 1 MiB).
	HandshakeMaxLength uint64
	// TransferTimeout is the default deadline of Wait and the bound on how
	// long Cancel waits for requests in flight (MC_TRANSFER_TIMEOUT, 30 s).
	TransferTimeout time.Duration
	// MetadataTimeout bounds one metadata operation (default 10 s).
	MetadataTimeout time.Duration
	// NewTransport creates transports by name (engine/stack sets it).
	NewTransport TransportFactory
	// Transports are installed at New, best first (default none: the
	// caller installs them, as with Mooncake's auto_discover = 0).
	Transports []string
	// ForceTransport, when set, makes every request use that transport
	// (MC_FORCE_TCP gives "tcp"; KVFERRY_TRANSPORT names one).
	ForceTransport string
	// PathChoice names the transport to take where two routes carry the
	// same requests and the engine would otherwise measure which is faster
	// (host memory on one side, another process's GPU memory on the
	// other: "nvlink" maps it, "shm" stages it; see Alternative). Empty:
	// measured (KVFERRY_GPU_HOST_PATH=map|stage|auto).
	PathChoice string
	// NoFailover keeps a slice on the transport chosen for it: a path
	// failure fails its task, and no transport is skipped for a peer
	// after failures (default false: failover on; KVFERRY_FAILOVER=off
	// sets it; see failover.go). A forced transport never fails over.
	NoFailover bool
	// AllowUnregisteredSource lets a request's local source lie outside
	// registered memory, as Mooncake's TCP transport allows (default false:
	// such tasks fail; KVFERRY_ALLOW_UNREGISTERED=1 sets it).
	AllowUnregisteredSource bool
	// Memory classifies registered memory (host, pinned, device, managed;
	// engine/stack sets the CUDA driver's classifier, engine/gpu). Nil:
	// every region is host memory and "cuda" locations are refused.
	Memory MemoryClassifier
	// NotifyQueueLimit caps received, undrained notifications (default
	// 65536); further ones are refused so the sender sees an error.
	NotifyQueueLimit int
	// NotifyQueueBytes caps the bytes of received, undrained notifications
	// (default DefaultNotifyQueueBytes, 64 MiB), and NotifyPeerBytes those
	// from one peer address (default DefaultNotifyPeerBytes, 16 MiB), so
	// neither a flood nor an application that never drains can grow
	// memory without bound.
	NotifyQueueBytes, NotifyPeerBytes int64
	// NoRequestMetrics turns off the per-request metrics (counters and
	// latency histograms per transport and peer; KVFERRY_METRICS=off), for
	// measuring what they cost.
	NoRequestMetrics bool
	// PublishDelay bounds how long a registration waits before the
	// descriptor is published to the metadata backend (default 2 ms;
	// longer while publications themselves take long, see publish.go).
	// Peers fetching the descriptor from this engine see changes at once.
	PublishDelay time.Duration
	// SpinWait bounds how long a wait polls before it parks: Wait, the TCP
	// lanes' readers and data connections, the store's master calls
	// (KVFERRY_SPIN_US, default spin.Default, 50 µs; negative: never poll,
	// no CPU spent waiting). Nothing polls while nothing is in flight.
	SpinWait time.Duration
	// Logger receives logs; nil discards them.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.MetadataConn == "" {
		c.MetadataConn = metadata.P2PHandshake
	}
	if c.LocalServerName == "" {
		c.LocalServerName = "127.0.0.1"
	}
	if c.MinRPCPort == 0 {
		c.MinRPCPort = DefaultMinRPCPort
	}
	if c.MaxRPCPort == 0 {
		c.MaxRPCPort = DefaultMaxRPCPort
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.HandshakeMaxLength == 0 {
		c.HandshakeMaxLength = DefaultHandshakeMaxLen
	}
	if c.TransferTimeout == 0 {
		c.TransferTimeout = DefaultTransferTimeout
	}
	if c.MetadataTimeout == 0 {
		c.MetadataTimeout = DefaultMetadataTimeout
	}
	if c.NotifyQueueLimit == 0 {
		c.NotifyQueueLimit = DefaultNotifyQueueLimit
	}
	if c.NotifyQueueBytes <= 0 {
		c.NotifyQueueBytes = DefaultNotifyQueueBytes
	}
	if c.NotifyPeerBytes <= 0 {
		c.NotifyPeerBytes = min(DefaultNotifyPeerBytes, c.NotifyQueueBytes)
	}
	if c.PublishDelay <= 0 {
		c.PublishDelay = DefaultPublishDelay
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.Metadata == nil:
		return fmt.Errorf("engine config: Metadata is nil: %w", ErrInvalidArgument)
	case c.MinRPCPort < 1 || c.MaxRPCPort > 65535 || c.MinRPCPort > c.MaxRPCPort:
		return fmt.Errorf("engine config: rpc port range %d-%d: %w", c.MinRPCPort, c.MaxRPCPort, ErrInvalidArgument)
	case c.HandshakeMaxLength < DefaultHandshakeMaxLen || c.HandshakeMaxLength > 128<<20:
		return fmt.Errorf("engine config: handshake max length %d outside 1 MiB-128 MiB: %w", c.HandshakeMaxLength, ErrInvalidArgument)
	case c.TransferTimeout < 0 || c.ConnectTimeout < 0 || c.MetadataTimeout < 0:
		return fmt.Errorf("engine config: negative timeout: %w", ErrInvalidArgument)
	}
	return nil
}

// String returns the effective configuration for the start-up log.
func (c Config) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "metadata=%s local_server_name=%s bind=%q listen=%q rpc_ports=%d-%d connect_timeout=%s transfer_timeout=%s transports=%v force=%q auth=%s",
		connstr.Redact(c.MetadataConn), c.LocalServerName, c.BindAddress, c.ListenIP, c.MinRPCPort, c.MaxRPCPort, c.ConnectTimeout, c.TransferTimeout, c.Transports, c.ForceTransport,
		authString(c.Auth))
	if c.TLS != nil {
		b.WriteString(" tls=on")
	}
	if c.NoFailover {
		b.WriteString(" failover=off")
	}
	return b.String()
}

func authString(k *peerauth.Keys) string {
	if k == nil {
		return "off"
	}
	return fmt.Sprintf("on(key %s, %d keys)", k.Fingerprint(), k.Len())
}

// LoadSecurity loads AuthKeyFile into Auth and TLSFiles into TLS unless
// they are set already; a file that cannot be used is an error (the
// engine never falls back to less security than it was asked for).
func (c *Config) LoadSecurity() error {
	if c.Auth == nil && c.AuthKeyFile != "" {
		ks, err := peerauth.LoadKeyFile(c.AuthKeyFile)
		if err != nil {
			return fmt.Errorf("engine config: %w: %w", err, ErrInvalidArgument)
		}
		c.Auth = ks
	}
	if c.TLS == nil && c.TLSFiles.Enabled() {
		p, err := tlsconf.Load(c.TLSFiles)
		if err != nil {
			return fmt.Errorf("engine config: %w: %w", err, ErrInvalidArgument)
		}
		c.TLS = p
	}
	return nil
}
