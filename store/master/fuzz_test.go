package master

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kvferry/kvferry/store/wire"
)

// checkInvariants verifies the bookkeeping of s: byte counts, free lists,
// indexes, and that no two live allocations overlap.
func checkInvariants(t *testing.T, s *Service) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.verifyLocked(); err != nil {
		t.Fatal(err)
	}
	var capacity, used uint64
	for _, seg := range s.mu.order {
		capacity += seg.info.Size
		used += seg.alloc.used
		var free uint64
		for i, e := range seg.alloc.free {
			if e.len == 0 || e.off+e.len > seg.info.Size {
				t.Fatalf("segment %s: bad free extent %+v", seg.info.ID, e)
			}
			if i > 0 && seg.alloc.free[i-1].off+seg.alloc.free[i-1].len >= e.off {
				t.Fatalf("segment %s: free extents unsorted, overlapping or adjacent: %+v", seg.info.ID, seg.alloc.free)
			}
			free += e.len
		}
		if free+seg.alloc.used != seg.info.Size {
			t.Fatalf("segment %s: free %d + used %d != size %d", seg.info.ID, free, seg.alloc.used, seg.info.Size)
		}
		var live uint64
		spans := map[uint64]uint64{}
		for r := range seg.replicas {
			if r.seg != seg {
				t.Fatalf("replica on the wrong segment")
			}
			live += alignedLen(r.size)
			spans[r.off] = alignedLen(r.size)
		}
		for g := range seg.grants {
			live += g.freeBytes()
		}
		for _, f := range s.mu.fences {
			if f.seg == seg {
				live += f.n
			}
		}
		if live != seg.alloc.used {
			t.Fatalf("segment %s: replicas, grants and fences hold %d bytes, allocator says %d", seg.info.ID, live, seg.alloc.used)
		}
		for off, n := range spans {
			for off2, n2 := range spans {
				if off != off2 && off < off2+n2 && off2 < off+n {
					t.Fatalf("segment %s: replicas overlap at %#x and %#x", seg.info.ID, off, off2)
				}
			}
		}
	}
	if capacity != s.mu.capacity || used != s.mu.used {
		t.Fatalf("capacity %d/%d used %d/%d", capacity, s.mu.capacity, used, s.mu.used)
	}
	for k, o := range s.mu.objects {
		if o.id != k || len(o.replicas)+len(o.pending) == 0 { // pending: restored, awaiting its holder
			t.Fatalf("object %v: key %v, %d replicas", k, o.id, len(o.replicas))
		}
		if _, proc := s.mu.processing[k]; proc == o.complete {
			t.Fatalf("object %q: complete=%v but processing index says otherwise", k, o.complete)
		}
		if o.inLRU != (o.complete && len(o.replicas) > 0) { // restored ones join once a holder is back
			t.Fatalf("object %q: complete=%v inLRU=%v", k, o.complete, o.inLRU)
		}
		for _, r := range o.replicas {
			if r.obj != o || r.seg.unmounted {
				t.Fatalf("object %q: replica not linked or on an unmounted segment", k)
			}
			if _, ok := r.seg.replicas[r]; !ok {
				t.Fatalf("object %q: replica missing from its segment", k)
			}
		}
	}
	n := 0
	for o := s.mu.lru.head; o != nil; o = o.next {
		if s.mu.objects[o.id] != o {
			t.Fatalf("lru holds a dropped object %v", o.id)
		}
		n++
	}
	for _, o := range s.mu.objects {
		if o.complete && len(o.replicas) > 0 {
			n--
		}
	}
	if n != 0 {
		t.Fatalf("lru length differs from complete objects by %d", n)
	}
}

