// Package connstr parses Mooncake's metadata connection strings
// (specs/mooncake.md §3.1): "P2PHANDSHAKE" is the P2P handshake,
// "http://…" and "https://…" the HTTP metadata protocol, "etcd://h:p[,h:p]"
// and a bare "h:p[,h:p]" etcd, "redis://[user:password@]h[:p][/db]" and
// "rediss://…" (TLS) Redis. It is pure data with no dependencies beyond
// the standard library, so its fuzz target runs in a small binary; package
// open opens the backend a string names, and the etcd and http backends
// check their endpoints with it.
package connstr

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// P2PHandshake is the connection string of the P2P mode.
const P2PHandshake = "P2PHANDSHAKE"

// EtcdScheme is the connection-string scheme of etcd.
const EtcdScheme = "etcd://"

// ErrBadConn is returned (wrapped) for a connection string that cannot be
// used: empty, malformed, or naming an unsupported service.
var ErrBadConn = errors.New("bad metadata connection string")

// Kind names a metadata service type.
type Kind string

// Service kinds.
const (
	KindP2P   Kind = "p2p"
	KindHTTP  Kind = "http"
	KindEtcd  Kind = "etcd"
	KindRedis Kind = "redis"
)

// Redis defaults.
const (
	// RedisScheme and RedissScheme are the connection-string schemes of
	// Redis over plain TCP and over TLS.
	RedisScheme  = "redis://"
	RedissScheme = "rediss://"
	// RedisDefaultPort is the port of a Redis URL without one (Redis's
	// own default; Mooncake, which has no default of its own for Redis,
	// always gives the port).
	RedisDefaultPort = 6379
)

// Redis is a parsed redis:// or rediss:// connection string.
type Redis struct {
	// Addr is "host:port".
	Addr string
	// Username and Password come from the URL's user information; an
	// empty Username with a Password is Redis's "default" user (AUTH
	// password).
	Username, Password string
	// DB is the database index of the path ("/2"); HasDB reports whether
	// the URL gave one (else MC_REDIS_DB_INDEX or 0 applies).
	DB    int
	HasDB bool
	// TLS is set for rediss://.
	TLS bool
}

// String returns the URL with the password replaced by "***", so that it
// can be logged.
func (r Redis) String() string {
	var b strings.Builder
	if r.TLS {
		b.WriteString(RedissScheme)
	} else {
		b.WriteString(RedisScheme)
	}
	if r.Password != "" {
		b.WriteString(url.User(r.Username).String())
		b.WriteString(":***@")
	}
	b.WriteString(r.Addr)
	if r.HasDB {
		b.WriteString("/" + strconv.Itoa(r.DB))
	}
	return b.String()
}

// Conn is a parsed connection string.
type Conn struct {
	// Kind is the service type.
	Kind Kind
	// URL is the endpoint URL (KindHTTP).
	URL string
	// Endpoints lists etcd "host:port" endpoints (KindEtcd).
	Endpoints []string
	// Redis holds the parts of a Redis URL (KindRedis).
	Redis Redis
}

// Hosts returns the hosts the connection reaches (none for P2P).
func (c Conn) Hosts() []string {
	switch c.Kind {
	case KindHTTP:
		if u, err := ParseHTTPURL(c.URL); err == nil {
			return []string{u.Hostname()}
		}
	case KindEtcd:
		hosts := make([]string, 0, len(c.Endpoints))
		for _, ep := range c.Endpoints {
			ep = strings.TrimPrefix(strings.TrimPrefix(ep, "http://"), "https://")
			if h, _, err := net.SplitHostPort(ep); err == nil {
				hosts = append(hosts, h)
			}
		}
		return hosts
	case KindRedis:
		if h, _, err := net.SplitHostPort(c.Redis.Addr); err == nil {
			return []string{h}
		}
	}
	return nil
}

// Remote reports whether the metadata service may be on another machine:
// it has a host that is not loopback. The engine warns when it advertises
// a loopback or link-local address while Remote is true.
func (c Conn) Remote() bool {
	for _, h := range c.Hosts() {
		if !IsLoopbackOrLinkLocal(h) {
			return true
		}
	}
	return false
}

// String returns the connection in its canonical form; a Redis password
// is shown as "***" (Redis.String), so the result is safe to log.
func (c Conn) String() string {
	switch c.Kind {
	case KindP2P:
		return P2PHandshake
	case KindHTTP:
		return c.URL
	case KindEtcd:
		return EtcdScheme + strings.Join(c.Endpoints, ",")
	case KindRedis:
		return c.Redis.String()
	}
	return "<invalid>"
}

