package client

import (
	"bytes"
	"math"
	"testing"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/internal/cmem"
)

func TestPartsSpan(t *testing.T) {
	// Empty buffers go, adjacent ones merge, one left is a plain span.
	s, ok := partsSpan([]Buffer{{0x1000, 10}, {0, 0}, {0x100a, 6}, {0x3000, 4}})
	assert.Assert(t, ok)
	assert.DeepEqual(t, s.parts, []Buffer{{0x1000, 16}, {0x3000, 4}})
	assert.Equal(t, s.size, uint64(20))
	assert.Equal(t, s.requests(), 1) // one request gathers both parts
	assert.DeepEqual(t, s.pieces(), []engine.Piece{{Addr: 0x1000, Length: 16}, {Addr: 0x3000, Length: 4}})
	s, ok = partsSpan([]Buffer{{0x1000, 10}, {0x100a, 6}})
	assert.Assert(t, ok && s.parts == nil && s.addr == 0x1000 && s.size == 16)
	s, ok = partsSpan([]Buffer{{0, 0}})
	assert.Assert(t, ok && s.size == 0 && !s.valid())
	_, ok = partsSpan([]Buffer{{0x1000, 1}, {0, 5}})
	assert.Assert(t, !ok)
	_, ok = partsSpan([]Buffer{{0x1000, math.MaxUint64}, {0x2000, 2}})
	assert.Assert(t, !ok)

	n, ok := capacity([]Buffer{{0x1000, 5}, {0, 0}, {0x2000, 7}})
	assert.Assert(t, ok && n == 12)
	_, ok = capacity([]Buffer{{0, 1}})
	assert.Assert(t, !ok)
	_, ok = capacity([]Buffer{{1, math.MaxUint64}, {1, 1}})
	assert.Assert(t, !ok)

	p := prefixSpan([]Buffer{{0x1000, 4}, {0, 0}, {0x2000, 10}, {0x3000, 10}}, 9)
	assert.DeepEqual(t, p.parts, []Buffer{{0x1000, 4}, {0x2000, 5}})
	assert.Equal(t, p.size, uint64(9))
	// Whole buffers holding the object: their array is shared, not copied;
	// empty ones and the buffers after the object's end are left out.
	bufs := []Buffer{{0x1000, 4}, {0, 0}, {0x2000, 10}, {0x3000, 10}, {0, 0}}
	p = prefixSpan(bufs, 14)
	assert.DeepEqual(t, p.parts, []Buffer{{0x1000, 4}, {0x2000, 10}})
	p = prefixSpan(bufs, 24)
	assert.DeepEqual(t, p.parts, []Buffer{{0x1000, 4}, {0x2000, 10}, {0x3000, 10}})
	p = prefixSpan([]Buffer{{0x1000, 4}, {0x1004, 10}}, 3)
	assert.Assert(t, p.parts == nil && p.addr == 0x1000 && p.size == 3)
	p = prefixSpan([]Buffer{{0x1000, 4}, {0x1004, 10}}, 14)
	assert.Assert(t, p.parts == nil && p.addr == 0x1000 && p.size == 14)
	assert.Equal(t, testing.AllocsPerRun(100, func() {
		p = prefixSpan(bufs[2:4], 20)
	}), 0.0)
	assert.Assert(t, &p.parts[0] == &bufs[2], "shares the caller's array")
}

func TestCopyParts(t *testing.T) {
	m, err := cmem.MapAnon(4096)
	assert.NilError(t, err)
	defer m.Close()
	b := m.Bytes()
	copy(b, "abcdefghij")
	a := m.Addr()
	s, _ := partsSpan([]Buffer{{a + 7, 3}, {a, 2}, {a + 4, 2}}) // "hij" "ab" "ef"
	copyOut := func(off, n uint64) string {
		s.copyTo(a+1000, off, n)
		return string(b[1000 : 1000+n])
	}
	assert.Equal(t, copyOut(0, 7), "hijabef")
	assert.Equal(t, copyOut(2, 3), "jab")
	assert.Equal(t, copyOut(5, 2), "ef")
	copy(b[2000:], "1234567")
	s.copyFrom(1, a+2000, 5) // "ij" "ab" "e" become "12345"
	assert.Assert(t, bytes.Equal(b[:10], []byte("34cd5fgh12")))
}
