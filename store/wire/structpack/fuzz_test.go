package structpack

import (
	"testing"

	"gotest.tools/v3/assert"
)

type fuzzMsg struct {
	Keys   []string
	Opt    *uint64
	Exp    Expected[[]uint64, int32]
	Tenant string
}

var fuzzCodec = func() Codec[fuzzMsg] {
	vs, ou, ex := Vec(String), Opt(Uint64), ExpectedOf(Vec(Uint64), Int32)
	return Define(StructLit(vs.Literal(), ou.Literal(), ex.Literal(), String.Literal()), 4,
		func(e *Encoder, v *fuzzMsg) {
			vs.Encode(e, &v.Keys)
			ou.Encode(e, &v.Opt)
			ex.Encode(e, &v.Exp)
			e.String(v.Tenant)
		},
		func(d *Decoder, v *fuzzMsg) {
			vs.Decode(d, &v.Keys)
			ou.Decode(d, &v.Opt)
			ex.Decode(d, &v.Exp)
			v.Tenant = d.String()
		})
}()

// FuzzUnmarshal: no input panics; an error comes with the zero value; what
// decodes re-encodes to bytes that decode to the same value.
func FuzzUnmarshal(f *testing.F) {
	one := uint64(1)
	f.Add(Marshal(fuzzCodec, &fuzzMsg{Keys: []string{"a", "bc"}, Opt: &one, Exp: Expected[[]uint64, int32]{OK: true, Value: []uint64{1, 2}}, Tenant: "default"}))
	f.Add(Marshal(fuzzCodec, &fuzzMsg{Exp: Expected[[]uint64, int32]{Err: -704}}))
	big := make([]string, 300)
	f.Add(Marshal(fuzzCodec, &fuzzMsg{Keys: big}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := Unmarshal(fuzzCodec, b, Limits{MaxElements: 1 << 16})
		if err != nil {
			assert.DeepEqual(t, v, fuzzMsg{})
			return
		}
		again := Marshal(fuzzCodec, &v)
		w, err := Unmarshal(fuzzCodec, again, Limits{MaxElements: 1 << 16})
		assert.NilError(t, err)
		assert.DeepEqual(t, w, v)
	})
}
