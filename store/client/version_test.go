package client_test

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/store/client"
	"github.com/kvferry/kvferry/store/master"
	"github.com/kvferry/kvferry/store/wire"
)

// TestVersionedPublish: publishes return growing versions, a publish over
// a stale version is a conflict, racing publishers get one winner, and a
// reader waits for a version. Plain puts and upserts are untouched.
func TestVersionedPublish(t *testing.T) {
	for _, grants := range []bool{true, false} {
		ctx := ctxT(t, 30*time.Second)
		srv := startMaster(t, master.Config{})
		holder := newClient(t, client.Config{MasterServerAddr: srv.Addr(), GlobalSegmentSize: 16 << 20})
		_ = holder
		pub := newClient(t, client.Config{MasterServerAddr: srv.Addr(), NoPutGrants: !grants})
		v1, err := pub.Publish(ctx, "k", pattern(1000, 1), 0, client.ReplicateConfig{})
		assert.NilError(t, err)
		assert.Assert(t, v1 > 0)
		_, err = pub.Publish(ctx, "k", pattern(1000, 2), 0, client.ReplicateConfig{})
		assert.Equal(t, code(err), wire.ErrInvalidVersion)
		v2, err := pub.Publish(ctx, "k", pattern(1000, 2), v1, client.ReplicateConfig{})
		assert.NilError(t, err)
		assert.Assert(t, v2 > v1)
		got, ver, err := pub.GetVersioned(ctx, "k", 0, 0)
		assert.NilError(t, err)
		assert.Equal(t, ver, v2)
		assert.Assert(t, bytes.Equal(got, pattern(1000, 2)))

		// Racing publishers over the same version: one wins.
		var wg sync.WaitGroup
		var mu sync.Mutex
		wins, conflicts := 0, 0
		var won uint64
		for i := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				v, err := pub.Publish(ctx, "k", pattern(1000, byte(10+i)), v2, client.ReplicateConfig{})
				mu.Lock()
				defer mu.Unlock()
				switch code(err) {
				case 0:
					wins++
					won = v
				case wire.ErrInvalidVersion:
					conflicts++
				default:
					t.Errorf("publisher %d: %v", i, err)
				}
			}()
		}
		wg.Wait()
		assert.Equal(t, wins, 1)
		assert.Equal(t, conflicts, 5)

		// A reader waits for the next version.
		type res struct {
			b   []byte
			ver uint64
			err error
		}
		ch := make(chan res, 1)
		go func() {
			b, v, err := pub.GetVersioned(ctx, "k", won+1, 10*time.Second)
			ch <- res{b, v, err}
		}()
		time.Sleep(50 * time.Millisecond)
		v4, err := pub.Publish(ctx, "k", pattern(1000, 99), client.AnyVersion, client.ReplicateConfig{})
		assert.NilError(t, err)
		r := <-ch
		assert.NilError(t, r.err)
		assert.Equal(t, r.ver, v4)
		assert.Assert(t, bytes.Equal(r.b, pattern(1000, 99)))
		_, _, err = pub.GetVersioned(ctx, "k", v4+1, 100*time.Millisecond)
		assert.Equal(t, code(err), wire.ErrInvalidVersion)
		_, _, err = pub.GetVersioned(ctx, "nope", 1, 50*time.Millisecond)
		assert.Equal(t, code(err), wire.ErrObjectNotFound)

		// Mooncake's calls are as they were: a put over an existing key
		// is a quiet no-op, an upsert overwrites (and bumps the version).
		assert.NilError(t, pub.Put(ctx, "k", pattern(1000, 5), client.ReplicateConfig{}))
		assert.NilError(t, pub.Upsert(ctx, "k", pattern(1000, 6), client.ReplicateConfig{}))
		got, ver, err = pub.GetVersioned(ctx, "k", 0, 0)
		assert.NilError(t, err)
		assert.Assert(t, ver > v4)
		assert.Assert(t, bytes.Equal(got, pattern(1000, 6)))
	}
}
