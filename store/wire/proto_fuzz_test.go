package wire

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"
)

// FuzzMessages decodes arbitrary bytes as every message of the master's
// protocol (what a client or a peer master may send, over gRPC or the
// mux): the decoder refuses or accepts, and what it accepts survives a
// re-encoding unchanged.
func FuzzMessages(f *testing.F) {
	msgs := File_wire_proto.Messages()
	seed := func(m proto.Message) {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		for i := 0; i < msgs.Len(); i++ {
			f.Add(uint8(i), b)
		}
	}
	seed(&PingRequest{ClientId: "c"})
	seed(&PutStartRequest{Key: "k", ClientId: "c"})
	f.Add(uint8(0), []byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, which uint8, b []byte) {
		d := msgs.Get(int(which) % msgs.Len())
		var mt protoreflect.MessageType = dynamicpb.NewMessageType(d)
		if g, err := protoregistry.GlobalTypes.FindMessageByName(d.FullName()); err == nil {
			mt = g // the generated type
		}
		m := mt.New().Interface()
		if err := proto.Unmarshal(b, m); err != nil {
			return
		}
		again, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			t.Fatalf("%s: re-encode: %v", d.FullName(), err)
		}
		m2 := mt.New().Interface()
		if err := proto.Unmarshal(again, m2); err != nil || !proto.Equal(m, m2) {
			t.Fatalf("%s: round trip differs (%v)", d.FullName(), err)
		}
	})
}

// FuzzParseMuxError reads a mux error answer.
func FuzzParseMuxError(f *testing.F) {
	f.Add(uint16(2), []byte{0xf6, 0xff, 0xff, 0xff, 'x'})
	f.Add(uint16(0), []byte{})
	f.Fuzz(func(t *testing.T, status uint16, body []byte) {
		err := ParseMuxError(status, body)
		se := AsStatusError(err)
		if se == nil || se.Code == OK {
			t.Fatalf("%v: no error code", err)
		}
	})
}
