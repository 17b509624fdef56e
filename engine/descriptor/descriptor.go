// Package descriptor holds the segment descriptor: the pure data a transfer
// engine publishes about its memory segment so that peers can reach it, and
// its JSON form, which is byte-compatible with Mooncake's (specs/mooncake.md
// §3.3). It also holds the rpc_meta record of §3.2.
//
// A Segment is plain data: it can be copied, compared and serialized, and it
// owns no resources.
package descriptor

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Protocol names as Mooncake writes them in a descriptor's "protocol" field.
const (
	ProtocolTCP  = "tcp"
	ProtocolRDMA = "rdma"
)

// TCP protocol versions (specs/mooncake.md §4.3): version 2 adds status frames.
const (
	TCPProtoV1 = 1
	TCPProtoV2 = 2
)

// ErrMalformed is returned (wrapped) for a descriptor that fails the
// decoder's rejection rules of specs/mooncake.md §3.3.
var ErrMalformed = errors.New("malformed segment descriptor")

// Buffer is one registered memory range of a segment.
type Buffer struct {
	// Name is the segment name for TCP buffers and the location string
	// ("cpu:0", "cuda:1") for RDMA buffers.
	Name string `json:"name"`
	// Addr is the start of the range in the owner's address space.
	Addr uint64 `json:"addr"`
	// Length is the size of the range in bytes.
	Length uint64 `json:"length"`
	// RKey and LKey hold one key per device (rdma and efa). They are 64
	// bits wide, as Mooncake's mr_key_t in its EFA builds (libfabric's
	// fi_mr_key); verbs keys and Mooncake's other builds use 32 bits.
	RKey []uint64 `json:"rkey,omitempty"`
	LKey []uint64 `json:"lkey,omitempty"`
	// ShmName is the IPC handle of GPU memory in the form Mooncake's
	// nvlink and nvlink_intra transports publish it: the 64 bytes of a
	// CUipcMemHandle (or, for VMM memory, a CUmemFabricHandle) in
	// upper-case hex. Empty for host memory and unshareable GPU memory.
	ShmName string `json:"shm_name,omitempty"`
	// Mem is the memory kind of GPU memory ("device", "managed"; empty
	// for host memory). kvferry extension; for buffers without it, a name
	// starting with "cuda:" or "hip:" means device memory (Mooncake's
	// locations).
	Mem string `json:"kvferry_mem,omitempty"`
	// IPCOffset is where the buffer starts in the allocation ShmName maps
	// (published by earlier kvferry versions; a buffer that does not start
	// its allocation now lists it as its one Chunk instead, and shm_name
	// names only buffers that start their allocation, as Mooncake assumes;
	// kvferry extension).
	IPCOffset uint64 `json:"kvferry_ipc_offset,omitempty"`
	// Share lists how same-host processes may map GPU memory, comma
	// separated: "ipc" (ShmName is a legacy IPC handle), "fd" (VMM memory
	// the owner exports as POSIX fds over its same-host socket), "fabric"
	// (ShmName is a fabric handle). kvferry extension; a buffer with
	// ShmName and no Share is a Mooncake buffer with a legacy IPC handle.
	Share string `json:"kvferry_share,omitempty"`
	// Continues marks a buffer that continues the one before it in the
	// list: one registration the RDMA transport published as several
	// buffers, one per memory region (device max_mr_size, GPU memory over
	// several allocations), as Mooncake does. Find treats such a run as one
	// buffer. kvferry extension; Mooncake's peers see separate buffers.
	Continues bool `json:"kvferry_continues,omitempty"`
	// Chunks lists the driver allocations of GPU memory that spans more
	// than one (PyTorch's expandable segments, adjacent cudaMalloc ranges),
	// in address order, side by side, covering the buffer; each with its
	// handle where the memory is shared by handle (a legacy IPC handle per
	// allocation for Share "ipc", a fabric handle for "fabric"; none for
	// "fd" alone, whose allocations the owner exports on request). ShmName is
	// then empty: no one handle maps the whole buffer. kvferry extension.
	Chunks []Chunk `json:"kvferry_chunks,omitempty"`
}

// Chunk is one driver allocation under a buffer (Buffer.Chunks).
type Chunk struct {
	// Addr and Size give the allocation (for VMM memory: its mapping) in
	// the owner's address space.
	Addr uint64 `json:"addr"`
	Size uint64 `json:"size"`
	// Handle is the allocation's 64-byte handle in upper-case hex, as
	// ShmName (empty for "fd" memory).
	Handle string `json:"handle,omitempty"`
}

