//go:build faults

package faults_test

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/tests/faults/netem"
	"github.com/kvferry/kvferry/tests/internal/netns"
	"github.com/kvferry/kvferry/tests/internal/proc"
)

// impairment is what a lossy, slow or disorderly network does, in tc
// netem's terms. Zero fields do nothing.
type impairment struct {
	delay, jitter time.Duration
	loss          float64 // percent of packets dropped
	reorder       float64 // percent of packets that skip the delay
	dup           float64 // percent of packets duplicated
	rate          uint64  // bits per second
}

func (m impairment) zero() bool { return m == impairment{} }

// netemArgs is m as tc netem arguments.
func (m impairment) netemArgs() []string {
	var a []string
	if m.delay > 0 {
		a = append(a, "delay", m.delay.String())
		if m.jitter > 0 {
			a = append(a, m.jitter.String())
		}
	}
	if m.loss > 0 {
		a = append(a, "loss", fmt.Sprintf("%g%%", m.loss))
	}
	if m.dup > 0 {
		a = append(a, "duplicate", fmt.Sprintf("%g%%", m.dup))
	}
	if m.reorder > 0 {
		a = append(a, "reorder", fmt.Sprintf("%g%%", m.reorder))
	}
	if m.rate > 0 {
		a = append(a, "rate", fmt.Sprintf("%dbit", m.rate))
	}
	return append(a, "limit", "100000")
}

// site is where faults are applied: a namespace, the interfaces whose
// egress carries the traffic, the netfilter hook it crosses and the
// next hops to which duplicates go.
type site struct {
	n      *netns.NS
	ifaces []string
	chain  string   // iptables chain of the emulator's NFQUEUE rule
	match  []string // iptables match narrowing it
	dupTo  [][2]string
}

// routerSite is R of a topology: both directions between A and B.
func routerSite(tp *topology) site {
	return site{n: tp.r, ifaces: []string{"fr0", "fr1"}, chain: "FORWARD",
		dupTo: [][2]string{{tp.aIP, "fr0"}, {tp.bIP, "fr1"}}}
}

// loopbackSite is the loopback of n (same-host peers' control path).
func loopbackSite(n *netns.NS) site {
	return site{n: n, ifaces: []string{"lo"}, chain: "OUTPUT", match: []string{"-o", "lo"}}
}

var netemProbe struct {
	once sync.Once
	ok   bool
}

// haveNetem reports whether the kernel has sch_netem (this machine's does
// not: then the user-space emulator, nftables and tbf stand in for it).
func haveNetem(t *testing.T) bool {
	netemProbe.once.Do(func() {
		out, err := exec.Command("unshare", "-n", "--", "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms").CombinedOutput()
		netemProbe.ok = err == nil
		if !netemProbe.ok {
			t.Logf("no sch_netem in this kernel (%s): impairments through the user-space emulator (NFQUEUE), nftables dup and tbf", strings.TrimSpace(string(out)))
		}
	})
	return netemProbe.ok
}

// backend names how impairments are made, for the result table.
func backend(t *testing.T) string {
	if haveNetem(t) {
		return "netem"
	}
	return "nfqueue+nft+tbf"
}

