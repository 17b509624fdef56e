package efa_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/engine/transport/efa"
	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/internal/testutil"
)

// testProvider is the software provider the tests run on: tcp with the
// rxm utility provider offers FI_EP_RDM with FI_RMA over loopback.
const testProvider = "tcp;ofi_rxm"

// ownerAddr is where an owner child maps its buffer, so that a restarted
// owner serves the same addresses (with new keys).
const ownerAddr = 0x5e1000000000

func TestMain(m *testing.M) {
	if os.Getenv("EFA_TEST_CHILD") == "owner" {
		os.Exit(ownerMain())
	}
	os.Exit(testutil.VerifyNoLeaks(m))
}

// skipWithoutLibfabric skips the test where libfabric or its tcp provider
// is absent (it is installed here and in CI).
func skipWithoutLibfabric(t testing.TB) {
	t.Helper()
	if err := efa.Available(efa.Config{Provider: testProvider}); err != nil {
		if errors.Is(err, engine.ErrNotSupported) {
			t.Skipf("libfabric with the %q provider is not installed (apt-get install libfabric1): %v", testProvider, err)
		}
		t.Fatal(err)
	}
}

func engineConfig(domains []string) stack.Config {
	return stack.Config{
		Engine: engine.Config{LocalServerName: "127.0.0.1", Transports: []string{efa.Name}, TransferTimeout: 5 * time.Second,
			Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))},
		EFA: efa.Config{Provider: testProvider, Domains: domains},
	}
}

// ownerMain runs an owner process: an engine with only the efa transport,
// one registered buffer of EFA_TEST_SIZE bytes at ownerAddr, the RPC port
// EFA_TEST_PORT when set. It prints "ready <segment> <addr>" and answers
// on stdin:
//
//	fill <seed> <off> <n>   write a pattern        -> ok
//	check <seed> <off> <n>  compare with a pattern -> ok | bad
func ownerMain() int {
	size, _ := strconv.ParseUint(os.Getenv("EFA_TEST_SIZE"), 10, 64)
	var domains []string
	if v := os.Getenv("EFA_TEST_DOMAINS"); v != "" {
		domains = strings.Split(v, ",")
	}
	cfg := engineConfig(domains)
	cfg.EFA.MooncakeOnly = os.Getenv("EFA_TEST_MOONCAKE") == "1"
	if p, err := strconv.Atoi(os.Getenv("EFA_TEST_PORT")); err == nil {
		cfg.Engine.MinRPCPort, cfg.Engine.MaxRPCPort = p, p
	}
	e, err := stack.New(context.Background(), cfg)
	if err != nil {
		fmt.Println("err", err)
		return 1
	}
	defer e.Close()
	p, _, errno := unix.Syscall6(unix.SYS_MMAP, ownerAddr, uintptr(size), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED_NOREPLACE, ^uintptr(0), 0)
	if errno != 0 || p != ownerAddr {
		fmt.Println("err mmap", errno)
		return 1
	}
	buf := cmem.Bytes(p, size)
	if err := e.RegisterMemory(p, size, "cpu:0", true); err != nil {
		fmt.Println("err", err)
		return 1
	}
	fmt.Printf("ready %s %d\n", e.SegmentName(), p)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) != 4 {
			fmt.Println("bad command")
			continue
		}
		num := func(i int) uint64 { n, _ := strconv.ParseUint(f[i], 10, 64); return n }
		seed, off, n := num(1), num(2), num(3)
		switch f[0] {
		case "fill":
			pattern(buf[off:off+n], seed)
			fmt.Println("ok")
		case "check":
			want := make([]byte, n)
			pattern(want, seed)
			if bytes.Equal(buf[off:off+n], want) {
				fmt.Println("ok")
			} else {
				fmt.Println("bad")
			}
		}
	}
	return 0
}

// pattern fills b with bytes derived from seed and the position.
func pattern(b []byte, seed uint64) {
	x := seed*0x9e3779b97f4a7c15 + 1
	for i := range b {
		if i%8 == 0 {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
		}
		b[i] = byte(x >> (8 * (i % 8)))
	}
}

// owner is a running owner child.
type owner struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	lines   chan string
	segment string
	addr    uint64
}

func startOwner(t testing.TB, size uint64, port int, env ...string) *owner {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "EFA_TEST_CHILD=owner", fmt.Sprintf("EFA_TEST_SIZE=%d", size))
	cmd.Env = append(cmd.Env, env...)
	if port > 0 {
		cmd.Env = append(cmd.Env, fmt.Sprintf("EFA_TEST_PORT=%d", port))
	}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	assert.NilError(t, err)
	stdout, err := cmd.StdoutPipe()
	assert.NilError(t, err)
	assert.NilError(t, cmd.Start())
	o := &owner{cmd: cmd, stdin: stdin, lines: make(chan string, 16)}
	go func() {
		defer close(o.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			o.lines <- sc.Text()
		}
	}()
	t.Cleanup(o.stop)
	line := o.read(t, 60*time.Second)
	f := strings.Fields(line)
	assert.Assert(t, len(f) == 3 && f[0] == "ready", "owner: %q", line)
	o.segment = f[1]
	o.addr, _ = strconv.ParseUint(f[2], 10, 64)
	return o
}

func (o *owner) read(t testing.TB, timeout time.Duration) string {
	t.Helper()
	select {
	case l, ok := <-o.lines:
		if !ok {
			t.Fatal("owner exited")
		}
		return l
	case <-time.After(timeout):
		t.Fatal("owner did not answer in time")
	}
	return ""
}

