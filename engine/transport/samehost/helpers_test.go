package samehost_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/engine/transport/samehost"
	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/internal/hostenv"
	"github.com/kvferry/kvferry/internal/memfd"
	"github.com/kvferry/kvferry/internal/testutil"
)

// The multi-process tests re-execute this test binary as a child peer; the
// environment variable roleEnv names the child's role.
const (
	roleEnv  = "KVFERRY_SAMEHOST_TEST_ROLE"
	ownerEnv = "KVFERRY_SAMEHOST_TEST_OWNER" // initiator: the owner's segment name
	bufEnv   = "KVFERRY_SAMEHOST_TEST_BUF"   // buffer size in bytes
	// GPU children: the engine's metadata connection string.
	metadataEnv = "KVFERRY_SAMEHOST_TEST_METADATA"
	denyEnv     = "KVFERRY_SAMEHOST_TEST_DENY"  // initiator: install a seccomp filter denying process_vm_*
	memfdEnv    = "KVFERRY_SAMEHOST_TEST_MEMFD" // owner: the buffer is memfd-backed (internal/memfd)
	nameEnv     = "KVFERRY_SAMEHOST_TEST_NAME"  // with metadataEnv: the segment name
	atEnv       = "KVFERRY_SAMEHOST_TEST_AT"    // owner: map the buffer at this address
	maxXfer     = 64 << 20
	refExtra    = 64 << 10
	spareSize   = 1 << 20
)

func TestMain(m *testing.M) {
	if role := os.Getenv(roleEnv); role != "" {
		os.Exit(childMain(role))
	}
	os.Exit(testutil.VerifyNoLeaks(m))
}

var ref struct {
	once sync.Once
	b    []byte
}

// patternAt returns n bytes of the test pattern for seed; every process
// derives the same bytes from the same seed.
func patternAt(seed, n uint64) []byte {
	ref.once.Do(func() {
		ref.b = make([]byte, maxXfer+refExtra)
		_, _ = rand.NewChaCha8([32]byte{'k', 'v', 'f'}).Read(ref.b)
	})
	start := (seed * 4099) % refExtra
	return ref.b[start : start+n]
}

// pattern fills b with bytes that depend on seed.
func pattern(b []byte, seed uint64) {
	_, _ = rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), 1}).Read(b)
}

// ---- child side ----

