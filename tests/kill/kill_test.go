//go:build killmatrix

package kill_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine/metadata/etcd/etcdtest"
	"github.com/kvferry/kvferry/tests/internal/servers"
	"github.com/kvferry/kvferry/tests/internal/suite"
	"github.com/kvferry/kvferry/tests/rdma/fakeverbs"
)

// entry is one way into the library.
type entry struct {
	name string
	// te starts a transfer-engine driver named name on metadata meta.
	te func(t *testing.T, name, meta string, mib int) *driver
	// store starts a store driver (nil: the entry point has no store).
	store func(t *testing.T, name, meta, masterAddr string, mib int) *driver
	// p2pOnly: the entry point has no metadata service to kill.
	p2pOnly bool
	// failover: the te driver reports the slices its engine failed over
	// (stats "failovers"), so the entry gets the failover row.
	failover bool
}

var entries = []entry{
	{name: "c", failover: true,
		te: func(t *testing.T, name, meta string, mib int) *driver {
			return startDriver(t, name, []string{bins.c, "te", bins.lib, meta, hostOf(name, meta), fmt.Sprint(mib)}, nil)
		},
		store: func(t *testing.T, name, meta, m string, mib int) *driver {
			return startDriver(t, name, []string{bins.c, "store", bins.lib, meta, "127.0.0.1", m, fmt.Sprint(mib)}, nil)
		}},
	{name: "nixl",
		te: func(t *testing.T, name, meta string, mib int) *driver {
			md := filepath.Join(t.TempDir(), name+".md")
			return startDriver(t, name, []string{bins.nixl, bins.plugin, meta, name, fmt.Sprint(mib), md}, nil)
		}},
	{name: "trtllm", p2pOnly: true,
		te: func(t *testing.T, name, meta string, mib int) *driver {
			return startDriver(t, name, []string{bins.trtllm, name, fmt.Sprint(mib)}, nil)
		}},
	{name: "python",
		te: func(t *testing.T, name, meta string, mib int) *driver {
			return startDriver(t, name, []string{python(), "tests/kill/drivers/driver.py", "te", meta, hostOf(name, meta), fmt.Sprint(mib)}, nil)
		},
		store: func(t *testing.T, name, meta, m string, mib int) *driver {
			return startDriver(t, name, []string{python(), "tests/kill/drivers/driver.py", "store", meta, "127.0.0.1", m, fmt.Sprint(mib)}, nil)
		}},
}

func python() string { return suite.Env("PYTHON", "/usr/bin/python3") }

// hostOf is an engine's local server name: in P2P mode the host (the
// segment is host:port), with a metadata service a unique name.
func hostOf(name, meta string) string {
	if meta == "P2PHANDSHAKE" {
		return "127.0.0.1"
	}
	return fmt.Sprintf("%s-%d", name, rand.Uint32())
}

var (
	teVictims    = []string{"initiator", "target", "metadata server", "etcd member"}
	storeVictims = []string{"replica holder", "master", "etcd member"}
)

// short is the make-test selection: one case per entry point, and the
// failover row.
var short = map[string]bool{
	"c/te/failover": true, "c/te/target": true, "nixl/te/initiator": true, "trtllm/te/target": true, "python/te/target": true,
	"c/store/replica holder": true, "python/store/master": true,
}

// TestKillMatrix SIGKILLs each victim at a random point of a running batch
// (or put stream), for each entry point.
func TestKillMatrix(t *testing.T) {
	for _, e := range entries {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			for _, v := range teVictims {
				id := e.name + "/te/" + v
				if !full && !short[id] {
					continue
				}
				t.Run("te/"+strings.ReplaceAll(v, " ", "_"), func(t *testing.T) {
					if e.p2pOnly && (v == "metadata server" || v == "etcd member") {
						rec.Add(result{Entry: e.name, Victim: v, Outcome: "n/a: the agent uses the P2P handshake (no metadata service)"})
						t.Skip("the TensorRT-LLM agent uses the P2P handshake: no metadata service to kill")
					}
					teCase(t, e, v)
				})
			}
			if e.failover && (full || short[e.name+"/te/failover"]) {
				t.Run("te/failover", func(t *testing.T) { failoverCase(t, e) })
			}
			if e.store == nil {
				return
			}
			for _, v := range storeVictims {
				id := e.name + "/store/" + v
				if !full && !short[id] {
					continue
				}
				t.Run("store/"+strings.ReplaceAll(v, " ", "_"), func(t *testing.T) { storeCase(t, e, v) })
			}
		})
	}
}

