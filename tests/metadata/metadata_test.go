//go:build multiprocess

// Package metadata_test runs transfer engines as separate processes that
// find each other through a real metadata service: the kvferry-metadata
// binary, a real etcd (issue 7) and a real redis-server (issue 40). Run by tests/metadata/run.sh
// (go test -tags multiprocess).
package metadata_test

import (
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine/metadata"
)

const mib = 1 << 20

// kinds runs body once through each metadata service: kvferry-metadata,
// etcd and Redis (with requirepass, the password in the URL).
func kinds(t *testing.T, body func(t *testing.T, svc service)) {
	t.Run("http", func(t *testing.T) { body(t, startHTTP(t)) })
	t.Run("etcd", func(t *testing.T) { body(t, startEtcd(t, false)) })
	t.Run("redis", func(t *testing.T) { body(t, startRedis(t, "mp-secret")) })
}

// TestTwoEngines: register, open, transfer both ways, notify; a buffer
// registered after the open is usable at once; a freed buffer is never
// written.
func TestTwoEngines(t *testing.T) {
	kinds(t, func(t *testing.T, svc service) {
		a := startPeer(t, svc, "node-a")
		b := startPeer(t, svc, "node-b")
		assert.Assert(t, svc.Has(t, metadata.SegmentKey("", "node-b")))
		assert.Assert(t, svc.Has(t, metadata.RPCMetaKey("", "node-b")))

		bAddr := b.u64(b.do("alloc %d", 4*mib), "addr")
		b.do("fill %d %d %d", bAddr, 4*mib, 0xab)
		aAddr := a.u64(a.do("alloc %d", 4*mib), "addr")
		id := a.u64(a.do("open node-b"), "id")

		a.do("xfer read %d %d %d %d", id, aAddr, bAddr, 4*mib)
		a.do("check %d %d %d", aAddr, 4*mib, 0xab)
		a.do("fill %d %d %d", aAddr, 4*mib, 0xcd)
		a.do("xfer write %d %d %d %d", id, aAddr, bAddr+mib, mib)
		b.do("check %d %d %d", bAddr+mib, mib, 0xcd)
		b.do("check %d %d %d", bAddr, mib, 0xab)

		a.do("notify %d node-a hello", id)
		r := b.do("notifs")
		assert.Assert(t, strings.Contains(jsonString(r["notifs"]), `"msg":"hello"`), "notifs %v", r["notifs"])

		// New buffer on B, no reopen on A.
		b2 := b.u64(b.do("alloc %d", 64<<10), "addr")
		b.do("fill %d %d %d", b2, 64<<10, 0x11)
		a.do("xfer read %d %d %d %d", id, aAddr, b2, 64<<10)
		a.do("check %d %d %d", aAddr, 64<<10, 0x11)

		// Freed buffer on B: A's cached descriptor still lists it, but the
		// write fails and B is unharmed.
		b.do("free %d", b2)
		_, e := a.try("xfer write %d %d %d %d", id, aAddr, b2, 64<<10)
		assert.Assert(t, e != "", "write to a freed buffer succeeded")
		t.Logf("write to freed buffer: %s", e)
		b.do("info")
		a.do("xfer write %d %d %d %d", id, aAddr, bAddr, mib)

		// Unknown segment: a clean error.
		_, e = a.try("open node-zz")
		assert.Assert(t, e != "")

		a.Quit()
		b.Quit()
		assert.Assert(t, !svc.Has(t, metadata.SegmentKey("", "node-b")), "entries left after a clean exit")
		assert.Assert(t, !svc.Has(t, metadata.RPCMetaKey("", "node-b")))
	})
}

// TestClusterID: engines of two clusters on one service do not see each
// other, and may use the same segment name.
func TestClusterID(t *testing.T) {
	kinds(t, func(t *testing.T, svc service) {
		a := startPeer(t, svc, "node-a", "-cluster", "c1")
		startPeer(t, svc, "node-b", "-cluster", "c2")
		b1 := startPeer(t, svc, "node-b", "-cluster", "c1")
		assert.Assert(t, svc.Has(t, "mooncake/c1/ram/node-b"))
		assert.Assert(t, svc.Has(t, "mooncake/c2/ram/node-b"))
		_, e := a.try("open node-b")
		assert.Assert(t, e == "", e)
		b1.Quit()
		assert.Assert(t, svc.Has(t, "mooncake/c2/ram/node-b"))
	})
}

// TestNameConflict: a second engine with a taken name is refused by the
// HTTP service (Mooncake master semantics for rpc_meta).
func TestNameConflict(t *testing.T) {
	svc := startHTTP(t)
	startPeer(t, svc, "node-a")
	_, err := tryPeer(t, svc, "node-a")
	assert.ErrorContains(t, err, "held by another engine")
}