func childMain(role string) int {
	if strings.HasPrefix(role, "gpu-") {
		return gpuChildMain(role)
	}
	if os.Getenv(denyEnv) != "" {
		if err := denyCrossMemory(); err != nil {
			fmt.Fprintln(os.Stderr, "seccomp:", err)
			return 3
		}
	}
	size := uint64(maxXfer + refExtra)
	if v, err := strconv.ParseUint(os.Getenv(bufEnv), 10, 64); err == nil && v > 0 {
		size = v
	}
	cfg := stack.ConfigFromEnv(hostenv.Lookup) // KVFERRY_TRANSPORT, MC_FORCE_TCP
	cfg.Engine.LocalServerName = "127.0.0.1"
	cfg.Engine.TransferTimeout = 5 * time.Second
	cfg.AutoDiscover = true
	if conn := os.Getenv(metadataEnv); conn != "" {
		// A metadata service: the segment keeps its name across restarts.
		cfg.Engine.MetadataConn, cfg.Engine.LocalServerName, cfg.Engine.BindAddress = conn, os.Getenv(nameEnv), "127.0.0.1"
	}
	e, err := stack.New(context.Background(), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "engine:", err)
		return 1
	}
	defer e.Close()
	var buf testBuf
	if os.Getenv(memfdEnv) != "" {
		buf, err = memfd.New("kvferry-test", size, true)
	} else {
		if at := os.Getenv(atEnv); at != "" {
			buf, err = mapAt(atou(at), size)
		} else {
			buf, err = cmem.MapAnon(size)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := e.RegisterMemory(buf.Addr(), size, "cpu:0", true); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	out := bufio.NewWriter(os.Stdout)
	reply := func(format string, args ...any) {
		fmt.Fprintf(out, format+"\n", args...)
		out.Flush()
	}
	switch role {
	case "owner":
		spare, err := cmem.MapAnon(spareSize)
		if err != nil || e.RegisterMemory(spare.Addr(), spareSize, "cpu:0", true) != nil {
			return 1
		}
		reply("ready %s %d %d %d", e.SegmentName(), buf.Addr(), size, spare.Addr())
		return ownerLoop(e, buf, reply)
	case "initiator":
		seg, err := e.OpenSegment(context.Background(), os.Getenv(ownerEnv))
		if err != nil {
			fmt.Fprintln(os.Stderr, "open:", err)
			return 1
		}
		reply("ready %s", orNone(e.ChooseTransport(seg)))
		return initiatorLoop(e, seg, buf, reply)
	}
	return 2
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// ownerLoop serves "fill off len seed", "check off len seed" and "quit".
//
//	unreg   unregister the buffer, clear it, and after 100 ms say whether
//	        it is still zero ("ok") or was written ("written")
func ownerLoop(e *engine.Engine, buf testBuf, reply func(string, ...any)) int {
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "fill", "check":
			off, n, seed := atou(f[1]), atou(f[2]), atou(f[3])
			if f[0] == "fill" {
				copy(buf.Bytes()[off:off+n], patternAt(seed, n))
				reply("ok")
			} else if bytes.Equal(buf.Bytes()[off:off+n], patternAt(seed, n)) {
				reply("ok")
			} else {
				reply("bad")
			}
		case "checkbytes": // off hex
			want, err := hex.DecodeString(f[2])
			off := atou(f[1])
			if err == nil && bytes.Equal(buf.Bytes()[off:off+uint64(len(want))], want) {
				reply("ok")
			} else {
				reply("bad")
			}
		case "unreg":
			if err := e.UnregisterMemory(buf.Addr()); err != nil {
				reply("err %s", oneLine(err))
				continue
			}
			clear(buf.Bytes())
			time.Sleep(100 * time.Millisecond)
			if bytes.Equal(buf.Bytes(), make([]byte, len(buf.Bytes()))) {
				reply("ok")
			} else {
				reply("written")
			}
		case "quit":
			return 0
		}
	}
	return 0
}

// fixedBuf is anonymous memory mapped at a chosen address.
type fixedBuf struct{ b []byte }

func (f fixedBuf) Addr() uintptr { return uintptr(unsafe.Pointer(&f.b[0])) }
func (f fixedBuf) Len() uint64   { return uint64(len(f.b)) }
func (f fixedBuf) Bytes() []byte { return f.b }

// mapAt maps n bytes of anonymous memory at addr exactly (as a restarted
// process whose allocator lands where its previous incarnation's did).
func mapAt(addr, n uint64) (testBuf, error) {
	p, _, errno := unix.Syscall6(unix.SYS_MMAP, uintptr(addr), uintptr(n), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED_NOREPLACE, ^uintptr(0), 0)
	if errno != 0 {
		return nil, fmt.Errorf("mmap at %#x: %w", addr, errno)
	}
	if uint64(p) != addr {
		return nil, fmt.Errorf("mmap at %#x landed at %#x", addr, p)
	}
	return fixedBuf{cmem.Bytes(p, n)}, nil
}

// testBuf is a child's registered buffer: anonymous or memfd-backed.
type testBuf interface {
	Addr() uintptr
	Len() uint64
	Bytes() []byte
}

