package main

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"gotest.tools/v3/assert"
)

const before = `# TYPE kvferry_engine_transferred_bytes_total counter
kvferry_engine_transferred_bytes_total{op="write",peer="a",transport="tcp"} 1000
kvferry_engine_transferred_bytes_total{op="write",peer="b",transport="tcp"} 0
# TYPE kvferry_engine_tasks_total counter
kvferry_engine_tasks_total{op="write",peer="a",state="completed",transport="tcp"} 10
# TYPE kvferry_engine_errors_total counter
kvferry_engine_errors_total{cause="timeout",peer="b",transport="tcp"} 1
kvferry_engine_errors_total{cause="canceled",peer="b",transport="tcp"} 5
# TYPE kvferry_transport_connections gauge
kvferry_transport_connections{peer="a",transport="tcp"} 4
# TYPE kvferry_engine_task_duration_seconds histogram
kvferry_engine_task_duration_seconds_bucket{size_class="<=4KiB",transport="tcp",le="0.001"} 10
kvferry_engine_task_duration_seconds_bucket{size_class="<=4KiB",transport="tcp",le="0.002"} 10
kvferry_engine_task_duration_seconds_bucket{size_class="<=4KiB",transport="tcp",le="+Inf"} 10
kvferry_engine_task_duration_seconds_sum{size_class="<=4KiB",transport="tcp"} 0.005
kvferry_engine_task_duration_seconds_count{size_class="<=4KiB",transport="tcp"} 10
`

const after = `# TYPE kvferry_engine_transferred_bytes_total counter
kvferry_engine_transferred_bytes_total{op="write",peer="a",transport="tcp"} 3000
kvferry_engine_transferred_bytes_total{op="write",peer="b",transport="tcp"} 500
# TYPE kvferry_engine_tasks_total counter
kvferry_engine_tasks_total{op="write",peer="a",state="completed",transport="tcp"} 110
# TYPE kvferry_engine_errors_total counter
kvferry_engine_errors_total{cause="timeout",peer="b",transport="tcp"} 3
kvferry_engine_errors_total{cause="canceled",peer="b",transport="tcp"} 50
# TYPE kvferry_transport_connections gauge
kvferry_transport_connections{peer="a",transport="tcp"} 4
# TYPE kvferry_engine_task_duration_seconds histogram
kvferry_engine_task_duration_seconds_bucket{size_class="<=4KiB",transport="tcp",le="0.001"} 10
kvferry_engine_task_duration_seconds_bucket{size_class="<=4KiB",transport="tcp",le="0.002"} 110
kvferry_engine_task_duration_seconds_bucket{size_class="<=4KiB",transport="tcp",le="+Inf"} 110
kvferry_engine_task_duration_seconds_sum{size_class="<=4KiB",transport="tcp"} 0.2
kvferry_engine_task_duration_seconds_count{size_class="<=4KiB",transport="tcp"} 110
`

func parse(t *testing.T, text string, at time.Time) *scrape {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(text))
	assert.NilError(t, err)
	s := &scrape{at: at, links: map[linkKey]*linkStat{}, buckets: map[[2]string]map[float64]float64{}}
	s.add("p1", mfs)
	return s
}

func TestTopRows(t *testing.T) {
	t0 := time.Unix(1000, 0)
	rows := topRows(parse(t, before, t0), parse(t, after, t0.Add(2*time.Second)))
	assert.Equal(t, len(rows), 2)
	a, b := rows[0], rows[1]
	assert.Equal(t, a.Peer, "a") // busiest first
	assert.Equal(t, a.BytesPerSec, 1000.0)
	assert.Equal(t, a.ReqPerSec, 50.0)
	assert.Equal(t, a.Conns, 4.0)
	// All 100 requests of the interval took 1-2 ms: p99 inside that bucket.
	assert.Assert(t, a.P99Seconds > 0.001 && a.P99Seconds <= 0.002, "%v", a.P99Seconds)
	assert.Equal(t, b.Peer, "b")
	assert.Equal(t, b.ErrPerSec, 1.0) // canceled requests are not errors here
}

func TestQuantileEmptyInterval(t *testing.T) {
	b := map[float64]float64{0.001: 5, math.Inf(1): 5}
	assert.Equal(t, quantile(0.99, b, b), 0.0)
}

func TestLinksTableAndJSON(t *testing.T) {
	var out bytes.Buffer
	o := &options{out: &out}
	s := parse(t, after, time.Now())
	links := s.sorted()
	var rows [][]string
	for _, l := range links {
		rows = append(rows, []string{l.Peer, bytesName(l.Bytes)})
	}
	assert.NilError(t, o.emit(links, []string{"PEER", "BYTES"}, rows))
	assert.Assert(t, strings.Contains(out.String(), "a     2.9 KiB"), out.String())
	out.Reset()
	o.json = true
	assert.NilError(t, o.emit(links, nil, nil))
	assert.Assert(t, strings.Contains(out.String(), `"peer": "a"`), out.String())
}

func TestRunRejectsUnknownCommand(t *testing.T) {
	var out bytes.Buffer
	assert.ErrorContains(t, run([]string{"frobnicate"}, &out), "unknown command")
	assert.ErrorContains(t, run([]string{"links"}, &out), "--metrics is required")
}
