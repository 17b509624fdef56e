package client_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/store/client"
	"github.com/kvferry/kvferry/store/master"
	"github.com/kvferry/kvferry/store/wire"
)

// TestReplicaListByRegex: the master answers every key that matches, with
// where its replicas are; a bad pattern is INVALID_PARAMS.
func TestReplicaListByRegex(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	srv := startMaster(t, master.Config{})
	a := newClient(t, client.Config{MasterServerAddr: srv.Addr(), GlobalSegmentSize: 8 << 20})
	b := newClient(t, client.Config{MasterServerAddr: srv.Addr(), GlobalSegmentSize: 8 << 20})
	user := newClient(t, client.Config{MasterServerAddr: srv.Addr()})
	const n = 300
	want := map[string]string{} // key -> holder
	for i := range n {
		key, holder := fmt.Sprintf("req/%d/k", i), a
		if i%3 == 0 {
			key, holder = fmt.Sprintf("req/%d/v", i), b
		}
		want[key] = holder.Hostname()
		assert.NilError(t, user.Put(ctx, key, pattern(1000+i, byte(i)), client.ReplicateConfig{PreferredSegments: []string{holder.Hostname()}}))
	}
	assert.NilError(t, user.Put(ctx, "other", pattern(10, 1), client.ReplicateConfig{}))

	got, err := user.ReplicaListByRegex(ctx, `^req/\d+/k$`)
	assert.NilError(t, err)
	assert.Equal(t, len(got), n-n/3)
	for key, kr := range got {
		assert.Equal(t, want[key], a.Hostname(), key)
		assert.Equal(t, len(kr.Replicas), 1)
		assert.Equal(t, kr.Replicas[0].SegmentName, a.Hostname())
		assert.Equal(t, kr.Replicas[0].Status, "COMPLETE")
		var i int
		_, err := fmt.Sscanf(key, "req/%d/k", &i)
		assert.NilError(t, err)
		assert.Equal(t, kr.Size, uint64(1000+i))
	}
	got, err = user.ReplicaListByRegex(ctx, "/v") // unanchored
	assert.NilError(t, err)
	assert.Equal(t, len(got), n/3)
	got, err = user.ReplicaListByRegex(ctx, "^nothing")
	assert.NilError(t, err)
	assert.Equal(t, len(got), 0)
	_, err = user.ReplicaListByRegex(ctx, "req/(")
	assert.Equal(t, code(err), wire.ErrInvalidParams)
}

// TestBatchQueryIP: the hosts of the clients' segments; clients without
// a segment and unknown ids are not in the answer.
func TestBatchQueryIP(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	srv := startMaster(t, master.Config{})
	a := newClient(t, client.Config{MasterServerAddr: srv.Addr(), GlobalSegmentSize: 4 << 20})
	b := newClient(t, client.Config{MasterServerAddr: srv.Addr(), GlobalSegmentSize: 4 << 20, LocalHostname: "127.0.0.2"})
	user := newClient(t, client.Config{MasterServerAddr: srv.Addr()})
	got, err := user.BatchQueryIP(ctx, []string{a.ClientID(), b.ClientID(), user.ClientID(), "no-such-client"})
	assert.NilError(t, err)
	assert.DeepEqual(t, got, map[string][]string{a.ClientID(): {"127.0.0.1"}, b.ClientID(): {"127.0.0.2"}})
	got, err = user.BatchQueryIP(ctx, nil)
	assert.NilError(t, err)
	assert.Equal(t, len(got), 0)
}