const batchBytes = 32 << 20

// connect makes initiator i open target tg (retried while a metadata
// service has not seen tg's registration yet).
func connect(t *testing.T, i, tg *driver) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		r := i.Call(2*deadline+margin, "connect %s", tg.info)
		if r["ok"] == true {
			return time.Since(start)
		}
		assert.Assert(t, time.Since(start) < 30*time.Second, "%s cannot open %s: %v", i.Name, tg.Name, r)
		time.Sleep(200 * time.Millisecond)
	}
}

// batch runs one verified batch and requires it to complete.
func batch(t *testing.T, i, tg *driver, seed int) map[string]any {
	t.Helper()
	r := i.Call(3*deadline+margin+60*time.Second, "batch %d %d %d", tg.addr, batchBytes, seed)
	assert.Assert(t, r["ok"] == true, "%s -> %s: batch: %v", i.Name, tg.Name, r)
	return r
}

func teCase(t *testing.T, e entry, victim string) {
	meta := "P2PHANDSHAKE"
	var md *servers.Metadata
	var ec *etcdCluster
	switch victim {
	case "metadata server":
		md = startMetadata(t, "")
		meta = md.Conn()
	case "etcd member":
		ec = startEtcdCluster(t)
		meta = "etcd://" + strings.Join(ec.clients, ",")
	}
	tg := e.te(t, "target", meta, 64)
	in := e.te(t, "initiator", meta, 64)
	connect(t, in, tg)
	warm := batch(t, in, tg, 1)
	baseT, baseI := tg.stats(), in.stats()

	// The batch under the kill, and the kill at a random point of it.
	est := time.Duration(warm["ms"].(float64) * float64(time.Millisecond))
	in.Send("batch %d %d %d", tg.addr, batchBytes, 2)
	at := time.Duration(rand.Int64N(int64(est) + 1))
	time.Sleep(at)
	killed := time.Now()
	var outcome string
	switch victim {
	case "initiator":
		in.kill9()
		in2 := e.te(t, "initiator2", meta, 64)
		connect(t, in2, tg)
		batch(t, in2, tg, 3)
		outcome = "target serves a new initiator"
		in = in2
	case "target":
		tg.kill9()
		outcome = batchAfterKill(t, in, killed)
	case "metadata server":
		addr := md.Addr
		md.Kill()
		outcome = batchAfterKill(t, in, killed) + ", metadata restarted"
		time.Sleep(time.Second)
		startMetadata(t, addr) // the engines find it again on the same address
	case "etcd member":
		m := rand.IntN(3)
		ec.kill(m)
		outcome = batchAfterKill(t, in, killed) + fmt.Sprintf(", member %d of 3 down", m)
		// A new engine registers only once the two left have a leader.
		ec.waitHealthy(60 * time.Second)
	}
	// Recovery: a new target (or the old one for a killed initiator) is
	// opened and carries a verified batch, no process restarted but the
	// victim.
	if victim != "initiator" {
		tg2 := e.te(t, "target2", meta, 64)
		connect(t, in, tg2)
		batch(t, in, tg2, 4)
	}
	recovery := time.Since(killed)
	// Survivors: no leaked fds or goroutines, registrations released
	// promptly (no pin left behind).
	for _, s := range []struct {
		p    *driver
		base stats
	}{{tg, baseT}, {in, baseI}} {
		if s.p.killed || (victim == "initiator" && s.p == in) {
			continue
		}
		s.p.settle(t, s.base, 60*time.Second)
		r := s.p.Call(deadline+margin+5*time.Second, "unreg")
		assert.Assert(t, r["ok"] == true && r["ms"].(float64) < float64(margin.Milliseconds()), "%s: unregister after the kill: %v", s.p.Name, r)
	}
	t.Logf("%s / kill %s at %s into a %s batch: %s; recovered in %s", e.name, victim, at.Round(time.Millisecond), est.Round(time.Millisecond), outcome, recovery.Round(time.Millisecond))
	rec.Add(result{Entry: e.name, Victim: victim, Outcome: outcome, KillMS: float64(at.Microseconds()) / 1000, Recover: float64(recovery.Microseconds()) / 1000})
}

