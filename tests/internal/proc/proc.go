// Package proc runs the child processes of the multi-process suites
// (tests/kill, tests/faults, tests/soak, tests/metadata, tests/store): a
// driver, peer or server that prints one line per event or answer on its
// standard output and takes commands, one a line, on its standard input.
// Every wait is bounded; every child dies with the test binary (SIGKILL
// on the parent's death) and is stopped when its test ends.
package proc

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// tailLines is how many of a child's last stderr lines are kept.
const tailLines = 200

// reapTimeout bounds the wait for a SIGKILLed child to be reaped.
const reapTimeout = 30 * time.Second

// Config says how a child is stopped and where its standard error goes.
type Config struct {
	// Quit, where set, is the line that asks the child to exit: Stop (and
	// the end of the test) writes it and closes the child's standard
	// input, and kills the child if it is still there after Grace. Where
	// unset, Stop kills the child at once.
	Quit string
	// Grace is how long a child asked to quit has (default 15 s).
	Grace time.Duration
	// LogStderr forwards the child's standard error to the test log as it
	// comes, each line prefixed with the child's name. Otherwise its last
	// lines are kept (Tail) and logged if the test fails.
	LogStderr bool
}

// Proc is a running child process.
type Proc struct {
	// Name names the child in messages.
	Name string
	// Cmd is the started command.
	Cmd *exec.Cmd

	t     testing.TB
	cfg   Config
	in    io.WriteCloser
	lines chan string
	done  chan struct{}
	tail  tail

	mu struct {
		sync.Mutex
		stopped bool // SIGSTOPped (Signal)
	}
}

// Start starts cmd as child name of t. Its standard output is read a line
// at a time (Line, Reply, Lines); its standard error is handled as cfg
// says. The child is stopped (Stop) when t ends. A start failure fails t.
func Start(t testing.TB, name string, cmd *exec.Cmd, cfg Config) *Proc {
	t.Helper()
	if cfg.Grace == 0 {
		cfg.Grace = 15 * time.Second
	}
	p := &Proc{Name: name, Cmd: cmd, t: t, cfg: cfg, lines: make(chan string, 64), done: make(chan struct{})}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	var err error
	if p.in, err = cmd.StdinPipe(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	var errp io.Reader
	switch {
	case cmd.Stderr != nil:
	case cfg.LogStderr:
		cmd.Stderr = LogWriter(t, name+": ")
	default:
		if errp, err = cmd.StderrPipe(); err != nil {
			t.Fatalf("start %s: %v", name, err)
		}
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { // until the child's stdout closes
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	if errp != nil {
		go p.tail.read(errp) // until the child's stderr closes
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() && errp != nil {
			for _, l := range p.tail.lines() {
				t.Logf("%s: %s", name, l)
			}
		}
	})
	return p
}

// Pid is the child's process id.
func (p *Proc) Pid() int { return p.Cmd.Process.Pid }

// Lines are the child's standard output lines, closed when it closes.
func (p *Proc) Lines() <-chan string { return p.lines }

// Done is closed once the child has exited and been reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the child has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Tail is the last lines the child wrote to its standard error (empty
// where Config.LogStderr or the caller's cmd.Stderr took them).
func (p *Proc) Tail() string { return strings.Join(p.tail.lines(), "\n") }

// TryLine waits up to timeout for the child's next output line. Safe from
// any goroutine.
func (p *Proc) TryLine(timeout time.Duration) (string, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case l, ok := <-p.lines:
		if !ok {
			return "", fmt.Errorf("%s exited", p.Name)
		}
		return l, nil
	case <-timer.C:
		return "", fmt.Errorf("%s did not answer within %s: a call blocked", p.Name, timeout)
	}
}

// TryReply waits up to timeout for the child's next output line and
// decodes it as one JSON object. Safe from any goroutine.
func (p *Proc) TryReply(timeout time.Duration) (map[string]any, error) {
	l, err := p.TryLine(timeout)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(l), &m); err != nil {
		return nil, fmt.Errorf("%s: %q: %w", p.Name, l, err)
	}
	return m, nil
}

// TrySend writes one command line to the child. Safe from any goroutine.
func (p *Proc) TrySend(format string, args ...any) error {
	if _, err := fmt.Fprintf(p.in, format+"\n", args...); err != nil {
		return fmt.Errorf("%s: send: %w", p.Name, err)
	}
	return nil
}

// TryCall sends a command and waits up to timeout for its JSON answer.
// Safe from any goroutine.
func (p *Proc) TryCall(timeout time.Duration, format string, args ...any) (map[string]any, error) {
	if err := p.TrySend(format, args...); err != nil {
		return nil, err
	}
	return p.TryReply(timeout)
}

// Line is TryLine that fails the test on error (test goroutine only).
func (p *Proc) Line(timeout time.Duration) string {
	p.t.Helper()
	l, err := p.TryLine(timeout)
	if err != nil {
		p.t.Fatal(err)
	}
	return l
}

