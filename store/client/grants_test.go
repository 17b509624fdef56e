package client_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/store/client"
	"github.com/kvferry/kvferry/store/master"
	"github.com/kvferry/kvferry/store/wire"
)

// waitFor polls cond every 10 ms until it holds or d has passed.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPutGrants: puts through a mux master take one round trip each
// (PutCommit into put grants) and keep Mooncake's semantics: readable by
// another client as soon as put returns, existing keys untouched, upsert
// replaces, replicas on distinct holders; puts that do not fit grants take
// PutStart and PutEnd; Close returns the grants.
func TestPutGrants(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	srv := startMaster(t, master.Config{GrantBytes: 1 << 20})
	svc := srv.Service()
	h1 := newClient(t, client.Config{MasterServerAddr: srv.Addr(), GlobalSegmentSize: 32 << 20})
	h2 := newClient(t, client.Config{MasterServerAddr: srv.Addr(), GlobalSegmentSize: 32 << 20})
	w := newClient(t, client.Config{MasterServerAddr: srv.Addr()})

	const n = 40
	for i := range n {
		key := fmt.Sprint("g", i)
		assert.NilError(t, w.Put(ctx, key, pattern(100_000, byte(i)), client.ReplicateConfig{}))
		got, err := h1.Get(ctx, key) // another client, right after put returned
		assert.NilError(t, err)
		assert.Assert(t, bytes.Equal(got, pattern(100_000, byte(i))), "key %s", key)
	}
	m := w.Metrics()
	assert.Equal(t, m.GrantPuts, uint64(n))
	assert.Equal(t, m.GrantFallbacks, uint64(0))
	// 100 KB objects (aligned 100032) in 1 MiB grants: 10 per grant.
	assert.Assert(t, m.GrantAcquires >= 4 && m.GrantAcquires <= 6, "acquires %d", m.GrantAcquires)
	assert.Equal(t, svc.Metrics().PutStartsTotal, uint64(0))
	// Spent grants go back with the next grant request.
	assert.Assert(t, m.GrantReturns >= m.GrantAcquires-2, "%+v", m)
	assert.Assert(t, svc.Metrics().Grants <= 2, "%+v", svc.Metrics())

	// An existing key: nil, value unchanged. Upsert replaces.
	assert.NilError(t, w.Put(ctx, "g0", pattern(10, 99), client.ReplicateConfig{}))
	got, err := h2.Get(ctx, "g0")
	assert.NilError(t, err)
	assert.Assert(t, bytes.Equal(got, pattern(100_000, 0)))
	assert.NilError(t, w.Upsert(ctx, "g0", pattern(10, 99), client.ReplicateConfig{}))
	got, err = h2.Get(ctx, "g0")
	assert.NilError(t, err)
	assert.Assert(t, bytes.Equal(got, pattern(10, 99)))

	// Two replicas, on the two holders; the object survives one holder.
	before := w.Metrics().GrantPuts
	assert.NilError(t, w.Put(ctx, "two", pattern(5000, 7), client.ReplicateConfig{ReplicaNum: 2}))
	assert.Equal(t, w.Metrics().GrantPuts, before+1)
	descs, err := w.ReplicaDescs(ctx, []string{"two"})
	assert.NilError(t, err)
	assert.Equal(t, len(descs[0].Replicas), 2)
	assert.Assert(t, descs[0].Replicas[0].SegmentName != descs[0].Replicas[1].SegmentName)

	// Preferred segments and large objects go the PutStart way.
	assert.NilError(t, w.Put(ctx, "pref", pattern(5000, 8), client.ReplicateConfig{PreferredSegments: []string{h2.Hostname()}}))
	assert.NilError(t, w.Put(ctx, "big", pattern(600_000, 9), client.ReplicateConfig{}))
	assert.Equal(t, svc.Metrics().PutStartsTotal, uint64(2))
	descs, err = w.ReplicaDescs(ctx, []string{"pref"})
	assert.NilError(t, err)
	assert.Equal(t, descs[0].Replicas[0].SegmentName, h2.Hostname())
	for _, k := range []string{"pref", "big", "two"} {
		_, err := h1.Get(ctx, k)
		assert.NilError(t, err, k)
	}

	assert.Assert(t, svc.Metrics().Grants > 0)
	assert.NilError(t, w.Close())
	assert.Equal(t, svc.Metrics().Grants, 0)
	assert.Equal(t, svc.Metrics().GrantedBytes, uint64(0))
}