// batchAfterKill reads the answer of the batch in flight when the victim
// died: completed with the right bytes, or failed, within the deadline.
func batchAfterKill(t *testing.T, in *driver, killed time.Time) string {
	t.Helper()
	r := in.Reply(3*deadline + margin + 60*time.Second)
	after := time.Since(killed)
	state, _ := r["state"].(string)
	switch state {
	case "completed":
		assert.Assert(t, r["match"] == true, "the batch completed with wrong bytes: %v", r)
		return "batch completed (bytes checked)"
	case "failed":
		// A WRITE then a READ: each may wait out one deadline.
		assert.Assert(t, after <= 2*deadline+margin, "the batch failed %s after the kill (deadline %s)", after, deadline)
		return fmt.Sprintf("batch FAILED %.1f s after the kill", after.Seconds())
	}
	t.Fatalf("batch after the kill: %v", r)
	return ""
}

// failoverDownAfter is how many work requests the initiator's NIC carries
// before its port goes down: an eighth of the first batch's WRITE (64 KiB
// slices), so the NIC dies mid-batch.
const failoverDownAfter = batchBytes / (64 << 10) / 8

// failoverCase: the initiator's better transport dies mid-batch (its only
// RDMA NIC, of the fake verbs provider, goes down after
// failoverDownAfter work requests, from inside the process, so whatever
// the load it happens after the batch's first slices and before its last)
// and the batch completes over TCP with the right bytes, and so does the
// next. The target runs in its own PID namespace, so the two are not on
// one host for the engine (no same-host path) and RDMA is the better
// transport.
func failoverCase(t *testing.T, e entry) {
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("no unshare(1): the target cannot leave the same-host path")
	}
	if os.Geteuid() != 0 {
		t.Skip("not root: unshare cannot give the target its own PID namespace")
	}
	lib, err := fakeverbs.Build()
	assert.NilError(t, err)
	if fakeverbs.Hardware() {
		t.Skip("fake verbs only: the NIC is taken down from inside the fake provider")
	}
	dir, err := os.MkdirTemp("", "fv") // short: the fake's sockets live here
	assert.NilError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	env := fakeverbs.Env(lib, dir, "fake_mlx5_0")
	start := func(name string, extra ...string) *driver {
		argv := []string{bins.c, "te", bins.lib, "P2PHANDSHAKE", "127.0.0.1", "64"}
		if name == "target" {
			argv = append([]string{"unshare", "--pid", "--fork", "--kill-child"}, argv...)
		}
		return startDriver(t, name, argv, append(env, extra...))
	}
	tg := start("target")
	in := start("initiator", fmt.Sprintf("FAKEVERBS_DOWN_AFTER=%d", failoverDownAfter))
	connect(t, in, tg)
	failovers := func(p *driver) int {
		r := p.Call(20*time.Second, "stats")
		v, _ := r["failovers"].(float64)
		return int(v)
	}
	start0 := time.Now()
	r := batch(t, in, tg, 1)
	assert.Assert(t, r["match"] == true, "batch after the NIC died: %v", r)
	moved := failovers(in)
	assert.Assert(t, moved > 0, "the batch completed, but no slice failed over (the NIC was not used?)")
	batch(t, in, tg, 2) // and the next one too, the NIC still down
	outcome := fmt.Sprintf("batch completed over tcp (bytes checked), %d slices failed over", moved)
	t.Logf("%s / initiator's RDMA NIC down after %d work requests: %s (%s)", e.name, failoverDownAfter, outcome, time.Since(start0).Round(time.Millisecond))
	rec.Add(result{Entry: e.name, Victim: "initiator's RDMA NIC (down mid-batch)", Outcome: outcome,
		Recover: float64(time.Since(start0).Microseconds()) / 1000})
}

