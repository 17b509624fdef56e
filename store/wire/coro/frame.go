package coro

import (
	"crypto/md5"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/kvferry/kvferry/store/wire/structpack"
)

// coro_rpc protocol constants (yalantinglibs coro_rpc_protocol, as pinned
// by Mooncake 3b5a594). They are part of the wire format.
const (
	// Magic is the first byte of every request and response header.
	Magic = 21
	// Version is the only protocol version defined; a request with a
	// higher one is refused.
	Version = 0
	// SerializeStructPack is the serialize_type of struct_pack bodies, the
	// only one defined.
	SerializeStructPack = 0
	// ReqHeaderBytes is the size of a request header.
	ReqHeaderBytes = 20
	// RespHeaderBytes is the size of a response header.
	RespHeaderBytes = 16
)

// Errc is coro_rpc's transport-level error code (errc), carried in the
// response header's err_code byte; 0 means the body is the method's
// struct_pack answer.
type Errc uint16

// coro_rpc error codes (yalantinglibs errno.h, in order).
const (
	ErrcOK                    Errc = 0
	ErrcIOError               Errc = 1
	ErrcNotConnected          Errc = 2
	ErrcTimedOut              Errc = 3
	ErrcInvalidRPCArguments   Errc = 4
	ErrcAddressInUse          Errc = 5
	ErrcBadAddress            Errc = 6
	ErrcOpenError             Errc = 7
	ErrcListenError           Errc = 8
	ErrcOperationCanceled     Errc = 9
	ErrcRPCThrowException     Errc = 10
	ErrcFunctionNotRegistered Errc = 11
	ErrcProtocolError         Errc = 12
	ErrcUnknownVersion        Errc = 13
	ErrcMessageTooLarge       Errc = 14
	ErrcServerHasRan          Errc = 15
	ErrcInvalidRPCResult      Errc = 16
	ErrcSerialNumberConflict  Errc = 17
)

// errcWide is the err_code byte of a response whose code does not fit a
// byte: the body then holds the code (uint16) and the message as a pair.
const errcWide = 255

// DefaultMaxBody caps a request or response body (and its attachment)
// that ReadRequest and ReadResponse accept: the mux's limit
// (wire.MaxMuxBody).
const DefaultMaxBody = 64 << 20

// ErrFrame is wrapped by every framing error: a bad magic or version, an
// unknown serialize type, a body over the limit, a short read.
var ErrFrame = errors.New("malformed coro_rpc frame")

// FuncID returns the function id coro_rpc derives from a handler's
// qualified name ("mooncake::WrappedMasterService::PutStart"): the first
// four bytes of the name's MD5 digest, read big endian.
func FuncID(name string) uint32 {
	sum := md5.Sum([]byte(name))
	return binary.BigEndian.Uint32(sum[:4])
}

// ReqHeader is a coro_rpc request header (20 bytes, little endian).
type ReqHeader struct {
	Magic         uint8
	Version       uint8
	SerializeType uint8
	MsgType       uint8
	Seq           uint32
	FuncID        uint32
	Length        uint32 // body bytes
	AttachLength  uint32 // attachment bytes after the body
}

// RespHeader is a coro_rpc response header (16 bytes, little endian).
type RespHeader struct {
	Magic        uint8
	Version      uint8
	ErrCode      uint8 // 0, an Errc, or 255 (code and message in the body)
	MsgType      uint8
	Seq          uint32
	Length       uint32
	AttachLength uint32
}

// Append appends the encoded header to dst.
func (h *ReqHeader) Append(dst []byte) []byte {
	dst = append(dst, h.Magic, h.Version, h.SerializeType, h.MsgType)
	dst = binary.LittleEndian.AppendUint32(dst, h.Seq)
	dst = binary.LittleEndian.AppendUint32(dst, h.FuncID)
	dst = binary.LittleEndian.AppendUint32(dst, h.Length)
	return binary.LittleEndian.AppendUint32(dst, h.AttachLength)
}