func (o *owner) do(t testing.TB, cmd string, seed, off, n uint64) string {
	t.Helper()
	_, err := fmt.Fprintf(o.stdin, "%s %d %d %d\n", cmd, seed, off, n)
	assert.NilError(t, err)
	return o.read(t, 60*time.Second)
}

// kill ends the owner at once (SIGKILL) and reaps it.
func (o *owner) kill() {
	if o.cmd.Process != nil {
		_ = o.cmd.Process.Kill()
	}
	o.stop()
}

func (o *owner) stop() {
	if o.stdin != nil {
		o.stdin.Close()
		o.stdin = nil
		done := make(chan struct{})
		go func() { _ = o.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = o.cmd.Process.Kill()
			<-done
		}
	}
}

// local is the test's own engine with one registered buffer.
type local struct {
	e    *engine.Engine
	addr uintptr
	buf  []byte
}

func newLocal(t testing.TB, size uint64, domains []string) *local {
	t.Helper()
	e, err := stack.New(context.Background(), engineConfig(domains))
	assert.NilError(t, err)
	t.Cleanup(func() { e.Close() })
	p, err := cmem.Malloc(size)
	assert.NilError(t, err)
	t.Cleanup(func() { cmem.Free(p) })
	assert.NilError(t, e.RegisterMemory(p, size, "cpu:0", true))
	return &local{e: e, addr: p, buf: cmem.Bytes(p, size)}
}

func (l *local) open(t testing.TB, name string) engine.SegmentID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	id, err := l.e.OpenSegment(ctx, name)
	assert.NilError(t, err)
	return id
}

// transfer runs reqs, bounded by a deadline of its own well past the
// engine's, so that a hang fails the test instead of stalling it.
func (l *local) transfer(t testing.TB, reqs []engine.Request) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- l.e.Transfer(context.Background(), reqs) }()
	select {
	case err := <-done:
		return err
	case <-time.After(60 * time.Second):
		t.Fatal("transfer did not complete within 60 s (engine deadline 5 s)")
	}
	return nil
}

// TestReadWrite moves 4 KiB to 64 MiB each way between two processes over
// the real libfabric (tcp;ofi_rxm on loopback), bytes checked on both
// sides, and a batch of 64 requests at scattered offsets.
func TestReadWrite(t *testing.T) {
	skipWithoutLibfabric(t)
	const size = 128 << 20
	o := startOwner(t, size, 0)
	l := newLocal(t, 64<<20, nil)
	seg := l.open(t, o.segment)
	assert.Equal(t, l.e.Transport(efa.Name).Name(), efa.Name)

	for i, n := range []uint64{4 << 10, 64 << 10, 1 << 20, 3<<20 + 4096, 16 << 20, 64 << 20} {
		t.Run(fmt.Sprintf("%d", n), func(t *testing.T) {
			seed := uint64(i*2 + 1)
			off := uint64(i) * 4096
			pattern(l.buf[:n], seed)
			err := l.transfer(t, []engine.Request{{Op: engine.OpWrite, Source: l.addr, Target: seg, TargetOffset: o.addr + off, Length: n}})
			assert.NilError(t, err)
			assert.Equal(t, o.do(t, "check", seed, off, n), "ok", "write of %d bytes", n)

			assert.Equal(t, o.do(t, "fill", seed+1, off, n), "ok")
			clear(l.buf[:n])
			err = l.transfer(t, []engine.Request{{Op: engine.OpRead, Source: l.addr, Target: seg, TargetOffset: o.addr + off, Length: n}})
			assert.NilError(t, err)
			want := make([]byte, n)
			pattern(want, seed+1)
			assert.Assert(t, bytes.Equal(l.buf[:n], want), "read of %d bytes", n)
		})
	}

	t.Run("batch", func(t *testing.T) {
		const each, count = 64 << 10, 64
		pattern(l.buf[:each*count], 99)
		var reqs []engine.Request
		for i := uint64(0); i < count; i++ {
			// Scattered: request i lands at slot (i*37)%count.
			reqs = append(reqs, engine.Request{Op: engine.OpWrite, Source: l.addr + uintptr(i*each), Target: seg,
				TargetOffset: o.addr + ((i*37)%count)*each, Length: each})
		}
		assert.NilError(t, l.transfer(t, reqs))
		want := make([]byte, each*count)
		pattern(want, 99)
		// Read them back from where they went and compare.
		clear(l.buf[:each*count])
		for i := range reqs {
			reqs[i].Op = engine.OpRead
		}
		assert.NilError(t, l.transfer(t, reqs))
		assert.Assert(t, bytes.Equal(l.buf[:each*count], want))
	})

	t.Run("out of range", func(t *testing.T) {
		// Past the end of the owner's buffer, and below its start: refused
		// before anything is posted, and the bytes at the end unchanged.
		assert.Equal(t, o.do(t, "fill", 7, size-8192, 8192), "ok")
		for _, off := range []uint64{o.addr + size - 100, o.addr - 4096, 0x1000} {
			err := l.transfer(t, []engine.Request{{Op: engine.OpWrite, Source: l.addr, Target: seg, TargetOffset: off, Length: 4096}})
			assert.Assert(t, err != nil, "a write at %#x was accepted", off)
		}
		assert.Equal(t, o.do(t, "check", 7, size-8192, 8192), "ok")
	})

	// The metrics name the transport (transport="efa" in Prometheus).
	assert.Assert(t, l.e.Metrics().SlicesByTransport[efa.Name] > 0, "%v", l.e.Metrics().SlicesByTransport)
}

// contextWithTimeout returns a context that ends with the test or after
// 60 s, whichever comes first.
func contextWithTimeout(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}
