package wire

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/kvferry/kvferry/store/wire/shape"
)

// Request limits of the store master (MasterConfig and kvferry-master
// flags set them): what one request may name, so that a hostile client
// cannot make the master allocate or work far beyond what it sent.
const (
	// DefaultMaxKeyBytes caps an object key.
	DefaultMaxKeyBytes = 4096
	// DefaultMaxBatchKeys caps the keys of one batch call.
	DefaultMaxBatchKeys = 65536
	// DefaultMaxElements caps the fields and repeated elements a request
	// decodes to, counted before it is decoded (CheckShape).
	DefaultMaxElements = 4 * DefaultMaxBatchKeys
	// DefaultMaxMuxRequest caps a mux request body (answers may be up to
	// MaxMuxBody).
	DefaultMaxMuxRequest = 16 << 20
	// maxListItems caps the smaller lists of a request: segments of a
	// re-mount, preferred or excluded segments, replicas of a commit,
	// grant ids.
	maxListItems = 4096
)

// ErrRequestLimit is returned (wrapped, with INVALID_PARAMS) for a request
// over a limit.
var ErrRequestLimit = fmt.Errorf("request over a store master limit: %w", ErrInvalidParams)

// RequestLimits bounds one master request. The zero value means the
// defaults.
type RequestLimits struct {
	MaxKeyBytes  int
	MaxBatchKeys int
	MaxElements  int
}

func (l RequestLimits) withDefaults() RequestLimits {
	if l.MaxKeyBytes <= 0 {
		l.MaxKeyBytes = DefaultMaxKeyBytes
	}
	if l.MaxBatchKeys <= 0 {
		l.MaxBatchKeys = DefaultMaxBatchKeys
	}
	if l.MaxElements <= 0 {
		l.MaxElements = max(DefaultMaxElements, 4*l.MaxBatchKeys)
	}
	return l
}

// CheckShape counts the fields a protobuf message of type md would decode
// to, nested messages and packed elements included, without decoding it,
// and fails once the count passes maxElements (shape.Check): over the
// limit is ErrRequestLimit, bytes that are no message ErrInvalidParams.
func CheckShape(md protoreflect.MessageDescriptor, b []byte, maxElements int) error {
	err := shape.Check(md, b, maxElements)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, shape.ErrLimit):
		return fmt.Errorf("%w: %w", err, ErrRequestLimit)
	default:
		return fmt.Errorf("%w: %w", err, ErrInvalidParams)
	}
}

// checkKey applies the key limit to a key of n bytes.
func (l RequestLimits) checkKey(n int) error {
	l = l.withDefaults()
	if n > l.MaxKeyBytes {
		return fmt.Errorf("key of %d bytes (at most %d): %w", n, l.MaxKeyBytes, ErrRequestLimit)
	}
	return nil
}

// Check applies the key and list limits to a decoded request.
func (l RequestLimits) Check(req proto.Message) error {
	l = l.withDefaults()
	key := func(k string) error { return l.checkKey(len(k)) }
	keys := func(ks []string) error {
		if len(ks) > l.MaxBatchKeys {
			return fmt.Errorf("batch of %d keys (at most %d): %w", len(ks), l.MaxBatchKeys, ErrRequestLimit)
		}
		for _, k := range ks {
			if err := key(k); err != nil {
				return err
			}
		}
		return nil
	}
	list := func(what string, n int) error {
		if n > maxListItems {
			return fmt.Errorf("%d %s (at most %d): %w", n, what, maxListItems, ErrRequestLimit)
		}
		return nil
	}
	config := func(c *ReplicateConfig) error { return list("preferred segments", len(c.GetPreferredSegments())) }
	switch r := req.(type) {
	case *KeyRequest:
		return key(r.GetKey())
	case *RemoveRequest:
		return key(r.GetKey())
	case *PutEndRequest:
		return key(r.GetKey())
	case *PutStartRequest:
		if err := key(r.GetKey()); err != nil {
			return err
		}
		return config(r.GetConfig())
	case *PutCommitRequest:
		if err := key(r.GetKey()); err != nil {
			return err
		}
		if err := list("replicas", len(r.GetReplicas())); err != nil {
			return err
		}
		return config(r.GetConfig())
	case *BatchKeyRequest:
		return keys(r.GetKeys())
	case *BatchRemoveRequest:
		return keys(r.GetKeys())
	case *BatchPutEndRequest:
		return keys(r.GetKeys())
	case *BatchPutStartRequest:
		if err := keys(r.GetKeys()); err != nil {
			return err
		}
		if len(r.GetSizes()) > l.MaxBatchKeys {
			return fmt.Errorf("batch of %d sizes (at most %d): %w", len(r.GetSizes()), l.MaxBatchKeys, ErrRequestLimit)
		}
		return config(r.GetConfig())
	case *RemoveByRegexRequest:
		return key(r.GetPattern())
	case *ReMountSegmentsRequest:
		return list("segments", len(r.GetSegments()))
	case *AcquireGrantsRequest:
		if err := list("excluded segments", len(r.GetExcludeSegments())); err != nil {
			return err
		}
		return list("returned grants", len(r.GetReturnGrantIds()))
	case *ReturnGrantsRequest:
		return list("grants", len(r.GetGrantIds()))
	case *MountDiskSegmentRequest:
		if len(r.GetEntries()) > l.MaxBatchKeys {
			return fmt.Errorf("%d disk entries (at most %d): %w", len(r.GetEntries()), l.MaxBatchKeys, ErrRequestLimit)
		}
		for _, e := range r.GetEntries() {
			if err := key(e.GetKey()); err != nil {
				return err
			}
		}
	case *WaitObjectRequest:
		return key(r.GetKey())
	case *FetchTasksRequest:
		return list("task results", len(r.GetDone()))
	case *CreateTaskRequest:
		if err := key(r.GetKey()); err != nil {
			return err
		}
		return list("targets", len(r.GetTargets()))
	case *GetReplicaListByRegexRequest:
		return key(r.GetPattern())
	case *BatchQueryIpRequest:
		return keys(r.GetClientIds())
	case *CreateDrainJobRequest:
		if err := list("segments", len(r.GetSegments())); err != nil {
			return err
		}
		return list("target segments", len(r.GetTargetSegments()))
	case *DrainJobIdRequest:
		return key(r.GetJobId())
	case *BatchReplicaClearRequest:
		if err := key(r.GetSegmentName()); err != nil {
			return err
		}
		return keys(r.GetKeys())
	}
	return nil
}

// ShapeCodec is the gRPC server codec of the master: protobuf, with every
// request's shape checked (CheckShape) before it is decoded. Install it
// with grpc.ForceServerCodecV2.
type ShapeCodec struct {
	// MaxElements is CheckShape's limit (DefaultMaxElements when 0).
	MaxElements int
}

var protoCodec = encoding.GetCodecV2(grpcproto.Name)

// Marshal encodes v as protobuf.
func (c ShapeCodec) Marshal(v any) (mem.BufferSlice, error) { return protoCodec.Marshal(v) }

// Unmarshal checks data's shape, then decodes it into v.
func (c ShapeCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return protoCodec.Unmarshal(data, v)
	}
	limit := c.MaxElements
	if limit <= 0 {
		limit = DefaultMaxElements
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	b := buf.ReadOnlyData()
	if err := CheckShape(m.ProtoReflect().Descriptor(), b, limit); err != nil {
		return err
	}
	return proto.Unmarshal(b, m)
}

// Name is "proto": clients see the ordinary protobuf codec.
func (c ShapeCodec) Name() string { return grpcproto.Name }