// TestPutGrantsConcurrent: puts from many goroutines share the grants;
// every object is intact.
func TestPutGrantsConcurrent(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	srv := startMaster(t, master.Config{GrantBytes: 1 << 20})
	h := newClient(t, client.Config{MasterServerAddr: srv.Addr(), GlobalSegmentSize: 64 << 20})
	w := newClient(t, client.Config{MasterServerAddr: srv.Addr()})
	const threads, per = 4, 30
	errs := make(chan error, threads)
	for th := range threads {
		go func() {
			for i := range per {
				if err := w.Put(ctx, fmt.Sprintf("c%d_%d", th, i), pattern(70_000+th*1000+i, byte(th*per+i)),
					client.ReplicateConfig{}); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range threads {
		select {
		case err := <-errs:
			assert.NilError(t, err)
		case <-ctx.Done():
			t.Fatal("puts did not finish")
		}
	}
	for th := range threads {
		for i := range per {
			got, err := h.Get(ctx, fmt.Sprintf("c%d_%d", th, i))
			assert.NilError(t, err)
			assert.Assert(t, bytes.Equal(got, pattern(70_000+th*1000+i, byte(th*per+i))))
		}
	}
	assert.Assert(t, w.Metrics().GrantPuts >= threads*per-4, "%+v", w.Metrics())
}

// TestPutGrantsOff: a master with grants off, a client with grants off, and
// a master reached over gRPC: every put takes PutStart and PutEnd.
func TestPutGrantsOff(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	for _, tc := range []struct {
		name string
		mcfg master.Config
		ccfg client.Config
	}{
		{"master", master.Config{DisableGrants: true}, client.Config{}},
		{"client", master.Config{}, client.Config{NoPutGrants: true}},
		{"grpc", master.Config{}, client.Config{MasterRPC: client.MasterRPCGRPC}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startMaster(t, tc.mcfg)
			h := newClient(t, client.Config{MasterServerAddr: srv.Addr(), GlobalSegmentSize: 16 << 20})
			cfg := tc.ccfg
			cfg.MasterServerAddr = srv.Addr()
			w := newClient(t, cfg)
			for i := range 5 {
				assert.NilError(t, w.Put(ctx, fmt.Sprint("k", i), pattern(3000, byte(i)), client.ReplicateConfig{}))
				got, err := h.Get(ctx, fmt.Sprint("k", i))
				assert.NilError(t, err)
				assert.Assert(t, bytes.Equal(got, pattern(3000, byte(i))))
			}
			assert.Equal(t, w.Metrics().GrantPuts, uint64(0))
			assert.Equal(t, srv.Service().Metrics().PutStartsTotal, uint64(5))
		})
	}
}

// TestPutGrantsMasterRestart: a master restarted on the same address knows
// none of the grants of the old one, and hands their space to others. A
// writer that did not hear of the restart (its heartbeat is an hour away)
// must not write into its old grants: it sees the old master's connection
// closed before it writes, and puts the PutStart way. Nobody's data is
// overwritten.
func TestPutGrantsMasterRestart(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	srv := startMaster(t, master.Config{})
	addr := srv.Addr()
	// An 8 MiB segment: grants of 1 MiB (an eighth).
	h := newClient(t, client.Config{MasterServerAddr: addr, GlobalSegmentSize: 8 << 20})
	a := newClient(t, client.Config{MasterServerAddr: addr, PingInterval: time.Hour})
	assert.NilError(t, a.Put(ctx, "a0", pattern(200_000, 1), client.ReplicateConfig{}))
	assert.Equal(t, a.Metrics().GrantPuts, uint64(1))
	assert.NilError(t, srv.Close())

	srv2 := startMaster(t, master.Config{RPCAddr: addr})
	waitFor(t, 15*time.Second, "holder to re-mount", func() bool { return len(srv2.Service().Segments()) == 1 })
	// Another writer fills the segment from its start, over a's old grant.
	b := newClient(t, client.Config{MasterServerAddr: addr, NoPutGrants: true})
	for i := range 7 {
		assert.NilError(t, b.Put(ctx, fmt.Sprint("b", i), pattern(1<<20, byte(10+i)), client.ReplicateConfig{}))
	}
	// a still holds its grant, renewed by its last commit well within the
	// lease.
	assert.NilError(t, a.Put(ctx, "a1", pattern(200_000, 2), client.ReplicateConfig{}))
	assert.Equal(t, a.Metrics().GrantPuts, uint64(1), "a wrote into a grant of the old master")
	for i := range 7 {
		got, err := h.Get(ctx, fmt.Sprint("b", i))
		assert.NilError(t, err)
		assert.Assert(t, bytes.Equal(got, pattern(1<<20, byte(10+i))), "b%d overwritten", i)
	}
	got, err := h.Get(ctx, "a1")
	assert.NilError(t, err)
	assert.Assert(t, bytes.Equal(got, pattern(200_000, 2)))
}

// TestPutGrantsWriterDies: the master expires a writer that holds grants
// and takes them back; after the grant lease their space is free again.
func TestPutGrantsWriterDies(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	srv := startMaster(t, master.Config{ClientTTL: time.Second, MaintenanceInterval: 20 * time.Millisecond})
	svc := srv.Service()
	h := newClient(t, client.Config{MasterServerAddr: srv.Addr(), GlobalSegmentSize: 16 << 20})
	w := newClient(t, client.Config{MasterServerAddr: srv.Addr()})
	assert.NilError(t, w.Put(ctx, "k", pattern(100_000, 3), client.ReplicateConfig{}))
	assert.Equal(t, w.Metrics().GrantPuts, uint64(1))
	assert.Equal(t, svc.Metrics().Grants, 1)
	stopHeartbeat(w)
	waitFor(t, 10*time.Second, "the writer's grant taken back", func() bool {
		m := svc.Metrics()
		return m.GrantsTakenBackTotal == 1 && m.Grants == 0
	})
	waitFor(t, 10*time.Second, "the fence to end", func() bool {
		m := svc.Metrics()
		return m.FencedBytes == 0 && m.UsedBytes == 100_032
	})
	got, err := h.Get(ctx, "k")
	assert.NilError(t, err)
	assert.Assert(t, bytes.Equal(got, pattern(100_000, 3)))
}

// TestPutGrantsHolderGone: the holder of a writer's grant goes away; the
// master takes the grant back, the writer hears it in its next heartbeat
// and puts into another holder.
func TestPutGrantsHolderGone(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	srv := startMaster(t, master.Config{})
	svc := srv.Service()
	h1 := newClient(t, client.Config{MasterServerAddr: srv.Addr(), GlobalSegmentSize: 16 << 20})
	w := newClient(t, client.Config{MasterServerAddr: srv.Addr()})
	assert.NilError(t, w.Put(ctx, "x", pattern(1000, 1), client.ReplicateConfig{}))
	h2 := newClient(t, client.Config{MasterServerAddr: srv.Addr(), GlobalSegmentSize: 16 << 20})
	assert.NilError(t, h1.Close())
	assert.Equal(t, svc.Metrics().GrantsTakenBackTotal, uint64(1))
	// The heartbeat (100 ms here) retires the grant; puts go on.
	for i := range 20 {
		assert.NilError(t, w.Put(ctx, fmt.Sprint("y", i), pattern(1000, byte(i)), client.ReplicateConfig{}))
		got, err := h2.Get(ctx, fmt.Sprint("y", i))
		assert.NilError(t, err)
		assert.Assert(t, bytes.Equal(got, pattern(1000, byte(i))))
	}
	_, err := w.Get(ctx, "x")
	assert.Equal(t, code(err), wire.ErrObjectNotFound)
}

// TestPutGrantLapsesWaitingForStaging: a put that placed its object in a
// grant but waits for a staging chunk past its write deadline (two thirds
// of the grant lease after the last confirmation; no heartbeat renews it
// here) must not write into the grant once a chunk frees up: by then the
// master may have taken the range back and handed it to someone else. It
// goes the PutStart way instead.
func TestPutGrantLapsesWaitingForStaging(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	srv := startMaster(t, master.Config{GrantLease: 300 * time.Millisecond})
	svc := srv.Service()
	h := newClient(t, client.Config{MasterServerAddr: srv.Addr(), GlobalSegmentSize: 16 << 20})
	w := newClient(t, client.Config{MasterServerAddr: srv.Addr(), PingInterval: time.Hour})
	release := client.HoldStagingForTest(w)
	released := false
	defer func() {
		if !released {
			release()
		}
	}()
	done := make(chan error, 1)
	go func() { done <- w.Put(ctx, "k", pattern(100_000, 5), client.ReplicateConfig{}) }()
	// The grant write waits for staging until its deadline (200 ms after
	// the grant was acquired), then gives up.
	waitFor(t, 5*time.Second, "the grant write to lapse", func() bool { return w.Metrics().GrantLapses == 1 })
	release()
	released = true
	select {
	case err := <-done:
		assert.NilError(t, err)
	case <-ctx.Done():
		t.Fatal("put did not finish")
	}
	m := w.Metrics()
	assert.Equal(t, m.GrantPuts, uint64(0), "%+v", m)
	assert.Equal(t, m.GrantFallbacks, uint64(1), "%+v", m)
	assert.Equal(t, svc.Metrics().PutStartsTotal, uint64(1))
	got, err := h.Get(ctx, "k")
	assert.NilError(t, err)
	assert.Assert(t, bytes.Equal(got, pattern(100_000, 5)))
}
