package wire

import (
	"context"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// A store put over grants is one PutCommit, the hottest call after the
// get: over the mux the server decodes its request by hand into one
// message it reuses (the client and tenant ids interned, the key a string
// of its own, since the master keeps it), and, when the server implements
// MuxPutCommitter, appends the answer by hand too; the client decodes the
// answer by hand into the message it is given. The bytes and the decoded
// messages are protobuf's (putcommit_test.go checks both against
// proto.Marshal and proto.Unmarshal, and fuzzes the decoders).

// MuxPutCommitter is implemented by a MasterServer that answers a mux
// PutCommit by appending its encoded PutCommitResponse to b
// (AppendPutCommitResponse). req is decoded and within the request limits;
// it is reused for the connection's next request once the call returns,
// so nothing of it may be kept but its strings. It returns b extended, or
// an error as PutCommit would (b is then dropped).
type MuxPutCommitter interface {
	AppendPutCommit(ctx context.Context, b []byte, req *PutCommitRequest) ([]byte, error)
}

// AppendPutCommitResponse appends a PutCommitResponse with these fields
// to b, as proto.Marshal encodes it.
func AppendPutCommitResponse(b []byte, grantGeneration, version, uid uint64, replicaTags []uint64, viewVersion uint64) []byte {
	b = appendVarint(b, 1, grantGeneration)
	b = appendVarint(b, 2, version)
	b = appendVarint(b, 3, uid)
	if len(replicaTags) > 0 {
		n := 0
		for _, t := range replicaTags {
			n += protowire.SizeVarint(t)
		}
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(n))
		for _, t := range replicaTags {
			b = protowire.AppendVarint(b, t)
		}
	}
	return appendVarint(b, 5, viewVersion)
}

// decodePutCommitResponse decodes a PutCommitResponse body into out as
// proto.Unmarshal would (out reset first; unknown fields kept), reusing
// the backing of out's replica tags.
func decodePutCommitResponse(b []byte, out *PutCommitResponse) error {
	tags := out.ReplicaTags[:0]
	unknown := out.unknownFields[:0]
	*out = PutCommitResponse{}
	for len(b) > 0 {
		num, typ, terr := consumeTag(&b)
		if terr != nil {
			return terr
		}
		var err error
		switch {
		case num == 4 && typ == protowire.BytesType: // packed
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return errProto("bytes")
			}
			b = b[m:]
			for len(v) > 0 {
				var t uint64
				if t, v, err = consumeVarint(v); err != nil {
					return err
				}
				tags = append(tags, t)
			}
			out.ReplicaTags = tags
			continue
		case num >= 1 && num <= 5 && typ == protowire.VarintType:
			var v uint64
			if v, b, err = consumeVarint(b); err != nil {
				return err
			}
			switch num {
			case 1:
				out.GrantGeneration = v
			case 2:
				out.Version = v
			case 3:
				out.Uid = v
			case 4: // unpacked
				tags = append(tags, v)
				out.ReplicaTags = tags
			case 5:
				out.ViewVersion = v
			}
			continue
		}
		if unknown, b, err = keepUnknown(unknown, num, typ, b); err != nil {
			return err
		}
	}
	if out.ReplicaTags == nil {
		out.ReplicaTags = tags // empty: keep the backing for the next answer
	}
	if len(unknown) > 0 {
		out.unknownFields = unknown
	}
	return nil
}

// putCommitDecoder decodes the PutCommit requests of one mux connection by
// hand into one reused message.
type putCommitDecoder struct {
	req    PutCommitRequest
	config ReplicateConfig   // req.Config when the request has one
	reps   []*GrantedReplica // the backing of req.Replicas
	ids    names             // client and tenant ids
}

