// Package rpc implements Mooncake's socket RPC on the engine's RPC
// (handshake) port: one request per TCP connection, framed as a
// little-endian u64 length, a type byte and a JSON body
// (specs/mooncake.md §3.6). The engine answers Metadata, Notify and Probe
// requests on it; peers use it for the P2P handshake and notifications.
package rpc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/kvferry/kvferry/internal/netguard"
)

// Type is the request type byte of a frame.
type Type uint8

// Request types (specs/mooncake.md §3.6).
const (
	TypeConnection Type = 0
	TypeMetadata   Type = 1
	TypeNotify     Type = 2
	TypeProbe      Type = 3
	// TypeLegacy marks a frame from a peer that predates the type byte; it
	// is treated as a Connection request and answered without a type byte.
	TypeLegacy Type = 0xff
)

// KeepAlive is a flag of the type byte (kvferry's extension, sent only to
// peers announcing descriptor.FeatureRPCKeepAlive): the client keeps the
// connection for further requests, so the server answers with the same
// type byte and reads the next request instead of closing. No Mooncake
// frame has it: their type bytes are 0-3, and a legacy frame starts with
// JSON text ('{' has the bit, but '{' without it is no type).
const KeepAlive Type = 0x40

// Base returns t without the KeepAlive flag.
func (t Type) Base() Type {
	if t != TypeLegacy && t&KeepAlive != 0 && t&^KeepAlive <= TypeProbe {
		return t &^ KeepAlive
	}
	return t
}

// String returns the type's name.
func (t Type) String() string {
	if b := t.Base(); b != t {
		return b.String() + "+keepalive"
	}
	switch t {
	case TypeConnection:
		return "connection"
	case TypeMetadata:
		return "metadata"
	case TypeNotify:
		return "notify"
	case TypeProbe:
		return "probe"
	case TypeLegacy:
		return "legacy"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// DefaultMaxMessage is the default cap on a frame's length
// (MC_HANDSHAKE_MAX_LENGTH); MaxMaxMessage is the largest allowed cap.
const (
	DefaultMaxMessage = 1 << 20
	MaxMaxMessage     = 128 << 20
)

// keyedHello is the length field a cluster-key handshake (peerauth's
// client hello, "KVFAUTH1") reads as: a node without a key says why it
// cannot serve that peer.
var keyedHello = binary.LittleEndian.Uint64([]byte("KVFAUTH1"))

// ErrFrame is returned (wrapped) for a frame that breaks the framing rules.
var ErrFrame = errors.New("bad rpc frame")

// AppendFrame appends the encoding of one frame to dst. A TypeLegacy frame
// has no type byte.
func AppendFrame(dst []byte, t Type, body []byte) []byte {
	n := uint64(len(body))
	if t != TypeLegacy {
		n++
	}
	dst = binary.LittleEndian.AppendUint64(dst, n)
	if t != TypeLegacy {
		dst = append(dst, byte(t))
	}
	return append(dst, body...)
}

// WriteFrame writes one frame to w in a single Write call.
func WriteFrame(w io.Writer, t Type, body []byte) error {
	_, err := w.Write(AppendFrame(make([]byte, 0, 9+len(body)), t, body))
	if err != nil {
		return fmt.Errorf("write %s frame: %w", t, err)
	}
	return nil
}

// DecodeFrame decodes one complete frame from buf, returning the type, the
// body (a sub-slice of buf) and the number of bytes used. It returns
// io.ErrUnexpectedEOF when buf holds only part of a frame.
func DecodeFrame(buf []byte, maxLen uint64) (Type, []byte, int, error) {
	if len(buf) < 8 {
		return 0, nil, 0, io.ErrUnexpectedEOF
	}
	n := binary.LittleEndian.Uint64(buf)
	if n == 0 || n > maxLen {
		return 0, nil, 0, fmt.Errorf("%w: length %d outside 1..%d", ErrFrame, n, maxLen)
	}
	if uint64(len(buf)-8) < n {
		return 0, nil, 0, io.ErrUnexpectedEOF
	}
	payload := buf[8 : 8+n]
	t, body := split(payload)
	return t, body, int(8 + n), nil
}

func split(payload []byte) (Type, []byte) {
	if t := Type(payload[0]); t.Base() <= TypeProbe {
		return t, payload[1:]
	}
	return TypeLegacy, payload
}

// ReadFrame reads one frame from r. Frames of length zero or above maxLen
// are rejected before their body is read.
func ReadFrame(r io.Reader, maxLen uint64) (Type, []byte, error) {
	var hdr [8]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, fmt.Errorf("read frame length: %w", err)
	}
	n := binary.LittleEndian.Uint64(hdr[:])
	if n == keyedHello {
		return 0, nil, fmt.Errorf("%w: a kvferry peer with a cluster key, but this node has none (set KVFERRY_AUTH_KEY_FILE)", ErrFrame)
	}
	if n == 0 || n > maxLen {
		return 0, nil, fmt.Errorf("%w: length %d outside 1..%d", ErrFrame, n, maxLen)
	}
	// Allocated as the bytes arrive: a peer that claims a large frame and
	// sends little costs little.
	payload, err := netguard.ReadFull(r, nil, int(n))
	if err != nil {
		return 0, nil, fmt.Errorf("read frame body (%d bytes): %w", n, err)
	}
	t, body := split(payload)
	return t, body, nil
}
