// Package rpc implements Mooncake's socket RPC on the engine's RPC
// (handshake) port: one request per TCP connection, framed as a
// little-endian u64 length, a type byte and a JSON body
// (specs/mooncake.md §3.6). The engine answers Metadata, Notify and Probe
// requests on it; peers use it for the P2P handshake and notifications.
package rpc

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/kvferry/kvferry/engine/rpc/rpcframe"
	"github.com/kvferry/kvferry/internal/netguard"
)

// Type is the request type byte of a frame (rpcframe.Type).
type Type = rpcframe.Type

// Request types and the KeepAlive flag (rpcframe).
const (
	TypeConnection = rpcframe.TypeConnection
	TypeMetadata   = rpcframe.TypeMetadata
	TypeNotify     = rpcframe.TypeNotify
	TypeProbe      = rpcframe.TypeProbe
	TypeStore      = rpcframe.TypeStore
	TypeLegacy     = rpcframe.TypeLegacy
	KeepAlive      = rpcframe.KeepAlive
)

// DefaultMaxMessage is the default cap on a frame's length
// (MC_HANDSHAKE_MAX_LENGTH); MaxMaxMessage is the largest allowed cap.
const (
	DefaultMaxMessage = rpcframe.DefaultMaxMessage
	MaxMaxMessage     = rpcframe.MaxMaxMessage
)

// keyedHello is the length field a cluster-key handshake (peerauth's
// client hello, "KVFAUTH1") reads as: a node without a key says why it
// cannot serve that peer.
var keyedHello = binary.LittleEndian.Uint64([]byte("KVFAUTH1"))

// ErrFrame is returned (wrapped) for a frame that breaks the framing rules.
var ErrFrame = rpcframe.ErrFrame

// AppendFrame appends the encoding of one frame to dst (rpcframe.Append).
func AppendFrame(dst []byte, t Type, body []byte) []byte { return rpcframe.Append(dst, t, body) }

// WriteFrame writes one frame to w in a single Write call (rpcframe.Write).
func WriteFrame(w io.Writer, t Type, body []byte) error { return rpcframe.Write(w, t, body) }

// DecodeFrame decodes one complete frame from buf (rpcframe.Decode).
func DecodeFrame(buf []byte, maxLen uint64) (Type, []byte, int, error) {
	return rpcframe.Decode(buf, maxLen)
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
	if err := rpcframe.CheckLength(n, maxLen); err != nil {
		return 0, nil, err
	}
	// Allocated as the bytes arrive: a peer that claims a large frame and
	// sends little costs little.
	payload, err := netguard.ReadFull(r, nil, int(n))
	if err != nil {
		return 0, nil, fmt.Errorf("read frame body (%d bytes): %w", n, err)
	}
	t, body := rpcframe.Split(payload)
	return t, body, nil
}
