package standalone

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/rpc"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/store/client"
	"github.com/kvferry/kvferry/store/wire"
)

// DummyConfig configures a dummy client.
type DummyConfig struct {
	// ServerAddress names the real client: "host:port" (Mooncake's
	// server_address) or a port; the real client must run on this host.
	ServerAddress string
	// LocalBufferSize is shared staging memory for calls on memory that
	// is not shared with the real client (0: none; such calls then carry
	// their bytes over the socket, as larger ones always do).
	LocalBufferSize uint64
	// Timeout bounds each call (default client.DefaultRPCTimeout).
	Timeout time.Duration
	// Logger receives reconnections; nil discards.
	Logger *slog.Logger
}

// Dummy is a dummy client: every store call runs on the real client. Calls
// on memory of registered shared buffers (HostMem) carry addresses only;
// the others carry bytes. A connection that broke (the real client
// restarted) is dialled again on the next call, with the registered
// buffers. Safe for concurrent use.
type Dummy struct {
	cfg  DummyConfig
	port int
	log  *slog.Logger

	mu struct {
		sync.Mutex
		rc         *rpc.Client // nil: not connected
		token      [tokenBytes]byte
		hostname   string
		masterAddr string
		closed     bool
	}
	// regs are the shared buffers registered with the real client, by
	// address (this process's); guarded by regMu.
	regMu sync.Mutex
	regs  map[uintptr]*shmBuffer

	staging     uintptr // LocalBufferSize of shared memory, or 0
	stagingBusy atomic.Bool
}