// ParseReqHeader decodes and checks a request header: magic, version and
// serialize type must be the defined ones.
func ParseReqHeader(b []byte) (ReqHeader, error) {
	if len(b) < ReqHeaderBytes {
		return ReqHeader{}, fmt.Errorf("%w: request header of %d bytes", ErrFrame, len(b))
	}
	h := ReqHeader{
		Magic: b[0], Version: b[1], SerializeType: b[2], MsgType: b[3],
		Seq:          binary.LittleEndian.Uint32(b[4:]),
		FuncID:       binary.LittleEndian.Uint32(b[8:]),
		Length:       binary.LittleEndian.Uint32(b[12:]),
		AttachLength: binary.LittleEndian.Uint32(b[16:]),
	}
	switch {
	case h.Magic != Magic:
		return h, fmt.Errorf("%w: magic %d", ErrFrame, h.Magic)
	case h.Version > Version:
		return h, fmt.Errorf("%w: version %d", ErrFrame, h.Version)
	case h.SerializeType != SerializeStructPack:
		return h, fmt.Errorf("%w: serialize type %d", ErrFrame, h.SerializeType)
	}
	return h, nil
}

// Append appends the encoded header to dst.
func (h *RespHeader) Append(dst []byte) []byte {
	dst = append(dst, h.Magic, h.Version, h.ErrCode, h.MsgType)
	dst = binary.LittleEndian.AppendUint32(dst, h.Seq)
	dst = binary.LittleEndian.AppendUint32(dst, h.Length)
	return binary.LittleEndian.AppendUint32(dst, h.AttachLength)
}

// ParseRespHeader decodes and checks a response header.
func ParseRespHeader(b []byte) (RespHeader, error) {
	if len(b) < RespHeaderBytes {
		return RespHeader{}, fmt.Errorf("%w: response header of %d bytes", ErrFrame, len(b))
	}
	h := RespHeader{
		Magic: b[0], Version: b[1], ErrCode: b[2], MsgType: b[3],
		Seq:          binary.LittleEndian.Uint32(b[4:]),
		Length:       binary.LittleEndian.Uint32(b[8:]),
		AttachLength: binary.LittleEndian.Uint32(b[12:]),
	}
	switch {
	case h.Magic != Magic:
		return h, fmt.Errorf("%w: magic %d", ErrFrame, h.Magic)
	case h.Version > Version:
		return h, fmt.Errorf("%w: version %d", ErrFrame, h.Version)
	}
	return h, nil
}

// Request is one decoded request frame.
type Request struct {
	Header ReqHeader
	Body   []byte // struct_pack of the argument tuple (empty for no arguments)
	Attach []byte // attachment (unused by Mooncake's master)
}

// AppendRequest appends a complete request frame to dst.
func AppendRequest(dst []byte, seq, funcID uint32, body, attach []byte) []byte {
	h := ReqHeader{Magic: Magic, Version: Version, SerializeType: SerializeStructPack,
		Seq: seq, FuncID: funcID, Length: uint32(len(body)), AttachLength: uint32(len(attach))}
	dst = h.Append(dst)
	dst = append(dst, body...)
	return append(dst, attach...)
}

// ReadRequest reads one request frame from r. Body plus attachment over
// maxBody (DefaultMaxBody when zero or less) is refused before anything is
// allocated.
func ReadRequest(r io.Reader, maxBody int) (Request, error) {
	var hb [ReqHeaderBytes]byte
	if _, err := io.ReadFull(r, hb[:]); err != nil {
		return Request{}, err
	}
	return ReadRequestAfter(r, hb[:], maxBody)
}

// ReadRequestAfter is ReadRequest when the header's bytes were already read
// (a listener that sniffed them).
func ReadRequestAfter(r io.Reader, header []byte, maxBody int) (Request, error) {
	h, err := ParseReqHeader(header)
	if err != nil {
		return Request{}, err
	}
	if maxBody <= 0 {
		maxBody = DefaultMaxBody
	}
	if uint64(h.Length)+uint64(h.AttachLength) > uint64(maxBody) {
		return Request{Header: h}, fmt.Errorf("%w: body of %d+%d bytes over the %d limit", ErrFrame, h.Length, h.AttachLength, maxBody)
	}
	buf := make([]byte, int(h.Length)+int(h.AttachLength))
	if _, err := io.ReadFull(r, buf); err != nil {
		return Request{Header: h}, fmt.Errorf("%w: body: %w", ErrFrame, err)
	}
	return Request{Header: h, Body: buf[:h.Length], Attach: buf[h.Length:]}, nil
}

