package rdma

import (
	"testing"

	"gotest.tools/v3/assert"
)

func keys(eps []*endpoint) []string {
	var out []string
	for _, ep := range eps {
		out = append(out, ep.peerPath)
	}
	return out
}

func (s *epStore) order() []string {
	var out []string
	s.each(func(ep *endpoint) { out = append(out, ep.peerPath) })
	return out
}

// TestSIEVEStore follows Mooncake's SIEVEEndpointStore: new endpoints go in
// front, visited; the hand starts at the oldest and walks towards the
// newest (wrapping), clearing marks, and evicts the first unmarked one; it
// then rests on the victim's newer neighbour.
func TestSIEVEStore(t *testing.T) {
	s := newEPStore(EndpointStoreSIEVE, 3)
	put := func(k string) []string { return keys(s.put(k, &endpoint{peerPath: k})) }
	assert.Assert(t, put("a") == nil && put("b") == nil && put("c") == nil)
	assert.DeepEqual(t, s.order(), []string{"c", "b", "a"})
	// Everything is marked: the hand clears a full round, then takes a.
	assert.DeepEqual(t, put("d"), []string{"a"})
	assert.DeepEqual(t, s.order(), []string{"d", "c", "b"})
	// b was used since: the hand (on b) spares it and takes c.
	assert.Assert(t, s.get("b") != nil)
	assert.DeepEqual(t, put("e"), []string{"c"})
	assert.DeepEqual(t, s.order(), []string{"e", "d", "b"})
	// The hand (on d) clears d and e, wraps to b (cleared before) and takes it.
	assert.DeepEqual(t, put("f"), []string{"b"})
	assert.DeepEqual(t, s.order(), []string{"f", "e", "d"})
	// The hand rests on d; deleting d moves it to d's newer neighbour.
	assert.Equal(t, s.hand.key, "d")
	s.del("d", &endpoint{peerPath: "d"}) // not the stored one: kept
	assert.DeepEqual(t, s.order(), []string{"f", "e", "d"})
	s.del("d", s.peek("d"))
	assert.Equal(t, s.hand.key, "e")
	s.del("f", s.peek("f"))
	assert.DeepEqual(t, s.order(), []string{"e"})
	assert.Equal(t, s.evictions, uint64(3))
}

func TestFIFOStore(t *testing.T) {
	s := newEPStore(EndpointStoreFIFO, 2)
	put := func(k string) []string { return keys(s.put(k, &endpoint{peerPath: k})) }
	put("a")
	put("b")
	s.get("a") // use does not matter
	assert.DeepEqual(t, put("c"), []string{"a"})
	assert.DeepEqual(t, put("d"), []string{"b"})
	assert.DeepEqual(t, s.order(), []string{"d", "c"})
}