// FuzzService drives the state machine with random operations and checks
// its invariants after each one.
func FuzzService(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13})
	f.Add([]byte("put a lot of things and then evict them all, remove, tick, expire"))
	f.Add([]byte{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 9, 9, 9, 12, 12, 12, 3, 3, 3})
	f.Add([]byte{0, 0, 0, 1, 14, 0, 15, 3, 15, 6, 16, 0, 14, 1, 8, 0, 15, 3, 9, 7, 9, 7, 13, 0, 14, 3})
	// Drain jobs: mounts, puts, a job, tasks done and failed, ticks, a
	// cancel, an unmount mid-drain.
	f.Add([]byte{0, 0, 0, 1, 0, 2, 1, 0, 3, 0, 1, 1, 3, 1, 1, 5, 3, 5, 17, 0, 9, 0, 18, 0, 18, 3, 9, 1, 18, 1,
		17, 1, 9, 0, 18, 4, 8, 1, 9, 2, 19, 0, 17, 2, 9, 0, 18, 2, 9, 7})
	// Replica clears: puts with two replicas, a read lease, clears whole
	// and per segment, ticks past the lease.
	f.Add([]byte{0, 0, 0, 1, 0, 2, 1, 0, 1, 3, 3, 0, 20, 1, 20, 0, 9, 7, 20, 3, 20, 0, 1, 1, 20, 5, 20, 2})
	f.Fuzz(func(t *testing.T, ops []byte) {
		clock := newFakeClock()
		s, err := NewService(Config{Clock: clock, Seed: 3, DefaultKVLeaseTTL: 2 * time.Second,
			ClientTTL: 5 * time.Second, PutStartDiscardTimeout: 3 * time.Second, PutStartReleaseTimeout: 6 * time.Second}, 1)
		if err != nil {
			t.Fatal(err)
		}
		clients := []string{"c0", "c1", "c2"}
		var jobs []string
		for i := 0; i+1 < len(ops); i += 2 {
			op, arg := ops[i]%21, int(ops[i+1])
			c := clients[arg%len(clients)]
			key := fmt.Sprintf("k%d", arg%17)
			tenant := []string{"", "t1", wire.DefaultTenant}[arg/17%3] // "" and "default" are one
			switch op {
			case 0:
				_ = s.MountSegment(c, SegmentInfo{ID: fmt.Sprintf("s%d", arg%6), Name: c, Base: uint64(arg%6+1) << 32,
					Size: uint64(arg%4+1) * 4096})
			case 1, 2:
				_, _ = s.PutStart(c, tenant, key, uint64(arg*37%5000+1), ReplicateConfig{ReplicaNum: arg%3 + 1,
					HardPin: arg%11 == 0, SoftPin: wire.SoftPinAction(arg % 2), GroupIDs: fuzzGroup(arg)}, false)
			case 3:
				_ = s.PutEnd(c, tenant, key)
			case 4:
				_ = s.PutRevoke(c, tenant, key)
			case 5:
				_, _ = s.GetReplicaList(tenant, key)
			case 6:
				_ = s.Remove(tenant, key, arg%2 == 0)
			case 7:
				_, _ = s.RemoveByRegex(tenant, fmt.Sprintf("^k%d", arg%3), arg%2 == 0)
			case 8:
				_ = s.UnmountSegment(c, fmt.Sprintf("s%d", arg%6))
			case 9:
				clock.Advance(time.Duration(arg%8) * time.Second)
				s.Tick()
			case 10:
				_, _ = s.Ping(c)
			case 11:
				_, _ = s.PutStart(c, tenant, key, uint64(arg*53%3000+1), ReplicateConfig{GroupIDs: fuzzGroup(arg / 3)}, true)
			case 12:
				_, _ = s.RemoveAll(tenant, arg%2 == 0)
			case 13:
				_ = s.ReMountSegments(c, []SegmentInfo{{ID: fmt.Sprintf("s%d", arg%6), Name: c,
					Base: uint64(arg%6+1) << 32, Size: 8192}})
			case 14:
				_, _, _ = s.AcquireGrants(c, arg%3+1, uint64(arg*41%3000+1), nil, []uint64{uint64(arg % 5)})
			case 15:
				commitSomewhere(s, c, tenant, key, arg)
			case 16:
				s.mu.Lock()
				var ids []uint64
				if cs, ok := s.mu.clients[c]; ok {
					for id := range cs.grants {
						if int(id)%2 == arg%2 {
							ids = append(ids, id)
						}
					}
				}
				s.mu.Unlock()
				s.ReturnGrants(c, append(ids, uint64(arg)))
			case 17:
				req := DrainJobRequest{Segments: []string{c}, MaxConcurrency: arg % 3}
				if arg%4 == 1 {
					req.Segments = append(req.Segments, clients[(arg+1)%len(clients)])
				}
				if arg%5 == 2 {
					req.Targets = []string{clients[(arg+2)%len(clients)]}
				}
				if id, err := s.CreateDrainJob(req); err == nil {
					jobs = append(jobs, id)
				}
			case 18:
				// c reports the tasks it was handed: all done, or every
				// other one failed.
				s.mu.Lock()
				var done []TaskResult
				if cs, ok := s.mu.clients[c]; ok {
					for i, tk := range cs.tasks {
						if tk.sent {
							r := TaskResult{ID: tk.id, FileBytes: diskFileBytes(tk.size)}
							if arg%2 == 1 && i%2 == 0 {
								r.Err = wire.ErrTransferFail
							}
							done = append(done, r)
						}
					}
				}
				s.mu.Unlock()
				_, _ = s.FetchTasks(context.Background(), c, done, 0, 0)
			case 19:
				if len(jobs) > 0 {
					_ = s.CancelDrainJob(jobs[arg%len(jobs)])
					_, _ = s.QueryDrainJob(jobs[arg%len(jobs)])
				}
			case 20:
				// c clears what it wrote: whole, or one holder's replicas.
				seg := ""
				if arg%2 == 1 {
					seg = clients[arg/2%len(clients)]
				}
				_, _ = s.BatchReplicaClear(c, tenant, []string{key, fmt.Sprintf("k%d", (arg+1)%17)}, seg)
			}
			checkInvariants(t, s)
		}
	})
}

