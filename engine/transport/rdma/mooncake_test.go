package rdma_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/transport/rdma"
)

// staleGID makes a child's fake NICs carry three GID entries of which
// index 1 (the one auto selection ranks first) fails INIT->RTR with EINVAL,
// as a stale GID entry does.
var staleGID = []string{"FAKEVERBS_GIDS=3", "FAKEVERBS_RTR_EINVAL_GIDS=1"}

func ownerGID(t *testing.T, o *owner) (int, string) {
	t.Helper()
	st := o.stats()
	assert.Equal(t, len(st), 1)
	return st[0].GIDIndex, st[0].GID
}

// TestGIDRetry: a connection setup whose INIT->RTR fails with EINVAL
// under an auto-selected GID is retried with the next-ranked GID (Mooncake's
// auto GID reprobe), on the passive side (it answers from the new GID) and
// on the active side (a new handshake with fresh QPs); the new GID is
// published.
func TestGIDRetry(t *testing.T) {
	needsFake(t, "GID entries that fail INIT->RTR")
	const size = 1 << 20
	a := newEngine(t, rdmaConfig(allDevices[:1]...), 20*time.Second)
	src := newBuf(t, a, size)

	// Passive: we connect to an owner whose GID is stale.
	p := startOwner(t, allDevices[:1], size, 0, staleGID...)
	idx, _ := ownerGID(t, p)
	assert.Equal(t, idx, 1, "auto selection ranks index 1 first")
	seg, err := a.OpenSegment(context.Background(), p.name)
	assert.NilError(t, err)
	pattern(src.Bytes(), 31)
	assert.NilError(t, a.Transfer(context.Background(), []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: p.addr, Length: size}}))
	assert.Equal(t, p.do("check 31 0 %d", size), "ok")
	idx, gid := ownerGID(t, p)
	assert.Equal(t, idx, 2, "the passive side switched GIDs")
	seg, err = a.OpenSegmentNoCache(context.Background(), p.name)
	assert.NilError(t, err)
	d, err := a.SegmentDescriptor(seg)
	assert.NilError(t, err)
	assert.Equal(t, d.Devices[0].GID, gid, "the new GID is published")
	assert.Assert(t, strings.HasSuffix(gid, ":02"), gid)

	// Active: an owner with a stale GID connects to us.
	q := startOwner(t, allDevices[:1], size, 0, staleGID...)
	dst := newBuf(t, a, size)
	assert.Equal(t, q.do("put %s %d 32 %d", a.SegmentName(), dst.Addr(), size), "ok")
	assert.Assert(t, bytesEqual(dst.Bytes(), patternAt(32, size)))
	idx, _ = ownerGID(t, q)
	assert.Equal(t, idx, 2, "the active side switched GIDs")
}

func bytesEqual(a, b []byte) bool { return string(a) == string(b) }

// TestPassiveFetchesPeerGID: a handshake without local_gid (as older
// Mooncake peers send) is answered with the GID and LID from the peer's
// descriptor, which the passive side fetches from the metadata service.
func TestPassiveFetchesPeerGID(t *testing.T) {
	const size = 1 << 20
	a := newEngine(t, rdmaConfig(nics(t, 1)...), 10*time.Second)
	b := newEngine(t, rdmaConfig(nics(t, 1)...), 10*time.Second)
	a.Transport(rdma.Name).(*rdma.Transport).SetOmitLocalGID(true)
	src, dst := newBuf(t, a, size), newBuf(t, b, size)
	pattern(src.Bytes(), 33)
	seg, err := a.OpenSegment(context.Background(), b.SegmentName())
	assert.NilError(t, err)
	assert.NilError(t, a.Transfer(context.Background(), []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: uint64(dst.Addr()), Length: size}}))
	assert.Assert(t, bytesEqual(dst.Bytes(), src.Bytes()))
}

// TestEndpointEviction: with room for one endpoint per NIC
// (MC_MAX_EP_PER_CTX=1), alternating between two peers evicts the older
// endpoint each time (its QPs retired, new ones made on the next use), and
// every transfer completes.
func TestEndpointEviction(t *testing.T) {
	const size = 1 << 20
	owners := []*owner{startOwner(t, nics(t, 1), size, 0), startOwner(t, nics(t, 1), size, 0)}
	cfg := rdmaConfig(nics(t, 1)...)
	cfg.MaxEndpoints = 1
	a := newEngine(t, cfg, 10*time.Second)
	src := newBuf(t, a, size)
	var segs []engine.SegmentID
	for _, o := range owners {
		seg, err := a.OpenSegment(context.Background(), o.name)
		assert.NilError(t, err)
		segs = append(segs, seg)
	}
	for i := range 6 {
		o := owners[i%2]
		pattern(src.Bytes(), uint64(50+i))
		assert.NilError(t, a.Transfer(context.Background(), []engine.Request{{Op: engine.OpWrite, Source: src.Addr(), Target: segs[i%2], TargetOffset: o.addr, Length: size}}))
		assert.Equal(t, o.do("check %d 0 %d", 50+i, size), "ok", fmt.Sprintf("transfer %d", i))
	}
	st := a.NICStats()[0]
	t.Logf("%s: %d endpoints, %d evicted", st.Device, st.Endpoints, st.EndpointsEvicted)
	assert.Assert(t, st.Endpoints <= 1)
	assert.Assert(t, st.EndpointsEvicted >= 5, "evicted %d", st.EndpointsEvicted)
}
