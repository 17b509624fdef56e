// Package peerauth authenticates kvferry peers to each other with a shared
// cluster key: a mutual challenge-response at the start of every
// connection (socket RPC, TCP data, same-host control, store master,
// HTTP metadata), before the first byte of payload. It is opt-in: with no
// key nothing is added to any wire, which then stays exactly Mooncake's.
//
// The construction is HMAC-SHA256 over a transcript that holds both sides'
// fresh 32-byte nonces, the connection's role and the key chosen, keyed by
// a key derived from the cluster key. The server proves itself first, so a
// peer that does not hold the key learns nothing beyond the server's
// nonce; a client proves itself before it sends any request. It costs one
// round trip per connection and nothing per request. It authenticates the
// peers, not each later byte: where the network itself is hostile (an
// attacker who can inject into an established TCP stream) the control
// plane can add TLS (docs/guide/security.md).
//
// Key rotation: a key file may hold two keys, one per line. A node proves
// with the first key its peer also holds and accepts either, so a cluster
// rolls over by (1) giving every node both keys, (2) moving the new key to
// the first line everywhere, (3) dropping the old one.
package peerauth

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
)

// MinKeyBytes is the shortest key accepted (32 random bytes in base64 are
// 44 characters).
const MinKeyBytes = 16

// MaxKeys is how many keys a key file may hold (two during a rollover).
const MaxKeys = 2

// maxKeyFileBytes bounds a key file.
const maxKeyFileBytes = 64 << 10

// ErrBadKey is returned (wrapped) for a key file that cannot be used.
var ErrBadKey = errors.New("bad cluster key")

// Keys is a node's cluster keys, the one it proves with first. It is
// immutable and safe for concurrent use; a nil *Keys means authentication
// is off.
type Keys struct {
	keys []key
}

type key struct {
	id   [8]byte  // names the key on the wire without revealing it
	auth [32]byte // HMAC key of the handshake
}

// ParseKeys reads keys from text: one key per non-empty line, surrounding
// whitespace ignored. A key is the text itself (base64, hex or any other
// printable form works alike on every node), at least MinKeyBytes long.
func ParseKeys(text []byte) (*Keys, error) {
	var ks Keys
	for _, line := range bytes.Split(text, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		if len(line) < MinKeyBytes {
			return nil, fmt.Errorf("%w: a key of %d bytes (at least %d)", ErrBadKey, len(line), MinKeyBytes)
		}
		if len(ks.keys) == MaxKeys {
			return nil, fmt.Errorf("%w: more than %d keys", ErrBadKey, MaxKeys)
		}
		k := derive(line)
		for _, o := range ks.keys {
			if o.id == k.id {
				return nil, fmt.Errorf("%w: the same key twice", ErrBadKey)
			}
		}
		ks.keys = append(ks.keys, k)
	}
	if len(ks.keys) == 0 {
		return nil, fmt.Errorf("%w: no key", ErrBadKey)
	}
	return &ks, nil
}

// LoadKeyFile reads keys from the file at path (ParseKeys). A file that
// others may read is refused: the key would be theirs too.
func LoadKeyFile(path string) (*Keys, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cluster key file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("cluster key file: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s is readable by group or others (mode %v); chmod 600 it", ErrBadKey, path, fi.Mode().Perm())
	}
	if fi.Size() > maxKeyFileBytes {
		return nil, fmt.Errorf("%w: %s has %d bytes", ErrBadKey, path, fi.Size())
	}
	text := make([]byte, fi.Size())
	if _, err := f.ReadAt(text, 0); err != nil && fi.Size() > 0 {
		return nil, fmt.Errorf("cluster key file: %w", err)
	}
	ks, err := ParseKeys(text)
	if err != nil {
		return nil, fmt.Errorf("cluster key file %s: %w", path, err)
	}
	return ks, nil
}

func derive(text []byte) key {
	var k key
	m := hmac.New(sha256.New, text)
	m.Write([]byte("kvferry peerauth v1 key id"))
	copy(k.id[:], m.Sum(nil))
	m = hmac.New(sha256.New, text)
	m.Write([]byte("kvferry peerauth v1 handshake key"))
	copy(k.auth[:], m.Sum(nil))
	return k
}

// Fingerprint names the first key for logs (its id in hex; it reveals
// nothing of the key).
func (k *Keys) Fingerprint() string {
	if k == nil {
		return ""
	}
	return hex.EncodeToString(k.keys[0].id[:])
}

// Len returns the number of keys.
func (k *Keys) Len() int {
	if k == nil {
		return 0
	}
	return len(k.keys)
}

// byID returns the key called id, or nil.
func (k *Keys) byID(id [8]byte) *key {
	for i := range k.keys {
		if k.keys[i].id == id {
			return &k.keys[i]
		}
	}
	return nil
}
