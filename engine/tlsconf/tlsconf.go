// Package tlsconf loads the TLS configuration of kvferry's control plane
// (socket RPC with notifications, store master, HTTP metadata) from PEM
// files: a node's certificate and key, and the CA that signs its peers.
// With a CA, both sides verify each other (mutual TLS). TLS 1.3 only.
// The data plane (TCP data port) stays unencrypted: it carries KV cache at
// line rate, and is protected by the cluster key (engine/peerauth).
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
)

// Files names the PEM files (KVFERRY_TLS_CERT_FILE, KVFERRY_TLS_KEY_FILE,
// KVFERRY_TLS_CA_FILE). The zero value means TLS is off.
type Files struct {
	// Cert and Key are this node's certificate chain and private key.
	Cert, Key string
	// CA holds the certificates that sign peers: servers are verified
	// against it, and a server with a CA requires client certificates
	// signed by it.
	CA string
}

// Enabled reports whether any file is named.
func (f Files) Enabled() bool { return f.Cert != "" || f.Key != "" || f.CA != "" }

// Pair is a node's TLS configuration as a server and as a client. A nil
// *Pair means TLS is off.
type Pair struct {
	Server *tls.Config // nil when the node has no certificate
	Client *tls.Config
}

// ErrFiles is returned (wrapped) for files that cannot make a
// configuration.
var ErrFiles = errors.New("bad TLS files")

// Load reads f. It returns nil, nil when f names nothing. A node needs a CA
// to verify its servers; it needs a certificate and key to serve.
func Load(f Files) (*Pair, error) {
	if !f.Enabled() {
		return nil, nil
	}
	if (f.Cert == "") != (f.Key == "") {
		return nil, fmt.Errorf("%w: a certificate needs its key and a key its certificate", ErrFiles)
	}
	if f.CA == "" {
		return nil, fmt.Errorf("%w: no CA file to verify peers with (KVFERRY_TLS_CA_FILE)", ErrFiles)
	}
	pem, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFiles, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%w: no certificate in %s", ErrFiles, f.CA)
	}
	p := &Pair{Client: &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool}}
	if f.Cert != "" {
		cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrFiles, err)
		}
		p.Client.Certificates = []tls.Certificate{cert}
		p.Server = &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert},
			ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert,
			// gRPC clients insist on ALPN "h2"; mux clients offer none.
			NextProtos: []string{"h2"}}
	}
	return p, nil
}

// ServerConfig returns p's server side, nil when p is nil.
func (p *Pair) ServerConfig() *tls.Config {
	if p == nil {
		return nil
	}
	return p.Server
}

// ClientConfig returns p's client side, nil when p is nil.
func (p *Pair) ClientConfig() *tls.Config {
	if p == nil {
		return nil
	}
	return p.Client
}

// ForAddr returns cfg with ServerName set to addr's host when cfg names
// none, so a server's certificate is checked against the address dialed.
func ForAddr(cfg *tls.Config, addr string) *tls.Config {
	if cfg.ServerName != "" {
		return cfg
	}
	c := cfg.Clone()
	if h, _, err := net.SplitHostPort(addr); err == nil {
		c.ServerName = h
	} else {
		c.ServerName = addr
	}
	return c
}
