package tcp

import (
	"testing"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
)

// Large submissions that leave lanes over start on the first group of
// free lanes, so that one request after another keeps to the same
// connections; a busy group is skipped, and with none free (or every lane
// wanted) the lanes are taken in turn.
func TestStartLaneKeepsToFreeLanes(t *testing.T) {
	pc := &peerConns{lanes: []*lane{{}, {}, {}, {}}}
	for range 3 {
		assert.Equal(t, pc.startLane(2), 0)
		assert.Equal(t, pc.startLane(1), 0)
	}
	busy := func(l *lane) { l.mu.queue = append(l.mu.queue, &engine.Slice{}) }
	busy(pc.lanes[1])
	assert.Equal(t, pc.startLane(2), 2) // lanes 0-1 hold lane 1's work
	assert.Equal(t, pc.startLane(1), 0)
	pc.lanes[2].w.Lock() // a writer writing
	first := pc.startLane(2)
	second := pc.startLane(2)
	assert.Equal(t, second, first+1, "no free group: in turn")
	pc.lanes[2].w.Unlock()
	assert.Equal(t, pc.startLane(2), 2)
	assert.Equal(t, pc.startLane(4)+1, pc.startLane(4), "every lane wanted: in turn")
}