// TestMetadataRestart: the service dies during operation and comes back.
// Transfers in flight and to opened segments go on; opening a segment
// while it is down fails cleanly; afterwards opens work again without
// restarting any engine (re-publish / lease re-grant).
func TestMetadataRestart(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) service
	}{
		{"http", func(t *testing.T) service { return startHTTP(t) }},
		{"http-snapshot", func(t *testing.T) service { return startHTTP(t, "-snapshot", t.TempDir()+"/snap.json") }},
		{"etcd", func(t *testing.T) service { return startEtcd(t, false) }},
		{"etcd-wiped", func(t *testing.T) service { return startEtcd(t, true) }},
		{"redis", func(t *testing.T) service { return startRedis(t, "") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := tc.start(t)
			a := startPeer(t, svc, "node-a")
			b := startPeer(t, svc, "node-b")
			c := startPeer(t, svc, "node-c")
			const size = 128 * mib
			bAddr := b.u64(b.do("alloc %d", size), "addr")
			aAddr := a.u64(a.do("alloc %d", size), "addr")
			a.do("fill %d %d %d", aAddr, size, 0x5a)
			id := a.u64(a.do("open node-b"), "id")

			batch := a.u64(a.do("submit write %d %d %d %d", id, aAddr, bAddr, size), "batch")
			svc.Kill()
			r := a.do("wait %d", batch)
			assert.Equal(t, r["state"], "completed")
			b.do("check %d %d %d", bAddr, size, 0x5a)
			a.do("xfer read %d %d %d %d", id, aAddr, bAddr, mib)

			// While down: a new open fails within the metadata timeouts
			// (5 s; the bound only tells a hang from a busy machine).
			r, e := a.try("open node-c")
			assert.Assert(t, e != "", "open succeeded with the service down")
			assert.Assert(t, r["ms"].(float64) < 30000, "open took %v ms", r["ms"])
			t.Logf("open while down: %v ms: %s", r["ms"], e)
			// Registering while down works locally (publication is in the
			// background and retried), and a peer that has the segment open
			// reaches the new buffer through its owner meanwhile.
			late := b.u64(b.do("alloc %d", mib), "addr")
			a.do("xfer write %d %d %d %d", id, aAddr, late, mib)
			b.do("check %d %d %d", late, mib, 0x5a)

			svc.Start(t)
			// Each engine publishes again on its own (with a new lease
			// after a wipe): wait for every one's entries.
			took := waitFor(t, 30*time.Second, "entries back", func() bool {
				for _, n := range []string{"node-a", "node-b", "node-c"} {
					if !svc.Has(t, metadata.SegmentKey("", n)) || !svc.Has(t, metadata.RPCMetaKey("", n)) {
						return false
					}
				}
				return true
			})
			t.Logf("entries back %v after the restart", took)
			cid := a.u64(a.do("open node-c"), "id")
			cAddr := c.u64(c.do("alloc %d", mib), "addr")
			a.do("xfer write %d %d %d %d", cid, aAddr, cAddr, mib)
			c.do("check %d %d %d", cAddr, mib, 0x5a)
			a.do("remove node-b")
			id = a.u64(a.do("open node-b"), "id")
			a.do("xfer write %d %d %d %d", id, aAddr, bAddr, mib)
			// A new engine joins after the restart.
			d := startPeer(t, svc, "node-d")
			d.do("open node-a")
		})
	}
}

// TestKillEngine: an engine killed with SIGKILL loses its entries once
// the TTL has run out (the time is logged); transfers to it end FAILED;
// opening
// it afterwards fails cleanly. When it comes back under the same name (new
// ports), a peer that had it open reaches it again after a cache sync,
// without reopening.
func TestKillEngine(t *testing.T) {
	kinds(t, func(t *testing.T, svc service) {
		a := startPeer(t, svc, "node-a")
		b := startPeer(t, svc, "node-b")
		d := startPeer(t, svc, "node-d")
		const size = 256 * mib
		bAddr := b.u64(b.do("alloc %d", size), "addr")
		aAddr := a.u64(a.do("alloc %d", size), "addr")
		id := a.u64(a.do("open node-b"), "id")
		a.do("xfer write %d %d %d %d", id, aAddr, bAddr, mib)

		batch := a.u64(a.do("submit write %d %d %d %d", id, aAddr, bAddr, size), "batch")
		b.Kill()
		killed := time.Now()
		r, _ := a.try("wait %d", batch)
		t.Logf("transfer in flight at the kill: %v after %v ms", r["state"], r["ms"])
		assert.Assert(t, r["state"] == "failed" || r["state"] == "completed", "state %v", r["state"])
		batch = a.u64(a.do("submit write %d %d %d %d", id, aAddr, bAddr, mib), "batch")
		r, _ = a.try("wait %d", batch)
		assert.Equal(t, r["state"], "failed", "transfer to a dead engine: %v", r)
		// Bounds that tell a hang from a busy machine, not latencies.
		assert.Assert(t, time.Since(killed) < 30*time.Second, "failed after %v", time.Since(killed))

		waitFor(t, svc.TTL()+15*time.Second, "dead engine's entries vanish", func() bool {
			return !svc.Has(t, metadata.SegmentKey("", "node-b")) && !svc.Has(t, metadata.RPCMetaKey("", "node-b"))
		})
		t.Logf("entries vanished %v after the kill (TTL %v)", time.Since(killed), svc.TTL())
		_, e := d.try("open node-b")
		assert.Assert(t, strings.Contains(e, "not found"), "open of a dead engine: %q", e)
		_, e = a.try("sync")
		assert.Assert(t, strings.Contains(e, "not found"), "sync with a dead engine: %q", e)

		// The engine comes back under the same name, on new ports.
		b = startPeer(t, svc, "node-b")
		bAddr = b.u64(b.do("alloc %d", mib), "addr")
		a.do("sync")
		a.do("xfer write %d %d %d %d", id, aAddr, bAddr, mib)
		a.do("notify %d node-a back", id)
		r = b.do("notifs")
		assert.Assert(t, strings.Contains(jsonString(r["notifs"]), `"msg":"back"`), "notifs %v", r["notifs"])
		d.do("open node-b")
	})
}

