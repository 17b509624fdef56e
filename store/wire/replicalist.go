package wire

import (
	"context"
	"fmt"
	"sync"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// A store get is one GetReplicaList, the store's hottest call: over the mux
// both ends encode and decode it by hand, into reused buffers and structs,
// so that a get allocates nothing on either end (issue 38). The bytes are
// protobuf's, the same as proto.Marshal writes (replicalist_test.go checks
// both ways and fuzzes the decoder against proto.Unmarshal); gRPC, the
// in-process master and every other call keep the generated code.

// MuxReplicaLister is implemented by a MasterServer that answers a mux
// GetReplicaList by appending its encoded GetReplicaListResponse to b
// (AppendReplica, AppendReplicaListTail), looking the key up without
// making strings of tenant and key (valid UTF-8, within the request
// limits; tenant not checked further). It returns b extended, or an error
// as GetReplicaList would (b is then dropped).
type MuxReplicaLister interface {
	AppendReplicaList(ctx context.Context, b []byte, tenant, key []byte) ([]byte, error)
}

// ReplicaFields are the fields of one Replica, for AppendReplica.
type ReplicaFields struct {
	SegmentName string
	Address     uint64
	Size        uint64
	Status      ReplicaStatus
	SegmentID   string
	Protocol    string
	Kind        ReplicaKind
	FilePath    string
	Tag         uint64
}

func sizeString(s string) int {
	if s == "" {
		return 0
	}
	return 1 + protowire.SizeBytes(len(s))
}

func sizeVarint(v uint64) int {
	if v == 0 {
		return 0
	}
	return 1 + protowire.SizeVarint(v)
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// enumVarint is an enum's varint: a negative value is sign-extended to 64
// bits, as protobuf encodes int32.
func enumVarint(v int32) uint64 { return uint64(int64(v)) }

// AppendReplica appends r as one element of GetReplicaListResponse's
// replicas (field 1), as proto.Marshal encodes it.
func AppendReplica(b []byte, r *ReplicaFields) []byte {
	n := sizeString(r.SegmentName) + sizeVarint(r.Address) + sizeVarint(r.Size) +
		sizeVarint(enumVarint(int32(r.Status))) + sizeString(r.SegmentID) + sizeString(r.Protocol) +
		sizeVarint(enumVarint(int32(r.Kind))) + sizeString(r.FilePath) + sizeVarint(r.Tag)
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	b = appendString(b, 1, r.SegmentName)
	b = appendVarint(b, 2, r.Address)
	b = appendVarint(b, 3, r.Size)
	b = appendVarint(b, 4, enumVarint(int32(r.Status)))
	b = appendString(b, 5, r.SegmentID)
	b = appendString(b, 6, r.Protocol)
	b = appendVarint(b, 7, enumVarint(int32(r.Kind)))
	b = appendString(b, 8, r.FilePath)
	return appendVarint(b, 9, r.Tag)
}

// AppendReplicaListTail appends the scalar fields of a
// GetReplicaListResponse, after its replicas (AppendReplica).
func AppendReplicaListTail(b []byte, leaseTTLMs, size, uid, version, viewVersion uint64) []byte {
	b = appendVarint(b, 2, leaseTTLMs)
	b = appendVarint(b, 3, size)
	b = appendVarint(b, 4, uid)
	b = appendVarint(b, 5, version)
	return appendVarint(b, 6, viewVersion)
}

// errProto is a malformed protobuf message, worded like proto.Unmarshal.
func errProto(what string) error {
	return fmt.Errorf("proto: cannot parse invalid wire-format data: %s", what)
}

// errUTF8 is a string field that is not valid UTF-8 (proto3 strings must be).
func errUTF8(field string) error { return fmt.Errorf("proto: field %s contains invalid UTF-8", field) }

// parseKeyRequest returns the key and tenant_id of a KeyRequest body as
// sub-slices of b, as proto.Unmarshal reads them: the last occurrence of a
// field wins, a field of another wire type or number is skipped (an
// unknown field), a string that is not UTF-8 is an error.
func parseKeyRequest(b []byte) (key, tenant []byte, err error) {
	for len(b) > 0 {
		num, typ, terr := consumeTag(&b)
		if terr != nil {
			return nil, nil, terr
		}
		if (num == 1 || num == 2) && typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return nil, nil, errProto("bytes")
			}
			b = b[m:]
			if !utf8.Valid(v) {
				if num == 1 {
					return nil, nil, errUTF8("kvferry.store.v1.KeyRequest.key")
				}
				return nil, nil, errUTF8("kvferry.store.v1.KeyRequest.tenant_id")
			}
			if num == 1 {
				key = v
			} else {
				tenant = v
			}
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return nil, nil, errProto("field")
		}
		b = b[m:]
	}
	return key, tenant, nil
}

// names interns the strings of decoded answers (segment names and ids,
// protocols): a client sees few distinct ones, and a get should not make
// them anew each time. Past maxNames distinct strings the rest are made
// as usual, as are strings over maxNameBytes.
type names struct {
	mu sync.Mutex
	m  map[string]string
}

// maxNames and maxNameBytes bound what names keeps.
const (
	maxNames     = 4096
	maxNameBytes = 256
)

