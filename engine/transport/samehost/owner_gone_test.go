package samehost_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/stack"
)

// fdsLike counts this process's open fds whose link target contains what.
func fdsLike(t *testing.T, what string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	assert.NilError(t, err)
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && strings.Contains(l, what) {
			n++
		}
	}
	return n
}

// mapsLike counts this process's mappings whose name contains what.
func mapsLike(t *testing.T, what string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	assert.NilError(t, err)
	return strings.Count(string(b), what)
}

// TestOwnerGoneLeavesNothing is tests/soak's finding: every peer on this
// host that went away (a restarted peer comes back with a new socket) left
// its session in the initiator, with the session's pidfd and mappings,
// until the engine closed: a survivor of peer restarts gained fds and
// goroutines with each. After the owner's death the session's resources go.
func TestOwnerGoneLeavesNothing(t *testing.T) {
	for _, tr := range []string{"cma", "shm"} {
		t.Run(tr, func(t *testing.T) {
			e, err := stack.New(context.Background(), stack.Config{AutoDiscover: true,
				Engine: engine.Config{LocalServerName: "127.0.0.1", TransferTimeout: 5 * time.Second, ForceTransport: tr}})
			assert.NilError(t, err)
			defer e.Close()
			src := newBuf(t, e, 1<<20)
			ctx := context.Background()
			basePidfds, baseMaps := fdsLike(t, "pidfd"), mapsLike(t, "memfd:kvferry")
			for i := range 3 {
				c := startChild(t, childOpts{role: "owner", bufBytes: 4 << 20})
				seg, err := e.OpenSegment(ctx, c.ready[0])
				assert.NilError(t, err)
				assert.Equal(t, e.ChooseTransport(seg), tr)
				req := engine.Request{Op: engine.OpWrite, Source: src.Addr(), Target: seg, TargetOffset: atou(c.ready[1]), Length: 1 << 20}
				assert.NilError(t, e.Transfer(ctx, []engine.Request{req}), "owner %d", i)
				c.kill()
				assert.NilError(t, e.CloseSegment(seg))
			}
			// The readers see the owners' sockets close: bounded, not timed.
			end := time.Now().Add(30 * time.Second)
			for {
				p, m := fdsLike(t, "pidfd"), mapsLike(t, "memfd:kvferry")
				if p <= basePidfds && m <= baseMaps {
					break
				}
				assert.Assert(t, time.Now().Before(end), "after 3 dead owners: %d pidfds (%d before), %d shared mappings (%d before)", p, basePidfds, m, baseMaps)
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}
