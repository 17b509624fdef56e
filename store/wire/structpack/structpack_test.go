package structpack

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"gotest.tools/v3/assert"
)

// Known answers worked out by hand from the format rules (doc.go,
// docs/reports/coro-rpc.md); the hashes are those yalantinglibs' own
// struct_pack wrote for the same types (store/wire/coro/testdata).
func TestLiterals(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  []byte
		want []byte
		hash uint32
	}{
		{"string", String.Literal(), []byte{128, 12}, 0x9dcffa76},
		{"expected<void,int32>", ExpectedOf(Void, Int32).Literal(), []byte{135, 250, 1}, 0xaf2868cc},
		{"expected<bool,int32>", ExpectedOf(Bool, Int32).Literal(), []byte{135, 11, 1}, 0x90e800d2},
		{"expected<string,int32>", ExpectedOf(String, Int32).Literal(), []byte{135, 128, 12, 1}, 0x1cb3cc34},
		{"expected<int64,int32>", ExpectedOf(Int64, Int32).Literal(), []byte{135, 3, 1}, 0xb83381fe},
		{"int64", Int64.Literal(), []byte{3}, 0x86666834},
		{"vector<string>", Vec(String).Literal(), []byte{132, 128, 12}, 0},
		{"optional<uint64>", Opt(Uint64).Literal(), []byte{133, 4}, 0},
		{"tuple<string,string>", StructLit(String.Literal(), String.Literal()), []byte{253, 128, 12, 128, 12, 255}, 0x7cf91ed8},
		{"pair<uint64,uint64>", TrivialStructLit(8, 8, Uint64.Literal(), Uint64.Literal()), []byte{253, 4, 4, 137, 137, 255}, 0x3c6d83e0},
		{"tuple<bool,string>", StructLit(Bool.Literal(), String.Literal()), []byte{253, 11, 128, 12, 255}, 0x48a6c274},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.DeepEqual(t, tc.got, tc.want)
			if tc.hash != 0 {
				assert.Equal(t, TypeHash(tc.got), tc.hash)
			}
		})
	}
}

func TestSizeLiteral(t *testing.T) {
	for _, tc := range []struct {
		n    uint64
		want []byte
	}{
		{0, []byte{129}},
		{8, []byte{137}},
		{126, []byte{255}},
		{127, []byte{1, 130}},
		{300, []byte{47, 131}},
		{127 * 127, []byte{1, 1, 130}},
	} {
		assert.DeepEqual(t, SizeLiteral(tc.n), tc.want)
	}
}

func TestTypeHashClearsLowBit(t *testing.T) {
	for i := range 64 {
		assert.Equal(t, TypeHash([]byte{byte(i), 7})&1, uint32(0))
	}
}

var keysTenant = Define(StructLit(Vec(String).Literal(), String.Literal()), 2,
	func(e *Encoder, v *struct {
		Keys   []string
		Tenant string
	}) {
		Vec(String).Encode(e, &v.Keys)
		e.String(v.Tenant)
	},
	func(d *Decoder, v *struct {
		Keys   []string
		Tenant string
	}) {
		Vec(String).Decode(d, &v.Keys)
		v.Tenant = d.String()
	})