// initiatorLoop serves:
//
//	xfer w|r addr len seed   one transfer; a read is compared with the pattern
//	wbatch addr n each seed  n writes of each bytes, 2*each apart, in one batch
//	mixed addr len seed      one batch: a write to the owner and a local copy
//	loop addr len            64 MiB writes until killed ("started" after the first)
//	metrics                  slices per transport, cma submissions copied inline
//	quit
func initiatorLoop(e *engine.Engine, seg engine.SegmentID, buf testBuf, reply func(string, ...any)) int {
	sc := bufio.NewScanner(os.Stdin)
	ctx := context.Background()
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "xfer":
			addr, n, seed := atou(f[2]), atou(f[3]), atou(f[4])
			op := engine.OpWrite
			if f[1] == "w" {
				copy(buf.Bytes()[:n], patternAt(seed, n))
			} else {
				op = engine.OpRead
				clear(buf.Bytes()[:n])
			}
			err := e.Transfer(ctx, []engine.Request{{Op: op, Source: buf.Addr(), Target: seg, TargetOffset: addr, Length: n}})
			switch {
			case err != nil:
				reply("err %s %s", errClass(err), oneLine(err))
			case op == engine.OpRead && !bytes.Equal(buf.Bytes()[:n], patternAt(seed, n)):
				reply("bad")
			default:
				reply("ok")
			}
		case "wbatch":
			addr, n, each, seed := atou(f[1]), atou(f[2]), atou(f[3]), atou(f[4])
			copy(buf.Bytes()[:2*n*each], patternAt(seed, 2*n*each))
			reqs := make([]engine.Request, n)
			for i := range reqs {
				off := uint64(i) * 2 * each
				reqs[i] = engine.Request{Op: engine.OpWrite, Source: buf.Addr() + uintptr(off), Target: seg, TargetOffset: addr + off, Length: each}
			}
			if err := e.Transfer(ctx, reqs); err != nil {
				reply("err %s %s", errClass(err), oneLine(err))
			} else {
				reply("ok")
			}
		case "mixed":
			// One batch, two transports: a write to the owner and a copy
			// inside this process (LOCAL_SEGMENT, the local transport).
			addr, n, seed := atou(f[1]), atou(f[2]), atou(f[3])
			copy(buf.Bytes()[:n], patternAt(seed, n))
			clear(buf.Bytes()[n : 2*n])
			err := e.Transfer(ctx, []engine.Request{
				{Op: engine.OpWrite, Source: buf.Addr(), Target: seg, TargetOffset: addr, Length: n},
				{Op: engine.OpWrite, Source: buf.Addr(), Target: engine.LocalSegment, TargetOffset: uint64(buf.Addr()) + n, Length: n},
			})
			switch {
			case err != nil:
				reply("err %s %s", errClass(err), oneLine(err))
			case !bytes.Equal(buf.Bytes()[n:2*n], patternAt(seed, n)):
				reply("bad")
			default:
				reply("ok")
			}
		case "loop":
			addr, n := atou(f[1]), atou(f[2])
			for i := 0; ; i++ {
				err := e.Transfer(ctx, []engine.Request{{Op: engine.OpWrite, Source: buf.Addr(), Target: seg, TargetOffset: addr, Length: n}})
				if err != nil {
					reply("err %s %s", errClass(err), oneLine(err))
					break
				}
				if i == 0 {
					reply("started")
				}
			}
		case "metrics":
			m := e.Metrics().SlicesByTransport
			var inlined uint64
			if t, ok := e.Transport(samehost.NameCMA).(*samehost.CMA); ok {
				inlined = t.Inlined()
			}
			reply("metrics local=%d cma=%d shm=%d tcp=%d inlined=%d", m["local"], m["cma"], m["shm"], m["tcp"], inlined)
		case "quit":
			return 0
		}
	}
	return 0
}

func errClass(err error) string {
	switch {
	case errors.Is(err, engine.ErrRejected):
		return "rejected"
	case errors.Is(err, engine.ErrAddressNotRegistered):
		return "notregistered"
	case errors.Is(err, engine.ErrNotSupportedTransport):
		return "notsupported"
	}
	return "other"
}

func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", " ") }

func atou(s string) uint64 {
	v, _ := strconv.ParseUint(s, 10, 64)
	return v
}

