package engine

import (
	"sort"
	"sync"
)

// regIndex is an immutable set of non-overlapping regions sorted by
// address, kept in chunks of at most maxChunk regions. An update copies the
// chunk it touches and the chunk list (O(chunk + n/chunk), about 10 µs at a
// million regions), never the whole set, so single registrations stay
// cheap however many exist; lookups are two binary searches on a snapshot
// readers load without a lock.
type regIndex struct {
	chunks []*chunk // each non-empty and sorted; chunk i ends before chunk i+1 starts
	n      int      // regions
	bytes  uint64   // their total length
	ver    uint64   // grows with every update

	flatOnce sync.Once
	flat     []*Region // every region in order, made on first use
}

// chunk is a run of regions in address order; immutable once in an index.
type chunk struct {
	first uint64 // rs[0].Addr
	rs    []*Region
}

func newChunk(rs []*Region) *chunk { return &chunk{first: uint64(rs[0].Addr), rs: rs} }

const (
	// maxChunk is the most regions a chunk holds; a fuller one splits.
	maxChunk = 512
	// minChunk: a chunk that shrinks below it merges with a neighbor
	// when both fit in one.
	minChunk = 64
)

// emptyIndex is the index of no regions.
var emptyIndex = &regIndex{}

// chunkFor returns the index of the chunk whose range would hold addr: the
// last chunk starting at or before addr (0 when addr precedes them all).
func (x *regIndex) chunkFor(addr uint64) int {
	i := sort.Search(len(x.chunks), func(i int) bool { return x.chunks[i].first > addr }) - 1
	return max(i, 0)
}

// find returns the region containing [addr, addr+n), or nil.
func (x *regIndex) find(addr, n uint64) *Region {
	if len(x.chunks) == 0 {
		return nil
	}
	c := x.chunks[x.chunkFor(addr)].rs
	i := sort.Search(len(c), func(i int) bool { return uint64(c[i].Addr) > addr }) - 1
	if i < 0 || !c[i].contains(addr, n) {
		return nil
	}
	return c[i]
}

// at returns the region starting exactly at addr, or nil.
func (x *regIndex) at(addr uintptr) *Region {
	r := x.find(uint64(addr), 1)
	if r == nil || r.Addr != addr {
		return nil
	}
	return r
}

// regions returns every region in order. The slice is shared: callers must
// not change it.
func (x *regIndex) regions() []*Region {
	x.flatOnce.Do(func() {
		if x.n == 0 {
			return
		}
		x.flat = make([]*Region, 0, x.n)
		for _, c := range x.chunks {
			x.flat = append(x.flat, c.rs...)
		}
	})
	return x.flat
}

// overlaps returns a region of x that overlaps [r.Addr, r.end()), or nil.
func (x *regIndex) overlaps(r *Region) *Region {
	if len(x.chunks) == 0 {
		return nil
	}
	ci := x.chunkFor(uint64(r.Addr))
	c := x.chunks[ci].rs
	i := sort.Search(len(c), func(i int) bool { return c[i].Addr >= r.Addr })
	// The previous region may reach into r; the next may start inside it.
	var prev, next *Region
	switch {
	case i > 0:
		prev = c[i-1]
	case ci > 0:
		p := x.chunks[ci-1].rs
		prev = p[len(p)-1]
	}
	switch {
	case i < len(c):
		next = c[i]
	case ci+1 < len(x.chunks):
		next = x.chunks[ci+1].rs[0]
	}
	if prev != nil && prev.end() > uint64(r.Addr) {
		return prev
	}
	if next != nil && uint64(next.Addr) < r.end() {
		return next
	}
	return nil
}

// with returns a copy of x with r added; r must not overlap x's regions.
func (x *regIndex) with(r *Region) *regIndex {
	y := &regIndex{n: x.n + 1, bytes: x.bytes + r.Length, ver: x.ver + 1}
	if len(x.chunks) == 0 {
		y.chunks = []*chunk{newChunk([]*Region{r})}
		return y
	}
	ci := x.chunkFor(uint64(r.Addr))
	old := x.chunks[ci].rs
	i := sort.Search(len(old), func(i int) bool { return old[i].Addr > r.Addr })
	c := make([]*Region, 0, len(old)+1)
	c = append(c, old[:i]...)
	c = append(c, r)
	c = append(c, old[i:]...)
	if len(c) <= maxChunk {
		y.chunks = replaceChunks(x.chunks, ci, 1, newChunk(c))
		return y
	}
	half := len(c) / 2
	y.chunks = replaceChunks(x.chunks, ci, 1, newChunk(c[:half:half]), newChunk(c[half:]))
	return y
}

// without returns a copy of x without r (which x holds).
func (x *regIndex) without(r *Region) *regIndex {
	ci := x.chunkFor(uint64(r.Addr))
	old := x.chunks[ci].rs
	i := sort.Search(len(old), func(i int) bool { return old[i].Addr >= r.Addr })
	y := &regIndex{n: x.n - 1, bytes: x.bytes - r.Length, ver: x.ver + 1}
	c := make([]*Region, 0, len(old)-1)
	c = append(c, old[:i]...)
	c = append(c, old[i+1:]...)
	switch {
	case len(c) == 0:
		y.chunks = replaceChunks(x.chunks, ci, 1)
	case len(c) < minChunk && ci+1 < len(x.chunks) && len(c)+len(x.chunks[ci+1].rs) <= maxChunk:
		y.chunks = replaceChunks(x.chunks, ci, 2, newChunk(append(c, x.chunks[ci+1].rs...)))
	case len(c) < minChunk && ci > 0 && len(c)+len(x.chunks[ci-1].rs) <= maxChunk:
		prev := x.chunks[ci-1].rs
		merged := append(append(make([]*Region, 0, len(c)+len(prev)), prev...), c...)
		y.chunks = replaceChunks(x.chunks, ci-1, 2, newChunk(merged))
	default:
		y.chunks = replaceChunks(x.chunks, ci, 1, newChunk(c))
	}
	return y
}

// replaceChunks returns a copy of chunks with the drop chunks at i replaced
// by add.
func replaceChunks(chunks []*chunk, i, drop int, add ...*chunk) []*chunk {
	out := make([]*chunk, 0, len(chunks)-drop+len(add))
	out = append(out, chunks[:i]...)
	out = append(out, add...)
	return append(out, chunks[i+drop:]...)
}
