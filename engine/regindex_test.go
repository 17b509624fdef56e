package engine

import (
	"math/rand/v2"
	"sort"
	"testing"

	"gotest.tools/v3/assert"
)

// TestRegIndexAgainstModel drives the chunked index with random
// registrations and removals (enough to split and merge chunks many times)
// and checks every answer against a plain sorted slice.
func TestRegIndexAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var g registry
	var model []*Region // sorted by address
	const slots = 4096  // addresses: slot*64, lengths 1..64
	check := func() {
		x := g.index()
		assert.Equal(t, x.n, len(model))
		var bytes uint64
		for _, r := range model {
			bytes += r.Length
		}
		assert.Equal(t, x.bytes, bytes)
		rs := x.regions()
		assert.Equal(t, len(rs), len(model))
		for i := range rs {
			assert.Assert(t, rs[i] == model[i], "region %d", i)
		}
		for _, c := range x.chunks {
			assert.Assert(t, len(c.rs) > 0 && len(c.rs) <= maxChunk && c.first == uint64(c.rs[0].Addr))
		}
		for range 64 {
			addr, n := uint64(rng.IntN(slots*64)+1), uint64(rng.IntN(80)+1)
			var want *Region
			for _, r := range model {
				if r.contains(addr, n) {
					want = r
				}
			}
			assert.Assert(t, g.find(addr, n) == want, "find %#x+%d", addr, n)
		}
	}
	for step := range 20000 {
		slot := rng.IntN(slots)
		addr := uintptr(slot*64 + 64)
		i := sort.Search(len(model), func(i int) bool { return model[i].Addr >= addr })
		if i < len(model) && model[i].Addr == addr && rng.IntN(3) > 0 {
			_, err := g.remove([]uintptr{addr})
			assert.NilError(t, err)
			model = append(model[:i], model[i+1:]...)
		} else {
			r := &Region{Addr: addr, Length: uint64(rng.IntN(96) + 1)} // may overlap the next slot
			overlaps := (i > 0 && model[i-1].end() > uint64(addr)) || (i < len(model) && uint64(model[i].Addr) < r.end())
			err := g.add([]*Region{r})
			assert.Equal(t, err != nil, overlaps, "step %d: add %#x+%d: %v", step, r.Addr, r.Length, err)
			if err == nil {
				model = append(model[:i], append([]*Region{r}, model[i:]...)...)
			}
		}
		if step%500 == 0 {
			check()
		}
	}
	check()
	// Remove everything, in random order.
	rng.Shuffle(len(model), func(i, j int) { model[i], model[j] = model[j], model[i] })
	for len(model) > 0 {
		_, err := g.remove([]uintptr{model[0].Addr})
		assert.NilError(t, err)
		model = model[1:]
	}
	assert.Equal(t, g.index().n, 0)
	assert.Equal(t, len(g.index().chunks), 0)
}
