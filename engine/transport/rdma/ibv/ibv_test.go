package ibv_test

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine/transport/rdma/ibv"
	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/tests/rdma/fakeverbs"
)

// TestMissingLibrary runs in a child process: a library that is not there
// makes RDMA unavailable, nothing else.
func TestMissingLibrary(t *testing.T) {
	if os.Getenv("IBV_TEST_CHILD") == "missing" {
		err := ibv.Load("/nonexistent/libibverbs.so.1")
		if !errors.Is(err, ibv.ErrUnavailable) {
			t.Fatalf("Load: %v", err)
		}
		if _, err := ibv.DeviceNames(); !errors.Is(err, ibv.ErrUnavailable) {
			t.Fatalf("DeviceNames: %v", err)
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestMissingLibrary$")
	cmd.Env = append(os.Environ(), "IBV_TEST_CHILD=missing")
	out, err := cmd.CombinedOutput()
	assert.NilError(t, err, "%s", out)
}

type side struct {
	ctx *ibv.Context
	pd  *ibv.PD
	ch  *ibv.CompChannel
	cq  *ibv.CQ
	qp  *ibv.QP
	gid ibv.GID
	buf *cmem.Map
	mr  *ibv.MR
}

func open(t *testing.T, name string) *side {
	t.Helper()
	c, err := ibv.Open(name)
	assert.NilError(t, err)
	s := &side{ctx: c}
	s.pd, err = c.AllocPD()
	assert.NilError(t, err)
	s.ch, err = c.CreateCompChannel()
	assert.NilError(t, err)
	assert.NilError(t, syscall.SetNonblock(s.ch.Fd(), true))
	s.cq, err = c.CreateCQ(256, s.ch, 0)
	assert.NilError(t, err)
	s.qp, err = s.pd.CreateQP(s.cq, s.cq, ibv.QPCaps{MaxSendWR: 64, MaxRecvWR: 16, MaxSGE: 1})
	assert.NilError(t, err)
	s.gid, err = c.QueryGID(1, 1)
	if !fakeverbs.Hardware() { // a real NIC's table may be shorter; its GID is not used then
		assert.NilError(t, err)
	}
	s.buf, err = cmem.MapAnon(1 << 20)
	assert.NilError(t, err)
	s.mr, err = s.pd.RegMR(s.buf.Addr(), 1<<20, ibv.AccessLocalWrite|ibv.AccessRemoteRead|ibv.AccessRemoteWrite)
	assert.NilError(t, err)
	return s
}

func connect(t *testing.T, a, b *side) {
	t.Helper()
	for _, s := range []*side{a, b} {
		assert.NilError(t, s.qp.ToInit(1, 0, ibv.AccessLocalWrite|ibv.AccessRemoteRead|ibv.AccessRemoteWrite))
	}
	assert.NilError(t, a.qp.ToRTR(ibv.RTR{DGID: b.gid, DestQPNum: b.qp.Num, Port: 1, SGIDIndex: 1, PathMTU: ibv.MTU4096, HopLimit: 16, MinRNRTimer: 12, MaxDestRdAtomic: 16, Global: true}))
	assert.NilError(t, b.qp.ToRTR(ibv.RTR{DGID: a.gid, DestQPNum: a.qp.Num, Port: 1, SGIDIndex: 1, PathMTU: ibv.MTU4096, HopLimit: 16, MinRNRTimer: 12, MaxDestRdAtomic: 16, Global: true}))
	for _, s := range []*side{a, b} {
		assert.NilError(t, s.qp.ToRTS(14, 7, 7, 0, 16))
	}
}

func poll(t *testing.T, s *side, n int) []ibv.WC {
	t.Helper()
	var out []ibv.WC
	wc := make([]ibv.WC, 16)
	deadline := time.Now().Add(10 * time.Second)
	for len(out) < n {
		k, err := s.cq.Poll(wc)
		assert.NilError(t, err)
		out = append(out, wc[:k]...)
		if k == 0 {
			assert.Assert(t, time.Now().Before(deadline), "completions: %d of %d", len(out), n)
			time.Sleep(time.Millisecond)
		}
	}
	return out
}

// sockDir holds the fake's sockets for the whole run (the fake reads its
// environment once per process).
var sockDir string

func TestMain(m *testing.M) {
	var err error
	if sockDir, err = os.MkdirTemp("", "fakeverbs-ibv-"); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(sockDir)
	os.Exit(code)
}

// loadFake builds the fake provider with devices fake_a and fake_b and
// loads it; in a hardware run it loads the machine's libibverbs and
// returns its first NIC with an active port (skipping t without one).
func loadFake(t *testing.T) string {
	t.Helper()
	if fakeverbs.Hardware() {
		lib, _ := fakeverbs.Build()
		assert.NilError(t, ibv.Load(lib))
		devs, err := fakeverbs.Devices()
		if err != nil {
			t.Skipf("KVFERRY_HW=1: %v", err)
		}
		return devs[0]
	}
	lib, err := fakeverbs.Build()
	assert.NilError(t, err)
	fakeverbs.Setenv(lib, sockDir, "fake_a", "fake_b")
	assert.NilError(t, ibv.Load(lib))
	return "fake_a"
}

func TestFakeProvider(t *testing.T) {
	fakeverbs.FakeOnly(t, "the fake's devices and GID table (the rdma package's tests drive real NICs)")
	loadFake(t)
	names, err := ibv.DeviceNames()
	assert.NilError(t, err)
	assert.DeepEqual(t, names, []string{"fake_a", "fake_b"})

	a, b := open(t, "fake_a"), open(t, "fake_b")
	pa, err := a.ctx.QueryPort(1)
	assert.NilError(t, err)
	assert.Equal(t, pa.State, ibv.PortActive)
	assert.Equal(t, pa.ActiveMTU, ibv.MTU4096)
	g0, err := a.ctx.QueryGID(1, 0)
	assert.NilError(t, err)
	assert.Assert(t, g0.IsZero())
	// ibv_query_gid fails with -1 and errno: the error is errno's.
	_, err = a.ctx.QueryGID(1, 99)
	assert.ErrorIs(t, err, syscall.EINVAL)
	typ, _, ok := a.ctx.QueryGIDType(1, 1)
	assert.Assert(t, ok)
	assert.Equal(t, typ, uint32(ibv.GIDTypeRoCEv2))
	// An empty entry has no type (_ibv_query_gid_ex: ENODATA).
	_, _, ok = a.ctx.QueryGIDType(1, 0)
	assert.Assert(t, !ok)
	g, err := ibv.ParseGID(a.gid.String())
	assert.NilError(t, err)
	assert.Equal(t, g, a.gid)

	// Posting before RTS is refused by the QP state machine.
	wrs := make([]ibv.SendWR, 2)
	ibv.SetSendWR(&wrs[0], 1, ibv.WRWrite, uint64(a.buf.Addr()), 4096, a.mr.LKey, uint64(b.buf.Addr()), b.mr.RKey, true)
	_, err = a.qp.PostSend(wrs[:1])
	assert.ErrorIs(t, err, syscall.EINVAL)

	connect(t, a, b)
	copy(a.buf.Bytes()[:4096], []byte("hello over fake rdma"))
	// An unsignaled WRITE then a signaled READ in one chain.
	ibv.SetSendWR(&wrs[0], 1, ibv.WRWrite, uint64(a.buf.Addr()), 4096, a.mr.LKey, uint64(b.buf.Addr())+8192, b.mr.RKey, false)
	ibv.SetSendWR(&wrs[1], 2, ibv.WRRead, uint64(a.buf.Addr())+65536, 4096, a.mr.LKey, uint64(b.buf.Addr())+8192, b.mr.RKey, true)
	assert.NilError(t, b.cq.ReqNotify())
	assert.NilError(t, a.cq.ReqNotify())
	n, err := a.qp.PostSend(wrs)
	assert.NilError(t, err)
	assert.Equal(t, n, 2)
	wc := poll(t, a, 1)
	assert.Equal(t, ibv.WRID(&wc[0]), uint64(2))
	assert.Equal(t, ibv.Status(&wc[0]), ibv.WCSuccess)
	assert.Equal(t, string(b.buf.Bytes()[8192:8192+20]), "hello over fake rdma")
	assert.Equal(t, string(a.buf.Bytes()[65536:65536+20]), "hello over fake rdma")
	// The armed CQ raised one event on its channel.
	ok, err = a.ch.GetEvent()
	assert.NilError(t, err)
	assert.Assert(t, ok)

	// WRITE_WITH_IMM consumes a posted receive.
	rw := make([]ibv.RecvWR, 1)
	ibv.SetRecvWR(&rw[0], 77, uint64(b.buf.Addr()), 0, b.mr.LKey)
	_, err = b.qp.PostRecv(rw)
	assert.NilError(t, err)
	ibv.SetSendWR(&wrs[0], 3, ibv.WRWriteImm, uint64(a.buf.Addr()), 16, a.mr.LKey, uint64(b.buf.Addr())+100, b.mr.RKey, true)
	ibv.SetImm(&wrs[0], 0xabcdef01)
	_, err = a.qp.PostSend(wrs[:1])
	assert.NilError(t, err)
	poll(t, a, 1)
	rc := poll(t, b, 1)
	assert.Equal(t, ibv.WRID(&rc[0]), uint64(77))
	assert.Equal(t, ibv.Opcode(&rc[0]), ibv.WCRecvRDMAImm)
	assert.Equal(t, ibv.Imm(&rc[0]), uint32(0xabcdef01))
	assert.Equal(t, ibv.ByteLen(&rc[0]), uint32(16))

	// Outside the peer's MR: remote access error, the QP goes to ERROR and
	// the WR after it is flushed (completions with errors are never
	// suppressed, signaled or not).
	ibv.SetSendWR(&wrs[0], 4, ibv.WRWrite, uint64(a.buf.Addr()), 4096, a.mr.LKey, uint64(b.buf.Addr())+(1<<20)-100, b.mr.RKey, false)
	ibv.SetSendWR(&wrs[1], 5, ibv.WRWrite, uint64(a.buf.Addr()), 4096, a.mr.LKey, uint64(b.buf.Addr()), b.mr.RKey, false)
	_, err = a.qp.PostSend(wrs)
	assert.NilError(t, err)
	wc = poll(t, a, 2)
	assert.Equal(t, ibv.Status(&wc[0]), ibv.WCRemAccessErr)
	assert.Equal(t, ibv.Status(&wc[1]), ibv.WCFlushErr)
	st, err := a.qp.State()
	assert.NilError(t, err)
	assert.Equal(t, st, ibv.QPSErr)
	_ = unsafe.Pointer(nil)

	for _, s := range []*side{a, b} {
		assert.NilError(t, s.qp.Destroy())
		assert.NilError(t, s.mr.Dereg())
		assert.NilError(t, s.cq.Destroy())
		assert.NilError(t, s.ch.Destroy())
		assert.NilError(t, s.pd.Dealloc())
		assert.NilError(t, s.ctx.Close())
	}
}

// TestRegMRNeedsTouchableMemory: like the kernel's pinning, the fake refuses
// to register memory the process cannot touch (GPU memory without a
// peer-memory module) with EFAULT.
func TestRegMRNeedsTouchableMemory(t *testing.T) {
	s := open(t, loadFake(t))
	p, err := syscall.Mmap(-1, 0, 1<<16, syscall.PROT_NONE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	assert.NilError(t, err)
	defer syscall.Munmap(p)
	_, err = s.pd.RegMR(uintptr(unsafe.Pointer(&p[0])), 1<<16, ibv.AccessLocalWrite)
	assert.Assert(t, errors.Is(err, syscall.EFAULT), "%v", err)
	ro, err := syscall.Mmap(-1, 0, 1<<16, syscall.PROT_READ, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	assert.NilError(t, err)
	defer syscall.Munmap(ro)
	_, err = s.pd.RegMR(uintptr(unsafe.Pointer(&ro[0])), 1<<16, ibv.AccessLocalWrite)
	assert.Assert(t, errors.Is(err, syscall.EFAULT), "read-only memory registered writable: %v", err)
	mr, err := s.pd.RegMR(uintptr(unsafe.Pointer(&ro[0])), 1<<16, 0)
	assert.NilError(t, err, "read-only memory, read-only registration")
	assert.NilError(t, mr.Dereg())
}
