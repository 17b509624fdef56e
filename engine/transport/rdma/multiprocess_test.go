package rdma_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/engine/transport/rdma"
	"github.com/kvferry/kvferry/engine/transport/tcp"
	"github.com/kvferry/kvferry/tests/rdma/fakeverbs"
)

// TestTwoProcesses moves 64 MiB each way between two processes over 1, 2
// and 4 NICs of the initiator and checks every byte on both sides; the
// per-NIC counters (the transport's and the fake device's) show the
// striping.
func TestTwoProcesses(t *testing.T) {
	const size = 64 << 20
	o := startOwner(t, nics(t, 1), size, 0)
	if len(allDevices) > 1 {
		o = startOwner(t, allDevices, size, 0)
	}
	for _, k := range []int{1, 2, 4} {
		t.Run(fmt.Sprintf("%dnic", k), func(t *testing.T) {
			devs := nics(t, k)
			a := newEngine(t, rdmaConfig(devs...), 20*time.Second)
			src := newBuf(t, a, size)
			seg, err := a.OpenSegment(context.Background(), o.name)
			assert.NilError(t, err)
			assert.Equal(t, a.ChooseTransport(seg), rdma.Name)
			before := map[string]uint64{}
			for _, d := range devs {
				before[d] = fake.Bytes(d)
			}
			seed := uint64(10 + k)
			pattern(src.Bytes(), seed)
			assert.NilError(t, a.Transfer(context.Background(), []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: o.addr, Length: size}}))
			assert.Equal(t, o.do("check %d 0 %d", seed, size), "ok")
			assert.Equal(t, o.do("fill %d 0 %d", seed+100, size), "ok")
			assert.NilError(t, a.Transfer(context.Background(), []engine.Request{{Op: engine.OpRead, Source: src.Addr(), Target: seg, TargetOffset: o.addr, Length: size}}))
			assert.Assert(t, bytes.Equal(src.Bytes(), patternAt(seed+100, size)), "read bytes differ")
			per := nicBytes(a)
			var sum uint64
			for _, d := range devs {
				moved := fake.Bytes(d) - before[d]
				t.Logf("%s: transport %d bytes, device %d bytes", d, per[d], moved)
				assert.Assert(t, per[d] > 0, "%s carried nothing: %v", d, per)
				switch {
				case fake.Fake():
					assert.Equal(t, per[d], moved)
				case fake.CountersReadable(d):
					// The port counts every byte it sent and
					// received, headers and other traffic too.
					assert.Assert(t, moved >= per[d], "%s: the port counted %d bytes, the transport %d", d, moved, per[d])
				}
				sum += per[d]
			}
			assert.Equal(t, sum, uint64(2*size))
		})
	}
	// The owner answered on its side too (passive endpoints, no slices).
	st := o.stats()
	assert.Equal(t, len(st), len(allDevices))
}

// needsFake skips a test of fault injection in a hardware run.
func needsFake(t *testing.T, why string) {
	t.Helper()
	fakeverbs.FakeOnly(t, why)
}

// TestNICDownMidBatch takes one of two NICs down while a batch is in
// flight: its slices fail and finish on the other NIC.
func TestNICDownMidBatch(t *testing.T) {
	needsFake(t, "a port taken down and held work requests")
	const size = 32 << 20
	o := startOwner(t, allDevices[:2], size, 0)
	a := newEngine(t, rdmaConfig(allDevices[:2]...), 20*time.Second)
	src := newBuf(t, a, size)
	seg, err := a.OpenSegment(context.Background(), o.name)
	assert.NilError(t, err)
	pattern(src.Bytes(), 3)
	// fake_mlx5_1 carries a few slices, then holds its work requests
	// until its port is down: they fail there, whatever the load (a
	// sleep before the port went down let a loaded machine finish the
	// batch first, or take the port down before a slice was posted).
	const nic = "fake_mlx5_1"
	assert.NilError(t, fake.Hold(nic, 4))
	defer func() {
		fake.Release(nic)
		fake.SetPort(nic, true)
	}()
	id, err := a.AllocateBatch(1)
	assert.NilError(t, err)
	before := fakeBytes([]string{nic})
	assert.NilError(t, a.Submit(id, []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: o.addr, Length: size}}))
	waitHeld(t, a, id, []string{nic}, before)
	assert.NilError(t, fake.SetPort(nic, false))
	assert.NilError(t, fake.Release(nic))
	bs, err := a.Wait(context.Background(), id)
	assert.NilError(t, err)
	assert.Equal(t, bs.State, engine.StateCompleted, "%v", bs.Err)
	assert.NilError(t, a.FreeBatch(id))
	assert.Equal(t, o.do("check 3 0 %d", size), "ok")
	var down engine.NICStat
	for _, s := range a.NICStats() {
		if s.Device == "fake_mlx5_1" {
			down = s
		}
	}
	t.Logf("down nic: %+v", down)
	assert.Assert(t, !down.Active && down.State == "down")
	assert.Assert(t, down.SlicesRetried > 0, "no slice was retried off the downed NIC")
}

