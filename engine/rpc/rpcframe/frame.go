// Package rpcframe is the framing of Mooncake's socket RPC (specs/mooncake.md
// §3.6): a little-endian u64 length, a type byte and a body. It is pure data
// with no dependencies beyond the standard library, so its fuzz target runs
// in a small binary; package rpc reads, writes and serves frames with it.
package rpcframe

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Type is the request type byte of a frame.
type Type uint8

// Request types (specs/mooncake.md §3.6).
const (
	TypeConnection Type = 0
	TypeMetadata   Type = 1
	TypeNotify     Type = 2
	TypeProbe      Type = 3
	// TypeStore is kvferry's extension for requests between store clients
	// (a disk-tier holder serving another client's read of its file). No
	// Mooncake peer sends it; a Mooncake node would take such a frame for
	// a legacy one (first byte above 3) and refuse it. It is sent only to
	// kvferry store clients, named by the master.
	TypeStore Type = 4
	// TypeLegacy marks a frame from a peer that predates the type byte; it
	// is treated as a Connection request and answered without a type byte.
	TypeLegacy Type = 0xff
)

// maxType is the highest request type (KeepAlive aside).
const maxType = TypeStore

// KeepAlive is a flag of the type byte (kvferry's extension, sent only to
// peers announcing descriptor.FeatureRPCKeepAlive): the client keeps the
// connection for further requests, so the server answers with the same
// type byte and reads the next request instead of closing. No Mooncake
// frame has it: their type bytes are 0-3, and a legacy frame starts with
// JSON text ('{' has the bit, but '{' without it is no type).
const KeepAlive Type = 0x40

// Base returns t without the KeepAlive flag.
func (t Type) Base() Type {
	if t != TypeLegacy && t&KeepAlive != 0 && t&^KeepAlive <= maxType {
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
	case TypeStore:
		return "store"
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

// ErrFrame is returned (wrapped) for a frame that breaks the framing rules.
var ErrFrame = errors.New("bad rpc frame")

// Append appends the encoding of one frame to dst. A TypeLegacy frame has
// no type byte.
func Append(dst []byte, t Type, body []byte) []byte {
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

// Write writes one frame to w in a single Write call.
func Write(w io.Writer, t Type, body []byte) error {
	_, err := w.Write(Append(make([]byte, 0, 9+len(body)), t, body))
	if err != nil {
		return fmt.Errorf("write %s frame: %w", t, err)
	}
	return nil
}

// CheckLength checks a frame's length field: 1..maxLen.
func CheckLength(n, maxLen uint64) error {
	if n == 0 || n > maxLen {
		return fmt.Errorf("%w: length %d outside 1..%d", ErrFrame, n, maxLen)
	}
	return nil
}

// Decode decodes one complete frame from buf, returning the type, the body
// (a sub-slice of buf) and the number of bytes used. It returns
// io.ErrUnexpectedEOF when buf holds only part of a frame.
func Decode(buf []byte, maxLen uint64) (Type, []byte, int, error) {
	if len(buf) < 8 {
		return 0, nil, 0, io.ErrUnexpectedEOF
	}
	n := binary.LittleEndian.Uint64(buf)
	if err := CheckLength(n, maxLen); err != nil {
		return 0, nil, 0, err
	}
	if uint64(len(buf)-8) < n {
		return 0, nil, 0, io.ErrUnexpectedEOF
	}
	t, body := Split(buf[8 : 8+n])
	return t, body, int(8 + n), nil
}

// Split splits a frame's payload (the bytes after the length, at least
// one) into its type and body: a payload whose first byte is no type is a
// legacy frame, all body.
func Split(payload []byte) (Type, []byte) {
	if t := Type(payload[0]); t.Base() <= maxType {
		return t, payload[1:]
	}
	return TypeLegacy, payload
}
