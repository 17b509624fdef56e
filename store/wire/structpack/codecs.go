package structpack

// Scalar codecs. C++ enums encode as their underlying integer (an enum class
// without one is int: Int32); size_t, uintptr_t and unsigned long are
// Uint64 and long is Int64 on LP64 Linux.
var (
	Int32  = Define([]byte{IDInt32}, 4, func(e *Encoder, v *int32) { e.U32(uint32(*v)) }, func(d *Decoder, v *int32) { *v = int32(d.U32()) })
	Uint32 = Define([]byte{IDUint32}, 4, func(e *Encoder, v *uint32) { e.U32(*v) }, func(d *Decoder, v *uint32) { *v = d.U32() })
	Int64  = Define([]byte{IDInt64}, 8, func(e *Encoder, v *int64) { e.U64(uint64(*v)) }, func(d *Decoder, v *int64) { *v = int64(d.U64()) })
	Uint64 = Define([]byte{IDUint64}, 8, func(e *Encoder, v *uint64) { e.U64(*v) }, func(d *Decoder, v *uint64) { *v = d.U64() })
	Uint8  = Define([]byte{IDUint8}, 1, func(e *Encoder, v *uint8) { e.U8(*v) }, func(d *Decoder, v *uint8) { *v = d.U8() })
	Uint16 = Define([]byte{IDUint16}, 2, func(e *Encoder, v *uint16) { e.U16(*v) }, func(d *Decoder, v *uint16) { *v = d.U16() })
	Bool   = Define([]byte{IDBool}, 1, func(e *Encoder, v *bool) { e.Bool(*v) }, func(d *Decoder, v *bool) { *v = d.Bool() })
	// String is std::string (and std::string_view): a container of char.
	String = Define([]byte{IDString, IDChar8}, 1, func(e *Encoder, v *string) { e.String(*v) }, func(d *Decoder, v *string) { *v = d.String() })
	// Void is the value type of tl::expected<void, E> and std::monostate:
	// it encodes to nothing.
	Void = Define([]byte{IDMonostate}, 0, func(*Encoder, *struct{}) {}, func(*Decoder, *struct{}) {})
)

// Vec returns the codec of std::vector<T> (a length, then the elements).
func Vec[T any](c Codec[T]) Codec[[]T] {
	lit := append([]byte{IDContainer}, c.lit...)
	return Define(lit, 1,
		func(e *Encoder, v *[]T) {
			e.Len(len(*v))
			for i := range *v {
				c.enc(e, &(*v)[i])
			}
		},
		func(d *Decoder, v *[]T) {
			n := d.Len(c.min)
			if d.err != nil || n == 0 {
				*v = nil // an empty vector decodes to nil
				return
			}
			out := make([]T, n)
			for i := range out {
				c.Decode(d, &out[i])
				if d.err != nil {
					return
				}
			}
			*v = out
		})
}

// Opt returns the codec of std::optional<T>, nil meaning empty: a presence
// byte, then the value when present.
func Opt[T any](c Codec[T]) Codec[*T] {
	lit := append([]byte{IDOptional}, c.lit...)
	return Define(lit, 1,
		func(e *Encoder, v **T) {
			e.Bool(*v != nil)
			if *v != nil {
				c.enc(e, *v)
			}
		},
		func(d *Decoder, v **T) {
			if !d.Bool() {
				*v = nil
				return
			}
			x := new(T)
			c.Decode(d, x)
			*v = x
		})
}

// Expected is tl::expected<T, E>: the value when OK, else the error.
type Expected[T, E any] struct {
	OK    bool
	Value T
	Err   E
}

// ExpectedOf returns the codec of tl::expected<T, E>: a presence byte, then
// the value (OK) or the error.
func ExpectedOf[T, E any](vc Codec[T], ec Codec[E]) Codec[Expected[T, E]] {
	lit := append(append([]byte{IDExpected}, vc.lit...), ec.lit...)
	return Define(lit, 1+min(vc.min, ec.min),
		func(e *Encoder, v *Expected[T, E]) {
			e.Bool(v.OK)
			if v.OK {
				vc.enc(e, &v.Value)
			} else {
				ec.enc(e, &v.Err)
			}
		},
		func(d *Decoder, v *Expected[T, E]) {
			v.OK = d.Bool()
			if v.OK {
				vc.Decode(d, &v.Value)
			} else {
				ec.Decode(d, &v.Err)
			}
		})
}

// Pair returns the codec of std::pair<A, B> whose members are not both
// scalars (a pair of scalars is trivially copyable and has its own
// literal: see TrivialStructLit).
func Pair[A, B any](ac Codec[A], bc Codec[B]) Codec[struct {
	First  A
	Second B
}] {
	type P = struct {
		First  A
		Second B
	}
	return Define(StructLit(ac.lit, bc.lit), ac.min+bc.min,
		func(e *Encoder, v *P) { ac.enc(e, &v.First); bc.enc(e, &v.Second) },
		func(d *Decoder, v *P) { ac.Decode(d, &v.First); bc.Decode(d, &v.Second) })
}

// KV is one entry of a map.
type KV[K, V any] struct {
	Key   K
	Value V
}

// MapOf returns the codec of std::map or std::unordered_map<K, V>, held as
// a slice of entries in wire order: a length, then each key and its value.
// Decoding does not check that keys are distinct.
func MapOf[K, V any](kc Codec[K], vc Codec[V]) Codec[[]KV[K, V]] {
	lit := append(append([]byte{IDMap}, kc.lit...), vc.lit...)
	return Define(lit, 1,
		func(e *Encoder, v *[]KV[K, V]) {
			e.Len(len(*v))
			for i := range *v {
				kc.enc(e, &(*v)[i].Key)
				vc.enc(e, &(*v)[i].Value)
			}
		},
		func(d *Decoder, v *[]KV[K, V]) {
			n := d.Len(kc.min + vc.min)
			if d.err != nil || n == 0 {
				*v = nil
				return
			}
			out := make([]KV[K, V], n)
			for i := range out {
				kc.Decode(d, &out[i].Key)
				vc.Decode(d, &out[i].Value)
				if d.err != nil {
					return
				}
			}
			*v = out
		})
}
