package tcpwire

import (
	"encoding/binary"
	"fmt"
)

// The identity hello (kvferry extension; Mooncake's wire has none). An
// initiator whose descriptor of the peer carries an incarnation and the
// feature "data_hello" (engine/descriptor) sends it as the first bytes of
// every data connection, and sends no request before the answer:
//
//	hello, 40 bytes:  a READ v2 header of size 0 at address 0, its seven
//	                  padding bytes "KVFIDH1" | the incarnation expected (16)
//	answer, 24 bytes: a status frame (magic "MCTV", code HelloOK or
//	                  HelloStale) | the server's own incarnation (16)
//
// A server that does not know the hello (Mooncake, an older kvferry) reads
// the first 24 bytes as a request header of size 0, which it refuses: a
// StatusRejected frame, then it closes; no memory is touched, and the
// initiator takes that refusal for a stale descriptor. A kvferry server
// answers HelloStale and closes when the incarnation is not its own.
const (
	// HelloSize is the size of a hello.
	HelloSize = HeaderSize + IncarnationSize
	// HelloReplySize is the size of its answer.
	HelloReplySize = StatusSize + IncarnationSize
	// IncarnationSize is the size of an incarnation on the wire
	// (descriptor.IncarnationBytes).
	IncarnationSize = 16
	// HelloOK and HelloStale are the status codes of an answer: the
	// incarnation is the server's, or it is not.
	HelloOK    = 0x100
	HelloStale = 0x101
)

// helloMagic fills the padding of a hello's header.
var helloMagic = [HeaderSize - 17]byte{'K', 'V', 'F', 'I', 'D', 'H', '1'}

// EncodeHello writes a hello expecting incarnation inc into b.
func EncodeHello(b *[HelloSize]byte, inc [IncarnationSize]byte) {
	clear(b[:17])
	b[16] = opRead | opV2
	copy(b[17:HeaderSize], helloMagic[:])
	copy(b[HeaderSize:], inc[:])
}

// IsHello reports whether b, the first HeaderSize bytes of a frame, starts
// a hello.
func IsHello(b []byte) bool {
	if len(b) < HeaderSize || b[16] != opRead|opV2 || [HeaderSize - 17]byte(b[17:HeaderSize]) != helloMagic {
		return false
	}
	return binary.LittleEndian.Uint64(b[0:8]) == 0 && binary.LittleEndian.Uint64(b[8:16]) == 0
}

// DecodeHello returns the incarnation a hello expects.
func DecodeHello(b []byte) ([IncarnationSize]byte, error) {
	if len(b) < HelloSize || !IsHello(b) {
		return [IncarnationSize]byte{}, fmt.Errorf("%w: not a hello (%d bytes)", ErrWire, len(b))
	}
	return [IncarnationSize]byte(b[HeaderSize:HelloSize]), nil
}

// EncodeHelloReply writes an answer with code (HelloOK or HelloStale) and
// the server's incarnation into b.
func EncodeHelloReply(b *[HelloReplySize]byte, code uint32, inc [IncarnationSize]byte) {
	EncodeStatus(b[:StatusSize], code)
	copy(b[StatusSize:], inc[:])
}

// DecodeHelloReply parses the incarnation part of an answer whose status
// frame (code, from DecodeStatus) was HelloOK or HelloStale.
func DecodeHelloReply(b []byte) ([IncarnationSize]byte, error) {
	if len(b) < IncarnationSize {
		return [IncarnationSize]byte{}, fmt.Errorf("%w: hello answer of %d bytes", ErrWire, len(b))
	}
	return [IncarnationSize]byte(b[:IncarnationSize]), nil
}