// TestCalcCacheStats: the figures follow what was put and read.
func TestCalcCacheStats(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	srv := startMaster(t, master.Config{})
	newClient(t, client.Config{MasterServerAddr: srv.Addr(), GlobalSegmentSize: 4 << 20})
	user := newClient(t, client.Config{MasterServerAddr: srv.Addr(), NoSpeculativeGets: true})
	st, err := user.CalcCacheStats(ctx)
	assert.NilError(t, err)
	assert.DeepEqual(t, st, client.CacheStats{})
	for i := range 5 {
		assert.NilError(t, user.Put(ctx, fmt.Sprintf("k%d", i), pattern(4096, byte(i)), client.ReplicateConfig{}))
	}
	for range 2 {
		for i := range 3 {
			got, err := user.Get(ctx, fmt.Sprintf("k%d", i))
			assert.NilError(t, err)
			assert.Assert(t, bytes.Equal(got, pattern(4096, byte(i))))
		}
	}
	_, err = user.Get(ctx, "missing")
	assert.Equal(t, code(err), wire.ErrObjectNotFound)
	st, err = user.CalcCacheStats(ctx)
	assert.NilError(t, err)
	// 6 memory hits of 5 objects in memory; 6 of 7 reads found their
	// object. No disk tier: no SSD figures.
	assert.DeepEqual(t, st, client.CacheStats{MemoryHits: 6, MemoryTotal: 5, MemoryHitRate: 1.2, OverallHitRate: 1.2,
		ValidGetRate: 0.86})
}

// drainKeys puts n objects of varied sizes into holders (some with a
// replica on each of the first two) and returns their values.
func drainKeys(ctx context.Context, t *testing.T, user *client.Client, n int, holders ...*client.Client) map[string][]byte {
	t.Helper()
	vals := map[string][]byte{}
	for i := range n {
		key := fmt.Sprintf("obj-%03d", i)
		cfg := client.ReplicateConfig{PreferredSegments: []string{holders[i%len(holders)].Hostname()}}
		if i%5 == 0 {
			cfg = client.ReplicateConfig{ReplicaNum: 2, PreferredSegments: []string{holders[0].Hostname(), holders[1].Hostname()}}
		}
		vals[key] = pattern(64<<10+i*4093, byte(i))
		assert.NilError(t, user.Put(ctx, key, vals[key], cfg))
	}
	return vals
}

// waitJob polls a drain job until it ends and returns the statuses seen,
// in order, without repeats.
func waitJob(t *testing.T, c *client.Client, id string) (client.JobInfo, []string) {
	t.Helper()
	var info client.JobInfo
	var seen []string
	waitUntil(t, "drain job "+id, func() bool {
		var err error
		info, err = c.QueryDrainJob(context.Background(), id)
		assert.NilError(t, err)
		if len(seen) == 0 || seen[len(seen)-1] != info.Status {
			seen = append(seen, info.Status)
		}
		return info.Done()
	})
	return info, seen
}