// Parse parses a connection string as Mooncake does: exactly
// "P2PHANDSHAKE"; a "<scheme>://" prefix selects http, https or etcd; no
// scheme means etcd; "redis://" and "rediss://" select Redis (ParseRedis).
func Parse(conn string) (Conn, error) {
	s := strings.TrimSpace(conn)
	if s == "" {
		return Conn{}, fmt.Errorf("%w: empty (want %s, http://host:port/path, etcd://host:port or redis://host:port)", ErrBadConn, P2PHandshake)
	}
	if s == P2PHandshake {
		return Conn{Kind: KindP2P}, nil
	}
	if len(s) >= len(P2PHandshake) && strings.EqualFold(s[:len(P2PHandshake)], P2PHandshake) {
		return Conn{}, fmt.Errorf("%w: %q: the P2P mode is spelled exactly %s", ErrBadConn, conn, P2PHandshake)
	}
	scheme, _, hasScheme := strings.Cut(s, "://")
	if !hasScheme {
		eps, err := ParseEtcdEndpoints(s)
		if err != nil {
			return Conn{}, fmt.Errorf("%w: %w", ErrBadConn, err)
		}
		return Conn{Kind: KindEtcd, Endpoints: eps}, nil
	}
	switch strings.ToLower(scheme) {
	case "http", "https":
		if scheme != "http" && scheme != "https" {
			return Conn{}, fmt.Errorf("%w: %q: scheme must be lower case", ErrBadConn, conn)
		}
		if _, err := ParseHTTPURL(s); err != nil {
			return Conn{}, fmt.Errorf("%w: %w", ErrBadConn, err)
		}
		return Conn{Kind: KindHTTP, URL: s}, nil
	case "etcd":
		if scheme != "etcd" {
			return Conn{}, fmt.Errorf("%w: %q: scheme must be lower case", ErrBadConn, conn)
		}
		eps, err := ParseEtcdEndpoints(s)
		if err != nil {
			return Conn{}, fmt.Errorf("%w: %w", ErrBadConn, err)
		}
		return Conn{Kind: KindEtcd, Endpoints: eps}, nil
	case "redis", "rediss":
		r, err := ParseRedis(s)
		if err != nil {
			return Conn{}, fmt.Errorf("%w: %w", ErrBadConn, err)
		}
		return Conn{Kind: KindRedis, Redis: r}, nil
	}
	return Conn{}, fmt.Errorf("%w: %q: unknown scheme %q (want http, https, etcd, redis or rediss)", ErrBadConn, Redact(conn), scheme)
}

// ParseRedis parses a Redis connection string:
// "redis://[[user]:password@]host[:port][/db]" or "rediss://…" (TLS), the
// URL form Redis clients share. The scheme is lower case; the port
// defaults to RedisDefaultPort; db is a non-negative database index; user
// information without a password, a query, a fragment and any other path
// are refused. Errors never show the password.
func ParseRedis(conn string) (Redis, error) {
	shown := Redact(conn)
	var r Redis
	switch {
	case strings.HasPrefix(conn, RedisScheme):
	case strings.HasPrefix(conn, RedissScheme):
		r.TLS = true
	default:
		return Redis{}, fmt.Errorf("redis url %q: scheme must be redis:// or rediss:// (lower case)", shown)
	}
	u, err := url.Parse(conn)
	if err != nil {
		// url.Error quotes the input: say what is wrong without it.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return Redis{}, fmt.Errorf("redis url %q: %w", shown, err)
	}
	switch {
	case u.Opaque != "":
		return Redis{}, fmt.Errorf("redis url %q: want redis://host:port", shown)
	case u.RawQuery != "" || u.ForceQuery:
		return Redis{}, fmt.Errorf("redis url %q: query parameters are not supported", shown)
	case u.Fragment != "" || strings.Contains(conn, "#"):
		return Redis{}, fmt.Errorf("redis url %q: fragments are not allowed", shown)
	}
	host := u.Hostname()
	if host == "" {
		return Redis{}, fmt.Errorf("redis url %q: no host", shown)
	}
	if strings.ContainsAny(host, " /?#@%[]") || (strings.Contains(host, ":") && net.ParseIP(host) == nil) ||
		(strings.Contains(host, ":") && !strings.HasPrefix(u.Host, "[")) {
		return Redis{}, fmt.Errorf("redis url %q: bad host %q", shown, host)
	}
	port := RedisDefaultPort
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 || n > 65535 {
			return Redis{}, fmt.Errorf("redis url %q: bad port %q", shown, p)
		}
		port = n
	} else if strings.HasSuffix(u.Host, ":") {
		return Redis{}, fmt.Errorf("redis url %q: empty port", shown)
	}
	r.Addr = net.JoinHostPort(host, strconv.Itoa(port))
	if u.User != nil {
		pw, ok := u.User.Password()
		if !ok || pw == "" {
			return Redis{}, fmt.Errorf("redis url %q: user information without a password (want [user]:password@)", shown)
		}
		r.Username, r.Password = u.User.Username(), pw
		if strings.ContainsAny(r.Username+r.Password, "\r\n\x00") {
			return Redis{}, fmt.Errorf("redis url %q: control characters in the user information", shown)
		}
	}
	if path := u.Path; path != "" && path != "/" {
		db, err := strconv.Atoi(path[1:])
		if err != nil || db < 0 || db > math.MaxInt32 || path[1:] != strconv.Itoa(db) {
			return Redis{}, fmt.Errorf("redis url %q: path %q: want /<database index>", shown, path)
		}
		r.DB, r.HasDB = db, true
	}
	return r, nil
}

