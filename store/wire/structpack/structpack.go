package structpack

import (
	"crypto/md5"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Type codes of a struct_pack type literal: one byte per type, composite
// types followed by their parts (docs/reports/coro-rpc.md lists them all).
// They are part of the format and never change.
const (
	IDInt32     = 1
	IDUint32    = 2
	IDInt64     = 3
	IDUint64    = 4
	IDInt8      = 5
	IDUint8     = 6
	IDInt16     = 7
	IDUint16    = 8
	IDBool      = 11
	IDChar8     = 12
	IDFloat32   = 17
	IDFloat64   = 18
	IDString    = 128
	IDArray     = 129
	IDMap       = 130
	IDSet       = 131
	IDContainer = 132
	IDOptional  = 133
	IDVariant   = 134
	IDExpected  = 135
	IDMonostate = 250
	IDStruct    = 253
	IDEnd       = 255
)

// Metainfo byte layout (it follows the hash when the hash's low bit is set).
const (
	metaCompatibleMask = 0b00011 // width of the compatible-fields total length
	metaTypeLiteral    = 0b00100 // the full type literal follows
	metaWidthShift     = 3       // bits 3-4: container length width code
	metaWidthMask      = 0b11000
)

// Limits of the decoder.
const (
	// DefaultMaxElements caps the container elements one Unmarshal may
	// decode, when Limits.MaxElements is zero. String bytes do not count:
	// a string costs no more memory than the input bytes it occupies.
	DefaultMaxElements = 1 << 20
	// DefaultMaxDepth caps the nesting depth of one value.
	DefaultMaxDepth = 32
)

// ErrMalformed is wrapped by every decoding error: input too short, a
// length beyond the input or a limit, a bad bool, optional or variant tag,
// trailing bytes, or a type hash that is not the expected one.
var ErrMalformed = errors.New("malformed struct_pack message")

// ErrTypeMismatch is wrapped (with ErrMalformed) when a message's type hash
// names a type other than the one being decoded.
var ErrTypeMismatch = fmt.Errorf("%w: type hash mismatch", ErrMalformed)

// Limits bounds one Unmarshal. The zero value means the defaults.
type Limits struct {
	// MaxElements caps the container elements (vector members, not string
	// bytes) decoded in total (default DefaultMaxElements): the bound on
	// what a small input can make the decoder allocate, since an element
	// may take more memory decoded than encoded.
	MaxElements int
}

// Codec describes how one Go type T maps to a struct_pack type: its type
// literal, the fewest bytes one value encodes to, and its encoder and
// decoder. Build codecs with Define or the combinators; the zero Codec is
// not usable.
type Codec[T any] struct {
	lit  []byte
	min  int
	hash uint32
	enc  func(e *Encoder, v *T)
	dec  func(d *Decoder, v *T)
}

// Define makes a Codec from its type literal, the minimum encoded size of
// one value in bytes (with one-byte container lengths), an encoder and a
// decoder. The decoder reports errors through d (Decoder.Fail) and may
// return early once d.Err() is set.
func Define[T any](lit []byte, minBytes int, enc func(e *Encoder, v *T), dec func(d *Decoder, v *T)) Codec[T] {
	return Codec[T]{lit: lit, min: minBytes, hash: TypeHash(lit), enc: enc, dec: dec}
}

// Literal returns the type literal (callers must not modify it).
func (c Codec[T]) Literal() []byte { return c.lit }

// Hash returns the 32-bit type hash of the literal, low bit clear.
func (c Codec[T]) Hash() uint32 { return c.hash }

// MinBytes returns the fewest bytes one value encodes to.
func (c Codec[T]) MinBytes() int { return c.min }

// Encode writes v's fields (no message header) to e.
func (c Codec[T]) Encode(e *Encoder, v *T) { c.enc(e, v) }

// Decode reads v's fields from d.
func (c Codec[T]) Decode(d *Decoder, v *T) {
	if d.err != nil {
		return
	}
	d.depth++
	if d.depth > DefaultMaxDepth {
		d.Fail("nesting deeper than %d", DefaultMaxDepth)
		return
	}
	c.dec(d, v)
	d.depth--
}

// TypeHash returns the hash struct_pack derives from a type literal: the
// first four bytes of its MD5 digest read big endian, low bit cleared.
func TypeHash(lit []byte) uint32 {
	sum := md5.Sum(lit)
	return binary.BigEndian.Uint32(sum[:4]) &^ 1
}

// SizeLiteral returns the literal struct_pack writes for a size inside a
// type literal (array extents, alignments): base-127 digits, least
// significant first, each digit plus 1, the last digit plus 129 instead.
func SizeLiteral(n uint64) []byte {
	var out []byte
	for n >= 127 {
		out = append(out, byte(n%127+1))
		n /= 127
	}
	return append(out, byte(n+129))
}

// StructLit returns the literal of a struct (or argument tuple) whose
// members have the given literals.
func StructLit(members ...[]byte) []byte {
	out := []byte{IDStruct}
	for _, m := range members {
		out = append(out, m...)
	}
	return append(out, IDEnd)
}

// TrivialStructLit returns the literal of a trivially copyable struct (one
// struct_pack copies as raw memory, std::pair of scalars included): the
// members, then its packing and its alignment as size literals.
func TrivialStructLit(pack, align uint64, members ...[]byte) []byte {
	out := []byte{IDStruct}
	for _, m := range members {
		out = append(out, m...)
	}
	out = append(out, SizeLiteral(pack)...)
	out = append(out, SizeLiteral(align)...)
	return append(out, IDEnd)
}

// VariantLit returns the literal of a std::variant of the alternatives.
func VariantLit(alts ...[]byte) []byte {
	out := []byte{IDVariant}
	for _, a := range alts {
		out = append(out, a...)
	}
	return append(out, IDEnd)
}

// Encoder accumulates one message body. It runs each value twice: once to
// measure (the widest container decides the width of every length), once
// to write.
type Encoder struct {
	buf     []byte
	measure bool
	width   int
	maxLen  uint64
	nLens   int
	size    int
}

// Marshal encodes v as a complete struct_pack message: type hash, metainfo
// when lengths are wider than one byte, body.
func Marshal[T any](c Codec[T], v *T) []byte {
	return AppendMarshal(nil, c, v)
}

// AppendMarshal appends the message Marshal would return to dst.
func AppendMarshal[T any](dst []byte, c Codec[T], v *T) []byte {
	return appendMarshal(dst, c, v, false)
}

// MarshalWithLiteral encodes v as a build of struct_pack without NDEBUG
// does: the metainfo byte always present, with its type-literal bit, and
// the type literal and a NUL after it, then the body. Mooncake's own CMake
// Release build drops NDEBUG, so mooncake_master and its clients send
// every message in this form (testdata/mooncake in store/wire/coro).
func MarshalWithLiteral[T any](c Codec[T], v *T) []byte {
	return appendMarshal(nil, c, v, true)
}

// AppendMarshalWithLiteral appends the message MarshalWithLiteral would
// return to dst.
func AppendMarshalWithLiteral[T any](dst []byte, c Codec[T], v *T) []byte {
	return appendMarshal(dst, c, v, true)
}

// HasLiteral reports whether a message carries its type literal (metainfo
// bit 2), as a struct_pack build without NDEBUG writes it.
func HasLiteral(b []byte) bool {
	return len(b) > 4 && b[0]&1 != 0 && b[4]&metaTypeLiteral != 0
}

func appendMarshal[T any](dst []byte, c Codec[T], v *T, withLit bool) []byte {
	m := Encoder{measure: true, width: 1}
	c.enc(&m, v)
	width, code := 1, byte(0)
	switch {
	case m.maxLen < 1<<8:
	case m.maxLen < 1<<16:
		width, code = 2, 1
	case m.maxLen < 1<<32:
		width, code = 4, 2
	default:
		width, code = 8, 3
	}
	total := 4 + m.size + m.nLens*(width-1)
	if code != 0 || withLit {
		total++
	}
	if withLit {
		total += len(c.lit) + 1
	}
	e := Encoder{buf: dst, width: width}
	if cap(e.buf)-len(e.buf) < total {
		e.buf = append(make([]byte, 0, len(dst)+total), dst...)
	}
	hash := c.hash
	if code != 0 || withLit {
		hash |= 1
	}
	e.buf = binary.LittleEndian.AppendUint32(e.buf, hash)
	switch {
	case withLit:
		e.buf = append(e.buf, code<<metaWidthShift|metaTypeLiteral)
		e.buf = append(e.buf, c.lit...)
		e.buf = append(e.buf, 0)
	case code != 0:
		e.buf = append(e.buf, code<<metaWidthShift)
	}
	c.enc(&e, v)
	return e.buf
}

// Len writes a container length.
func (e *Encoder) Len(n int) {
	if e.measure {
		e.maxLen = max(e.maxLen, uint64(n))
		e.nLens++
		e.size++
		return
	}
	switch e.width {
	case 1:
		e.buf = append(e.buf, byte(n))
	case 2:
		e.buf = binary.LittleEndian.AppendUint16(e.buf, uint16(n))
	case 4:
		e.buf = binary.LittleEndian.AppendUint32(e.buf, uint32(n))
	default:
		e.buf = binary.LittleEndian.AppendUint64(e.buf, uint64(n))
	}
}

// U8 writes one byte.
func (e *Encoder) U8(v uint8) {
	if e.measure {
		e.size++
		return
	}
	e.buf = append(e.buf, v)
}

// Bool writes a bool as one byte, 0 or 1.
func (e *Encoder) Bool(v bool) {
	var b uint8
	if v {
		b = 1
	}
	e.U8(b)
}

// U16 writes a little-endian uint16.
func (e *Encoder) U16(v uint16) {
	if e.measure {
		e.size += 2
		return
	}
	e.buf = binary.LittleEndian.AppendUint16(e.buf, v)
}

// U32 writes a little-endian uint32.
func (e *Encoder) U32(v uint32) {
	if e.measure {
		e.size += 4
		return
	}
	e.buf = binary.LittleEndian.AppendUint32(e.buf, v)
}

// U64 writes a little-endian uint64.
func (e *Encoder) U64(v uint64) {
	if e.measure {
		e.size += 8
		return
	}
	e.buf = binary.LittleEndian.AppendUint64(e.buf, v)
}

// Raw writes bytes as they are (the elements of a byte container).
func (e *Encoder) Raw(b []byte) {
	if e.measure {
		e.size += len(b)
		return
	}
	e.buf = append(e.buf, b...)
}

// String writes a string: its length, then its bytes.
func (e *Encoder) String(s string) {
	e.Len(len(s))
	if e.measure {
		e.size += len(s)
		return
	}
	e.buf = append(e.buf, s...)
}

// Decoder reads one message body. Its methods return zero values once an
// error is recorded; callers check Err at the end.
type Decoder struct {
	b     []byte
	off   int
	width int
	elems int
	depth int
	err   error
}

// Unmarshal decodes a complete message (type hash, optional metainfo,
// body) into a T. The hash must be c's, every byte must be consumed, and
// the limits hold; any failure wraps ErrMalformed.
func Unmarshal[T any](c Codec[T], b []byte, lim Limits) (T, error) {
	var v T
	d, err := newDecoder(c, b, lim)
	if err != nil {
		return v, err
	}
	c.Decode(d, &v)
	if d.err == nil && d.off != len(d.b) {
		d.Fail("%d trailing bytes", len(d.b)-d.off)
	}
	if d.err != nil {
		var zero T
		return zero, d.err
	}
	return v, nil
}

func newDecoder[T any](c Codec[T], b []byte, lim Limits) (*Decoder, error) {
	if lim.MaxElements <= 0 {
		lim.MaxElements = DefaultMaxElements
	}
	if len(b) < 4 {
		return nil, fmt.Errorf("%w: %d bytes, no type hash", ErrMalformed, len(b))
	}
	h := binary.LittleEndian.Uint32(b)
	if h&^1 != c.hash {
		return nil, fmt.Errorf("%w: got %#08x, want %#08x", ErrTypeMismatch, h&^1, c.hash)
	}
	d := &Decoder{b: b, off: 4, width: 1, elems: lim.MaxElements}
	if h&1 == 0 {
		return d, nil
	}
	meta := d.U8()
	if d.err != nil {
		return nil, d.err
	}
	if meta&metaCompatibleMask != 0 {
		// Compatible (versioned) fields: none of the types modelled here has
		// them, so a message that carries them is not one of ours.
		return nil, fmt.Errorf("%w: compatible fields (metainfo %#02x) not supported", ErrMalformed, meta)
	}
	if meta&^(metaTypeLiteral|metaWidthMask) != 0 {
		return nil, fmt.Errorf("%w: unknown metainfo bits %#02x", ErrMalformed, meta)
	}
	if meta&metaTypeLiteral != 0 {
		// A debug build appends the literal and its terminating NUL.
		want := len(c.lit) + 1
		if len(b)-d.off < want {
			return nil, fmt.Errorf("%w: type literal cut short", ErrMalformed)
		}
		got := b[d.off : d.off+want]
		if string(got[:len(c.lit)]) != string(c.lit) || got[len(c.lit)] != 0 {
			return nil, fmt.Errorf("%w: type literal differs", ErrTypeMismatch)
		}
		d.off += want
	}
	d.width = 1 << ((meta & metaWidthMask) >> metaWidthShift)
	return d, nil
}

// Err returns the first error recorded.
func (d *Decoder) Err() error { return d.err }

// Fail records an error (the first one wins), wrapping ErrMalformed with
// the offset where it happened.
func (d *Decoder) Fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w at offset %d: %s", ErrMalformed, d.off, fmt.Sprintf(format, args...))
	}
}