// impair applies m at s and returns the function that clears it.
func (s site) impair(t *testing.T, m impairment) (clear func()) {
	t.Helper()
	if m.zero() {
		return func() {}
	}
	if haveNetem(t) {
		for _, dev := range s.ifaces {
			s.n.Run(t, append([]string{"tc", "qdisc", "add", "dev", dev, "root", "netem"}, m.netemArgs()...)...)
		}
		return func() {
			for _, dev := range s.ifaces {
				_, _ = s.n.Try("tc", "qdisc", "del", "dev", dev, "root")
			}
		}
	}
	var undo []func()
	if m.rate > 0 {
		for _, dev := range s.ifaces {
			s.n.Run(t, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", fmt.Sprintf("%dbit", m.rate), "burst", "64kb", "latency", "200ms")
		}
		undo = append(undo, func() {
			for _, dev := range s.ifaces {
				_, _ = s.n.Try("tc", "qdisc", "del", "dev", dev, "root")
			}
		})
	}
	if m.dup > 0 {
		var b strings.Builder
		b.WriteString("table ip kvfdup {\n chain f { type filter hook forward priority 0; policy accept;\n")
		for _, d := range s.dupTo {
			fmt.Fprintf(&b, "  ip daddr %s numgen random mod 10000 < %d dup to %s device %s\n", d[0], int(m.dup*100), d[0], d[1])
		}
		b.WriteString(" }\n}\n")
		s.n.NFT(t, b.String())
		undo = append(undo, func() { _, _ = s.n.Try("nft", "delete", "table", "ip", "kvfdup") })
	}
	p := netem.Params{Delay: m.delay, Jitter: m.jitter, Loss: m.loss, Reorder: m.reorder}
	if p != (netem.Params{}) {
		undo = append(undo, s.emulate(t, p))
	}
	return func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
}

// emulate runs the user-space emulator in s's namespace and queues s's
// traffic to it.
func (s site) emulate(t *testing.T, p netem.Params) func() {
	t.Helper()
	const queue = "7"
	cmd := s.n.Command(bins.peer, "netem", "-queue", queue, "-params", p.String(), "-seed", strconv.FormatInt(time.Now().UnixNano(), 10))
	em := proc.Start(t, "netem", cmd, proc.Config{LogStderr: true})
	ready := em.Line(30 * time.Second)
	assert.Assert(t, strings.Contains(ready, `"ready":true`), "emulator: %s", ready)
	rule := append(append([]string{s.chain}, s.match...), "-j", "NFQUEUE", "--queue-num", queue, "--queue-bypass")
	s.n.Run(t, append([]string{"iptables", "-I"}, rule...)...)
	return func() {
		_, _ = s.n.Try(append([]string{"iptables", "-D"}, rule...)...)
		_ = em.Signal(syscall.SIGTERM)
		if st, err := em.TryReply(10 * time.Second); err == nil {
			t.Logf("emulator %s: %v packets, %v dropped, %v reordered", p, st["packets"], st["dropped"], st["reordered"])
		}
		if !em.Wait(10 * time.Second) {
			em.Kill()
		}
	}
}

// linkDown takes s's interfaces down (up again with linkUp).
func (s site) linkDown(t *testing.T) {
	t.Helper()
	for _, dev := range s.ifaces {
		s.n.Run(t, "ip", "link", "set", dev, "down")
	}
}

func (s site) linkUp(t *testing.T) {
	t.Helper()
	for _, dev := range s.ifaces {
		s.n.Run(t, "ip", "link", "set", dev, "up")
	}
}

// resetIdle makes every TCP connection that n has open to dst right now get
// an RST the next time either end sends on it (as a middlebox that forgot
// them does); connections made afterwards pass. It returns how many it
// caught.
func (s site) resetIdle(t *testing.T, n *netns.NS, src, dst string) int {
	t.Helper()
	out := n.Run(t, "ss", "-Htn", "state", "established", "dst", dst)
	var ports []string
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) < 4 {
			continue
		}
		// Recv-Q Send-Q Local:Port Peer:Port
		local := f[len(f)-2]
		if i := strings.LastIndexByte(local, ':'); i >= 0 {
			ports = append(ports, local[i+1:])
		}
	}
	if len(ports) == 0 {
		return 0
	}
	set := strings.Join(ports, ", ")
	hook := "forward"
	if s.chain == "OUTPUT" {
		hook = "output"
	}
	s.n.NFT(t, fmt.Sprintf(`table ip kvfrst {
 set idle { type inet_service; elements = { %s } }
 chain f { type filter hook %s priority -10; policy accept;
  ip saddr %s tcp sport @idle reject with tcp reset
  ip daddr %s tcp dport @idle reject with tcp reset
 }
}
`, set, hook, src, src))
	return len(ports)
}