// Redact returns conn with the password of a URL's user information
// ("scheme://user:password@host…") replaced by "***", for logs and error
// messages; anything else is returned as it is.
func Redact(conn string) string {
	scheme, rest, ok := strings.Cut(conn, "://")
	if !ok {
		return conn
	}
	authority := rest
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority = rest[:i]
	}
	at := strings.LastIndex(authority, "@")
	if at < 0 {
		return conn
	}
	user, _, hasPW := strings.Cut(authority[:at], ":")
	if !hasPW {
		user = "***"
	} else {
		user += ":***"
	}
	return scheme + "://" + user + rest[at:]
}

// ParseEtcdEndpoints parses Mooncake's etcd connection string:
// "etcd://h:p[,h:p…]" or the bare list "h:p[,h:p…]" (';' also separates).
// Every endpoint must be host:port with a port in 1..65535.
func ParseEtcdEndpoints(conn string) ([]string, error) {
	list := strings.TrimPrefix(conn, EtcdScheme)
	if strings.Contains(list, "://") {
		return nil, fmt.Errorf("etcd connection string %q: unexpected scheme", conn)
	}
	var eps []string
	for _, ep := range strings.FieldsFunc(list, func(r rune) bool { return r == ',' || r == ';' }) {
		ep = strings.TrimSpace(ep)
		if ep == "" {
			continue
		}
		if err := CheckEtcdEndpoint(ep); err != nil {
			return nil, fmt.Errorf("etcd connection string %q: %w", conn, err)
		}
		eps = append(eps, ep)
	}
	if len(eps) == 0 {
		return nil, fmt.Errorf("etcd connection string %q: no endpoints", conn)
	}
	return eps, nil
}

// CheckEtcdEndpoint checks one etcd endpoint: host:port, optionally with
// an http:// or https:// prefix, a port in 1..65535.
func CheckEtcdEndpoint(ep string) error {
	hp := ep
	if rest, ok := strings.CutPrefix(ep, "http://"); ok {
		hp = rest
	} else if rest, ok := strings.CutPrefix(ep, "https://"); ok {
		hp = rest
	}
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		return fmt.Errorf("endpoint %q: want host:port: %w", ep, err)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n <= 0 || n > 65535 {
		return fmt.Errorf("endpoint %q: bad port %q", ep, port)
	}
	if host == "" || strings.ContainsAny(host, "/ ?#@") {
		return fmt.Errorf("endpoint %q: bad host %q", ep, host)
	}
	return nil
}

// ParseHTTPURL checks a metadata URL: scheme http or https, a host, no
// fragment and no user information.
func ParseHTTPURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("http metadata url %q: %w", raw, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("http metadata url %q: scheme must be http or https", raw)
	case u.Host == "" || u.Hostname() == "":
		return nil, fmt.Errorf("http metadata url %q: no host", raw)
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return nil, fmt.Errorf("http metadata url %q: fragments are not allowed", raw)
	case u.User != nil:
		return nil, fmt.Errorf("http metadata url %q: user information is not supported", raw)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n <= 0 || n > 65535 {
			return nil, fmt.Errorf("http metadata url %q: bad port %q", raw, p)
		}
	}
	return u, nil
}

// IsLoopbackOrLinkLocal reports whether host is an IP literal (or
// "localhost") that other machines cannot reach: loopback, link-local or
// unspecified. It serves the engine's start-up diagnostics.
func IsLoopbackOrLinkLocal(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	if ip == nil {
		return false
	}
	return ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsUnspecified()
}