// MaxChunks bounds Buffer.Chunks (and the allocations one registration of
// GPU memory may span): 4096 chunks with fabric handles keep a buffer's
// entry under 1 MB, inside what etcd takes in one value.
const MaxChunks = 4096

// checkChunks checks that b's chunks lie side by side and cover b.
func (b Buffer) checkChunks() error {
	if len(b.Chunks) == 0 {
		return nil
	}
	if len(b.Chunks) > MaxChunks {
		return fmt.Errorf("buffer %#x+%d lists %d chunks (at most %d)", b.Addr, b.Length, len(b.Chunks), MaxChunks)
	}
	next := b.Chunks[0].Addr
	for _, c := range b.Chunks {
		if c.Addr != next || c.Size == 0 || c.Addr+c.Size < c.Addr {
			return fmt.Errorf("buffer %#x+%d: chunk %#x+%d does not follow the one before", b.Addr, b.Length, c.Addr, c.Size)
		}
		next = c.Addr + c.Size
	}
	if b.Chunks[0].Addr > b.Addr || next < b.Addr+b.Length {
		return fmt.Errorf("buffer %#x+%d: its chunks cover %#x..%#x only", b.Addr, b.Length, b.Chunks[0].Addr, next)
	}
	return nil
}

// ChunkAt returns the chunk of b holding addr, or false.
func (b Buffer) ChunkAt(addr uint64) (Chunk, bool) {
	i := sort.Search(len(b.Chunks), func(i int) bool { return b.Chunks[i].Addr+b.Chunks[i].Size > addr })
	if i < len(b.Chunks) && b.Chunks[i].Addr <= addr {
		return b.Chunks[i], true
	}
	return Chunk{}, false
}

// Memory kinds of Buffer.Mem.
const (
	MemDevice  = "device"
	MemManaged = "managed"
)

// GPU reports whether the buffer is GPU memory (device or managed).
func (b Buffer) GPU() bool {
	switch b.Mem {
	case MemDevice, MemManaged:
		return true
	case "":
		// Mooncake's CUDA builds name device memory "cuda:N", its HIP
		// builds "hip:N".
		return strings.HasPrefix(b.Name, "cuda:") || strings.HasPrefix(b.Name, "hip:")
	}
	return false
}

// Contains reports whether [addr, addr+length) lies inside the buffer.
// A zero length never matches.
func (b Buffer) Contains(addr, length uint64) bool {
	if length == 0 || addr < b.Addr {
		return false
	}
	end := addr + length
	if end < addr { // overflow
		return false
	}
	return end <= b.Addr+b.Length
}

// Device is one RDMA device of a segment.
type Device struct {
	Name string `json:"name"`
	LID  uint16 `json:"lid"`
	GID  string `json:"gid"`
}

// Host identifies the machine, kernel namespaces and process that own a
// segment. It is a kvferry extension (field "kvferry_host"): Mooncake peers
// ignore it. Two segments share a host only when BootID and the namespace
// ids are equal; the IP address is never used for that decision.
type Host struct {
	BootID string `json:"boot_id"`
	// MountNS, PIDNS, NetNS and UserNS are the inode numbers of the
	// owner's namespaces (/proc/self/ns/*).
	MountNS uint64 `json:"mnt_ns,omitempty"`
	PIDNS   uint64 `json:"pid_ns,omitempty"`
	NetNS   uint64 `json:"net_ns,omitempty"`
	UserNS  uint64 `json:"user_ns,omitempty"`
	// PID is the owner's process id as seen in its PID namespace.
	PID int `json:"pid"`
	// UID is the owner's effective user id.
	UID int `json:"uid"`
}

// SameHost reports whether h and o describe processes on one kernel that
// share their PID and user namespaces (so that a pid means the same process).
func (h *Host) SameHost(o *Host) bool {
	if h == nil || o == nil || h.BootID == "" {
		return false
	}
	return h.BootID == o.BootID && h.PIDNS == o.PIDNS && h.UserNS == o.UserNS
}