// TestIdleGap (Mooncake#4209): transfer, stay idle longer than every
// keep-alive and idle period in play (HTTP idle connections closed by the
// server after 1 s, etcd lease TTL 2 s), transfer again: it succeeds on the
// first try, and so does a metadata lookup.
func TestIdleGap(t *testing.T) {
	kinds(t, func(t *testing.T, svc service) {
		a := startPeer(t, svc, "node-a")
		b := startPeer(t, svc, "node-b")
		c := startPeer(t, svc, "node-c")
		bAddr := b.u64(b.do("alloc %d", 4*mib), "addr")
		aAddr := a.u64(a.do("alloc %d", 4*mib), "addr")
		id := a.u64(a.do("open node-b"), "id")
		for round := range 2 {
			a.do("xfer write %d %d %d %d", id, aAddr, bAddr, 4*mib)
			time.Sleep(5 * time.Second) // the idle gap under test
			_, e := a.try("xfer write %d %d %d %d", id, aAddr, bAddr, 4*mib)
			assert.Assert(t, e == "", "round %d: first transfer after the gap: %s", round, e)
			_, e = a.try("xfer read %d %d %d %d", id, aAddr, bAddr, 4*mib)
			assert.Assert(t, e == "", "round %d: %s", round, e)
		}
		_, e := a.try("open %s", c.name)
		assert.Assert(t, e == "", "open after the gap: %s", e)
	})
}

func jsonString(v any) string {
	var b strings.Builder
	switch x := v.(type) {
	case []any:
		for _, e := range x {
			if m, ok := e.(map[string]any); ok {
				b.WriteString(`{"msg":"` + str(m["msg"]) + `","name":"` + str(m["name"]) + `"}`)
			}
		}
	}
	return b.String()
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// TestRedisFlushAndAuth: a FLUSHALL under running engines (Redis keeps
// running, every key gone) is repaired by the engines on their own: the
// entries come back and opens work; an engine with a wrong or missing
// password fails to start with Redis's refusal, and never shows the
// password it was given.
func TestRedisFlushAndAuth(t *testing.T) {
	svc := startRedis(t, "mp-secret")
	a := startPeer(t, svc, "node-a")
	b := startPeer(t, svc, "node-b")
	bAddr := b.u64(b.do("alloc %d", mib), "addr")
	aAddr := a.u64(a.do("alloc %d", mib), "addr")
	a.do("fill %d %d %d", aAddr, mib, 0x3c)

	svc.Flush(t)
	took := waitFor(t, 30*time.Second, "entries back after FLUSHALL", func() bool {
		for _, n := range []string{"node-a", "node-b"} {
			if !svc.Has(t, metadata.SegmentKey("", n)) || !svc.Has(t, metadata.RPCMetaKey("", n)) {
				return false
			}
		}
		return true
	})
	t.Logf("entries back %v after FLUSHALL", took)
	id := a.u64(a.do("open node-b"), "id")
	a.do("xfer write %d %d %d %d", id, aAddr, bAddr, mib)
	b.do("check %d %d %d", bAddr, mib, 0x3c)

	for _, conn := range []string{"redis://:wrong-pw@" + svc.srv.Addr(), "redis://" + svc.srv.Addr()} {
		_, err := tryPeer(t, fixedConn(conn), "node-x")
		assert.ErrorContains(t, err, "refused")
		assert.Assert(t, !strings.Contains(err.Error(), "wrong-pw"), "password shown: %v", err)
		t.Logf("%s: %v", strings.Replace(conn, "wrong-pw", "***", 1), err)
	}
}

// fixedConn is a service that only names a connection string.
type fixedConn string

func (c fixedConn) Conn() string              { return string(c) }
func (fixedConn) Kill()                       {}
func (fixedConn) Start(*testing.T)            {}
func (fixedConn) Has(*testing.T, string) bool { return false }
func (fixedConn) TTL() time.Duration          { return 0 }
