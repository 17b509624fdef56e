package standalone

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/kvferry/kvferry/store/client"
	"github.com/kvferry/kvferry/store/wire"
)

// DefaultPort is the real client's default port (Mooncake's mooncake_client
// --port).
const DefaultPort = 50052

// SocketName returns the abstract Unix socket name of the real client that
// port names (without the leading NUL).
func SocketName(port int) string { return "kvferry_client_" + strconv.Itoa(port) + ".sock" }

// socketAddr is SocketName as a Go Unix address (abstract: leading '@').
func socketAddr(port int) *net.UnixAddr {
	return &net.UnixAddr{Name: "@" + SocketName(port), Net: "unix"}
}

// PortOf parses a real client's server_address: "host:port" or a bare port.
func PortOf(serverAddress string) (int, error) {
	p := serverAddress
	if _, port, err := net.SplitHostPort(serverAddress); err == nil {
		p = port
	}
	n, err := strconv.Atoi(p)
	if err != nil || n <= 0 || n > 65535 {
		return 0, fmt.Errorf("real client address %q: want host:port: %w", serverAddress, wire.ErrInvalidParams)
	}
	return n, nil
}

// Connection kinds (the first byte of a connection).
const (
	connRPC byte = 'R'
	connFD  byte = 'F'
)

// tokenBytes is the length of a session token.
const tokenBytes = 16

// fdRequest is what an 'F' connection carries beside the descriptor: the
// session token, the buffer's address and size in the dummy's process.
// Fixed layout, little endian: token (16), addr (8), size (8).
const fdRequestBytes = tokenBytes + 16

func putFDRequest(b []byte, token [tokenBytes]byte, addr, size uint64) {
	copy(b, token[:])
	binary.LittleEndian.PutUint64(b[tokenBytes:], addr)
	binary.LittleEndian.PutUint64(b[tokenBytes+8:], size)
}

// fdReplyBytes: the answer to an 'F' connection is a store code (int32).
const fdReplyBytes = 4

// handshakeTimeout bounds the first bytes and the fd exchange of a
// connection.
const handshakeTimeout = 5 * time.Second

// RPC service name on the control connection.
const service = "Store"

// Errors travel as a store code and a text.
type rpcError struct {
	Code int32
	Msg  string
}

func toRPCError(err error) rpcError {
	if err == nil {
		return rpcError{}
	}
	return rpcError{Code: int32(wire.CodeOf(err)), Msg: err.Error()}
}

// err returns the error e stands for (nil for code 0).
func (e rpcError) err() error {
	if e.Code == 0 {
		return nil
	}
	return &remoteError{code: wire.Code(e.Code), msg: e.Msg}
}

// remoteError is an error of the real client: its text, and its code for
// errors.Is and wire.CodeOf.
type remoteError struct {
	code wire.Code
	msg  string
}

func (e *remoteError) Error() string { return "real client: " + e.msg }

// Unwrap makes the store code visible to errors.Is / wire.CodeOf.
func (e *remoteError) Unwrap() error { return e.code }

func errsOf(es []rpcError, n int) []error {
	out := make([]error, n)
	for i := range out {
		if i < len(es) {
			out[i] = es[i].err()
		} else {
			out[i] = fmt.Errorf("real client answered %d of %d: %w", len(es), n, wire.ErrRPCFail)
		}
	}
	return out
}

func rpcErrs(errs []error) []rpcError {
	out := make([]rpcError, len(errs))
	for i, e := range errs {
		out[i] = toRPCError(e)
	}
	return out
}

// Messages of the Store service. Addresses are the dummy's.

// OpenArgs opens a session.
type OpenArgs struct {
	// PID is the dummy's process (for logs).
	PID int
}

// OpenReply answers OpenArgs.
type OpenReply struct {
	Token      [tokenBytes]byte
	Hostname   string
	MasterAddr string
	Err        rpcError
}

// Piece is a part of an object in a registered shared buffer.
type Piece struct {
	Addr uint64
	Size uint64
}

// PutItem is one object of a put: its pieces in shared memory, or its
// bytes.
type PutItem struct {
	Key    string
	Pieces []Piece
	Data   []byte
}

// PutArgs puts objects.
type PutArgs struct {
	Items  []PutItem
	Config client.ReplicateConfig
	// HasGroups says Config.GroupIDs was given (gob sends an empty list as
	// none).
	HasGroups bool
	Upsert    bool
	// Publish makes the one item a versioned publish expecting Expected.
	Publish  bool
	Expected uint64
}

// PutReply answers PutArgs.
type PutReply struct {
	Errs    []rpcError
	Version uint64 // of a publish
}

// GetItem is one object of a get: read into pieces of shared memory, or
// (Pieces nil) answered as bytes, at most Cap of them.
type GetItem struct {
	Key    string
	Pieces []Piece
	Cap    uint64
}

// GetArgs reads objects.
type GetArgs struct {
	Items []GetItem
}

// GetReply answers GetArgs: per item the object size, the bytes of items
// answered as bytes, the failure.
type GetReply struct {
	Sizes []uint64
	Data  [][]byte
	Errs  []rpcError
}

// KeysArgs names keys (existence, removal, replica lookups).
type KeysArgs struct {
	Keys    []string
	Force   bool
	Pattern string
	All     bool
}

// CountReply answers removals by pattern or of all objects, and sizes.
type CountReply struct {
	Count int64
	Err   rpcError
}

// ExistReply answers existence checks.
type ExistReply struct {
	Exist []bool
	Err   rpcError
}

// ErrsReply answers calls with one result per key.
type ErrsReply struct {
	Errs []rpcError
	Err  rpcError
}

// KeyReplicas is client.KeyReplicas on the wire.
type KeyReplicas struct {
	Err      rpcError
	Size     uint64
	Replicas []client.ReplicaDesc
}

// ReplicasReply answers replica lookups.
type ReplicasReply struct {
	Keys []KeyReplicas
	Err  rpcError
}

// TaskArgs creates or queries a copy or move task.
type TaskArgs struct {
	Key     string
	Source  string
	Targets []string
	ID      string
	Move    bool
}

// TaskReply answers TaskArgs.
type TaskReply struct {
	ID   string
	Info client.TaskInfo
	Err  rpcError
}

// VersionArgs reads an object at a version at least Min.
type VersionArgs struct {
	Key  string
	Min  uint64
	Wait time.Duration
}

// VersionReply answers VersionArgs.
type VersionReply struct {
	Data    []byte
	Version uint64
	Err     rpcError
}

// UnregisterArgs drops a shared buffer from the session.
type UnregisterArgs struct {
	Addr uint64
}

// Empty is the argument or answer of calls that carry nothing.
type Empty struct{}

// ReplyErr answers calls with only an error.
type ReplyErr struct {
	Err rpcError
}

var errClosed = errors.New("dummy store client closed")
