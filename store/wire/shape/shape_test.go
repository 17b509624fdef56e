package shape

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// batchPut is a message of the shape of the store's BatchPutStartRequest
// (store/wire/wire.proto): a string, a list of strings, a packed list of
// varints and a nested message with a list of strings, built here so that
// the test links the protobuf runtime only.
func batchPut(t testing.TB) protoreflect.MessageDescriptor {
	t.Helper()
	field := func(name string, num int32, typ descriptorpb.FieldDescriptorProto_Type, repeated bool, msg string) *descriptorpb.FieldDescriptorProto {
		l := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL
		if repeated {
			l = descriptorpb.FieldDescriptorProto_LABEL_REPEATED
		}
		f := &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(num), Type: typ.Enum(), Label: l.Enum(), JsonName: proto.String(name)}
		if msg != "" {
			f.TypeName = proto.String(msg)
		}
		return f
	}
	str, u64, msg := descriptorpb.FieldDescriptorProto_TYPE_STRING, descriptorpb.FieldDescriptorProto_TYPE_UINT64, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name: proto.String("shape_test.proto"), Package: proto.String("shapetest"), Syntax: proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{
			{Name: proto.String("Config"), Field: []*descriptorpb.FieldDescriptorProto{
				field("replica_num", 1, descriptorpb.FieldDescriptorProto_TYPE_UINT32, false, ""),
				field("preferred_segments", 5, str, true, ""),
			}},
			{Name: proto.String("BatchPut"), Field: []*descriptorpb.FieldDescriptorProto{
				field("client_id", 1, str, false, ""),
				field("keys", 2, str, true, ""),
				field("sizes", 3, u64, true, ""),
				field("config", 4, msg, false, ".shapetest.Config"),
			}},
		},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return fd.Messages().ByName("BatchPut")
}

// message builds a BatchPut of keys, sizes and preferred segments.
func message(md protoreflect.MessageDescriptor, keys, sizes, segments int) []byte {
	m := dynamicpb.NewMessage(md)
	f := md.Fields()
	m.Set(f.ByName("client_id"), protoreflect.ValueOfString("c"))
	for range keys {
		m.Mutable(f.ByName("keys")).List().Append(protoreflect.ValueOfString("k"))
	}
	for i := range sizes {
		m.Mutable(f.ByName("sizes")).List().Append(protoreflect.ValueOfUint64(uint64(i + 1)))
	}
	if segments > 0 {
		cfg := m.Mutable(f.ByName("config")).Message()
		cfg.Set(cfg.Descriptor().Fields().ByName("replica_num"), protoreflect.ValueOfUint32(1))
		for range segments {
			cfg.Mutable(cfg.Descriptor().Fields().ByName("preferred_segments")).List().Append(protoreflect.ValueOfString("s"))
		}
	}
	b, _ := proto.Marshal(m)
	return b
}

func TestCheck(t *testing.T) {
	md := batchPut(t)
	// 1 client id + 2 keys + 1 packed field with 2 sizes + config(1) with
	// replica_num and one preferred segment = 9 elements.
	ok := message(md, 2, 2, 1)
	if err := Check(md, ok, 9); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		b     []byte
		limit int
		want  error
	}{
		"one over":       {ok, 8, ErrLimit},
		"nested list":    {message(md, 0, 0, 100), 50, ErrLimit},
		"packed scalars": {message(md, 0, 100, 0), 50, ErrLimit},
		"malformed":      {[]byte{0xff}, 50, ErrMalformed},
	} {
		if err := Check(md, c.b, c.limit); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
}

// FuzzCheckShape: any bytes give an answer without a panic, and a message
// that passes with limit n decodes to no more than n elements' worth.
func FuzzCheckShape(f *testing.F) {
	md := batchPut(f)
	f.Add(message(md, 1, 1, 1))
	f.Add([]byte{0x12, 0x00, 0x12, 0x00})
	f.Add([]byte{0x1a, 0x03, 0x01, 0x02, 0x03})
	keys, sizes, cfg := md.Fields().ByName("keys"), md.Fields().ByName("sizes"), md.Fields().ByName("config")
	segs := cfg.Message().Fields().ByName("preferred_segments")
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := Check(md, data, 64); err != nil {
			return
		}
		m := dynamicpb.NewMessage(md)
		if proto.Unmarshal(data, m) != nil {
			return
		}
		n := m.Get(keys).List().Len() + m.Get(sizes).List().Len() + m.Get(cfg).Message().Get(segs).List().Len()
		if n > 64 {
			t.Fatalf("passed with %d elements", n)
		}
	})
}
