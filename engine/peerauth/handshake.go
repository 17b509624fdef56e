package peerauth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
)

// Role is the service a connection is for. It is bound into the proofs,
// so a handshake made for one port cannot be used on another.
type Role uint8

// Roles.
const (
	RoleRPC      Role = 1 // engine socket RPC: handshake, metadata, notify, probe, RDMA connect
	RoleData     Role = 2 // TCP data port
	RoleSameHost Role = 3 // same-host control socket (cma, shm)
	RoleMaster   Role = 4 // store master, gRPC and mux
	RoleMetadata Role = 5 // HTTP metadata server
	roleEnd      Role = 6
)

// String names the role.
func (r Role) String() string {
	switch r {
	case RoleRPC:
		return "rpc"
	case RoleData:
		return "data"
	case RoleSameHost:
		return "samehost"
	case RoleMaster:
		return "master"
	case RoleMetadata:
		return "metadata"
	}
	return fmt.Sprintf("role(%d)", uint8(r))
}

// The handshake (all sizes fixed; integers are single bytes):
//
//	client hello, 64 bytes:  "KVFAUTH1" | role | key count (1-2) | 6 zero bytes |
//	                         client nonce (32) | key id 0 (8) | key id 1 (8, zero if one key)
//	server hello, 88 bytes:  "KVFAUTHS" | role | status | 6 zero bytes |
//	                         server nonce (32) | chosen key id (8) | server proof (32)
//	client proof, 40 bytes:  "KVFAUTHC" | client proof (32)
//
//	server proof = HMAC-SHA256(k, "kvferry peerauth v1 server" | client hello | server hello[:56])
//	client proof = HMAC-SHA256(k, "kvferry peerauth v1 client" | client hello | server hello)
//
// where k is the handshake key derived from the chosen cluster key. A
// status other than statusOK comes with a zero proof, and the server
// closes the connection. The client sends its proof and, at once, its
// first request: one round trip in all.
const (
	ClientHelloBytes = 64
	ServerHelloBytes = 88
	ClientProofBytes = 40

	statusOK       = 0
	statusNoKey    = 1 // no key in common
	statusBadRole  = 2 // the connection is for another service
	nonceBytes     = 32
	serverMACStart = 56
)

var (
	magicClient = [8]byte{'K', 'V', 'F', 'A', 'U', 'T', 'H', '1'}
	magicServer = [8]byte{'K', 'V', 'F', 'A', 'U', 'T', 'H', 'S'}
	magicProof  = [8]byte{'K', 'V', 'F', 'A', 'U', 'T', 'H', 'C'}
	labelServer = []byte("kvferry peerauth v1 server")
	labelClient = []byte("kvferry peerauth v1 client")
)

// Errors of a handshake, wrapped with what happened.
var (
	// ErrNoHandshake: the peer did not speak the handshake at all (a
	// Mooncake node, or kvferry without a cluster key).
	ErrNoHandshake = errors.New("peer did not authenticate: no kvferry cluster key handshake (a Mooncake peer, or kvferry without KVFERRY_AUTH_KEY_FILE)")
	// ErrRefused: the peer spoke the handshake and its proof, or its key,
	// is not ours.
	ErrRefused = errors.New("peer authentication failed")
)

// IsClientHello reports whether b (at least 8 bytes) starts a client
// hello; a server without a key uses it to log why it cannot serve.
func IsClientHello(b []byte) bool { return len(b) >= 8 && [8]byte(b[:8]) == magicClient }

// randReader supplies nonces; golden tests replace it.
var randReader io.Reader = rand.Reader

func mac(k *key, label []byte, parts ...[]byte) [32]byte {
	m := hmac.New(sha256.New, k.auth[:])
	m.Write(label)
	for _, p := range parts {
		m.Write(p)
	}
	var out [32]byte
	copy(out[:], m.Sum(nil))
	return out
}