// TestPeerKilledMidBatch kills the owner while a batch is in flight: the
// batch ends FAILED within the transfer deadline, nothing hangs.
func TestPeerKilledMidBatch(t *testing.T) {
	needsFake(t, "held work requests, so that the batch is in flight when the peer dies")
	const size = 32 << 20
	o := startOwner(t, allDevices[:2], size, 0)
	const deadline = 4 * time.Second
	a := newEngine(t, rdmaConfig(allDevices[:2]...), deadline)
	src := newBuf(t, a, size)
	seg, err := a.OpenSegment(context.Background(), o.name)
	assert.NilError(t, err)
	// The NICs carry a few slices each, then hold the rest until the
	// owner is dead (with a sleep instead, a loaded machine could finish
	// the batch before the kill).
	for _, d := range allDevices[:2] {
		assert.NilError(t, fake.Hold(d, 4))
	}
	defer func() {
		for _, d := range allDevices[:2] {
			fake.Release(d)
		}
	}()
	id, err := a.AllocateBatch(1)
	assert.NilError(t, err)
	before := fakeBytes(allDevices[:2])
	start := time.Now()
	assert.NilError(t, a.Submit(id, []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: o.addr, Length: size}}))
	waitHeld(t, a, id, allDevices[:2], before)
	o.kill()
	for _, d := range allDevices[:2] {
		assert.NilError(t, fake.Release(d))
	}
	// The bound is the one checked below, counted from the start: a Wait
	// without a deadline bounds itself by the transfer timeout counted
	// from the call, less than the batch may take to fail (its deadline
	// counts from the submit, and a failed batch waits for its work
	// requests to leave the caller's memory).
	bound := deadline + 5*time.Second
	wctx, cancel := context.WithDeadline(context.Background(), start.Add(bound))
	defer cancel()
	bs, err := a.Wait(wctx, id)
	took := time.Since(start)
	assert.NilError(t, err, "took %s", took)
	assert.Equal(t, bs.State, engine.StateFailed)
	t.Logf("batch FAILED %s after the start: %v", took, bs.Err)
	assert.Assert(t, took < bound, "took %s", took)
	assert.NilError(t, a.FreeBatch(id))
}

// TestPeerRestarted restarts the owner under the same name (same RPC port,
// same addresses, new QPs and new keys): the next transfer re-establishes
// the endpoints and uses the new keys.
func TestPeerRestarted(t *testing.T) {
	const size = 4 << 20
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	devs := nics(t, 1)
	if len(allDevices) > 1 {
		devs = allDevices[:2]
	}
	o := startOwner(t, devs, size, port)
	a := newEngine(t, rdmaConfig(devs...), 10*time.Second)
	src := newBuf(t, a, size)
	seg, err := a.OpenSegment(context.Background(), o.name)
	assert.NilError(t, err)
	pattern(src.Bytes(), 5)
	write := func() error {
		return a.Transfer(context.Background(), []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: o.addr, Length: size}})
	}
	assert.NilError(t, write())
	assert.Equal(t, o.do("check 5 0 %d", size), "ok")
	name := o.name
	o.kill()
	o2 := startOwner(t, devs, size, port)
	assert.Equal(t, o2.name, name)
	pattern(src.Bytes(), 6)
	assert.NilError(t, write())
	assert.Equal(t, o2.do("check 6 0 %d", size), "ok")
	var retried uint64
	for _, s := range a.NICStats() {
		retried += s.SlicesRetried
	}
	t.Logf("slices retried across the restart: %d", retried)
	assert.Assert(t, retried > 0)
}

