package tcpwire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Wire constants (specs/mooncake.md §4.2-4.3).
const (
	// HeaderSize is the size of a request header.
	HeaderSize = 24
	// StatusSize is the size of a version 2 status frame.
	StatusSize = 8
	// StatusMagic is the high 32 bits of every status frame ("MCTV").
	StatusMagic = 0x4D435456
	// StatusOK and StatusRejected are the low 32 bits of a status frame.
	StatusOK       = 0
	StatusRejected = 1
	// opRead and opWrite are the header opcodes; opV2 marks v2 framing.
	opRead  = 0
	opWrite = 1
	opV2    = 0x80
)

// ErrWire is returned (wrapped) for bytes that break the wire format.
var ErrWire = errors.New("tcp wire format")

// Header is a decoded request header.
type Header struct {
	// Size is the payload size in bytes.
	Size uint64
	// Addr is the absolute address in the server's registered memory.
	Addr uint64
	// Write is true for WRITE, false for READ.
	Write bool
	// V2 selects status-frame framing.
	V2 bool
}

// Encode writes h into b (24 bytes, padding zeroed).
func (h Header) Encode(b *[HeaderSize]byte) {
	binary.LittleEndian.PutUint64(b[0:8], h.Size)
	binary.LittleEndian.PutUint64(b[8:16], h.Addr)
	op := byte(opRead)
	if h.Write {
		op = opWrite
	}
	if h.V2 {
		op |= opV2
	}
	b[16] = op
	clear(b[17:24])
}

// DecodeHeader parses a request header; padding bytes are ignored. An
// opcode other than READ or WRITE (with or without the v2 bit) is an error.
func DecodeHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("%w: header of %d bytes", ErrWire, len(b))
	}
	op := b[16]
	h := Header{
		Size: binary.LittleEndian.Uint64(b[0:8]),
		Addr: binary.LittleEndian.Uint64(b[8:16]),
		V2:   op&opV2 != 0,
	}
	switch op &^ opV2 {
	case opRead:
	case opWrite:
		h.Write = true
	default:
		return Header{}, fmt.Errorf("%w: opcode %#x", ErrWire, op)
	}
	return h, nil
}

// EncodeStatus writes a status frame with code into b.
func EncodeStatus(b []byte, code uint32) {
	binary.LittleEndian.PutUint64(b, uint64(StatusMagic)<<32|uint64(code))
}

// DecodeStatus parses a status frame. A frame without the magic means a
// peer that does not speak version 2.
func DecodeStatus(b []byte) (uint32, error) {
	if len(b) < StatusSize {
		return 0, fmt.Errorf("%w: status frame of %d bytes", ErrWire, len(b))
	}
	v := binary.LittleEndian.Uint64(b)
	if v>>32 != StatusMagic {
		return 0, fmt.Errorf("%w: status frame %#016x without magic", ErrWire, v)
	}
	return uint32(v), nil
}
