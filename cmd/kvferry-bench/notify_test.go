package main

import (
	"context"
	"testing"

	"gotest.tools/v3/assert"
)

// The notify run (--operation=notify) between two engines of this process,
// one answering pings: every round trip is counted, and the result carries
// the initiator's CPU and context switches per round trip beside the
// latencies (bench/latency.sh prints them with the target's).
func TestNotifyPointReportsCost(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	target, err := newEngine(ctx)
	assert.NilError(t, err)
	defer target.Close()
	initiator, err := newEngine(ctx)
	assert.NilError(t, err)
	defer initiator.Close()
	done := make(chan struct{})
	go func() { defer close(done); echoNotifications(ctx, target) }()
	defer func() { cancel(); <-done }()

	seg, err := initiator.OpenSegment(ctx, target.SegmentName())
	assert.NilError(t, err)
	old := *duration
	*duration = 1
	defer func() { *duration = old }()
	r, err := notifyPoint(ctx, initiator, seg)
	assert.NilError(t, err)
	assert.Assert(t, r.Batches > 0)
	assert.Assert(t, r.P50BatchUs > 0 && r.P99BatchUs >= r.P50BatchUs, "p50 %v p99 %v", r.P50BatchUs, r.P99BatchUs)
	assert.Assert(t, r.CPUPerOpUs > 0, "cpu per round trip %v", r.CPUPerOpUs)
	// One delivery is part of a round trip: never longer than it.
	assert.Assert(t, r.P50DeliverUs > 0 && r.P50DeliverUs <= r.P50BatchUs, "delivery p50 %v, round trip p50 %v", r.P50DeliverUs, r.P50BatchUs)
	assert.Assert(t, r.P50AcceptUs > 0 && r.P50AcceptUs <= r.P50BatchUs, "Notify call p50 %v, round trip p50 %v", r.P50AcceptUs, r.P50BatchUs)
}

// TestParsePing reads back what a ping carries, and refuses a message
// without a send time.
func TestParsePing(t *testing.T) {
	name, sent, ok := parsePing("127.0.0.1:15000\n12345")
	assert.Assert(t, ok)
	assert.Equal(t, name, "127.0.0.1:15000")
	assert.Equal(t, sent, int64(12345))
	name, _, ok = parsePing("127.0.0.1:15000")
	assert.Assert(t, !ok)
	assert.Equal(t, name, "127.0.0.1:15000")
	_, _, ok = parsePing("a\nb")
	assert.Assert(t, !ok)
}