// decode decodes a PutCommitRequest body as proto.Unmarshal would into
// the decoder's message and returns it (valid until the next decode).
func (d *putCommitDecoder) decode(b []byte) (*PutCommitRequest, error) {
	out := &d.req
	reps := d.reps[:cap(d.reps)]
	unknown := out.unknownFields[:0]
	*out = PutCommitRequest{}
	n := 0
	hasConfig := false
	var configUnknown []byte
	for len(b) > 0 {
		num, typ, terr := consumeTag(&b)
		if terr != nil {
			return nil, terr
		}
		var err error
		switch {
		case (num == 1 || num == 2 || num == 4 || num == 6 || num == 7) && typ == protowire.BytesType:
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return nil, errProto("bytes")
			}
			b = b[m:]
			switch num {
			case 1, 2, 7:
				if !utf8.Valid(v) {
					return nil, errUTF8(putCommitStringField(num))
				}
				switch num {
				case 1:
					out.ClientId = d.ids.intern(v)
				case 2:
					out.Key = string(v) // the master keeps it
				case 7:
					out.TenantId = d.ids.intern(v)
				}
			case 4: // a message field given twice is merged
				if !hasConfig {
					hasConfig = true
					configUnknown = d.config.unknownFields[:0]
					d.config = ReplicateConfig{}
				}
				if configUnknown, err = decodeReplicateConfig(v, &d.config, configUnknown); err != nil {
					return nil, err
				}
			case 6:
				if n == len(reps) {
					reps = append(reps, nil)
					reps = reps[:cap(reps)]
				}
				if reps[n] == nil {
					reps[n] = new(GrantedReplica)
				}
				if err := decodeGrantedReplica(v, reps[n]); err != nil {
					return nil, err
				}
				n++
				out.Replicas = reps[:n]
			}
			continue
		case (num == 3 || num == 5 || num == 8 || num == 9) && typ == protowire.VarintType:
			var v uint64
			if v, b, err = consumeVarint(b); err != nil {
				return nil, err
			}
			switch num {
			case 3:
				out.Size = v
			case 5:
				out.Upsert = v != 0
			case 8:
				out.Versioned = v != 0
			case 9:
				out.ExpectedVersion = v
			}
			continue
		}
		if unknown, b, err = keepUnknown(unknown, num, typ, b); err != nil {
			return nil, err
		}
	}
	d.reps = reps
	if hasConfig {
		if len(configUnknown) > 0 {
			d.config.unknownFields = configUnknown
		}
		out.Config = &d.config
	}
	if len(unknown) > 0 {
		out.unknownFields = unknown
	}
	return out, nil
}

// decodeReplicateConfig merges the ReplicateConfig body b into c as
// proto.Unmarshal merges one (its lists new: the master may keep them);
// unknown fields are appended to unknown, returned extended.
func decodeReplicateConfig(b []byte, c *ReplicateConfig, unknown []byte) ([]byte, error) {
	for len(b) > 0 {
		num, typ, terr := consumeTag(&b)
		if terr != nil {
			return unknown, terr
		}
		var err error
		switch {
		case (num == 5 || num == 6) && typ == protowire.BytesType:
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return unknown, errProto("bytes")
			}
			b = b[m:]
			if !utf8.Valid(v) {
				if num == 5 {
					return unknown, errUTF8("kvferry.store.v1.ReplicateConfig.preferred_segments")
				}
				return unknown, errUTF8("kvferry.store.v1.ReplicateConfig.group_ids")
			}
			if num == 5 {
				c.PreferredSegments = append(c.PreferredSegments, string(v))
			} else {
				c.GroupIds = append(c.GroupIds, string(v))
			}
			continue
		case num >= 1 && num <= 7 && num != 5 && num != 6 && typ == protowire.VarintType:
			var v uint64
			if v, b, err = consumeVarint(b); err != nil {
				return unknown, err
			}
			switch num {
			case 1:
				c.ReplicaNum = uint32(v)
			case 2:
				c.SoftPin = SoftPinAction(int32(v))
			case 3:
				c.SoftPinTtlMs = v
			case 4:
				c.HardPin = v != 0
			case 7:
				c.HasGroupIds = v != 0
			}
			continue
		}
		if unknown, b, err = keepUnknown(unknown, num, typ, b); err != nil {
			return unknown, err
		}
	}
	return unknown, nil
}

// decodeGrantedReplica decodes one GrantedReplica into r, reset first.
func decodeGrantedReplica(b []byte, r *GrantedReplica) error {
	unknown := r.unknownFields[:0]
	*r = GrantedReplica{}
	for len(b) > 0 {
		num, typ, terr := consumeTag(&b)
		if terr != nil {
			return terr
		}
		var err error
		if (num == 1 || num == 2) && typ == protowire.VarintType {
			var v uint64
			if v, b, err = consumeVarint(b); err != nil {
				return err
			}
			if num == 1 {
				r.GrantId = v
			} else {
				r.Address = v
			}
			continue
		}
		if unknown, b, err = keepUnknown(unknown, num, typ, b); err != nil {
			return err
		}
	}
	if len(unknown) > 0 {
		r.unknownFields = unknown
	}
	return nil
}

func putCommitStringField(num protowire.Number) string {
	switch num {
	case 1:
		return "kvferry.store.v1.PutCommitRequest.client_id"
	case 2:
		return "kvferry.store.v1.PutCommitRequest.key"
	}
	return "kvferry.store.v1.PutCommitRequest.tenant_id"
}