// TestInvariantsAfterScenarios runs the invariant check over the state the
// datadriven files leave behind.
func TestInvariantsAfterScenarios(t *testing.T) {
	clock := newFakeClock()
	s, err := NewService(Config{Clock: clock, Seed: 9}, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if err := s.MountSegment(fmt.Sprint("c", i), SegmentInfo{ID: fmt.Sprint("s", i), Name: fmt.Sprint("n", i),
			Base: uint64(i+1) << 30, Size: 1 << 20}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3000 {
		key := fmt.Sprint("k", i%700)
		_, _ = s.PutStart("c0", "", key, uint64(i%9000+1), ReplicateConfig{ReplicaNum: i%3 + 1}, i%5 == 0)
		if i%3 != 0 {
			_ = s.PutEnd("c0", "", key)
		}
		if i%7 == 0 {
			_, _ = s.GetReplicaList("", fmt.Sprint("k", (i*13)%700))
		}
		if i%100 == 0 {
			clock.Advance(time.Second)
			s.Tick()
		}
	}
	checkInvariants(t, s)
	clock.Advance(20 * time.Minute)
	s.Tick()
	checkInvariants(t, s)
}

// commitSomewhere commits key of tenant from client c at the start of a free part of
// one of c's grants (or, for some arg, at an address no grant holds).
func commitSomewhere(s *Service, c, tenant, key string, arg int) {
	s.mu.Lock()
	var reps []GrantedReplica
	var size uint64
	if cs, ok := s.mu.clients[c]; ok {
		for _, g := range sortedGrantsByID(cs.grants) {
			if len(g.free) == 0 || len(reps) == arg%2+1 {
				continue
			}
			e := g.free[arg%len(g.free)]
			if size == 0 {
				size = uint64(arg*29)%e.len + 1
			}
			if alignedLen(size) <= e.len {
				reps = append(reps, GrantedReplica{GrantID: g.id, Addr: g.seg.info.Base + e.off})
			}
		}
	}
	s.mu.Unlock()
	if arg%13 == 0 {
		reps = append(reps, GrantedReplica{GrantID: uint64(arg), Addr: uint64(arg) << 20})
	}
	_, _ = s.PutCommit(c, tenant, key, max(size, 1), ReplicateConfig{ReplicaNum: arg%2 + 1, GroupIDs: fuzzGroup(arg / 7)},
		arg%5 == 0, reps)
}

// fuzzGroup picks no group list, an ungrouped one, one of two groups, or a
// list of the wrong length.
func fuzzGroup(arg int) []string {
	switch arg % 6 {
	case 0:
		return []string{""}
	case 1, 2:
		return []string{"g" + string(rune('0'+arg%2))}
	case 3:
		return []string{"g0", "g1"}
	}
	return nil
}
