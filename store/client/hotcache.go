package client

import (
	"hash/maphash"
	"sync"

	"github.com/kvferry/kvferry/internal/cmem"
)

// The local hot cache (specs/mooncake.md §7.7; off unless
// Config.HotCacheBytes > 0, MC_STORE_LOCAL_HOT_CACHE_SIZE): a bounded
// cache, in this client's own memory (C heap, never the Go heap), of
// objects it read from other clients' segments. A read still asks the
// master for the object (one round trip, as every read does: that is
// what keeps the cache correct), and when the master names the same
// incarnation of the key (its uid) as the cached copy, the bytes are
// copied from the cache instead of crossing the network. A remove and a
// new put of the key, or an upsert, give it a new uid, so a stale copy is
// never served; this client's own puts and removes drop their keys at
// once. Admission: a key is cached on its admission-th remote read within
// a count-min sketch's window (MC_STORE_LOCAL_HOT_ADMISSION_THRESHOLD,
// default 2), so one-off reads do not churn the cache. Least recently used
// entries go first.

// DefaultHotCacheAdmission is the read count that admits a key.
const DefaultHotCacheAdmission = 2

// sketchWidth and sketchDepth size the admission count-min sketch; its
// counters are halved every sketchWidth admissions checks (aging).
const (
	sketchWidth = 4096
	sketchDepth = 4
)

type hotEntry struct {
	key        string
	uid        uint64
	addr       uintptr // C heap
	size       uint64
	prev, next *hotEntry
}

// hotCache is the cache; nil when off. Safe for concurrent use.
type hotCache struct {
	capacity  uint64
	admission uint8

	mu         sync.Mutex
	entries    map[string]*hotEntry
	head, tail *hotEntry // head: least recently used
	used       uint64
	sketch     [sketchDepth][sketchWidth]uint8
	seeds      [sketchDepth]maphash.Seed
	checks     int
	hits       uint64
	misses     uint64
}

func newHotCache(capacity uint64, admission int) *hotCache {
	if capacity == 0 {
		return nil
	}
	if admission <= 0 {
		admission = DefaultHotCacheAdmission
	}
	h := &hotCache{capacity: capacity, admission: uint8(min(admission, 255)), entries: make(map[string]*hotEntry)}
	for i := range h.seeds {
		h.seeds[i] = maphash.MakeSeed()
	}
	return h
}

// read copies the cached bytes of (key, uid) into d and reports whether it
// could; a cached copy of another uid is dropped.
func (h *hotCache) read(key string, uid, size uint64, d span) bool {
	if h == nil || uid == 0 {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.entries[key]
	if !ok {
		h.misses++
		return false
	}
	if e.uid != uid || e.size != size {
		h.dropLocked(e)
		h.misses++
		return false
	}
	h.touchLocked(e)
	if d.copyFrom(0, e.addr, size) != nil { // under the lock: the entry cannot be freed meanwhile
		h.misses++
		return false
	}
	h.hits++
	return true
}

// offer notes a remote read of (key, uid) that landed in d; once the key
// was read often enough it is cached.
func (h *hotCache) offer(key string, uid, size uint64, d span) {
	if h == nil || uid == 0 || size == 0 || size > h.capacity/4 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.countLocked(key) < h.admission {
		return
	}
	if e, ok := h.entries[key]; ok {
		h.dropLocked(e)
	}
	for h.used+size > h.capacity && h.head != nil {
		h.dropLocked(h.head)
	}
	addr, err := cmem.Malloc(size)
	if err != nil {
		return
	}
	if d.copyTo(addr, 0, size) != nil {
		cmem.Free(addr)
		return
	}
	e := &hotEntry{key: key, uid: uid, addr: addr, size: size}
	h.entries[key] = e
	h.used += size
	h.touchLocked(e)
}

// holds reports whether the cache has key's incarnation uid.
func (h *hotCache) holds(key string, uid uint64) bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.entries[key]
	return ok && e.uid == uid
}

// invalidate drops key (this client put, upserted or removed it).
func (h *hotCache) invalidate(key string) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if e, ok := h.entries[key]; ok {
		h.dropLocked(e)
	}
}

// clear drops everything (a removal by pattern, Close).
func (h *hotCache) clear() {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for h.head != nil {
		h.dropLocked(h.head)
	}
}

// countLocked adds one to key's count and returns the estimate.
func (h *hotCache) countLocked(key string) uint8 {
	h.checks++
	if h.checks >= sketchWidth {
		h.checks = 0
		for i := range h.sketch {
			for j := range h.sketch[i] {
				h.sketch[i][j] >>= 1
			}
		}
	}
	est := uint8(255)
	for i := range h.sketch {
		c := &h.sketch[i][maphash.String(h.seeds[i], key)%sketchWidth]
		if *c < 255 {
			*c++
		}
		est = min(est, *c)
	}
	return est
}

func (h *hotCache) touchLocked(e *hotEntry) {
	if h.tail == e {
		return
	}
	h.unlinkLocked(e)
	e.prev, e.next = h.tail, nil
	if h.tail != nil {
		h.tail.next = e
	} else {
		h.head = e
	}
	h.tail = e
}

func (h *hotCache) unlinkLocked(e *hotEntry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else if h.head == e {
		h.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else if h.tail == e {
		h.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

func (h *hotCache) dropLocked(e *hotEntry) {
	h.unlinkLocked(e)
	delete(h.entries, e.key)
	h.used -= e.size
	cmem.Free(e.addr)
}

// HotCacheStats reports the hot cache (zero when it is off).
type HotCacheStats struct {
	Entries      int
	Bytes        uint64
	Hits, Misses uint64
}

// HotCache returns the hot cache's counters.
func (c *Client) HotCache() HotCacheStats {
	h := c.hot
	if h == nil {
		return HotCacheStats{}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return HotCacheStats{Entries: len(h.entries), Bytes: h.used, Hits: h.hits, Misses: h.misses}
}