// Dial connects a dummy client to the real client at cfg.ServerAddress
// and registers its local buffer. ctx bounds the connection.
func Dial(ctx context.Context, cfg DummyConfig) (*Dummy, error) {
	port, err := PortOf(cfg.ServerAddress)
	if err != nil {
		return nil, err
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = client.DefaultRPCTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	d := &Dummy{cfg: cfg, port: port, log: cfg.Logger, regs: make(map[uintptr]*shmBuffer)}
	if _, err := d.client(ctx); err != nil {
		return nil, err
	}
	if cfg.LocalBufferSize > 0 {
		addr, err := hostMem.Alloc(cfg.LocalBufferSize)
		if err != nil {
			d.Close()
			return nil, fmt.Errorf("dummy client: local buffer: %v: %w", err, wire.ErrInternal)
		}
		d.staging = addr
		if err := d.RegisterBuffer(addr, cfg.LocalBufferSize); err != nil {
			d.Close()
			return nil, fmt.Errorf("dummy client: register local buffer: %w", err)
		}
	}
	return d, nil
}

// client returns the connection, dialling the real client (and
// registering the shared buffers again) when there is none.
func (d *Dummy) client(ctx context.Context) (*rpc.Client, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mu.closed {
		return nil, errClosed
	}
	if d.mu.rc != nil {
		return d.mu.rc, nil
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	var dl net.Dialer
	conn, err := dl.DialContext(ctx, "unix", socketAddr(d.port).Name)
	if err != nil {
		return nil, fmt.Errorf("dummy client: no real client at @%s (%s): %v: %w", SocketName(d.port), d.cfg.ServerAddress, err, wire.ErrRPCFail)
	}
	if _, err := conn.Write([]byte{connRPC}); err != nil {
		conn.Close()
		return nil, fmt.Errorf("dummy client: %v: %w", err, wire.ErrRPCFail)
	}
	rc := rpc.NewClient(conn)
	var reply OpenReply
	if err := wait(ctx, rc, "Open", &OpenArgs{PID: os.Getpid()}, &reply); err != nil {
		rc.Close()
		return nil, err
	}
	if err := reply.Err.err(); err != nil {
		rc.Close()
		return nil, fmt.Errorf("dummy client: open session: %w", err)
	}
	d.mu.rc, d.mu.token, d.mu.hostname, d.mu.masterAddr = rc, reply.Token, reply.Hostname, reply.MasterAddr
	// A new session: the real client maps the buffers again.
	d.regMu.Lock()
	regs := make([]*shmBuffer, 0, len(d.regs))
	for _, b := range d.regs {
		regs = append(regs, b)
	}
	d.regMu.Unlock()
	for _, b := range regs {
		if err := d.sendFD(ctx, reply.Token, b); err != nil {
			d.log.Warn("dummy client: re-registering a shared buffer failed", "addr", b.addr, "err", err)
		}
	}
	return rc, nil
}

// wait runs one call, bounded by ctx.
func wait(ctx context.Context, rc *rpc.Client, method string, args, reply any) error {
	call := rc.Go(service+"."+method, args, reply, make(chan *rpc.Call, 1))
	select {
	case <-call.Done:
		if call.Error != nil {
			return fmt.Errorf("real client %s: %v: %w", method, call.Error, wire.ErrRPCFail)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("real client %s: %v: %w", method, ctx.Err(), wire.ErrRPCTimeout)
	}
}

// call runs method on the real client. A connection that failed is dropped
// (the next call dials again).
func (d *Dummy) call(ctx context.Context, method string, args, reply any) error {
	rc, err := d.client(ctx)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	err = wait(ctx, rc, method, args, reply)
	if err != nil && wire.CodeOf(err) == wire.ErrRPCFail {
		d.mu.Lock()
		if d.mu.rc == rc {
			d.mu.rc = nil
			rc.Close()
			d.log.Warn("dummy client lost the real client", "socket", "@"+SocketName(d.port), "err", err)
		}
		d.mu.Unlock()
	}
	return err
}

// sendFD hands buffer b's descriptor to the session token names.
func (d *Dummy) sendFD(ctx context.Context, token [tokenBytes]byte, b *shmBuffer) error {
	var dl net.Dialer
	c, err := dl.DialContext(ctx, "unix", socketAddr(d.port).Name)
	if err != nil {
		return fmt.Errorf("register shared buffer: %v: %w", err, wire.ErrRPCFail)
	}
	defer c.Close()
	uc := c.(*net.UnixConn)
	_ = uc.SetDeadline(time.Now().Add(handshakeTimeout))
	if _, err := uc.Write([]byte{connFD}); err != nil {
		return fmt.Errorf("register shared buffer: %v: %w", err, wire.ErrRPCFail)
	}
	req := make([]byte, fdRequestBytes)
	putFDRequest(req, token, uint64(b.addr), b.size)
	if _, _, err := uc.WriteMsgUnix(req, unix.UnixRights(b.fd), nil); err != nil {
		return fmt.Errorf("register shared buffer: send descriptor: %v: %w", err, wire.ErrRPCFail)
	}
	var reply [fdReplyBytes]byte
	if _, err := io.ReadFull(uc, reply[:]); err != nil {
		return fmt.Errorf("register shared buffer: %v: %w", err, wire.ErrRPCFail)
	}
	if code := int32(uint32(reply[0]) | uint32(reply[1])<<8 | uint32(reply[2])<<16 | uint32(reply[3])<<24); code != 0 {
		return fmt.Errorf("real client refused shared buffer %#x+%d: %w", b.addr, b.size, wire.ErrorOf(code))
	}
	return nil
}

// Close ends the session (the real client drops the shared buffers) and
// frees the local buffer. A second Close is harmless.
func (d *Dummy) Close() error {
	d.mu.Lock()
	if d.mu.closed {
		d.mu.Unlock()
		return nil
	}
	d.mu.closed = true
	rc := d.mu.rc
	d.mu.rc = nil
	d.mu.Unlock()
	if rc != nil {
		rc.Close()
	}
	if d.staging != 0 {
		_ = hostMem.Free(d.staging)
	}
	return nil
}

// Hostname returns the real client's segment name.
func (d *Dummy) Hostname() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.mu.hostname
}

// MasterAddr returns the master the real client uses.
func (d *Dummy) MasterAddr() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.mu.masterAddr
}

// RegisterBuffer shares the HostMem buffer holding [addr, addr+size) with
// the real client (once per buffer). Other memory is INTERNAL_ERROR, as a
// Mooncake dummy answers -1.
func (d *Dummy) RegisterBuffer(addr uintptr, size uint64) error {
	if addr == 0 || size == 0 {
		return fmt.Errorf("register buffer %#x+%d: %w", addr, size, wire.ErrInvalidParams)
	}
	b := hostMem.find(addr, size)
	if b == nil {
		return fmt.Errorf("register buffer %#x+%d: %v: %w", addr, size, ErrNotShared, wire.ErrInternal)
	}
	d.regMu.Lock()
	_, done := d.regs[b.addr]
	d.regMu.Unlock()
	if done {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.Timeout)
	defer cancel()
	if _, err := d.client(ctx); err != nil {
		return err
	}
	d.mu.Lock()
	token := d.mu.token
	d.mu.Unlock()
	if err := d.sendFD(ctx, token, b); err != nil {
		return err
	}
	d.regMu.Lock()
	d.regs[b.addr] = b
	d.regMu.Unlock()
	return nil
}

// UnregisterBuffer stops sharing the buffer registered at addr.
func (d *Dummy) UnregisterBuffer(addr uintptr) error {
	d.regMu.Lock()
	b, ok := d.regs[addr]
	delete(d.regs, addr)
	d.regMu.Unlock()
	if !ok {
		return fmt.Errorf("unregister buffer %#x: not registered: %w", addr, wire.ErrInternal)
	}
	var r ReplyErr
	if err := d.call(context.Background(), "Unregister", &UnregisterArgs{Addr: uint64(b.addr)}, &r); err != nil {
		return err
	}
	return r.Err.err()
}

// shared returns the registered buffer pieces of [addr, addr+n), or false.
func (d *Dummy) shared(addr uintptr, n uint64) bool {
	d.regMu.Lock()
	defer d.regMu.Unlock()
	for _, b := range d.regs {
		if addr >= b.addr && uint64(addr-b.addr) <= b.size && n <= b.size-uint64(addr-b.addr) {
			return true
		}
	}
	return false
}

// putItem describes one object of C memory in bufs.
func (d *Dummy) putItem(key string, bufs []client.Buffer) PutItem {
	it := PutItem{Key: key}
	all := true
	var total uint64
	for _, b := range bufs {
		total += b.Size
		if b.Size > 0 && (b.Addr == 0 || !d.shared(b.Addr, b.Size)) {
			all = false
		}
	}
	if all {
		for _, b := range bufs {
			if b.Size > 0 {
				it.Pieces = append(it.Pieces, Piece{Addr: uint64(b.Addr), Size: b.Size})
			}
		}
		if it.Pieces != nil {
			return it
		}
	}
	it.Data = make([]byte, 0, total)
	for _, b := range bufs {
		if b.Addr != 0 && b.Size > 0 {
			it.Data = append(it.Data, cmem.Bytes(b.Addr, b.Size)...)
		}
	}
	return it
}

func (d *Dummy) put(ctx context.Context, keys []string, bufs [][]client.Buffer, cfg client.ReplicateConfig, upsert bool) []error {
	if len(bufs) != len(keys) {
		return fill(len(keys), fmt.Errorf("put: %d keys, %d buffer lists: %w", len(keys), len(bufs), wire.ErrInvalidParams))
	}
	a := &PutArgs{Config: cfg, HasGroups: cfg.GroupIDs != nil, Upsert: upsert, Items: make([]PutItem, len(keys))}
	for i, k := range keys {
		a.Items[i] = d.putItem(k, bufs[i])
	}
	var r PutReply
	if err := d.call(ctx, "Put", a, &r); err != nil {
		return fill(len(keys), err)
	}
	return errsOf(r.Errs, len(keys))
}

// one is the one-buffer list of a single-buffer call.
func one(addr uintptr, size uint64) [][]client.Buffer {
	return [][]client.Buffer{{{Addr: addr, Size: size}}}
}

func flat(addrs []uintptr, sizes []uint64) ([][]client.Buffer, bool) {
	if len(addrs) != len(sizes) {
		return nil, false
	}
	out := make([][]client.Buffer, len(addrs))
	for i := range addrs {
		out[i] = []client.Buffer{{Addr: addrs[i], Size: sizes[i]}}
	}
	return out, true
}

// putOne puts one object, through the local buffer when it is not shared
// memory and fits there.
func (d *Dummy) putOne(ctx context.Context, key string, addr uintptr, size uint64, cfg client.ReplicateConfig, upsert bool) error {
	if key == "" || size == 0 || addr == 0 {
		return fmt.Errorf("put %q (%d bytes): %w", key, size, wire.ErrInvalidParams)
	}
	if d.staging != 0 && size <= d.cfg.LocalBufferSize && !d.shared(addr, size) && d.stagingBusy.CompareAndSwap(false, true) {
		defer d.stagingBusy.Store(false)
		cmem.Copy(d.staging, addr, size)
		addr = d.staging
	}
	return d.put(ctx, []string{key}, one(addr, size), cfg, upsert)[0]
}

// PutFrom puts size bytes at addr under key.
func (d *Dummy) PutFrom(ctx context.Context, key string, addr uintptr, size uint64, cfg client.ReplicateConfig) error {
	return d.putOne(ctx, key, addr, size, cfg, false)
}

// UpsertFrom is PutFrom replacing an existing object.
func (d *Dummy) UpsertFrom(ctx context.Context, key string, addr uintptr, size uint64, cfg client.ReplicateConfig) error {
	return d.putOne(ctx, key, addr, size, cfg, true)
}

// BatchPutFrom puts keys[i] from sizes[i] bytes at addrs[i].
func (d *Dummy) BatchPutFrom(ctx context.Context, keys []string, addrs []uintptr, sizes []uint64, cfg client.ReplicateConfig) []error {
	b, ok := flat(addrs, sizes)
	if !ok || len(b) != len(keys) {
		return fill(len(keys), fmt.Errorf("batch put: %d keys, %d buffers, %d sizes: %w", len(keys), len(addrs), len(sizes), wire.ErrInvalidParams))
	}
	return d.put(ctx, keys, b, cfg, false)
}

// BatchUpsertFrom is BatchPutFrom replacing existing objects.
func (d *Dummy) BatchUpsertFrom(ctx context.Context, keys []string, addrs []uintptr, sizes []uint64, cfg client.ReplicateConfig) []error {
	b, ok := flat(addrs, sizes)
	if !ok || len(b) != len(keys) {
		return fill(len(keys), fmt.Errorf("batch upsert: %d keys, %d buffers, %d sizes: %w", len(keys), len(addrs), len(sizes), wire.ErrInvalidParams))
	}
	return d.put(ctx, keys, b, cfg, true)
}

// BatchPutFromMulti puts, per key, the concatenation of its buffers.
func (d *Dummy) BatchPutFromMulti(ctx context.Context, keys []string, bufs [][]client.Buffer, cfg client.ReplicateConfig) []error {
	return d.put(ctx, keys, bufs, cfg, false)
}

// BatchUpsertFromMulti is BatchPutFromMulti replacing existing objects.
func (d *Dummy) BatchUpsertFromMulti(ctx context.Context, keys []string, bufs [][]client.Buffer, cfg client.ReplicateConfig) []error {
	return d.put(ctx, keys, bufs, cfg, true)
}

// PublishFrom is the real client's versioned publish.
func (d *Dummy) PublishFrom(ctx context.Context, key string, addr uintptr, size uint64, expected uint64, cfg client.ReplicateConfig) (uint64, error) {
	if key == "" || size == 0 || addr == 0 {
		return 0, fmt.Errorf("publish %q (%d bytes): %w", key, size, wire.ErrInvalidParams)
	}
	a := &PutArgs{Config: cfg, HasGroups: cfg.GroupIDs != nil, Publish: true, Expected: expected,
		Items: []PutItem{d.putItem(key, []client.Buffer{{Addr: addr, Size: size}})}}
	var r PutReply
	if err := d.call(ctx, "Put", a, &r); err != nil {
		return 0, err
	}
	return r.Version, errsOf(r.Errs, 1)[0]
}

// get reads keys into bufs.
func (d *Dummy) get(ctx context.Context, keys []string, bufs [][]client.Buffer) ([]uint64, []error) {
	n := make([]uint64, len(keys))
	if len(bufs) != len(keys) {
		return n, fill(len(keys), fmt.Errorf("get: %d keys, %d buffer lists: %w", len(keys), len(bufs), wire.ErrInvalidParams))
	}
	a := &GetArgs{Items: make([]GetItem, len(keys))}
	for i, k := range keys {
		it := GetItem{Key: k}
		all := true
		for _, b := range bufs[i] {
			it.Cap += b.Size
			if b.Size > 0 && (b.Addr == 0 || !d.shared(b.Addr, b.Size)) {
				all = false
			}
		}
		if all {
			for _, b := range bufs[i] {
				if b.Size > 0 {
					it.Pieces = append(it.Pieces, Piece{Addr: uint64(b.Addr), Size: b.Size})
				}
			}
		}
		a.Items[i] = it
	}
	var r GetReply
	if err := d.call(ctx, "Get", a, &r); err != nil {
		return n, fill(len(keys), err)
	}
	errs := errsOf(r.Errs, len(keys))
	for i := range keys {
		if errs[i] != nil || i >= len(r.Sizes) {
			continue
		}
		n[i] = r.Sizes[i]
		if a.Items[i].Pieces != nil || i >= len(r.Data) {
			continue
		}
		if err := scatter(r.Data[i], bufs[i]); err != nil {
			errs[i], n[i] = fmt.Errorf("get %q: %w", keys[i], err), 0
		}
	}
	return n, errs
}

// scatter copies data over bufs, in order.
func scatter(data []byte, bufs []client.Buffer) error {
	for _, b := range bufs {
		if len(data) == 0 {
			return nil
		}
		k := min(uint64(len(data)), b.Size)
		if k == 0 {
			continue
		}
		if b.Addr == 0 {
			return fmt.Errorf("NULL buffer: %w", wire.ErrInvalidParams)
		}
		copy(cmem.Bytes(b.Addr, k), data[:k])
		data = data[k:]
	}
	if len(data) > 0 {
		return fmt.Errorf("%d bytes left over: %w", len(data), wire.ErrInvalidParams)
	}
	return nil
}

// GetInto reads key into size bytes at addr, through the local buffer
// when addr is not shared memory and the object fits there.
func (d *Dummy) GetInto(ctx context.Context, key string, addr uintptr, size uint64) (uint64, error) {
	if key == "" || addr == 0 {
		return 0, fmt.Errorf("get %q: %w", key, wire.ErrInvalidParams)
	}
	if d.staging != 0 && size <= d.cfg.LocalBufferSize && !d.shared(addr, size) && d.stagingBusy.CompareAndSwap(false, true) {
		defer d.stagingBusy.Store(false)
		n, errs := d.get(ctx, []string{key}, one(d.staging, size))
		if errs[0] != nil {
			return 0, errs[0]
		}
		cmem.Copy(addr, d.staging, n[0])
		return n[0], nil
	}
	n, errs := d.get(ctx, []string{key}, one(addr, size))
	return n[0], errs[0]
}

// BatchGetInto reads keys[i] into sizes[i] bytes at addrs[i].
func (d *Dummy) BatchGetInto(ctx context.Context, keys []string, addrs []uintptr, sizes []uint64) ([]uint64, []error) {
	b, ok := flat(addrs, sizes)
	if !ok || len(b) != len(keys) {
		return make([]uint64, len(keys)), fill(len(keys), fmt.Errorf("batch get: %d keys, %d buffers, %d sizes: %w",
			len(keys), len(addrs), len(sizes), wire.ErrInvalidParams))
	}
	return d.get(ctx, keys, b)
}

// BatchGetIntoMulti reads each key scattered over its buffers.
func (d *Dummy) BatchGetIntoMulti(ctx context.Context, keys []string, bufs [][]client.Buffer) ([]uint64, []error) {
	return d.get(ctx, keys, bufs)
}

// GetVersioned is the real client's versioned read.
func (d *Dummy) GetVersioned(ctx context.Context, key string, minVersion uint64, wait time.Duration) ([]byte, uint64, error) {
	var r VersionReply
	if err := d.call(ctx, "GetVersion", &VersionArgs{Key: key, Min: minVersion, Wait: wait}, &r); err != nil {
		return nil, 0, err
	}
	return r.Data, r.Version, r.Err.err()
}

// IsExist reports whether key exists.
func (d *Dummy) IsExist(ctx context.Context, key string) (bool, error) {
	ex, err := d.BatchIsExist(ctx, []string{key})
	if err != nil || len(ex) != 1 {
		return false, errors.Join(err, errIfShort(len(ex), 1))
	}
	return ex[0], nil
}

func errIfShort(got, want int) error {
	if got == want {
		return nil
	}
	return fmt.Errorf("real client answered %d of %d: %w", got, want, wire.ErrRPCFail)
}

// BatchIsExist reports which keys exist.
func (d *Dummy) BatchIsExist(ctx context.Context, keys []string) ([]bool, error) {
	var r ExistReply
	if err := d.call(ctx, "Exist", &KeysArgs{Keys: keys}, &r); err != nil {
		return nil, err
	}
	if err := r.Err.err(); err != nil {
		return nil, err
	}
	if len(r.Exist) != len(keys) {
		return nil, errIfShort(len(r.Exist), len(keys))
	}
	return r.Exist, nil
}

// GetSize returns the size of key.
func (d *Dummy) GetSize(ctx context.Context, key string) (uint64, error) {
	var r CountReply
	if err := d.call(ctx, "Size", &KeysArgs{Keys: []string{key}}, &r); err != nil {
		return 0, err
	}
	return uint64(r.Count), r.Err.err()
}

// Remove removes key.
func (d *Dummy) Remove(ctx context.Context, key string, force bool) error {
	var r ErrsReply
	if err := d.call(ctx, "Remove", &KeysArgs{Keys: []string{key}, Force: force}, &r); err != nil {
		return err
	}
	return r.Err.err()
}

// BatchRemove removes keys.
func (d *Dummy) BatchRemove(ctx context.Context, keys []string, force bool) ([]error, error) {
	if len(keys) == 1 {
		return []error{d.Remove(ctx, keys[0], force)}, nil
	}
	var r ErrsReply
	if err := d.call(ctx, "Remove", &KeysArgs{Keys: keys, Force: force}, &r); err != nil {
		return nil, err
	}
	if err := r.Err.err(); err != nil {
		return nil, err
	}
	return errsOf(r.Errs, len(keys)), nil
}

// RemoveByRegex removes the objects whose key matches pattern.
func (d *Dummy) RemoveByRegex(ctx context.Context, pattern string, force bool) (int64, error) {
	var r CountReply
	if err := d.call(ctx, "RemoveMatching", &KeysArgs{Pattern: pattern, Force: force}, &r); err != nil {
		return 0, err
	}
	return r.Count, r.Err.err()
}

// RemoveAll removes every object.
func (d *Dummy) RemoveAll(ctx context.Context, force bool) (int64, error) {
	var r CountReply
	if err := d.call(ctx, "RemoveMatching", &KeysArgs{All: true, Force: force}, &r); err != nil {
		return 0, err
	}
	return r.Count, r.Err.err()
}

// ReplicaDescs returns where the objects of keys live.
func (d *Dummy) ReplicaDescs(ctx context.Context, keys []string) ([]client.KeyReplicas, error) {
	var r ReplicasReply
	if err := d.call(ctx, "Replicas", &KeysArgs{Keys: keys}, &r); err != nil {
		return nil, err
	}
	if err := r.Err.err(); err != nil {
		return nil, err
	}
	out := make([]client.KeyReplicas, len(r.Keys))
	for i, k := range r.Keys {
		reps := k.Replicas
		if reps == nil {
			reps = []client.ReplicaDesc{}
		}
		out[i] = client.KeyReplicas{Err: k.Err.err(), Size: k.Size, Replicas: reps}
	}
	return out, nil
}

// HealthCheck reports whether the real client and its master answer.
func (d *Dummy) HealthCheck(ctx context.Context) error {
	var r ReplyErr
	if err := d.call(ctx, "Health", &Empty{}, &r); err != nil {
		return err
	}
	return r.Err.err()
}

// CreateCopyTask asks for copies of key on targets.
func (d *Dummy) CreateCopyTask(ctx context.Context, key string, targets []string) (string, error) {
	var r TaskReply
	if err := d.call(ctx, "Task", &TaskArgs{Key: key, Targets: targets}, &r); err != nil {
		return "", err
	}
	return r.ID, r.Err.err()
}

// CreateMoveTask asks for key's replica on source to move to target.
func (d *Dummy) CreateMoveTask(ctx context.Context, key, source, target string) (string, error) {
	var r TaskReply
	if err := d.call(ctx, "Task", &TaskArgs{Key: key, Source: source, Targets: []string{target}, Move: true}, &r); err != nil {
		return "", err
	}
	return r.ID, r.Err.err()
}

// QueryTask returns the state of a copy or move task.
func (d *Dummy) QueryTask(ctx context.Context, id string) (client.TaskInfo, error) {
	var r TaskReply
	if err := d.call(ctx, "Task", &TaskArgs{ID: id}, &r); err != nil {
		return client.TaskInfo{}, err
	}
	return r.Info, r.Err.err()
}
