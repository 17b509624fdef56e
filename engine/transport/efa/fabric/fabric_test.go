package fabric

import (
	"bytes"
	"errors"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/internal/cmem"
)

// testProvider is the software provider the tests run on: tcp with the
// rxm utility provider gives FI_EP_RDM with FI_RMA over loopback.
const testProvider = "tcp;ofi_rxm"

// loopbackInfo returns the loopback domain of testProvider, or skips the
// test when libfabric is absent.
func loopbackInfo(t testing.TB) (*InfoList, Info) {
	t.Helper()
	if err := Load(""); err != nil {
		t.Skipf("libfabric is not installed (apt-get install libfabric1): %v", err)
	}
	l, err := GetInfo(Hints{Provider: testProvider, Domain: "lo", Caps: CapRMA | CapMsg, Mode: ModeContext,
		MRMode: MRLocal | MRVirtAddr | MRAllocated | MRProvKey, TxOpFlags: DeliveryComplete})
	assert.NilError(t, err)
	t.Cleanup(l.Free)
	for _, in := range l.Infos {
		if in.Fabric == "127.0.0.1/32" {
			return l, in
		}
	}
	t.Fatalf("no IPv4 loopback fabric in %+v", l.Infos)
	return nil, Info{}
}

func TestLayout(t *testing.T) {
	assert.Equal(t, checkLayout(), "")
}

// TestReadWrite moves bytes both ways between two endpoints of one process
// over the real provider: fi_write and fi_read into registered memory,
// completions read from the CQ, and a remote key that was never issued
// fails its operation instead of touching memory.
func TestReadWrite(t *testing.T) {
	_, in := loopbackInfo(t)
	assert.Assert(t, in.Caps&CapRMA != 0)
	assert.Assert(t, in.TxOpFlags&DeliveryComplete != 0, "%#x", in.TxOpFlags)
	a, err := Open(in, 16, 256, 64)
	assert.NilError(t, err)
	defer a.Close()
	b, err := Open(in, 16, 256, 64)
	assert.NilError(t, err)
	defer b.Close()
	assert.Assert(t, len(a.Addr()) > 0 && !bytes.Equal(a.Addr(), b.Addr()))

	const n = 1 << 20
	abuf, err := cmem.Malloc(n)
	assert.NilError(t, err)
	defer cmem.Free(abuf)
	bbuf, err := cmem.Malloc(n)
	assert.NilError(t, err)
	defer cmem.Free(bbuf)
	am, err := a.RegMR(abuf, n, AccessAll, 1, IfaceSystem, 0)
	assert.NilError(t, err)
	defer am.Close()
	bm, err := b.RegMR(bbuf, n, AccessAll, 2, IfaceSystem, 0)
	assert.NilError(t, err)
	defer bm.Close()

	peer, err := a.Insert(b.Addr())
	assert.NilError(t, err)
	av, bv := cmem.Bytes(abuf, n), cmem.Bytes(bbuf, n)
	for i := range av {
		av[i] = byte(i * 7)
	}
	raddr := func(off uint64) uint64 {
		if in.MRMode&MRVirtAddr != 0 {
			return uint64(bbuf) + off
		}
		return off
	}
	desc := uint64(0)
	if in.MRMode&MRLocal != 0 {
		desc = am.Desc()
	}
	ops := []Op{
		{Local: uint64(abuf), Length: n / 2, Desc: desc, Remote: raddr(0), Key: bm.Key(), Peer: peer, Slot: 1, Write: 1},
		{Local: uint64(abuf) + n/2, Length: n / 2, Desc: desc, Remote: raddr(n / 2), Key: bm.Key(), Peer: peer, Slot: 2, Write: 1},
	}
	waitSlots(t, a, b, ops)
	assert.Assert(t, bytes.Equal(av, bv))

	for i := range bv {
		bv[i] = byte(i * 13)
	}
	ops = []Op{{Local: uint64(abuf), Length: n, Desc: desc, Remote: raddr(0), Key: bm.Key(), Peer: peer, Slot: 3}}
	waitSlots(t, a, b, ops)
	assert.Assert(t, bytes.Equal(av, bv))

	// A key b never issued: the operation fails on the CQ.
	ops = []Op{{Local: uint64(abuf), Length: 4096, Desc: desc, Remote: raddr(0), Key: bm.Key() + 1000, Peer: peer, Slot: 4, Write: 1}}
	c := post(t, a, b, ops)
	assert.Equal(t, len(c), 1)
	assert.Equal(t, c[0].Slot, uint32(4))
	assert.Assert(t, c[0].Err != 0, "a write with a bad key succeeded")
}

// waitSlots posts ops on a and waits for all to complete without error.
func waitSlots(t testing.TB, a, b *Device, ops []Op) {
	t.Helper()
	for _, c := range post(t, a, b, ops) {
		assert.Equal(t, c.Err, int32(0), "slot %d: %s", c.Slot, Strerror(int(c.Err)))
	}
}

// post posts ops on a and collects their completions, driving b's progress
// meanwhile (the target of a manual-progress provider must poll too). A
// full queue (EAGAIN, also while rxm connects) is retried after polling.
func post(t testing.TB, a, b *Device, ops []Op) []Comp {
	t.Helper()
	var got []Comp
	out := make([]Comp, 16)
	deadline := time.Now().Add(20 * time.Second)
	rest := ops
	for len(rest) > 0 || len(got) < len(ops) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d completions before the deadline (%d unposted)", len(got), len(ops), len(rest))
		}
		if len(rest) > 0 {
			n, err := a.Post(rest)
			if err != nil && !errors.Is(err, syscall.EAGAIN) {
				t.Fatalf("post: %v", err)
			}
			rest = rest[n:]
		}
		k, err := a.Poll(out, pollWait)
		assert.NilError(t, err)
		got = append(got, out[:k]...)
		_, err = b.Poll(out[:1], 0)
		assert.NilError(t, err)
	}
	return got
}

func TestNoProvider(t *testing.T) {
	if err := Load(""); err != nil {
		t.Skipf("libfabric is not installed: %v", err)
	}
	_, err := GetInfo(Hints{Provider: "no-such-provider", Caps: CapRMA})
	assert.Assert(t, errors.Is(err, ErrNoProvider), "%v", err)
	assert.Assert(t, errors.Is(err, syscall.ENODATA), "%v", err)
}

// pollWait is how long post's Poll on the initiator waits.
var pollWait = 1