func (d *Decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if len(d.b)-d.off < n {
		d.Fail("need %d bytes, %d left", n, len(d.b)-d.off)
		return nil
	}
	p := d.b[d.off : d.off+n]
	d.off += n
	return p
}

// Remaining returns the bytes not yet read.
func (d *Decoder) Remaining() int { return len(d.b) - d.off }

// Len reads a container length and checks it before anything is
// allocated: n elements of at least minBytes each (1 for elements that
// may encode to nothing) must fit in the bytes left, and n counts against
// the element cap.
func (d *Decoder) Len(minBytes int) int {
	n := d.rawLen(minBytes)
	if d.err != nil {
		return 0
	}
	if n > d.elems {
		d.Fail("length %d exceeds the element limit", n)
		return 0
	}
	d.elems -= n
	return n
}

// rawLen reads a length that must fit in the bytes left.
func (d *Decoder) rawLen(minBytes int) int {
	p := d.take(d.width)
	if p == nil {
		return 0
	}
	var n uint64
	switch d.width {
	case 1:
		n = uint64(p[0])
	case 2:
		n = uint64(binary.LittleEndian.Uint16(p))
	case 4:
		n = uint64(binary.LittleEndian.Uint32(p))
	default:
		n = binary.LittleEndian.Uint64(p)
	}
	minBytes = max(minBytes, 1)
	if n > math.MaxInt32 || n > uint64(d.Remaining()/minBytes) {
		d.Fail("length %d exceeds the %d bytes left", n, d.Remaining())
		return 0
	}
	return int(n)
}

