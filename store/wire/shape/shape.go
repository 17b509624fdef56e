// Package shape counts the elements a protobuf message would decode to
// without decoding it (the store master's request bound, wire.CheckShape).
// It imports the protobuf runtime only, not gRPC or the store's wire, so
// that its fuzz target runs alone.
package shape

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// ErrLimit marks a message over the element limit or nested too deep.
var ErrLimit = errors.New("over the element limit")

// ErrMalformed marks bytes that are not a protobuf message.
var ErrMalformed = errors.New("malformed message")

// MaxDepth caps the nesting of messages.
const MaxDepth = 32

// Check counts the fields a protobuf message of type md would decode to,
// nested messages and packed elements included, without decoding it, and
// fails (ErrLimit) once the count passes maxElements. It bounds what
// decoding may allocate: an empty string costs two bytes on the wire and a
// few dozen once decoded.
func Check(md protoreflect.MessageDescriptor, b []byte, maxElements int) error {
	n := 0
	if err := check(md, b, &n, maxElements, 0); err != nil {
		return fmt.Errorf("%s: %w", md.Name(), err)
	}
	return nil
}

func check(md protoreflect.MessageDescriptor, b []byte, n *int, limit, depth int) error {
	if depth > MaxDepth {
		return fmt.Errorf("nested too deep: %w", ErrLimit)
	}
	for len(b) > 0 {
		num, typ, k := protowire.ConsumeTag(b)
		if k < 0 {
			return fmt.Errorf("malformed tag: %w", ErrMalformed)
		}
		b = b[k:]
		k = protowire.ConsumeFieldValue(num, typ, b)
		if k < 0 {
			return fmt.Errorf("malformed field %d: %w", num, ErrMalformed)
		}
		val := b[:k]
		b = b[k:]
		if *n++; *n > limit {
			return fmt.Errorf("more than %d elements: %w", limit, ErrLimit)
		}
		if typ != protowire.BytesType {
			continue
		}
		fd := md.Fields().ByNumber(num)
		if fd == nil {
			continue // unknown fields are kept as bytes
		}
		v, _ := protowire.ConsumeBytes(val)
		switch {
		case fd.Kind() == protoreflect.MessageKind:
			if err := check(fd.Message(), v, n, limit, depth+1); err != nil {
				return err
			}
		case fd.IsList() && fd.Kind() != protoreflect.StringKind && fd.Kind() != protoreflect.BytesKind:
			// Packed scalars: every varint ends in a byte below 0x80;
			// fixed-width ones are at least 4 bytes each.
			c := 0
			for _, x := range v {
				if x < 0x80 {
					c++
				}
			}
			if *n += c; *n > limit {
				return fmt.Errorf("more than %d elements: %w", limit, ErrLimit)
			}
		}
	}
	return nil
}
