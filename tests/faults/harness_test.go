//go:build faults

package faults_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/internal/testutil"
	"github.com/kvferry/kvferry/internal/testutil/fakecuda"
	"github.com/kvferry/kvferry/tests/internal/netns"
	"github.com/kvferry/kvferry/tests/internal/proc"
	"github.com/kvferry/kvferry/tests/internal/suite"
	"github.com/kvferry/kvferry/tests/rdma/fakeverbs"
)

// Timing of every case. The peers run with MC_TRANSFER_TIMEOUT and
// MC_TCP_STATUS_TIMEOUT_SEC at deadline; a call may take up to its
// deadline plus margin (a loaded 2-core machine, not a timing assertion).
const (
	deadline = 5 * time.Second
	margin   = 3 * time.Second
)

var (
	bins struct {
		peer string
		dir  string
	}
	full bool // KVFERRY_FAULTS_FULL: the whole matrix (make faults)
	rec  *testutil.Results
)

func TestMain(m *testing.M) {
	if err := netns.Usable("ip", "tc", "nft", "iptables", "ss"); err != nil {
		fmt.Printf("tests/faults: SKIP: %v (the fault suite makes network namespaces, veth pairs, qdiscs and netfilter rules as root; Debian: iproute2, util-linux, nftables, iptables)\n", err)
		os.Exit(0)
	}
	full = os.Getenv("KVFERRY_FAULTS_FULL") != ""
	suite.Main(m, "kvferry-faults", func(dir string) (func(), error) {
		bins.dir = dir
		bins.peer = filepath.Join(dir, "faultpeer")
		if err := suite.GoBuild(bins.peer, "github.com/kvferry/kvferry/tests/faults/faultpeer"); err != nil {
			return nil, err
		}
		rec = testutil.OpenResults(os.Getenv("KVFERRY_FAULTS_RESULTS"))
		return rec.Close, nil
	})
}

// ---- network namespaces ----

// topology is initiator namespace A and target namespace B joined through
// router namespace R:
//
//	A 10.77.1.2 (fa) <-> (fr0) 10.77.1.1  R  10.77.2.1 (fr1) <-> (fb) 10.77.2.2 B
//
// Faults are applied in R, to both directions, so the endpoints' own stacks
// stay untouched.
type topology struct {
	a, r, b *netns.NS
	aIP     string
	bIP     string
}

func newTopology(t *testing.T) *topology {
	t.Helper()
	tp := &topology{a: netns.New(t, "A"), r: netns.New(t, "R"), b: netns.New(t, "B"), aIP: "10.77.1.2", bIP: "10.77.2.2"}
	r := tp.r
	r.Run(t, "ip", "link", "add", "fr0", "type", "veth", "peer", "name", "fa", "netns", strconv.Itoa(tp.a.Pid()))
	r.Run(t, "ip", "link", "add", "fr1", "type", "veth", "peer", "name", "fb", "netns", strconv.Itoa(tp.b.Pid()))
	r.Run(t, "ip", "addr", "add", "10.77.1.1/24", "dev", "fr0")
	r.Run(t, "ip", "addr", "add", "10.77.2.1/24", "dev", "fr1")
	r.Run(t, "ip", "link", "set", "fr0", "up")
	r.Run(t, "ip", "link", "set", "fr1", "up")
	r.Run(t, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	for _, e := range []struct {
		n        *netns.NS
		dev, ip  string
		gw       string
		otherNet string
	}{{tp.a, "fa", tp.aIP, "10.77.1.1", ""}, {tp.b, "fb", tp.bIP, "10.77.2.1", ""}} {
		e.n.Run(t, "ip", "addr", "add", e.ip+"/24", "dev", e.dev)
		e.n.Run(t, "ip", "link", "set", e.dev, "up")
		e.n.Run(t, "ip", "route", "add", "default", "via", e.gw)
	}
	return tp
}

// ---- peers ----

// peer is one faultpeer process seen from the test.
type peer struct {
	*proc.Proc
	t    *testing.T
	seg  string
	addr uint64
	pid  int
}

// startPeer starts "faultpeer engine" in n with the given environment.
func startPeer(t *testing.T, name string, n *netns.NS, host string, env []string, args ...string) *peer {
	t.Helper()
	cmd := n.Command(append([]string{bins.peer, "engine", "-name", host}, args...)...)
	cmd.Env = append(append(os.Environ(), suite.EngineEnv(deadline, suite.Env("KVFERRY_FAULTS_LOG", "warn"))...), env...)
	p := &peer{Proc: proc.Start(t, name, cmd, proc.Config{Quit: "quit", Grace: 10 * time.Second, LogStderr: true}), t: t}
	r := p.Reply(60 * time.Second)
	assert.Assert(t, r["ok"] == true, "%s did not start: %v", name, r)
	p.seg = r["segment"].(string)
	p.addr = uint64(r["addr"].(float64))
	p.pid = int(r["pid"].(float64))
	return p
}

// signal sends sig to the peer.
func (p *peer) signal(sig syscall.Signal) {
	p.t.Helper()
	assert.NilError(p.t, p.Signal(sig))
}

// sum returns the CRC-32C of [off, off+n) of the peer's buffer.
func (p *peer) sum(off, n uint64) uint64 {
	p.t.Helper()
	r := p.Call(30*time.Second, "sum %d %d", off, n)
	assert.Assert(p.t, r["ok"] == true, "%s sum: %v", p.Name, r)
	return uint64(r["sum"].(float64))
}

func (p *peer) fill(seed uint64) {
	p.t.Helper()
	r := p.Call(30*time.Second, "fill %d", seed)
	assert.Assert(p.t, r["ok"] == true, "%s fill: %v", p.Name, r)
}

// stats are a process's resource counts, and the slices its engine
// failed over to another transport.
type stats struct {
	Goroutines, FDs, Threads, RSSKB, Regions int
	Failovers                                int
}

func (p *peer) stats() stats {
	r := p.Call(10*time.Second, "stats")
	num := func(k string) int { v, _ := r[k].(float64); return int(v) }
	return stats{Goroutines: num("goroutines"), FDs: num("fds"), Threads: num("threads"), RSSKB: num("rss_kb"), Regions: num("regions"),
		Failovers: num("failovers")}
}

// ---- fake drivers ----

var fakes struct {
	once            sync.Once
	verbs, cuda     string
	verbsErr, cuErr error
}

func buildFakes() {
	fakes.once.Do(func() {
		fakes.verbs, fakes.verbsErr = fakeverbs.Build()
		fakes.cuda, fakes.cuErr = fakecuda.Build()
	})
}

// ---- results ----

// result is one row of the fault table (docs/reports/reliability.md,
// "Network faults").
type result struct {
	Path       string  `json:"path"`
	Fault      string  `json:"fault"`
	Outcome    string  `json:"outcome"`
	CallMaxMS  float64 `json:"call_max_ms"`
	RecoveryMS float64 `json:"recovery_ms"`
	Backend    string  `json:"backend"`
	Note       string  `json:"note,omitempty"`
}
