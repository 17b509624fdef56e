//go:build faults

package faults_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/internal/testutil"
	"github.com/kvferry/kvferry/internal/testutil/fakecuda"
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
	if os.Geteuid() != 0 {
		fmt.Println("tests/faults: SKIP: not root; the fault suite makes network namespaces, veth pairs, qdiscs and netfilter rules")
		os.Exit(0)
	}
	var missing []string
	for _, tool := range []string{"ip", "tc", "nsenter", "unshare", "nft", "iptables", "ss"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) > 0 {
		fmt.Printf("tests/faults: SKIP: missing %s (Debian: iproute2, util-linux, nftables, iptables)\n", strings.Join(missing, ", "))
		os.Exit(0)
	}
	if out, err := exec.Command("unshare", "-n", "true").CombinedOutput(); err != nil {
		fmt.Printf("tests/faults: SKIP: cannot make a network namespace: %v %s\n", err, out)
		os.Exit(0)
	}
	full = os.Getenv("KVFERRY_FAULTS_FULL") != ""
	dir, err := os.MkdirTemp("", "kvferry-faults")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bins.dir = dir
	bins.peer = filepath.Join(dir, "faultpeer")
	args := []string{"build", "-o", bins.peer}
	if os.Getenv("KVFERRY_TEST_RACE") != "" {
		args = append(args, "-race")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	out, err := exec.CommandContext(ctx, "go", append(args, "github.com/kvferry/kvferry/tests/faults/faultpeer")...).CombinedOutput()
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "go build faultpeer: %v\n%s", err, out)
		os.Exit(1)
	}
	rec = testutil.OpenResults(os.Getenv("KVFERRY_FAULTS_RESULTS"))
	code := m.Run()
	rec.Close()
	os.RemoveAll(dir)
	os.Exit(code)
}

// ---- network namespaces ----

// netns is a network namespace held open by a sleeping process.
type netns struct {
	name string
	pid  int
	cmd  *exec.Cmd
}

func newNetns(t *testing.T, name string) *netns {
	t.Helper()
	cmd := exec.Command("unshare", "-n", "--", "sleep", "infinity")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	assert.NilError(t, cmd.Start())
	n := &netns{name: name, pid: cmd.Process.Pid, cmd: cmd}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	self, _ := os.Readlink("/proc/self/ns/net")
	for i := 0; ; i++ {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", n.pid))
		if err == nil && l != self {
			break
		}
		assert.Assert(t, i < 500, "namespace %s did not appear", name)
		time.Sleep(10 * time.Millisecond)
	}
	n.run(t, "ip", "link", "set", "lo", "up")
	return n
}

// command returns cmd run inside n.
func (n *netns) command(args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"-t", strconv.Itoa(n.pid), "-n", "--"}, args...)...)
}

func (n *netns) try(args ...string) (string, error) {
	out, err := n.command(args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s in %s: %v: %s", strings.Join(args, " "), n.name, err, out)
	}
	return string(out), nil
}

func (n *netns) run(t testing.TB, args ...string) string {
	t.Helper()
	out, err := n.try(args...)
	assert.NilError(t, err)
	return out
}

// nft loads an nftables script into n.
func (n *netns) nft(t testing.TB, script string) {
	t.Helper()
	cmd := n.command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	out, err := cmd.CombinedOutput()
	assert.NilError(t, err, "nft in %s: %s\n%s", n.name, out, script)
}

// topology is initiator namespace A and target namespace B joined through
// router namespace R:
//
//	A 10.77.1.2 (fa) <-> (fr0) 10.77.1.1  R  10.77.2.1 (fr1) <-> (fb) 10.77.2.2 B
//
// Faults are applied in R, to both directions, so the endpoints' own stacks
// stay untouched.
type topology struct {
	a, r, b *netns
	aIP     string
	bIP     string
}