// Segment is a segment descriptor.
type Segment struct {
	// Name is the segment name ("<ip>:<port>" in P2P mode).
	Name string
	// Protocol is the transport the owner advertises to Mooncake peers
	// ("tcp" or "rdma").
	Protocol string
	// TCPDataPort is the TCP transport's data port.
	TCPDataPort int
	// TCPProtoVersion is 2 for status-frame framing; 1 for legacy peers.
	TCPProtoVersion int
	// Timestamp is informational ("YYYY-MM-DD HH:MM:SS.uuuuuu").
	Timestamp string
	// RDMAServerName is an optional separate RDMA-reachable name.
	RDMAServerName string
	// Devices lists RDMA devices (RDMA protocol only).
	Devices []Device
	// PriorityMatrix is the raw NIC priority matrix (RDMA only).
	PriorityMatrix json.RawMessage
	// Buffers lists every registered range.
	Buffers []Buffer
	// Host identifies the owner (kvferry extension; nil from Mooncake).
	Host *Host
	// Transports lists the transports the owner serves, best first
	// (kvferry extension "kvferry_transports"; nil from Mooncake).
	Transports []string
	// Extra carries transport-specific published data keyed by transport
	// name (kvferry extension "kvferry_extra"), e.g. shared-memory sockets.
	Extra map[string]json.RawMessage
	// Features lists the optional protocol features the owner understands
	// (kvferry extension "kvferry_features"; nil from Mooncake), e.g.
	// FeatureNotifyBytes.
	Features []string
	// Incarnation identifies the owning engine instance: 32 hex digits
	// drawn at random when the engine starts, so a restarted peer publishes
	// a new one under the same name (kvferry extension
	// "kvferry_incarnation"; empty from Mooncake). With FeatureDataHello, a
	// kvferry initiator binds each TCP data connection to it (see
	// ParseIncarnation).
	Incarnation string
}

// IncarnationBytes is the size of a decoded incarnation.
const IncarnationBytes = 16

