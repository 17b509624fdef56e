package hostile_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"gotest.tools/v3/assert"

	mdhttp "github.com/kvferry/kvferry/engine/metadata/http"
	"github.com/kvferry/kvferry/engine/peerauth"
	"github.com/kvferry/kvferry/engine/rpc"
	"github.com/kvferry/kvferry/engine/transport/tcp"
	"github.com/kvferry/kvferry/engine/transport/tcp/tcpwire"
	"github.com/kvferry/kvferry/store/wire"
)

// attack is one row of the table: what the attacker does, and what it must
// get. run returns the outcome as the table reports it.
type attack struct {
	name string
	// keyed attacks need a target with a cluster key.
	keyed bool
	// peakHeap bounds what the attack may add to the heap at its height
	// (the attacker's own buffers, in this process, included).
	peakHeap uint64
	// peakGoroutines bounds the goroutines at the attack's height.
	peakGoroutines int
	run            func(t *testing.T, x *target) string
}

// target is the node under attack: an engine, a store master and an HTTP
// metadata server, all with the cluster key keys (or all without one).
type target struct {
	n      *node
	master string
	meta   string
	keys   *peerauth.Keys
}

func header(write bool, addr, size uint64) []byte {
	var b [tcpwire.HeaderSize]byte
	tcpwire.Header{Size: size, Addr: addr, Write: write, V2: true}.Encode(&b)
	return b[:]
}

// authed dials addr and proves the key for role (nothing without a key): an
// attacker who holds the key (a compromised member) still meets every
// bound, and so does anyone when there is no key.
func authed(t *testing.T, ks *peerauth.Keys, role peerauth.Role, addr string) net.Conn {
	t.Helper()
	c, err := dialFrom("127.0.0.9", addr)
	assert.NilError(t, err)
	t.Cleanup(func() { c.Close() })
	assert.NilError(t, peerauth.Handshake(context.Background(), c, ks, role, 0))
	return c
}

// status reads one data-port status frame; ok is false when the server
// closed the connection instead.
func status(c net.Conn) (code uint32, ok bool) {
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	var b [tcpwire.StatusSize]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return 0, false
	}
	code, err := tcpwire.DecodeStatus(b[:])
	return code, err == nil
}

