package master

import (
	"math"
	"slices"
	"sort"
)

// allocAlign is the granularity of allocations inside a segment: every
// replica starts on a 64-byte boundary relative to the segment base.
const allocAlign = 64

// extent is a free range [off, off+len) relative to a segment base.
type extent struct {
	off, len uint64
}

// rangeAllocator hands out ranges inside one segment. It keeps the free
// ranges sorted by offset, coalesces on free and allocates first-fit, so the
// layout is deterministic. Not safe for concurrent use (the Service lock
// guards it).
type rangeAllocator struct {
	size uint64
	free []extent // sorted by off, never adjacent, never empty
	used uint64   // bytes allocated (aligned lengths)
}

func newRangeAllocator(size uint64) *rangeAllocator {
	a := &rangeAllocator{size: size}
	if size > 0 {
		a.free = []extent{{0, size}}
	}
	return a
}

// inside reports whether [off, off+n) lies wholly inside e. It never
// computes an end, so offsets and lengths near 2^64 (a client's) cannot
// wrap into a match.
func (e extent) inside(off, n uint64) bool {
	return off >= e.off && n <= e.len && off-e.off <= e.len-n
}

// mulSat returns a*b, or the largest uint64 when the product overflows.
func mulSat(a, b uint64) uint64 {
	if b != 0 && a > math.MaxUint64/b {
		return math.MaxUint64
	}
	return a * b
}

// alignedLen is the length an allocation of n bytes takes.
func alignedLen(n uint64) uint64 {
	return (n + allocAlign - 1) &^ (allocAlign - 1)
}

// alloc returns the offset of a free range of alignedLen(n) bytes.
func (a *rangeAllocator) alloc(n uint64) (uint64, bool) {
	need := alignedLen(n)
	if need < n { // overflow
		return 0, false
	}
	for i := range a.free {
		e := &a.free[i]
		if e.len < need {
			continue
		}
		off := e.off
		e.off += need
		e.len -= need
		if e.len == 0 {
			a.free = append(a.free[:i], a.free[i+1:]...)
		}
		a.used += need
		return off, true
	}
	return 0, false
}

// release returns the range at off of an allocation of n bytes.
func (a *rangeAllocator) release(off, n uint64) {
	need := alignedLen(n)
	a.used -= need
	i := sort.Search(len(a.free), func(i int) bool { return a.free[i].off > off })
	// Merge with the previous and/or next free range.
	mergePrev := i > 0 && a.free[i-1].off+a.free[i-1].len == off
	mergeNext := i < len(a.free) && off+need == a.free[i].off
	switch {
	case mergePrev && mergeNext:
		a.free[i-1].len += need + a.free[i].len
		a.free = append(a.free[:i], a.free[i+1:]...)
	case mergePrev:
		a.free[i-1].len += need
	case mergeNext:
		a.free[i].off = off
		a.free[i].len += need
	default:
		a.free = append(a.free, extent{})
		copy(a.free[i+1:], a.free[i:])
		a.free[i] = extent{off, need}
	}
}

// reserve allocates exactly [off, off+n) (n a multiple of allocAlign); false
// when that range is not wholly free.
func (a *rangeAllocator) reserve(off, n uint64) bool {
	free, ok := carve(a.free, off, n)
	if ok {
		a.free = free
		a.used += n
	}
	return ok
}

// carve removes [off, off+n) from free (sorted, non-adjacent extents) and
// returns the new list; false when that range is not wholly inside one
// extent. The extent it falls in is replaced by the parts before and after.
func carve(free []extent, off, n uint64) ([]extent, bool) {
	for i, e := range free {
		if !e.inside(off, n) {
			continue
		}
		var buf [2]extent
		parts := buf[:0]
		if off > e.off {
			parts = append(parts, extent{e.off, off - e.off})
		}
		if end := e.off + e.len; off+n < end {
			parts = append(parts, extent{off + n, end - off - n})
		}
		return slices.Replace(free, i, i+1, parts...), true
	}
	return free, false
}

// largestFree returns the length of the largest free range.
func (a *rangeAllocator) largestFree() uint64 {
	var m uint64
	for _, e := range a.free {
		m = max(m, e.len)
	}
	return m
}