func (t *names) intern(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if len(b) > maxNameBytes {
		return string(b)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if s, ok := t.m[string(b)]; ok {
		return s
	}
	s := string(b)
	if t.m == nil {
		t.m = make(map[string]string)
	}
	if len(t.m) < maxNames {
		t.m[s] = s
	}
	return s
}

// decodeReplicaList decodes a GetReplicaListResponse body into out as
// proto.Unmarshal would (out reset first; unknown fields kept), reusing
// out's replicas and their slice, and taking segment names, ids and
// protocols from in.
func decodeReplicaList(b []byte, out *GetReplicaListResponse, in *names) error {
	reps := out.Replicas[:cap(out.Replicas)]
	unknown := out.unknownFields[:0]
	*out = GetReplicaListResponse{}
	n := 0
	for len(b) > 0 {
		num, typ, terr := consumeTag(&b)
		if terr != nil {
			return terr
		}
		switch {
		case num == 1 && typ == protowire.BytesType:
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return errProto("bytes")
			}
			b = b[m:]
			if n == len(reps) {
				reps = append(reps, nil)
				reps = reps[:cap(reps)]
			}
			if reps[n] == nil {
				reps[n] = new(Replica)
			}
			if err := decodeReplica(v, reps[n], in); err != nil {
				return err
			}
			n++
			out.Replicas = reps[:n]
			continue
		case num >= 2 && num <= 6 && typ == protowire.VarintType:
			var v uint64
			var err error
			if v, b, err = consumeVarint(b); err != nil {
				return err
			}
			switch num {
			case 2:
				out.LeaseTtlMs = v
			case 3:
				out.Size = v
			case 4:
				out.Uid = v
			case 5:
				out.Version = v
			case 6:
				out.ViewVersion = v
			}
			continue
		}
		var err error
		if unknown, b, err = keepUnknown(unknown, num, typ, b); err != nil {
			return err
		}
	}
	if n == 0 {
		out.Replicas = reps[:0]
	}
	if len(unknown) > 0 {
		out.unknownFields = unknown
	}
	return nil
}

// decodeReplica decodes one Replica into r, reset first.
func decodeReplica(b []byte, r *Replica, in *names) error {
	unknown := r.unknownFields[:0]
	*r = Replica{}
	for len(b) > 0 {
		num, typ, terr := consumeTag(&b)
		if terr != nil {
			return terr
		}
		switch {
		case (num == 1 || num == 5 || num == 6 || num == 8) && typ == protowire.BytesType:
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return errProto("bytes")
			}
			b = b[m:]
			if !utf8.Valid(v) {
				return errUTF8(replicaStringField(num))
			}
			switch num {
			case 1:
				r.SegmentName = in.intern(v)
			case 5:
				r.SegmentId = in.intern(v)
			case 6:
				r.Protocol = in.intern(v)
			case 8:
				r.FilePath = string(v) // one per object: not interned
			}
			continue
		case (num == 2 || num == 3 || num == 4 || num == 7 || num == 9) && typ == protowire.VarintType:
			var v uint64
			var err error
			if v, b, err = consumeVarint(b); err != nil {
				return err
			}
			switch num {
			case 2:
				r.Address = v
			case 3:
				r.Size = v
			case 4:
				r.Status = ReplicaStatus(int32(v))
			case 7:
				r.Kind = ReplicaKind(int32(v))
			case 9:
				r.Tag = v
			}
			continue
		}
		var err error
		if unknown, b, err = keepUnknown(unknown, num, typ, b); err != nil {
			return err
		}
	}
	if len(unknown) > 0 {
		r.unknownFields = unknown
	}
	return nil
}

// consumeTag reads a field's tag at the head of *b and advances *b past
// it, refusing what proto.Unmarshal refuses (a bad varint, a number above
// the largest valid one).
func consumeTag(b *[]byte) (protowire.Number, protowire.Type, error) {
	num, typ, m := protowire.ConsumeTag(*b)
	if m < 0 || num > protowire.MaxValidNumber {
		return 0, 0, errProto("tag")
	}
	*b = (*b)[m:]
	return num, typ, nil
}

// consumeVarint reads a varint at the head of b; it returns b advanced.
func consumeVarint(b []byte) (uint64, []byte, error) {
	v, m := protowire.ConsumeVarint(b)
	if m < 0 {
		return 0, b, errProto("varint")
	}
	return v, b[m:], nil
}

// keepUnknown consumes the value of field num (wire type typ) at the head
// of b and appends the field to unknown as proto.Unmarshal keeps one it
// does not know (the tag encoded anew); it returns both advanced.
func keepUnknown(unknown []byte, num protowire.Number, typ protowire.Type, b []byte) ([]byte, []byte, error) {
	m := protowire.ConsumeFieldValue(num, typ, b)
	if m < 0 {
		return unknown, b, errProto("field")
	}
	return append(protowire.AppendTag(unknown, num, typ), b[:m]...), b[m:], nil
}

func replicaStringField(num protowire.Number) string {
	switch num {
	case 1:
		return "kvferry.store.v1.Replica.segment_name"
	case 5:
		return "kvferry.store.v1.Replica.segment_id"
	case 6:
		return "kvferry.store.v1.Replica.protocol"
	}
	return "kvferry.store.v1.Replica.file_path"
}