// Client runs the client side on c: it proves the peer holds a key of ks
// and then proves itself. The caller bounds it with c's deadline.
func Client(c io.ReadWriter, ks *Keys, role Role) error {
	var ch [ClientHelloBytes]byte
	copy(ch[:], magicClient[:])
	ch[8] = byte(role)
	ch[9] = byte(len(ks.keys))
	if _, err := io.ReadFull(randReader, ch[16:48]); err != nil {
		return fmt.Errorf("auth: nonce: %w", err)
	}
	for i, k := range ks.keys {
		copy(ch[48+8*i:], k.id[:])
	}
	if _, err := c.Write(ch[:]); err != nil {
		return fmt.Errorf("auth: send hello: %w", err)
	}
	var sh [ServerHelloBytes]byte
	if n, err := io.ReadFull(c, sh[:]); err != nil {
		if n < 8 || [8]byte(sh[:8]) != magicServer {
			return fmt.Errorf("auth: %w (%d bytes then %v)", ErrNoHandshake, n, err)
		}
		return fmt.Errorf("auth: read server hello: %w", err)
	}
	if [8]byte(sh[:8]) != magicServer {
		return fmt.Errorf("auth: %w (got %q)", ErrNoHandshake, sh[:8])
	}
	switch sh[9] {
	case statusOK:
	case statusNoKey:
		return fmt.Errorf("auth: %w: the peer holds none of our keys (%s)", ErrRefused, ks.Fingerprint())
	case statusBadRole:
		return fmt.Errorf("auth: %w: the peer does not serve %s here", ErrRefused, role)
	default:
		return fmt.Errorf("auth: %w: status %d", ErrRefused, sh[9])
	}
	if Role(sh[8]) != role {
		return fmt.Errorf("auth: %w: answer for role %d", ErrRefused, sh[8])
	}
	k := ks.byID([8]byte(sh[48:56]))
	if k == nil {
		return fmt.Errorf("auth: %w: the peer chose a key we did not offer", ErrRefused)
	}
	want := mac(k, labelServer, ch[:], sh[:serverMACStart])
	if !hmac.Equal(want[:], sh[serverMACStart:]) {
		return fmt.Errorf("auth: %w: the peer's proof is wrong (it does not hold the key)", ErrRefused)
	}
	var cp [ClientProofBytes]byte
	copy(cp[:], magicProof[:])
	p := mac(k, labelClient, ch[:], sh[:])
	copy(cp[8:], p[:])
	if _, err := c.Write(cp[:]); err != nil {
		return fmt.Errorf("auth: send proof: %w", err)
	}
	return nil
}

// Server runs the server side on c for role: it reads the client's hello,
// proves itself with the first key of ks the client also holds, and checks
// the client's proof. The caller bounds it with c's deadline. On any error
// the caller closes c; nothing else may be read from or written to it.
func Server(c io.ReadWriter, ks *Keys, role Role) error {
	var ch [ClientHelloBytes]byte
	// One read of the whole hello: on a stream the first bytes tell a
	// peer without the handshake at once, and on a packet socket
	// (same-host) the hello is one message, which a short read would cut.
	n, err := io.ReadAtLeast(c, ch[:], 8)
	if err != nil {
		return fmt.Errorf("auth: %w (%d bytes then %v)", ErrNoHandshake, n, err)
	}
	if [8]byte(ch[:8]) != magicClient {
		return fmt.Errorf("auth: %w (first bytes %x)", ErrNoHandshake, ch[:8])
	}
	if _, err := io.ReadFull(c, ch[n:]); err != nil {
		return fmt.Errorf("auth: read hello: %w", err)
	}
	var sh [ServerHelloBytes]byte
	copy(sh[:], magicServer[:])
	sh[8] = byte(role)
	refuse := func(status byte, err error) error {
		sh[9] = status
		_, _ = c.Write(sh[:])
		return err
	}
	if Role(ch[8]) != role {
		return refuse(statusBadRole, fmt.Errorf("auth: %w: a %s handshake on the %s port", ErrRefused, Role(ch[8]), role))
	}
	n = int(ch[9])
	if n < 1 || n > MaxKeys {
		return refuse(statusNoKey, fmt.Errorf("auth: %w: hello with %d keys", ErrRefused, n))
	}
	var k *key
	for i := range ks.keys { // our order: the first key of ours the peer holds
		for j := range n {
			if [8]byte(ch[48+8*j:56+8*j]) == ks.keys[i].id {
				k = &ks.keys[i]
				break
			}
		}
		if k != nil {
			break
		}
	}
	if k == nil {
		return refuse(statusNoKey, fmt.Errorf("auth: %w: the peer holds none of our keys", ErrRefused))
	}
	if _, err := io.ReadFull(randReader, sh[16:48]); err != nil {
		return fmt.Errorf("auth: nonce: %w", err)
	}
	copy(sh[48:56], k.id[:])
	p := mac(k, labelServer, ch[:], sh[:serverMACStart])
	copy(sh[serverMACStart:], p[:])
	if _, err := c.Write(sh[:]); err != nil {
		return fmt.Errorf("auth: send hello: %w", err)
	}
	var cp [ClientProofBytes]byte
	if _, err := io.ReadFull(c, cp[:]); err != nil {
		return fmt.Errorf("auth: %w: no proof (%v)", ErrRefused, err)
	}
	want := mac(k, labelClient, ch[:], sh[:])
	if [8]byte(cp[:8]) != magicProof || !hmac.Equal(want[:], cp[8:]) {
		return fmt.Errorf("auth: %w: wrong proof (wrong key, or a replayed handshake)", ErrRefused)
	}
	return nil
}
