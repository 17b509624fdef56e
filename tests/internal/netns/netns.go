// Package netns makes Linux network namespaces for the suites that build
// their own networks (tests/faults): each is held open by a sleeping
// child, and commands run inside it through nsenter. Root only.
package netns

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// appearTimeout bounds the wait for a new namespace to be entered.
const appearTimeout = 5 * time.Second

// Usable reports why namespaces cannot be made here: not root, one of
// tools (besides unshare and nsenter) missing from PATH, or a kernel or
// sandbox that refuses a new network namespace; nil where they can.
func Usable(tools ...string) error {
	if os.Geteuid() != 0 {
		return errors.New("not root")
	}
	var missing []string
	for _, tool := range append([]string{"unshare", "nsenter"}, tools...) {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing %s", strings.Join(missing, ", "))
	}
	if out, err := exec.Command("unshare", "-n", "true").CombinedOutput(); err != nil {
		return fmt.Errorf("cannot make a network namespace: %v %s", err, out)
	}
	return nil
}

// NS is a network namespace, with its loopback up, that lives until the
// test that made it ends.
type NS struct {
	// Name names the namespace in messages.
	Name string
	pid  int
}

// New makes a namespace named name for t; a failure fails t.
func New(t testing.TB, name string) *NS {
	t.Helper()
	cmd := exec.Command("unshare", "-n", "--", "sleep", "infinity")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("namespace %s: %v", name, err)
	}
	n := &NS{Name: name, pid: cmd.Process.Pid}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	self, _ := os.Readlink("/proc/self/ns/net")
	for end := time.Now().Add(appearTimeout); ; {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", n.pid))
		if err == nil && l != self {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("namespace %s did not appear within %s", name, appearTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
	n.Run(t, "ip", "link", "set", "lo", "up")
	return n
}

// Pid is the process that holds the namespace (for `ip link ... netns`).
func (n *NS) Pid() int { return n.pid }

// Command is args run inside n.
func (n *NS) Command(args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"-t", strconv.Itoa(n.pid), "-n", "--"}, args...)...)
}

// Try runs args inside n and returns their combined output; the error
// names the command, the namespace and the output.
func (n *NS) Try(args ...string) (string, error) {
	out, err := n.Command(args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s in %s: %w: %s", strings.Join(args, " "), n.Name, err, out)
	}
	return string(out), nil
}

// Run is Try that fails t on error.
func (n *NS) Run(t testing.TB, args ...string) string {
	t.Helper()
	out, err := n.Try(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// NFT loads an nftables script into n; a failure fails t.
func (n *NS) NFT(t testing.TB, script string) {
	t.Helper()
	cmd := n.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft in %s: %v: %s\n%s", n.Name, err, out, script)
	}
}