// Response is one decoded response frame.
type Response struct {
	Header RespHeader
	Body   []byte
	Attach []byte
}

// AppendResponse appends a successful response frame (err_code 0) whose
// body is the method's struct_pack answer.
func AppendResponse(dst []byte, seq uint32, body []byte) []byte {
	h := RespHeader{Magic: Magic, Version: Version, Seq: seq, Length: uint32(len(body))}
	dst = h.Append(dst)
	return append(dst, body...)
}

// AppendError appends a failed response frame: err_code is the Errc and
// the body the message as a struct_pack string; a code over 255 is sent as
// err_code 255 with the body a struct_pack pair of the code (uint16) and
// the message.
func AppendError(dst []byte, seq uint32, code Errc, msg string) []byte {
	var body []byte
	ec := uint8(code)
	if code > 255 {
		ec = errcWide
		v := wideErr{Code: uint16(code), Msg: msg}
		body = structpack.Marshal(wideErrCodec, &v)
	} else {
		body = structpack.Marshal(structpack.String, &msg)
	}
	h := RespHeader{Magic: Magic, Version: Version, ErrCode: ec, Seq: seq, Length: uint32(len(body))}
	dst = h.Append(dst)
	return append(dst, body...)
}

type wideErr struct {
	Code uint16
	Msg  string
}

var wideErrCodec = structpack.Define(structpack.StructLit([]byte{structpack.IDUint16}, structpack.String.Literal()), 3,
	func(e *structpack.Encoder, v *wideErr) { e.U16(v.Code); e.String(v.Msg) },
	func(d *structpack.Decoder, v *wideErr) { v.Code = d.U16(); v.Msg = d.String() })

// RPCError is a coro_rpc transport-level failure an answer carried.
type RPCError struct {
	Code Errc
	Msg  string
}

func (e *RPCError) Error() string {
	return fmt.Sprintf("coro_rpc error %d: %s", e.Code, e.Msg)
}

// ResponseError returns the RPCError a failed response carries, or nil for
// a successful one; a body that does not decode still gives the code.
func ResponseError(r Response) error {
	switch r.Header.ErrCode {
	case 0:
		return nil
	case errcWide:
		if v, err := structpack.Unmarshal(wideErrCodec, r.Body, structpack.Limits{}); err == nil {
			return &RPCError{Code: Errc(v.Code), Msg: v.Msg}
		}
		fallthrough // code 255 itself comes with a plain message
	default:
		msg, err := structpack.Unmarshal(structpack.String, r.Body, structpack.Limits{})
		if err != nil {
			msg = "undecodable error body"
		}
		return &RPCError{Code: Errc(r.Header.ErrCode), Msg: msg}
	}
}

// ReadResponse reads one response frame from r, with the same bounds as
// ReadRequest.
func ReadResponse(r io.Reader, maxBody int) (Response, error) {
	var hb [RespHeaderBytes]byte
	if _, err := io.ReadFull(r, hb[:]); err != nil {
		return Response{}, err
	}
	h, err := ParseRespHeader(hb[:])
	if err != nil {
		return Response{}, err
	}
	if maxBody <= 0 {
		maxBody = DefaultMaxBody
	}
	if uint64(h.Length)+uint64(h.AttachLength) > uint64(maxBody) {
		return Response{Header: h}, fmt.Errorf("%w: body of %d+%d bytes over the %d limit", ErrFrame, h.Length, h.AttachLength, maxBody)
	}
	buf := make([]byte, int(h.Length)+int(h.AttachLength))
	if _, err := io.ReadFull(r, buf); err != nil {
		return Response{Header: h}, fmt.Errorf("%w: body: %w", ErrFrame, err)
	}
	return Response{Header: h, Body: buf[:h.Length], Attach: buf[h.Length:]}, nil
}