// NewIncarnation draws a fresh incarnation from rand (crypto/rand in
// production).
func NewIncarnation(rand io.Reader) (string, error) {
	var b [IncarnationBytes]byte
	if _, err := io.ReadFull(rand, b[:]); err != nil {
		return "", fmt.Errorf("draw incarnation: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// ParseIncarnation decodes an incarnation; false for an empty or
// malformed one (which binds nothing).
func ParseIncarnation(s string) ([IncarnationBytes]byte, bool) {
	var b [IncarnationBytes]byte
	if len(s) != 2*IncarnationBytes {
		return b, false
	}
	if _, err := hex.Decode(b[:], []byte(s)); err != nil {
		return b, false
	}
	return b, true
}

// FeatureNotifyBytes: the owner accepts notify RPCs whose name and message
// are base64 ("kvferry_encoding":"base64"), so any bytes arrive exactly.
const FeatureNotifyBytes = "notify_bytes"

// FeatureMetadataRPC: the owner answers Metadata requests on its RPC port
// with its current descriptor in every metadata mode, not only P2P (peers
// use it when the metadata service does not list a buffer yet).
const FeatureMetadataRPC = "metadata_rpc"

// FeatureRPCKeepAlive: the owner's RPC port serves several requests on
// one connection when their type byte carries rpc.KeepAlive, so peers
// keep connections between notifications instead of one per request.
const FeatureRPCKeepAlive = "rpc_keepalive"

// FeatureDataHello: the owner's TCP data port answers the identity hello
// (engine/transport/tcp/tcpwire) with its Incarnation, so an initiator
// holding a stale descriptor never sends a request to another process
// that took the port over. Mooncake's wire has no hello: Mooncake
// peers (which publish neither this feature nor an incarnation) are
// reached without one.
const FeatureDataHello = "data_hello"

// Has reports whether the owner announced feature f.
func (s *Segment) Has(f string) bool {
	for _, g := range s.Features {
		if g == f {
			return true
		}
	}
	return false
}

// Find returns the buffer that contains [addr, addr+length), or false. A
// run of buffers that continue each other (Buffer.Continues) counts as one
// buffer: a range that starts in one of them and runs on into the next
// gets the buffer holding its start, extended over the ones it spans.
func (s *Segment) Find(addr, length uint64) (Buffer, bool) {
	for i, b := range s.Buffers {
		if b.Contains(addr, length) {
			return b, true
		}
		if !b.Contains(addr, 1) {
			continue
		}
		// A range running on into the buffers that continue b: one
		// registration, returned as one buffer (b's keys and names).
		for _, c := range s.Buffers[i+1:] {
			if !c.Continues || c.Addr != b.Addr+b.Length {
				break
			}
			b.Length += c.Length
			if b.Contains(addr, length) {
				return b, true
			}
		}
	}
	return Buffer{}, false
}

// Clone returns a deep copy of s.
func (s *Segment) Clone() *Segment {
	c := *s
	c.Buffers = append([]Buffer(nil), s.Buffers...)
	for i := range c.Buffers {
		if b := &c.Buffers[i]; b.Chunks != nil {
			b.Chunks = append([]Chunk(nil), b.Chunks...)
		}
	}
	c.Devices = append([]Device(nil), s.Devices...)
	c.Transports = append([]string(nil), s.Transports...)
	c.Features = append([]string(nil), s.Features...)
	if s.Host != nil {
		h := *s.Host
		c.Host = &h
	}
	if s.Extra != nil {
		c.Extra = make(map[string]json.RawMessage, len(s.Extra))
		for k, v := range s.Extra {
			c.Extra[k] = v
		}
	}
	return &c
}

// wireSegment is the JSON shape; field order follows Mooncake's encoder.
type wireSegment struct {
	Name            string                     `json:"name"`
	Protocol        json.RawMessage            `json:"protocol"`
	TCPDataPort     int                        `json:"tcp_data_port"`
	TCPProtoVersion *int                       `json:"tcp_proto_version,omitempty"`
	Timestamp       string                     `json:"timestamp,omitempty"`
	RDMAServerName  string                     `json:"rdma_server_name,omitempty"`
	Devices         []Device                   `json:"devices,omitempty"`
	Buffers         []Buffer                   `json:"buffers"`
	PriorityMatrix  json.RawMessage            `json:"priority_matrix,omitempty"`
	Host            *Host                      `json:"kvferry_host,omitempty"`
	Transports      []string                   `json:"kvferry_transports,omitempty"`
	Extra           map[string]json.RawMessage `json:"kvferry_extra,omitempty"`
	Features        []string                   `json:"kvferry_features,omitempty"`
	Incarnation     string                     `json:"kvferry_incarnation,omitempty"`
}

// TimestampNow formats t as Mooncake's descriptor timestamp.
func TimestampNow(t time.Time) string {
	return t.Format("2006-01-02 15:04:05.000000")
}

// Marshal encodes s as compact JSON readable by Mooncake's decoder.
func Marshal(s *Segment) ([]byte, error) {
	proto, err := json.Marshal(s.Protocol)
	if err != nil {
		return nil, fmt.Errorf("encode segment descriptor %q: %w", s.Name, err)
	}
	w := wireSegment{
		Name:           s.Name,
		Protocol:       proto,
		TCPDataPort:    s.TCPDataPort,
		Timestamp:      s.Timestamp,
		RDMAServerName: s.RDMAServerName,
		Buffers:        s.Buffers,
		Host:           s.Host,
		Transports:     s.Transports,
		Extra:          s.Extra,
		Features:       s.Features,
		Incarnation:    s.Incarnation,
	}
	if w.Buffers == nil {
		w.Buffers = []Buffer{}
	}
	v := s.TCPProtoVersion
	w.TCPProtoVersion = &v
	if isRDMALike(s.Protocol) {
		w.Devices = s.Devices
		if w.Devices == nil {
			w.Devices = []Device{}
		}
		w.PriorityMatrix = s.PriorityMatrix
		if len(w.PriorityMatrix) == 0 {
			w.PriorityMatrix = json.RawMessage("{}")
		}
	}
	b, err := json.Marshal(&w)
	if err != nil {
		return nil, fmt.Errorf("encode segment descriptor %q: %w", s.Name, err)
	}
	return b, nil
}

func isRDMALike(p string) bool {
	switch p {
	case "rdma", "efa", "cxi", "barex":
		return true
	}
	return false
}

// Unmarshal decodes a descriptor and applies Mooncake's rejection rules
// (specs/mooncake.md §3.3): a tcp buffer with an empty name or a zero
// address or length, an RDMA device without name or gid, or an RDMA buffer
// whose key count differs from the device count rejects the whole
// descriptor. A missing tcp_proto_version means version 1. Buffers must not
// wrap around the address space.
func Unmarshal(data []byte) (*Segment, error) {
	var w wireSegment
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	s := &Segment{
		Name:           w.Name,
		TCPDataPort:    w.TCPDataPort,
		Timestamp:      w.Timestamp,
		RDMAServerName: w.RDMAServerName,
		Devices:        w.Devices,
		PriorityMatrix: w.PriorityMatrix,
		Buffers:        w.Buffers,
		Host:           w.Host,
		Transports:     w.Transports,
		Extra:          w.Extra,
		Features:       w.Features,
		Incarnation:    w.Incarnation,
	}
	if w.TCPProtoVersion != nil {
		s.TCPProtoVersion = *w.TCPProtoVersion
	} else {
		s.TCPProtoVersion = TCPProtoV1
	}
	// The protocol is a string, or an array of strings in multi-protocol
	// builds; keep the first supported one.
	if len(w.Protocol) == 0 {
		return nil, fmt.Errorf("%w: segment %q has no protocol", ErrMalformed, w.Name)
	}
	var p string
	if err := json.Unmarshal(w.Protocol, &p); err != nil {
		var ps []string
		if err2 := json.Unmarshal(w.Protocol, &ps); err2 != nil || len(ps) == 0 {
			return nil, fmt.Errorf("%w: segment %q: protocol is neither string nor list", ErrMalformed, w.Name)
		}
		p = strings.Join(ps, ",")
	}
	s.Protocol = p
	if s.Name == "" {
		return nil, fmt.Errorf("%w: empty segment name", ErrMalformed)
	}
	rdma := isRDMALike(p)
	for _, d := range s.Devices {
		if rdma && (d.Name == "" || d.GID == "") {
			return nil, fmt.Errorf("%w: segment %q: device without name or gid", ErrMalformed, s.Name)
		}
	}
	for _, b := range s.Buffers {
		if b.Name == "" || b.Addr == 0 || b.Length == 0 {
			return nil, fmt.Errorf("%w: segment %q: buffer with empty name, address or length", ErrMalformed, s.Name)
		}
		if b.Addr+b.Length < b.Addr {
			return nil, fmt.Errorf("%w: segment %q: buffer %#x+%d wraps around", ErrMalformed, s.Name, b.Addr, b.Length)
		}
		if err := b.checkChunks(); err != nil {
			return nil, fmt.Errorf("%w: segment %q: %v", ErrMalformed, s.Name, err)
		}
		// As Mooncake: a buffer registered without remote access has lkeys
		// and no rkeys; keys, when present, pair one to one with devices.
		if rdma && len(b.RKey) != 0 && (len(b.RKey) != len(b.LKey) || len(b.RKey) != len(s.Devices)) {
			return nil, fmt.Errorf("%w: segment %q: buffer key count differs from device count", ErrMalformed, s.Name)
		}
	}
	return s, nil
}

// RPCMeta is the rpc_meta record: where a segment's RPC (handshake) port is.
type RPCMeta struct {
	IPOrHostName string `json:"ip_or_host_name"`
	RPCPort      int    `json:"rpc_port"`
}

// Addr returns "host:port", with IPv6 literals in brackets.
func (m RPCMeta) Addr() string {
	return net.JoinHostPort(m.IPOrHostName, strconv.Itoa(m.RPCPort))
}

// MarshalRPCMeta encodes m as compact JSON.
func MarshalRPCMeta(m RPCMeta) ([]byte, error) {
	return json.Marshal(m)
}

// UnmarshalRPCMeta decodes an rpc_meta record; it requires a host and a port
// in 1..65535.
func UnmarshalRPCMeta(data []byte) (RPCMeta, error) {
	var m RPCMeta
	if err := json.Unmarshal(data, &m); err != nil {
		return RPCMeta{}, fmt.Errorf("%w: rpc_meta: %v", ErrMalformed, err)
	}
	if m.IPOrHostName == "" || m.RPCPort <= 0 || m.RPCPort > 65535 {
		return RPCMeta{}, fmt.Errorf("%w: rpc_meta without host or valid port", ErrMalformed)
	}
	return m, nil
}

// ParseP2PName splits a P2P segment name "<host>:<port>" (IPv6 in brackets)
// into its rpc_meta.
func ParseP2PName(name string) (RPCMeta, error) {
	host, port, err := net.SplitHostPort(name)
	if err != nil {
		return RPCMeta{}, fmt.Errorf("parse segment name %q: %w", name, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p <= 0 || p > 65535 || host == "" {
		return RPCMeta{}, fmt.Errorf("parse segment name %q: bad host or port", name)
	}
	return RPCMeta{IPOrHostName: host, RPCPort: p}, nil
}

// P2PName formats host and port as a P2P segment name.
func P2PName(host string, port int) string {
	return net.JoinHostPort(host, strconv.Itoa(port))
}