var attacks = []attack{
	{name: "connect without the key: RPC metadata request (Mooncake framing)", keyed: true, peakHeap: 64 << 20, peakGoroutines: 64,
		run: func(t *testing.T, x *target) string {
			_, err := rpc.Call(context.Background(), x.n.rpcAddr(), rpc.TypeMetadata, []byte("{}"), rpc.ClientConfig{Timeout: 10 * time.Second})
			assert.Assert(t, err != nil)
			return "closed, no descriptor byte sent"
		}},
	{name: "connect without the key: raw data WRITE over registered memory", keyed: true, peakHeap: 64 << 20, peakGoroutines: 64,
		run: func(t *testing.T, x *target) string {
			c, err := dialFrom("127.0.0.2", x.n.dataAddr())
			assert.NilError(t, err)
			defer c.Close()
			_, _ = c.Write(append(header(true, uint64(x.n.canary.Addr()), 4096), make([]byte, 4096)...))
			assert.Assert(t, closedWithin(c, 10*time.Second))
			assert.Assert(t, x.n.intact())
			return "closed before the header is read; canary intact"
		}},
	{name: "wrong key on every port", keyed: true, peakHeap: 64 << 20, peakGoroutines: 64,
		run: func(t *testing.T, x *target) string {
			bad := mustKeys(t, keyB)
			for _, p := range []struct {
				role peerauth.Role
				addr string
			}{{peerauth.RoleRPC, x.n.rpcAddr()}, {peerauth.RoleData, x.n.dataAddr()}, {peerauth.RoleMaster, x.master},
				{peerauth.RoleMetadata, strings.TrimSuffix(strings.TrimPrefix(x.meta, "http://"), "/metadata")}} {
				c, err := dialFrom("127.0.0.2", p.addr)
				assert.NilError(t, err)
				err = peerauth.Handshake(context.Background(), c, bad, p.role, 0)
				c.Close()
				assert.Assert(t, err != nil, "%s accepted a wrong key", p.role)
			}
			return "refused by rpc, data, master and metadata; no payload read"
		}},
	{name: "replay a captured handshake, then a data WRITE", keyed: true, peakHeap: 64 << 20, peakGoroutines: 64,
		run: func(t *testing.T, x *target) string {
			c, err := dialFrom("127.0.0.2", x.n.dataAddr())
			assert.NilError(t, err)
			rec := &recorder{Conn: c}
			assert.NilError(t, peerauth.Handshake(context.Background(), rec, x.keys, peerauth.RoleData, 0))
			c.Close()
			c, err = dialFrom("127.0.0.2", x.n.dataAddr())
			assert.NilError(t, err)
			defer c.Close()
			_, _ = c.Write(append(rec.sent.Bytes(), append(header(true, uint64(x.n.canary.Addr()), 4096), make([]byte, 4096)...)...))
			assert.Assert(t, closedWithin(c, 10*time.Second))
			assert.Assert(t, x.n.intact())
			return "refused (the server's nonce is new); canary intact"
		}},
	{name: "out-of-range, overflowing, zero and huge lengths (and remote_accessible = 0)", peakHeap: 64 << 20, peakGoroutines: 64,
		run: func(t *testing.T, x *target) string {
			base := uint64(x.n.canary.Addr())
			hs := [][]byte{
				header(true, base+canaryBytes-100, 4096), // runs past the end
				header(false, base-4096, 8192),           // starts before
				header(true, ^uint64(0)-100, 4096),       // wraps around
				header(false, base, 0),                   // zero
				header(true, base, 1<<62),                // huge
			}
			if x.keys != nil { // without a key the flag is Mooncake's: ignored
				hs = append(hs, header(false, uint64(x.n.private.Addr()), 4096), header(true, uint64(x.n.private.Addr())+16, 4096))
			}
			for _, h := range hs {
				c := authed(t, x.keys, peerauth.RoleData, x.n.dataAddr())
				_, _ = c.Write(h)
				code, ok := status(c)
				assert.Assert(t, !ok || code == tcpwire.StatusRejected, "served: status %d", code)
				assert.Assert(t, closedWithin(c, 10*time.Second))
			}
			assert.Assert(t, x.n.intact())
			if x.keys == nil {
				return "each rejected (status 1) and closed; canary intact"
			}
			return "each rejected (status 1) and closed; canary and private (remote_accessible = 0) region intact"
		}},
	{name: "half-open connections and byte-at-a-time headers (200)", peakHeap: 96 << 20, peakGoroutines: 600,
		run: func(t *testing.T, x *target) string {
			var wg sync.WaitGroup
			var mu sync.Mutex
			cut := 0
			for i := range 200 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					addr := []string{x.n.rpcAddr(), x.n.dataAddr(), x.master}[i%3]
					c, err := dialFrom(fmt.Sprintf("127.0.1.%d", 1+i%50), addr)
					if err != nil {
						return
					}
					defer c.Close()
					for _, b := range []byte("KVFAUTH1") { // one byte every 200 ms
						if _, err := c.Write([]byte{b}); err != nil {
							break
						}
						time.Sleep(200 * time.Millisecond)
					}
					if closedWithin(c, 15*time.Second) {
						mu.Lock()
						cut++
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			assert.Equal(t, cut, 200)
			if x.keys == nil {
				return "all 200 cut by the read deadlines (RPC 5 s, data header, master hello 1 s)"
			}
			return "all 200 cut at the handshake deadline (3 s)"
		}},
	{name: "2,000 simultaneous connections (RPC, data, master) from 100 addresses", peakHeap: 160 << 20, peakGoroutines: 4600,
		run: func(t *testing.T, x *target) string {
			var conns []net.Conn
			for i := range 2000 {
				addr := []string{x.n.rpcAddr(), x.n.dataAddr(), x.master}[i%3]
				c, err := dialFrom(fmt.Sprintf("127.0.2.%d", 1+i%100), addr)
				if err != nil {
					continue
				}
				conns = append(conns, c)
			}
			// The honest peer keeps working while they are all open; then
			// the server cuts every one of them.
			time.Sleep(500 * time.Millisecond)
			closed := 0
			for _, c := range conns {
				if closedWithin(c, 15*time.Second) {
					closed++
				}
				c.Close()
			}
			assert.Equal(t, closed, len(conns))
			return fmt.Sprintf("%d opened, all cut by the deadlines (handshake, or RPC/idle/hello without a key)", len(conns))
		}},
	{name: "one address opens 300 RPC connections (slowloris)", peakHeap: 64 << 20, peakGoroutines: 700,
		run: func(t *testing.T, x *target) string {
			var conns []net.Conn
			defer func() {
				for _, c := range conns {
					c.Close()
				}
			}()
			for range 300 {
				c, err := dialFrom("127.0.0.3", x.n.rpcAddr())
				if err == nil {
					_, _ = c.Write([]byte{1, 2, 3})
					conns = append(conns, c)
				}
			}
			cut := 0
			for _, c := range conns {
				if closedWithin(c, 100*time.Millisecond) {
					cut++
				}
			}
			assert.Assert(t, cut >= 300-rpc.DefaultMaxConnsPerIP, "%d cut at once", cut)
			return fmt.Sprintf("%d displaced by newer ones, oldest first (per-address cap %d); the port kept answering the honest peer", cut, rpc.DefaultMaxConnsPerIP)
		}},
	{name: "malformed, nested and oversized JSON on the RPC port", peakHeap: 96 << 20, peakGoroutines: 64,
		run: func(t *testing.T, x *target) string {
			for _, body := range [][]byte{
				[]byte(`{"name":`), []byte(strings.Repeat("[", 100000)), []byte(`{"name":"x","notify_msg":123}`),
				bytes.Repeat([]byte("x"), 1<<20-1), // exactly the cap: parsed and refused
			} {
				c := authed(t, x.keys, peerauth.RoleRPC, x.n.rpcAddr())
				_ = c.SetDeadline(time.Now().Add(20 * time.Second))
				_ = rpc.WriteFrame(c, rpc.TypeNotify, body)
				_, reply, err := rpc.ReadFrame(c, 1<<20)
				assert.Assert(t, err != nil || !bytes.Contains(reply, []byte("success")), "accepted %q...", body[:min(len(body), 20)])
			}
			c := authed(t, x.keys, peerauth.RoleRPC, x.n.rpcAddr())
			var claim [9]byte
			binary.LittleEndian.PutUint64(claim[:], 1<<40)
			claim[8] = byte(rpc.TypeNotify)
			_, _ = c.Write(claim[:])
			assert.Assert(t, closedWithin(c, 10*time.Second))
			return "refused without a reply; a 1 TiB frame claim closed before any allocation"
		}},
	{name: "notification flood (8 x 256 KiB from one address; cap set to 1 MiB)", peakHeap: 160 << 20, peakGoroutines: 64,
		run: func(t *testing.T, x *target) string {
			kept := 0
			big := strings.Repeat("n", 256<<10)
			for range 8 {
				c := authed(t, x.keys, peerauth.RoleRPC, x.n.rpcAddr())
				_ = c.SetDeadline(time.Now().Add(20 * time.Second))
				body, _ := json.Marshal(map[string]string{"name": "flood", "notify_msg": big})
				_ = rpc.WriteFrame(c, rpc.TypeNotify, body)
				if _, reply, err := rpc.ReadFrame(c, 1<<20); err == nil && bytes.Contains(reply, []byte("success")) {
					kept++
				}
				c.Close()
			}
			assert.Assert(t, kept <= 3, "%d x 256 KiB kept from one address", kept)
			x.n.e.Notifications()
			return fmt.Sprintf("%d kept (the per-address byte cap), the rest refused", kept)
		}},
	{name: "giant keys and batch counts at the master", peakHeap: 64 << 20, peakGoroutines: 64,
		run: func(t *testing.T, x *target) string {
			c := authed(t, x.keys, peerauth.RoleMaster, x.master)
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			_, _ = c.Write(wire.MuxHello[:])
			var hello [8]byte
			_, err := io.ReadFull(c, hello[:])
			assert.NilError(t, err)
			refused := 0
			for _, req := range []struct {
				m   wire.MuxMethod
				msg proto.Message
			}{
				{wire.MuxBatchExistKey, &wire.BatchKeyRequest{Keys: make([]string, 300000)}}, // 300,000 empty keys: over the element cap
				{wire.MuxBatchExistKey, &wire.BatchKeyRequest{Keys: make([]string, 70000)}},  // over the batch cap
				{wire.MuxPutStart, &wire.PutStartRequest{Key: strings.Repeat("k", 1<<20)}},   // 1 MiB key
				{wire.MuxExistKey, &wire.KeyRequest{Key: strings.Repeat("k", wire.DefaultMaxKeyBytes+1)}},
			} {
				body, _ := proto.Marshal(req.msg)
				var hdr [wire.MuxHeaderBytes]byte
				wire.PutMuxHeader(hdr[:], wire.MuxHeader{BodyBytes: uint32(len(body)), ID: 1, Method: req.m})
				_, _ = c.Write(append(hdr[:], body...))
				if _, err := io.ReadFull(c, hdr[:]); err != nil {
					break
				}
				h, _ := wire.ParseMuxHeader(hdr[:])
				_, _ = io.CopyN(io.Discard, c, int64(h.BodyBytes))
				if h.Status != 0 {
					refused++
				}
			}
			assert.Equal(t, refused, 4)
			// A claimed 64 MiB body closes the connection unread.
			var hdr [wire.MuxHeaderBytes]byte
			wire.PutMuxHeader(hdr[:], wire.MuxHeader{BodyBytes: wire.MaxMuxBody, ID: 2, Method: wire.MuxBatchExistKey})
			_, _ = c.Write(hdr[:])
			assert.Assert(t, closedWithin(c, 10*time.Second))
			return "each refused (INVALID_PARAMS) before or right after decoding; a 64 MiB claim closed unread"
		}},
	{name: "giant keys, values and entry counts at the metadata server", peakHeap: 192 << 20, peakGoroutines: 64,
		run: func(t *testing.T, x *target) string {
			hc := httpClient(x.keys)
			put := func(key string, n int) int {
				req, _ := http.NewRequest(http.MethodPut, x.meta+"?key="+key, bytes.NewReader(make([]byte, n)))
				resp, err := hc.Do(req)
				if err != nil {
					return 0
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return resp.StatusCode
			}
			assert.Equal(t, put(strings.Repeat("k", 8192), 1), 413)
			assert.Equal(t, put("big", 17<<20), 413)
			full := 0
			for i := range 10 {
				if put(fmt.Sprintf("fill%d", i), 1<<20) == http.StatusInsufficientStorage {
					full++
				}
			}
			assert.Assert(t, full > 0, "the store never filled")
			return fmt.Sprintf("413 for an 8 KiB key and a 17 MiB value (refused on its length); %d of 10 1 MiB entries refused with 507 past the total cap (4 MiB here)", full)
		}},
	{name: "a stalled peer holds a pin; unregister", peakHeap: 96 << 20, peakGoroutines: 64,
		run: func(t *testing.T, x *target) string {
			c := authed(t, x.keys, peerauth.RoleData, x.n.dataAddr())
			_, _ = c.Write(append(header(true, uint64(x.n.canary.Addr()), canaryBytes), 1, 2, 3))
			time.Sleep(200 * time.Millisecond)
			start := time.Now()
			assert.NilError(t, x.n.e.UnregisterMemory(x.n.canary.Addr()))
			took := time.Since(start)
			assert.Assert(t, took < 10*time.Second, "unregister took %v", took)
			assert.Assert(t, closedWithin(c, 10*time.Second))
			return fmt.Sprintf("unregisterLocalMemory returned in %v (status timeout 30 s); connection cut", took.Round(100*time.Microsecond))
		}},
}

type recorder struct {
	net.Conn
	sent bytes.Buffer
}

func (r *recorder) Write(b []byte) (int, error) {
	r.sent.Write(b)
	return r.Conn.Write(b)
}

// TestHostilePeers runs every attack against one keyed node, each with an
// honest transfer alongside, and prints the table.
func TestHostilePeers(t *testing.T) {
	x := &target{n: newNode(t, keyA), keys: mustKeys(t, keyA)}
	x.master = startMaster(t, keyA).Addr()
	x.meta = startMetadata(t, keyA, mdhttp.ServerConfig{MaxTotalBytes: 4 << 20})
	runAttacks(t, x, keyA)
}

// TestHostilePeersNoKey runs the attacks that need no key against a node
// without one: the bounds hold for anyone (the data port's idle and header
// deadlines are shortened so that the test need not wait minutes).
func TestHostilePeersNoKey(t *testing.T) {
	x := &target{n: newNodeTCP(t, "", tcp.Config{IdleTimeout: 2 * time.Second, HeaderTimeout: 2 * time.Second})}
	x.master = startMaster(t, "").Addr()
	x.meta = startMetadata(t, "", mdhttp.ServerConfig{MaxTotalBytes: 4 << 20})
	runAttacks(t, x, "")
}

func runAttacks(t *testing.T, x *target, key string) {
	h := newHonest(t, x.n, key)
	var rows []string
	for _, a := range attacks {
		if a.keyed && x.keys == nil {
			continue
		}
		t.Run(a.name, func(t *testing.T) {
			h.start(x.n)
			u := startUsage()
			outcome := a.run(t, x)
			n := h.stop(t)
			u.finish(t, a.peakHeap, a.peakGoroutines)
			rows = append(rows, fmt.Sprintf("| %s | %s | %d honest round trips, correct | %s |", a.name, outcome, n, u))
		})
	}
	mode := "with a cluster key"
	if x.keys == nil {
		mode = "without a key"
	}
	t.Logf("target %s:\n| attack | outcome | honest peer | bounds |\n|---|---|---|---|\n%s", mode, strings.Join(rows, "\n"))
}