// U8 reads one byte.
func (d *Decoder) U8() uint8 {
	p := d.take(1)
	if p == nil {
		return 0
	}
	return p[0]
}

// Bool reads a bool: exactly 0 or 1.
func (d *Decoder) Bool() bool {
	v := d.U8()
	if v > 1 {
		d.off--
		d.Fail("bool byte %d", v)
		return false
	}
	return v == 1
}

// U16 reads a little-endian uint16.
func (d *Decoder) U16() uint16 {
	p := d.take(2)
	if p == nil {
		return 0
	}
	return binary.LittleEndian.Uint16(p)
}

// U32 reads a little-endian uint32.
func (d *Decoder) U32() uint32 {
	p := d.take(4)
	if p == nil {
		return 0
	}
	return binary.LittleEndian.Uint32(p)
}

// U64 reads a little-endian uint64.
func (d *Decoder) U64() uint64 {
	p := d.take(8)
	if p == nil {
		return 0
	}
	return binary.LittleEndian.Uint64(p)
}

// Raw reads n bytes, aliasing the input (copy what you keep).
func (d *Decoder) Raw(n int) []byte { return d.take(n) }

// String reads a length-prefixed string (its bytes must be in the input;
// they do not count against the element cap).
func (d *Decoder) String() string {
	n := d.rawLen(1)
	p := d.take(n)
	if p == nil {
		return ""
	}
	return string(p)
}
