// Package connstr parses Mooncake's metadata connection strings
// (specs/mooncake.md §3.1): "P2PHANDSHAKE" is the P2P handshake,
// "http://…" and "https://…" the HTTP metadata protocol, "etcd://h:p[,h:p]"
// and a bare "h:p[,h:p]" etcd. It is pure data with no dependencies beyond
// the standard library, so its fuzz target runs in a small binary; package
// open opens the backend a string names, and the etcd and http backends
// check their endpoints with it.
package connstr

import (
	"errors"
	"fmt"
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
	KindP2P  Kind = "p2p"
	KindHTTP Kind = "http"
	KindEtcd Kind = "etcd"
)

// Conn is a parsed connection string.
type Conn struct {
	// Kind is the service type.
	Kind Kind
	// URL is the endpoint URL (KindHTTP).
	URL string
	// Endpoints lists etcd "host:port" endpoints (KindEtcd).
	Endpoints []string
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

// String returns the connection in its canonical form.
func (c Conn) String() string {
	switch c.Kind {
	case KindP2P:
		return P2PHandshake
	case KindHTTP:
		return c.URL
	case KindEtcd:
		return EtcdScheme + strings.Join(c.Endpoints, ",")
	}
	return "<invalid>"
}

// Parse parses a connection string as Mooncake does: exactly
// "P2PHANDSHAKE"; a "<scheme>://" prefix selects http, https or etcd; no
// scheme means etcd. redis is recognised and refused (not implemented).
func Parse(conn string) (Conn, error) {
	s := strings.TrimSpace(conn)
	if s == "" {
		return Conn{}, fmt.Errorf("%w: empty (want %s, http://host:port/path or etcd://host:port)", ErrBadConn, P2PHandshake)
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
	case "redis":
		return Conn{}, fmt.Errorf("%w: %q: redis metadata is not supported (use etcd or http)", ErrBadConn, conn)
	}
	return Conn{}, fmt.Errorf("%w: %q: unknown scheme %q (want http, https or etcd)", ErrBadConn, conn, scheme)
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