// TestRefusals: a range outside the peer's buffers is refused at submit;
// a buffer the peer unregistered (still in the cached descriptor) is
// refused by the peer's NIC (remote access error), and its memory stays
// untouched.
func TestRefusals(t *testing.T) {
	const size = 1 << 20
	o := startOwner(t, nics(t, 1), size, 0)
	a := newEngine(t, rdmaConfig(nics(t, 1)...), 5*time.Second)
	src := newBuf(t, a, size)
	pattern(src.Bytes(), 9)
	seg, err := a.OpenSegment(context.Background(), o.name)
	assert.NilError(t, err)
	err = a.Transfer(context.Background(), []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: o.addr + size - 100, Length: 4096}})
	assert.ErrorIs(t, err, engine.ErrAddressNotRegistered)
	assert.Equal(t, o.do("zero"), "ok")
	assert.Equal(t, o.do("unreg"), "ok")
	for _, op := range []engine.OpCode{engine.OpWrite, engine.OpRead} {
		err = a.Transfer(context.Background(), []engine.Request{{Op: op, Source: src.Addr(), Target: seg, TargetOffset: o.addr, Length: 64 << 10}})
		assert.Assert(t, err != nil, "%s of an unregistered buffer succeeded", op)
		t.Logf("%s: %v", op, err)
	}
	assert.Equal(t, o.do("nonzero"), "0")
	assert.Assert(t, bytes.Equal(src.Bytes(), patternAt(9, size)), "a refused read wrote local memory")
}

// TestNoLibibverbs: without libibverbs, or with it and no device, the
// transport is not installed and requests take TCP.
func TestNoLibibverbs(t *testing.T) {
	cases := [][]string{{"KVFERRY_IBVERBS_LIB=/nonexistent/libibverbs.so.1"}, {"FAKEVERBS_DEVICES="}}
	if !fake.Fake() {
		cases = cases[:1] // a real library always has the machine's devices
	}
	for _, env := range cases {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(append(os.Environ(), "RDMA_TEST_CHILD=nolib"), env...)
		out, err := cmd.CombinedOutput()
		assert.NilError(t, err, "%s", out)
		assert.Assert(t, bytes.Contains(out, []byte("nolib ok")), "%s", out)
	}
}

func noLibMain() int {
	fail := func(f string, a ...any) int { fmt.Printf("nolib fail: "+f+"\n", a...); return 1 }
	cfg := rdma.Config{Library: os.Getenv("KVFERRY_IBVERBS_LIB"), SysFS: testSys()}
	if _, err := rdma.Available(cfg); !errors.Is(err, engine.ErrNotSupported) {
		return fail("Available: %v", err)
	}
	mk := func() (*engine.Engine, error) {
		return stack.New(context.Background(), stack.Config{AutoDiscover: true, RDMA: cfg,
			Engine: engine.Config{LocalServerName: "127.0.0.1", ForceTransport: ""}})
	}
	a, err := mk()
	if err != nil {
		return fail("engine: %v", err)
	}
	defer a.Close()
	b, err := mk()
	if err != nil {
		return fail("engine: %v", err)
	}
	defer b.Close()
	if a.Transport(rdma.Name) != nil {
		return fail("rdma installed")
	}
	if _, err := a.InstallTransport(rdma.Name); !errors.Is(err, engine.ErrNotSupported) {
		return fail("InstallTransport(rdma): %v", err)
	}
	if d := a.LocalDescriptor(); d.Protocol != "tcp" || len(d.Devices) != 0 {
		return fail("descriptor protocol %q devices %v", d.Protocol, d.Devices)
	}
	seg, err := a.OpenSegment(context.Background(), b.SegmentName())
	if err != nil {
		return fail("open: %v", err)
	}
	// Same host: cma would win; with the same-host paths forced off the
	// selector falls to TCP, never to RDMA.
	if got := a.ChooseTransport(seg); got == rdma.Name {
		return fail("chose %s", got)
	}
	if a.Transport(tcp.Name) == nil {
		return fail("no tcp")
	}
	fmt.Println("nolib ok")
	return 0
}