// denyCrossMemory installs a seccomp filter on every thread of this process
// that fails process_vm_readv and process_vm_writev with EPERM, as a
// container profile or LSM would.
func denyCrossMemory() error {
	var arch uint32
	switch runtime.GOARCH {
	case "amd64":
		arch = unix.AUDIT_ARCH_X86_64
	case "arm64":
		arch = unix.AUDIT_ARCH_AARCH64
	default:
		return fmt.Errorf("seccomp filter for %s: %w", runtime.GOARCH, engine.ErrNotSupported)
	}
	filter := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 4}, // seccomp_data.arch
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 1, K: arch},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW},
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0}, // seccomp_data.nr
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 2, K: unix.SYS_PROCESS_VM_READV},
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 1, K: unix.SYS_PROCESS_VM_WRITEV},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)},
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("PR_SET_NO_NEW_PRIVS: %w", err)
	}
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC,
		uintptr(unsafe.Pointer(&prog))); errno != 0 {
		return fmt.Errorf("seccomp(SET_MODE_FILTER, TSYNC): %w", errno)
	}
	return nil
}

// ---- parent side ----

// child is a peer process driven over its stdin and stdout.
type child struct {
	t     *testing.T
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
	ready []string // fields of the "ready" line
	done  chan struct{}
}

type childOpts struct {
	role string
	env  []string
	// asNobody runs the child as uid/gid 65534 (the test must run as root).
	asNobody bool
	bufBytes uint64
}

// startChild starts this test binary as a peer and waits for its ready line.
func startChild(t *testing.T, o childOpts) *child {
	t.Helper()
	exe, err := os.Executable()
	assert.NilError(t, err)
	if o.asNobody {
		exe = nobodyCopy(t, exe)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"="+o.role)
	if o.bufBytes != 0 {
		cmd.Env = append(cmd.Env, bufEnv+"="+strconv.FormatUint(o.bufBytes, 10))
	}
	cmd.Env = append(cmd.Env, o.env...)
	if o.asNobody {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	cmd.Stderr = testWriter{t: t, prefix: o.role + ": "}
	c := &child{t: t, cmd: cmd, lines: make(chan string, 16), done: make(chan struct{})}
	c.in, err = cmd.StdinPipe()
	assert.NilError(t, err)
	out, err := cmd.StdoutPipe()
	assert.NilError(t, err)
	assert.NilError(t, cmd.Start())
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	go func() {
		_ = cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(c.stop)
	line := c.read(60 * time.Second)
	f := strings.Fields(line)
	assert.Assert(t, len(f) > 0 && f[0] == "ready", "child said %q", line)
	c.ready = f[1:]
	return c
}

// read returns the next line, failing the test after timeout.
func (c *child) read(timeout time.Duration) string {
	c.t.Helper()
	select {
	case l, ok := <-c.lines:
		if !ok {
			c.t.Fatal("child exited")
		}
		return l
	case <-time.After(timeout):
		c.t.Fatalf("child silent for %s", timeout)
	}
	return ""
}

// do sends a command and returns the reply line.
func (c *child) do(format string, args ...any) string {
	c.t.Helper()
	_, err := fmt.Fprintf(c.in, format+"\n", args...)
	assert.NilError(c.t, err)
	return c.read(60 * time.Second)
}

// kill ends the child with SIGKILL and waits for it.
func (c *child) kill() {
	_ = c.cmd.Process.Kill()
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		c.t.Error("killed child did not exit")
	}
}

func (c *child) stop() {
	select {
	case <-c.done:
		return
	default:
	}
	_, _ = fmt.Fprintln(c.in, "quit")
	c.in.Close()
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		c.kill()
	}
}

// nobodyCopy copies the test binary where uid 65534 can execute it.
func nobodyCopy(t *testing.T, exe string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kvferry-samehost-nobody")
	assert.NilError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	assert.NilError(t, os.Chmod(dir, 0o755))
	dst := filepath.Join(dir, "samehost.test")
	src, err := os.ReadFile(exe)
	assert.NilError(t, err)
	assert.NilError(t, os.WriteFile(dst, src, 0o755))
	return dst
}

type testWriter struct {
	t      *testing.T
	prefix string
}

func (w testWriter) Write(p []byte) (int, error) {
	for _, l := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		w.t.Log(w.prefix + l)
	}
	return len(p), nil
}