// A message's lengths are one byte until a container reaches 256
// elements; then the hash's low bit is set, a metainfo byte names the
// width, and every length in the message takes that width.
func TestLengthWidth(t *testing.T) {
	type kt = struct {
		Keys   []string
		Tenant string
	}
	h := keysTenant.Hash()
	for _, tc := range []struct {
		name  string
		n     int // length of the first key
		count int // number of keys
		meta  byte
		width int
	}{
		{"narrow", 255, 1, 0, 1},
		{"wide16 by string", 256, 1, 0x08, 2},
		{"wide16 by count", 1, 300, 0x08, 2},
		{"wide32", 70000, 1, 0x10, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := kt{Tenant: "default"}
			v.Keys = make([]string, tc.count)
			v.Keys[0] = strings.Repeat("k", tc.n)
			for i := 1; i < tc.count; i++ {
				v.Keys[i] = "x"
			}
			b := Marshal(keysTenant, &v)
			got := binary.LittleEndian.Uint32(b)
			off := 4
			if tc.meta == 0 {
				assert.Equal(t, got, h)
			} else {
				assert.Equal(t, got, h|1)
				assert.Equal(t, b[4], tc.meta)
				off = 5
			}
			readLen := func() int {
				var n uint64
				for i := range tc.width {
					n |= uint64(b[off+i]) << (8 * i)
				}
				off += tc.width
				return int(n)
			}
			assert.Equal(t, readLen(), tc.count)
			assert.Equal(t, readLen(), tc.n)
			back, err := Unmarshal(keysTenant, b, Limits{})
			assert.NilError(t, err)
			assert.DeepEqual(t, back, v)
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	good := Marshal(String, new(string))
	s := "abc"
	abc := Marshal(String, &s) // hash, 03, 'a' 'b' 'c'
	hash := binary.LittleEndian.AppendUint32(nil, String.Hash())
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	for _, tc := range []struct {
		name string
		in   []byte
		lim  Limits
		want error
	}{
		{"empty", nil, Limits{}, ErrMalformed},
		{"short hash", abc[:3], Limits{}, ErrMalformed},
		{"other type", Marshal(Int64, new(int64)), Limits{}, ErrTypeMismatch},
		{"cut body", abc[:len(abc)-1], Limits{}, ErrMalformed},
		{"trailing", append(append([]byte{}, abc...), 0), Limits{}, ErrMalformed},
		{"length past end", cat(hash, []byte{200, 'a'}), Limits{}, ErrMalformed},
		{"compatible bits", cat(binary.LittleEndian.AppendUint32(nil, String.Hash()|1), []byte{0x01, 0, 0, 0}), Limits{}, ErrMalformed},
		{"unknown meta bits", cat(binary.LittleEndian.AppendUint32(nil, String.Hash()|1), []byte{0x20, 0}), Limits{}, ErrMalformed},
		{"wrong type literal", cat(binary.LittleEndian.AppendUint32(nil, String.Hash()|1), []byte{0x04, 128, 13, 0, 0}), Limits{}, ErrTypeMismatch},
		{"huge wide length", cat(binary.LittleEndian.AppendUint32(nil, String.Hash()|1), []byte{0x18}, binary.LittleEndian.AppendUint64(nil, 1<<62)), Limits{}, ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Unmarshal(String, tc.in, tc.lim)
			assert.Assert(t, errors.Is(err, tc.want), "got %v", err)
		})
	}
	_, err := Unmarshal(String, good, Limits{})
	assert.NilError(t, err)

	// The element cap counts vector members, not string bytes.
	v := []string{"a", "b", "c"}
	_, err = Unmarshal(Vec(String), Marshal(Vec(String), &v), Limits{MaxElements: 2})
	assert.Assert(t, errors.Is(err, ErrMalformed))
	_, err = Unmarshal(Vec(String), Marshal(Vec(String), &v), Limits{MaxElements: 3})
	assert.NilError(t, err)
	long := strings.Repeat("z", 1000)
	_, err = Unmarshal(String, Marshal(String, &long), Limits{MaxElements: 1})
	assert.NilError(t, err)
}

func TestDecodeAcceptsTypeLiteral(t *testing.T) {
	// A debug build of struct_pack appends the type literal and a NUL after
	// the metainfo byte (bit 2).
	in := binary.LittleEndian.AppendUint32(nil, String.Hash()|1)
	in = append(in, 0x04, 128, 12, 0, 2, 'h', 'i')
	v, err := Unmarshal(String, in, Limits{})
	assert.NilError(t, err)
	assert.Equal(t, v, "hi")
}

func TestBadTags(t *testing.T) {
	ob := Opt(Uint64)
	in := binary.LittleEndian.AppendUint32(nil, ob.Hash())
	_, err := Unmarshal(ob, append(in, 2), Limits{})
	assert.Assert(t, errors.Is(err, ErrMalformed))
	ex := ExpectedOf(Bool, Int32)
	in = binary.LittleEndian.AppendUint32(nil, ex.Hash())
	_, err = Unmarshal(ex, append(in, 1, 7), Limits{})
	assert.Assert(t, errors.Is(err, ErrMalformed), "bool byte 7")
}

func TestVectorOfScalars(t *testing.T) {
	v := []uint64{10, 20}
	b := Marshal(Vec(Uint64), &v)
	// hash, count, two little-endian uint64s: the raw-copy layout of a
	// trivially copyable vector.
	want := binary.LittleEndian.AppendUint32(nil, TypeHash([]byte{132, 4}))
	want = append(want, 2, 10, 0, 0, 0, 0, 0, 0, 0, 20, 0, 0, 0, 0, 0, 0, 0)
	assert.DeepEqual(t, b, want)
}

func TestDepthLimit(t *testing.T) {
	type node struct{ kids []node }
	var c Codec[node]
	c = Define([]byte{IDStruct, IDEnd}, 1,
		func(e *Encoder, v *node) {
			e.Len(len(v.kids))
			for i := range v.kids {
				c.Encode(e, &v.kids[i])
			}
		},
		func(d *Decoder, v *node) {
			n := d.Len(1)
			v.kids = make([]node, n)
			for i := range v.kids {
				c.Decode(d, &v.kids[i])
			}
		})
	deep := node{}
	for range DefaultMaxDepth + 2 {
		deep = node{kids: []node{deep}}
	}
	_, err := Unmarshal(c, Marshal(c, &deep), Limits{})
	assert.Assert(t, errors.Is(err, ErrMalformed))
}

// TestMarshalWithLiteral: the form a struct_pack build without NDEBUG
// writes (Mooncake's Release build): the string mooncake_master sent as a
// coro_rpc failure text (store/wire/coro/testdata/mooncake), and a message
// with wide lengths, whose metainfo byte carries both.
func TestMarshalWithLiteral(t *testing.T) {
	msg := "the rpc function not registered"
	want := append([]byte{0x77, 0xfa, 0xcf, 0x9d, 0x04, 0x80, 0x0c, 0x00, 0x1f}, msg...)
	got := MarshalWithLiteral(String, &msg)
	assert.DeepEqual(t, got, want)
	assert.Assert(t, HasLiteral(got))
	assert.Assert(t, !HasLiteral(Marshal(String, &msg)))
	back, err := Unmarshal(String, got, Limits{})
	assert.NilError(t, err)
	assert.Equal(t, back, msg)

	long := strings.Repeat("k", 300)
	got = AppendMarshalWithLiteral([]byte{0xee}, String, &long)
	assert.Equal(t, got[0], byte(0xee))
	got = got[1:]
	assert.Equal(t, got[4], byte(0x0c), "width code 1 and the literal bit")
	assert.DeepEqual(t, got[5:8], []byte{0x80, 0x0c, 0x00})
	assert.DeepEqual(t, got[8:10], []byte{0x2c, 0x01})
	back, err = Unmarshal(String, got, Limits{})
	assert.NilError(t, err)
	assert.Equal(t, back, long)
}
