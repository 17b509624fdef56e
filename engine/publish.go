package engine

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvferry/kvferry/engine/descriptor"
)

// Descriptor publication. A registration changes the registry (O(chunk),
// regindex.go) and marks the descriptor dirty; it does not rebuild or
// publish it. The descriptor is rebuilt when someone needs it: a peer's
// Metadata request (P2P handshake) gets the current one, so a peer that
// opens the segment, or refreshes it on a miss, right after a registration
// sees the new buffer; and a publisher goroutine publishes to the metadata
// backend at most PublishDelay after the first unpublished change (or three
// times the last publication's duration, when that is longer, so that
// publishing takes at most a quarter of a core however large the
// descriptor grows). N registrations in a row therefore cost O(N) plus a
// bounded number of O(N) publications per unit of time, not O(N²).

// DefaultPublishDelay bounds how long a change waits for its publication.
const DefaultPublishDelay = 2 * time.Millisecond

// publishRetry is the pause after a failed background publication.
const publishRetry = time.Second

// descCache is the descriptor built for one registry version and
// descriptor generation.
type descCache struct {
	regVer, gen uint64
	seg         *descriptor.Segment
	jsonOnce    sync.Once
	json        []byte
	jsonErr     error
}

// publishing is the engine's publication state.
type publishing struct {
	mu      sync.Mutex // serializes builds
	netMu   sync.Mutex // serializes publications (held across the network call, mu is not)
	gen     atomic.Uint64
	cache   atomic.Pointer[descCache]
	dirty   atomic.Bool
	kick    chan struct{} // capacity 1
	stop    chan struct{} // closed by Close
	done    chan struct{} // closed when the publisher ended
	lastDur atomic.Int64  // duration of the last publication, ns
}

// current returns the descriptor of the current registry and transports,
// building it when something changed since the last build.
func (e *Engine) current() *descCache {
	ver := e.reg.index().ver
	gen := e.pub.gen.Load()
	if c := e.pub.cache.Load(); c != nil && c.regVer == ver && c.gen == gen {
		return c
	}
	e.pub.mu.Lock()
	defer e.pub.mu.Unlock()
	return e.rebuildLocked()
}

// rebuildLocked builds the descriptor unless the cache is current; pub.mu
// held.
func (e *Engine) rebuildLocked() *descCache {
	ver := e.reg.index().ver
	gen := e.pub.gen.Load()
	if c := e.pub.cache.Load(); c != nil && c.regVer == ver && c.gen == gen {
		return c
	}
	c := &descCache{regVer: ver, gen: gen, seg: e.buildDescriptor()}
	e.pub.cache.Store(c)
	e.segments.RLock()
	e.segments.byID[0].setDescriptor(c.seg)
	e.segments.RUnlock()
	return c
}

// marshaled returns the JSON of c's descriptor, encoded once.
func (c *descCache) marshaled() ([]byte, error) {
	c.jsonOnce.Do(func() { c.json, c.jsonErr = descriptor.Marshal(c.seg) })
	return c.json, c.jsonErr
}

// changed marks the descriptor dirty and wakes the publisher.
func (e *Engine) changed() {
	if e.closed.Load() {
		return
	}
	if !e.pub.dirty.Swap(true) {
		select {
		case e.pub.kick <- struct{}{}:
		default:
		}
	}
}

// publish rebuilds the descriptor now (transports' Describe included) and
// publishes it.
func (e *Engine) publish(ctx context.Context) error {
	e.pub.gen.Add(1) // what the transports describe may have changed
	return e.publishNow(ctx)
}

// publishNow publishes the current descriptor. Publications are serialized
// (netMu), so a newer descriptor is never overwritten by an older one; the
// build lock is not held across the network call, so a peer's Metadata
// request is not held up by a slow metadata service.
func (e *Engine) publishNow(ctx context.Context) error {
	e.pub.netMu.Lock()
	defer e.pub.netMu.Unlock()
	start := time.Now()
	e.pub.dirty.Store(false)
	e.pub.mu.Lock()
	seg := e.rebuildLocked().seg
	e.pub.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, e.cfg.MetadataTimeout)
	defer cancel()
	err := e.meta.Publish(ctx, seg, descriptor.RPCMeta{IPOrHostName: e.host, RPCPort: e.rpcPort})
	e.pub.lastDur.Store(int64(time.Since(start)))
	if err != nil {
		return fmt.Errorf("publish segment %q: %w: %w", e.name, ErrMetadata, err)
	}
	return nil
}

// runPublisher publishes changes in the background (see the top of this
// file); owned by the engine, stopped by Close through pub.stop.
func (e *Engine) runPublisher() {
	defer close(e.pub.done)
	for {
		select {
		case <-e.pub.stop:
			return
		case <-e.pub.kick:
		}
		delay := max(e.cfg.PublishDelay, 3*time.Duration(e.pub.lastDur.Load()))
		t := time.NewTimer(delay)
		select {
		case <-e.pub.stop:
			t.Stop()
			return
		case <-t.C:
		}
		if !e.pub.dirty.Load() {
			continue // published meanwhile (Publish, InstallTransport)
		}
		err := e.publishNow(e.ctx)
		if err == nil {
			continue
		}
		e.log.Warn("descriptor publication failed; retrying", "segment", e.name, "in", publishRetry, "err", err)
		e.pub.dirty.Store(true)
		t = time.NewTimer(publishRetry)
		select {
		case <-e.pub.stop:
			t.Stop()
			return
		case <-t.C:
		}
		select {
		case e.pub.kick <- struct{}{}:
		default:
		}
	}
}

// stopPublisher ends the publisher and waits for it.
func (e *Engine) stopPublisher() {
	close(e.pub.stop)
	<-e.pub.done
}