// Reply is TryReply that fails the test on error (test goroutine only).
func (p *Proc) Reply(timeout time.Duration) map[string]any {
	p.t.Helper()
	m, err := p.TryReply(timeout)
	if err != nil {
		p.t.Fatal(err)
	}
	return m
}

// Send is TrySend that fails the test on error (test goroutine only).
func (p *Proc) Send(format string, args ...any) {
	p.t.Helper()
	if err := p.TrySend(format, args...); err != nil {
		p.t.Fatal(err)
	}
}

// Call is TryCall that fails the test on error (test goroutine only).
func (p *Proc) Call(timeout time.Duration, format string, args ...any) map[string]any {
	p.t.Helper()
	p.Send(format, args...)
	return p.Reply(timeout)
}

// Await reads output lines until, for each prefix, a line that starts
// with it has come, within timeout in all; it returns the rest of each
// such line, in the order of prefixes. Lines that match none are dropped.
func (p *Proc) Await(timeout time.Duration, prefixes ...string) ([]string, error) {
	got := make([]string, len(prefixes))
	seen := 0
	end := time.Now().Add(timeout)
	for seen < len(prefixes) {
		l, err := p.TryLine(time.Until(end))
		if err != nil {
			return nil, fmt.Errorf("await %q: %w", prefixes, err)
		}
		for i, pre := range prefixes {
			if rest, ok := strings.CutPrefix(l, pre); ok && got[i] == "" {
				got[i] = rest
				seen++
				break
			}
		}
	}
	return got, nil
}

// Drain discards the child's further output lines, so that a child whose
// output nobody reads never blocks on it.
func (p *Proc) Drain() {
	go func() { // until the child's stdout closes
		for range p.lines {
		}
	}()
}

// Signal sends sig to the child; a SIGSTOPped child is continued before
// Stop or Kill.
func (p *Proc) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.Cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %s: %w", p.Name, err)
	}
	switch sig {
	case syscall.SIGSTOP:
		p.mu.stopped = true
	case syscall.SIGCONT:
		p.mu.stopped = false
	}
	return nil
}

// cont continues a SIGSTOPped child (it could take no signal but SIGKILL).
func (p *Proc) cont() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.stopped {
		_ = p.Cmd.Process.Signal(syscall.SIGCONT)
		p.mu.stopped = false
	}
}

// Kill SIGKILLs the child and waits until it has been reaped (bounded: a
// child that outlives the bound fails the test).
func (p *Proc) Kill() {
	_ = p.Cmd.Process.Kill()
	select {
	case <-p.done:
	case <-time.After(reapTimeout):
		p.t.Errorf("%s: not reaped %s after SIGKILL", p.Name, reapTimeout)
	}
}

// Quit writes line to the child, closes its standard input and waits up
// to grace for it to exit; a child still there then is killed. It reports
// whether the child exited by itself (true for one already gone).
func (p *Proc) Quit(line string, grace time.Duration) bool {
	if p.Exited() {
		return true
	}
	p.cont()
	_, _ = io.WriteString(p.in, line+"\n")
	_ = p.in.Close()
	if p.Wait(grace) {
		return true
	}
	p.Kill()
	return false
}

// Wait waits up to timeout for the child to exit and reports whether it
// did.
func (p *Proc) Wait(timeout time.Duration) bool {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.done:
		return true
	case <-timer.C:
		return false
	}
}

// Stop ends the child as its Config says (Quit, or Kill) and reports
// whether it exited by itself. A second Stop is harmless.
func (p *Proc) Stop() bool {
	if p.Exited() {
		return true
	}
	if p.cfg.Quit != "" {
		return p.Quit(p.cfg.Quit, p.cfg.Grace)
	}
	p.Kill()
	return false
}

// LogWriter is an io.Writer that logs each line written to it to t, after
// prefix (a child's stderr in the test log).
func LogWriter(t testing.TB, prefix string) io.Writer { return logWriter{t, prefix} }

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

// FreePort is a TCP port on 127.0.0.1 that was free a moment ago (for a
// child's listen flag; another process may take it meanwhile).
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// tail keeps the last tailLines lines of a stream.
type tail struct {
	mu sync.Mutex
	l  []string
}

// read keeps r's lines until r ends; an over-long line is cut, never a
// reason to stop reading (the child would block on a full pipe).
func (t *tail) read(r io.Reader) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		l, err := br.ReadSlice('\n')
		if len(l) > 0 {
			t.add(strings.TrimRight(string(l), "\n"))
		}
		if err == bufio.ErrBufferFull {
			for err == bufio.ErrBufferFull { // the rest of the long line
				_, err = br.ReadSlice('\n')
			}
		}
		if err != nil {
			return
		}
	}
}

func (t *tail) add(l string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.l = append(t.l, l)
	if len(t.l) > tailLines {
		t.l = t.l[1:]
	}
}

func (t *tail) lines() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.l...)
}