func newTopology(t *testing.T) *topology {
	t.Helper()
	tp := &topology{a: newNetns(t, "A"), r: newNetns(t, "R"), b: newNetns(t, "B"), aIP: "10.77.1.2", bIP: "10.77.2.2"}
	r := tp.r
	r.run(t, "ip", "link", "add", "fr0", "type", "veth", "peer", "name", "fa", "netns", strconv.Itoa(tp.a.pid))
	r.run(t, "ip", "link", "add", "fr1", "type", "veth", "peer", "name", "fb", "netns", strconv.Itoa(tp.b.pid))
	r.run(t, "ip", "addr", "add", "10.77.1.1/24", "dev", "fr0")
	r.run(t, "ip", "addr", "add", "10.77.2.1/24", "dev", "fr1")
	r.run(t, "ip", "link", "set", "fr0", "up")
	r.run(t, "ip", "link", "set", "fr1", "up")
	r.run(t, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	for _, e := range []struct {
		n        *netns
		dev, ip  string
		gw       string
		otherNet string
	}{{tp.a, "fa", tp.aIP, "10.77.1.1", ""}, {tp.b, "fb", tp.bIP, "10.77.2.1", ""}} {
		e.n.run(t, "ip", "addr", "add", e.ip+"/24", "dev", e.dev)
		e.n.run(t, "ip", "link", "set", e.dev, "up")
		e.n.run(t, "ip", "route", "add", "default", "via", e.gw)
	}
	return tp
}

// ---- peers ----

// peer is one faultpeer process seen from the test.
type peer struct {
	t       *testing.T
	name    string
	cmd     *exec.Cmd
	in      io.WriteCloser
	lines   chan string
	done    chan struct{}
	seg     string
	addr    uint64
	pid     int
	stopped bool
}

// startPeer starts "faultpeer engine" in n with the given environment.
func startPeer(t *testing.T, name string, n *netns, host string, env []string, args ...string) *peer {
	t.Helper()
	cmd := n.command(append([]string{bins.peer, "engine", "-name", host}, args...)...)
	cmd.Env = append(append(os.Environ(),
		"MC_TRANSFER_TIMEOUT="+strconv.Itoa(int(deadline/time.Second)),
		"MC_TCP_STATUS_TIMEOUT_SEC="+strconv.Itoa(int(deadline/time.Second)),
		"MC_HANDSHAKE_CONNECT_TIMEOUT="+strconv.Itoa(int(deadline/time.Second)),
		"KVFERRY_LOG_LEVEL="+logLevel(),
	), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = logWriter{t, name + ": "}
	in, err := cmd.StdinPipe()
	assert.NilError(t, err)
	out, err := cmd.StdoutPipe()
	assert.NilError(t, err)
	assert.NilError(t, cmd.Start())
	p := &peer{t: t, name: name, cmd: cmd, in: in, lines: make(chan string, 16), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(p.kill)
	r := p.recv(60 * time.Second)
	assert.Assert(t, r["ok"] == true, "%s did not start: %v", name, r)
	p.seg = r["segment"].(string)
	p.addr = uint64(r["addr"].(float64))
	p.pid = int(r["pid"].(float64))
	return p
}

// logLevel is the peers' log level: KVFERRY_FAULTS_LOG, default warn.
func logLevel() string {
	if v := os.Getenv("KVFERRY_FAULTS_LOG"); v != "" {
		return v
	}
	return "warn"
}

// send writes one command without waiting for its answer.
func (p *peer) send(format string, args ...any) {
	p.t.Helper()
	_, err := fmt.Fprintf(p.in, format+"\n", args...)
	assert.NilError(p.t, err, "%s: send", p.name)
}

// recv waits up to timeout for the next answer; a longer wait means a call
// blocked past its bound, which fails the test.
func (p *peer) recv(timeout time.Duration) map[string]any {
	p.t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			p.t.Fatalf("%s exited", p.name)
		}
		var m map[string]any
		assert.NilError(p.t, json.Unmarshal([]byte(l), &m), "%s: %q", p.name, l)
		return m
	case <-time.After(timeout):
		p.t.Fatalf("%s did not answer within %s: a call blocked", p.name, timeout)
		return nil
	}
}

// call sends a command and waits for its answer (bounded by timeout).
func (p *peer) call(timeout time.Duration, format string, args ...any) map[string]any {
	p.t.Helper()
	p.send(format, args...)
	return p.recv(timeout)
}

func (p *peer) signal(sig syscall.Signal) {
	p.t.Helper()
	assert.NilError(p.t, p.cmd.Process.Signal(sig))
	p.stopped = sig == syscall.SIGSTOP
}

func (p *peer) kill() {
	if p.stopped {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
	}
	select {
	case <-p.done:
		return
	default:
	}
	_, _ = fmt.Fprintln(p.in, "quit")
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// sum returns the CRC-32C of [off, off+n) of the peer's buffer.
func (p *peer) sum(off, n uint64) uint64 {
	p.t.Helper()
	r := p.call(30*time.Second, "sum %d %d", off, n)
	assert.Assert(p.t, r["ok"] == true, "%s sum: %v", p.name, r)
	return uint64(r["sum"].(float64))
}

func (p *peer) fill(seed uint64) {
	p.t.Helper()
	r := p.call(30*time.Second, "fill %d", seed)
	assert.Assert(p.t, r["ok"] == true, "%s fill: %v", p.name, r)
}

// stats are a process's resource counts.
type stats struct {
	Goroutines, FDs, Threads, RSSKB, Regions int
}

func (p *peer) stats() stats {
	p.t.Helper()
	r := p.call(10*time.Second, "stats")
	num := func(k string) int { v, _ := r[k].(float64); return int(v) }
	return stats{Goroutines: num("goroutines"), FDs: num("fds"), Threads: num("threads"), RSSKB: num("rss_kb"), Regions: num("regions")}
}

// logWriter forwards a child's stderr to the test log.
type logWriter struct {
	t      testing.TB
	prefix string
}

func (w logWriter) Write(b []byte) (int, error) {
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		w.t.Log(w.prefix + l)
	}
	return len(b), nil
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