// TestDrainJob drains two of three segments: every replica moves to the
// third, the objects read back with their bytes throughout and after, the
// job goes CREATED → ... → SUCCEEDED, the segments end DRAINED and take
// no new object, and bad requests get Mooncake's codes.
func TestDrainJob(t *testing.T) {
	ctx := ctxT(t, 120*time.Second)
	srv := startMaster(t, master.Config{MaintenanceInterval: 20 * time.Millisecond})
	a := newClient(t, client.Config{MasterServerAddr: srv.Addr(), GlobalSegmentSize: 4 << 20})
	b := newClient(t, client.Config{MasterServerAddr: srv.Addr(), GlobalSegmentSize: 4 << 20})
	c := newClient(t, client.Config{MasterServerAddr: srv.Addr(), GlobalSegmentSize: 16 << 20})
	user := newClient(t, client.Config{MasterServerAddr: srv.Addr()})
	vals := drainKeys(ctx, t, user, 40, a, b, c)
	keys := make([]string, 0, len(vals))
	for k := range vals {
		keys = append(keys, k)
	}
	slices.Sort(keys)

	// Bad requests.
	_, err := user.CreateDrainJob(ctx, client.DrainJobRequest{})
	assert.Equal(t, code(err), wire.ErrInvalidParams)
	_, err = user.CreateDrainJob(ctx, client.DrainJobRequest{Segments: []string{a.Hostname(), "no-such-segment"}})
	assert.Equal(t, code(err), wire.ErrSegmentNotFound)
	_, err = user.CreateDrainJob(ctx, client.DrainJobRequest{Segments: []string{a.Hostname()}, Targets: []string{a.Hostname()}})
	assert.Equal(t, code(err), wire.ErrInvalidParams)
	_, err = user.QueryDrainJob(ctx, "123e4567-e89b-42d3-a456-426614174000")
	assert.Equal(t, code(err), wire.ErrJobNotFound)
	_, err = user.QueryDrainJob(ctx, "")
	assert.Equal(t, code(err), wire.ErrInvalidParams)
	assert.Equal(t, code(user.CancelDrainJob(ctx, "123e4567-e89b-42d3-a456-426614174000")), wire.ErrJobNotFound)

	// Readers check every object's bytes while the job runs.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var readErr error
	var reads int
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			for _, k := range keys {
				select {
				case <-stop:
					return
				default:
				}
				got, err := getRetry(ctx, user, k)
				if err == nil && !bytes.Equal(got, vals[k]) {
					err = fmt.Errorf("%s: wrong bytes", k)
				}
				if err != nil {
					readErr = fmt.Errorf("read %s during the drain: %w", k, err)
					return
				}
				reads++
			}
		}
	}()

	id, err := user.CreateDrainJob(ctx, client.DrainJobRequest{Segments: []string{a.Hostname(), b.Hostname()}, MaxConcurrency: 3})
	assert.NilError(t, err)
	_, err = user.CreateDrainJob(ctx, client.DrainJobRequest{Segments: []string{b.Hostname()}})
	assert.Equal(t, code(err), wire.ErrUnavailableInStatus)
	info, seen := waitJob(t, user, id)
	close(stop)
	wg.Wait()
	assert.NilError(t, readErr)
	t.Logf("job %s: %v, %+v; %d reads during the drain", id, seen, info, reads)
	assert.Equal(t, info.Status, "SUCCEEDED", info.Message)
	assert.Equal(t, info.Type, "DRAIN")
	assert.DeepEqual(t, info.Segments, []string{a.Hostname(), b.Hostname()})
	order := map[string]int{"CREATED": 0, "PLANNING": 1, "RUNNING": 2, "SUCCEEDED": 3}
	for i := 1; i < len(seen); i++ {
		assert.Assert(t, order[seen[i-1]] < order[seen[i]], "statuses out of order: %v", seen)
	}
	assert.Equal(t, info.ActiveUnits, uint64(0))
	// Each object with a replica on a or b moved once; those with one on
	// each (every fifth) had the second dropped, as c held them by then.
	var moves, drops, bytesMoved uint64
	for i, k := range keys {
		switch {
		case i%5 == 0:
			moves++
			drops++
			bytesMoved += uint64(len(vals[k]))
		case i%3 != 2: // put on a or b
			moves++
			bytesMoved += uint64(len(vals[k]))
		}
	}
	assert.Equal(t, info.SucceededUnits, moves+drops)
	assert.Equal(t, info.DroppedUnits, drops)
	assert.Equal(t, info.MigratedBytes, bytesMoved)
	assert.Equal(t, info.FailedUnits, uint64(0))

	for _, name := range []string{a.Hostname(), b.Hostname()} {
		st, err := srv.Service().SegmentStatusOf(name)
		assert.NilError(t, err)
		assert.Equal(t, st, master.SegmentDrained, name)
	}
	// Every object now lives on c only, and reads back intact from each
	// client (c by memcpy from its own segment).
	for _, k := range keys {
		assert.DeepEqual(t, segmentsOf(t, user, k), map[string]bool{c.Hostname(): true})
		for _, r := range []*client.Client{user, a, c} {
			got, err := r.Get(ctx, k)
			assert.NilError(t, err, k)
			assert.Assert(t, bytes.Equal(got, vals[k]), "%s: wrong bytes", k)
		}
	}
	// Drained segments take nothing new; a and b leave without loss.
	assert.NilError(t, user.Put(ctx, "after", pattern(1000, 9), client.ReplicateConfig{PreferredSegments: []string{a.Hostname()}}))
	assert.DeepEqual(t, segmentsOf(t, user, "after"), map[string]bool{c.Hostname(): true})
	assert.Equal(t, code(user.CancelDrainJob(ctx, id)), wire.ErrUnavailableInStatus)
	assert.NilError(t, a.Close())
	assert.NilError(t, b.Close())
	for _, k := range keys {
		got, err := user.Get(ctx, k)
		assert.NilError(t, err, k)
		assert.Assert(t, bytes.Equal(got, vals[k]), "%s: wrong bytes", k)
	}
}