func storeCase(t *testing.T, e entry, victim string) {
	var masterAddr string
	var masters []*servers.Master
	var ec *etcdCluster
	switch victim {
	case "replica holder":
		m := startMaster(t)
		masters = []*servers.Master{m}
		masterAddr = m.Addr
	case "master", "etcd member":
		var endpoints []string
		if victim == "etcd member" {
			ec = startEtcdCluster(t)
			endpoints = ec.clients
		} else {
			endpoints = []string{etcdtest.Start(t).Endpoint()}
		}
		ha := []string{"--enable_ha", "--enable_oplog", "--etcd_endpoints=" + strings.Join(endpoints, ",")}
		m1 := startMaster(t, ha...)
		end := time.Now().Add(20 * time.Second)
		for m1.Role() != "leader" {
			assert.Assert(t, time.Now().Before(end), "no leader")
			time.Sleep(100 * time.Millisecond)
		}
		m2 := startMaster(t, ha...)
		masters = []*servers.Master{m1, m2}
		masterAddr = "etcd://" + strings.Join(endpoints, ";")
	}
	h1 := e.store(t, "holder1", "P2PHANDSHAKE", masterAddr, 64)
	h2 := e.store(t, "holder2", "P2PHANDSHAKE", masterAddr, 64)
	c := e.store(t, "client", "P2PHANDSHAKE", masterAddr, 0)
	const n, size = 48, 256 << 10
	put := func(i int) map[string]any {
		return c.Call(3*deadline+margin+30*time.Second, "put k%d %d %d 2", i, size, 100+i)
	}
	assert.Assert(t, put(0)["ok"] == true, "first put")
	base := c.stats()
	acked := []int{0}
	killAt := 8 + rand.IntN(24)
	var killed time.Time
	failedPuts := 0
	for i := 1; i <= n; i++ {
		if i == killAt { // kill at a random point of this put
			c.Send("put k%d %d %d 2", i, size, 100+i)
			time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
			killed = time.Now()
			switch victim {
			case "replica holder":
				h1.kill9()
			case "master":
				for _, m := range masters {
					if m.Role() == "leader" {
						m.Kill()
						break
					}
				}
			case "etcd member":
				ec.kill(rand.IntN(3))
			}
			r := c.Reply(3*deadline + margin + 30*time.Second)
			if r["ok"] == true {
				acked = append(acked, i)
			} else {
				failedPuts++
			}
			continue
		}
		if r := put(i); r["ok"] == true {
			acked = append(acked, i)
		} else {
			failedPuts++
			time.Sleep(200 * time.Millisecond)
		}
	}
	// Every acknowledged put is readable while a replica lives (the master
	// may need its TTL to notice a dead holder, a new leader to be elected
	// and the holders to remount: bounded).
	start := time.Now()
	for _, i := range acked {
		for {
			r := c.Call(3*deadline+margin+30*time.Second, "get k%d %d %d", i, size, 100+i)
			if r["ok"] == true && r["match"] == true {
				break
			}
			assert.Assert(t, time.Since(start) < 60*time.Second, "acknowledged put k%d not readable after the %s was killed: %v", i, victim, r)
			time.Sleep(200 * time.Millisecond)
		}
	}
	readable := time.Since(start)
	c.settle(t, base, 60*time.Second)
	if victim != "replica holder" {
		h1.stats() // alive and answering
	}
	h2.stats()
	outcome := fmt.Sprintf("%d of %d puts acknowledged, all readable (%d failed while it was down)", len(acked), n+1, failedPuts)
	t.Logf("%s store / kill %s at put %d: %s; reads back in %s", e.name, victim, killAt, outcome, readable.Round(time.Millisecond))
	rec.Add(result{Entry: e.name + " (store)", Victim: victim, Outcome: outcome, Recover: float64(time.Since(killed).Microseconds()) / 1000})
}