// TestDrainJobCancel: a job cancelled half way stops, its segment takes
// puts again, and every object reads back intact wherever it is.
func TestDrainJobCancel(t *testing.T) {
	ctx := ctxT(t, 120*time.Second)
	srv := startMaster(t, master.Config{MaintenanceInterval: 20 * time.Millisecond})
	a := newClient(t, client.Config{MasterServerAddr: srv.Addr(), GlobalSegmentSize: 8 << 20})
	newClient(t, client.Config{MasterServerAddr: srv.Addr(), GlobalSegmentSize: 8 << 20})
	user := newClient(t, client.Config{MasterServerAddr: srv.Addr()})
	vals := map[string][]byte{}
	for i := range 200 {
		key := fmt.Sprintf("c%03d", i)
		vals[key] = pattern(32<<10+i, byte(i))
		assert.NilError(t, user.Put(ctx, key, vals[key], client.ReplicateConfig{PreferredSegments: []string{a.Hostname()}}))
	}
	id, err := user.CreateDrainJob(ctx, client.DrainJobRequest{Segments: []string{a.Hostname()}, MaxConcurrency: 1})
	assert.NilError(t, err)
	waitUntil(t, "a first move", func() bool {
		info, err := user.QueryDrainJob(ctx, id)
		assert.NilError(t, err)
		return info.SucceededUnits > 0 || info.Done()
	})
	if err := user.CancelDrainJob(ctx, id); code(err) == wire.ErrUnavailableInStatus {
		// (The whole drain was done before the cancel came.)
		info, _ := waitJob(t, user, id)
		assert.Equal(t, info.Status, "SUCCEEDED", "%+v", info)
		t.Skip("the drain ended before it could be cancelled")
	} else {
		assert.NilError(t, err)
	}
	info, _ := waitJob(t, user, id)
	assert.Equal(t, info.Status, "CANCELED")
	waitUntil(t, "the move in flight", func() bool {
		info, err = user.QueryDrainJob(ctx, id)
		assert.NilError(t, err)
		return info.ActiveUnits == 0
	})
	st, err := srv.Service().SegmentStatusOf(a.Hostname())
	assert.NilError(t, err)
	assert.Equal(t, st, master.SegmentOK)
	onA, onB := 0, 0
	for k, v := range vals {
		got, err := user.Get(ctx, k)
		assert.NilError(t, err, k)
		assert.Assert(t, bytes.Equal(got, v), "%s: wrong bytes", k)
		segs := segmentsOf(t, user, k)
		assert.Equal(t, len(segs), 1, "%s: %v", k, segs)
		if segs[a.Hostname()] {
			onA++
		} else {
			onB++
		}
	}
	t.Logf("cancelled after %d moves: %d objects on a, %d on b", info.SucceededUnits, onA, onB)
	assert.Equal(t, uint64(onB), info.SucceededUnits)
	assert.NilError(t, user.Put(ctx, "after", pattern(100, 1), client.ReplicateConfig{PreferredSegments: []string{a.Hostname()}}))
	assert.DeepEqual(t, segmentsOf(t, user, "after"), map[string]bool{a.Hostname(): true})
}
