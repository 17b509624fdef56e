package metrics

import (
	"flag"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gotest.tools/v3/assert"
)

// updating reports -update (the flag gotest.tools defines, shared here).
func updating() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

// TestMetricsDoc keeps docs/METRICS.md equal to the catalogue.
func TestMetricsDoc(t *testing.T) {
	const path = "../docs/METRICS.md"
	want := Markdown()
	if updating() {
		assert.NilError(t, os.WriteFile(path, []byte(want), 0o644))
	}
	got, err := os.ReadFile(path)
	assert.NilError(t, err)
	assert.Equal(t, string(got), want, "docs/METRICS.md is stale: go test ./metrics -run TestMetricsDoc -update")
}

func TestCatalogueWellFormed(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range Catalogue() {
		assert.Assert(t, !seen[s.Name], "duplicate %s", s.Name)
		seen[s.Name] = true
		assert.Assert(t, strings.HasPrefix(s.Name, "kvferry_"), s.Name)
		assert.Assert(t, s.Help != "", s.Name)
		switch s.Kind {
		case Counter:
			assert.Assert(t, strings.HasSuffix(s.Name, "_total"), "counter %s", s.Name)
		case HistogramKind:
			assert.Assert(t, strings.HasSuffix(s.Name, "_seconds"), "histogram %s", s.Name)
		default:
			assert.Assert(t, !strings.HasSuffix(s.Name, "_total"), "gauge %s", s.Name)
		}
		for _, l := range s.Labels {
			assert.Assert(t, l != "" && !strings.HasPrefix(l, "__"), "%s label %q", s.Name, l)
		}
	}
}

func TestHistogramBuckets(t *testing.T) {
	var h Histogram
	h.Observe(500 * time.Nanosecond)  // bucket 0 (< 1 µs)
	h.Observe(1500 * time.Nanosecond) // bucket 1 ([1, 2) µs)
	h.Observe(3 * time.Microsecond)   // bucket 2
	h.Observe(time.Hour)              // overflow
	s := h.Snapshot()
	assert.Equal(t, s.Buckets[0], uint64(1))
	assert.Equal(t, s.Buckets[1], uint64(1))
	assert.Equal(t, s.Buckets[2], uint64(1))
	assert.Equal(t, s.Buckets[NumBuckets], uint64(1))
	assert.Equal(t, s.Count(), uint64(4))
	assert.Equal(t, s.Quantile(0.25), 2e-6)
	cum := s.cumulative()
	assert.Equal(t, cum[bucketBounds[NumBuckets-1]], uint64(3)) // +Inf holds the fourth
	assert.Equal(t, SizeClass(4096), Size4K)
	assert.Equal(t, SizeClass(4097), Size64K)
	assert.Equal(t, SizeClass(64<<20), SizeLarge)
}

func TestFolderCap(t *testing.T) {
	f := NewFolder(2)
	assert.Equal(t, f.Label("a"), "a")
	assert.Equal(t, f.Label("b"), "b")
	assert.Equal(t, f.Label("c"), Other)
	assert.Equal(t, f.Label("a"), "a") // admitted names keep their label
	assert.Equal(t, f.Label(""), Other)
}

// TestRetiredEngineKeepsCounters: closing an engine keeps its counters in
// the process totals, and drops its gauges.
func TestRetiredEngineKeepsCounters(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(Collector())
	e := NewEngine(nil)
	l := e.Link("tcp", "retire-peer")
	l.Submitted(3)
	l.Completed(1, 4096, time.Microsecond)
	l.Failed(0, CauseTimeout, 10, time.Millisecond)
	e.Conn("tcp", "retire-peer").Open.Add(2)
	before := value(t, reg, "kvferry_engine_tasks_in_flight", map[string]string{"peer": "retire-peer"})
	assert.Equal(t, before, 1.0)
	e.Close()
	e.Close()
	got := value(t, reg, "kvferry_engine_tasks_total", map[string]string{"peer": "retire-peer", "op": "write", "state": "completed"})
	assert.Equal(t, got, 1.0)
	got = value(t, reg, "kvferry_engine_errors_total", map[string]string{"peer": "retire-peer", "cause": "timeout"})
	assert.Equal(t, got, 1.0)
	assert.Equal(t, value(t, reg, "kvferry_engine_tasks_in_flight", map[string]string{"peer": "retire-peer"}), 0.0)
	assert.Equal(t, value(t, reg, "kvferry_transport_connections", map[string]string{"peer": "retire-peer"}), 0.0)
}

// value returns the sum of the samples of name whose labels include want.
func value(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	assert.NilError(t, err)
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// BenchmarkObserve compares the hot path's histogram with client_golang's.
func BenchmarkObserve(b *testing.B) {
	b.Run("kvferry", func(b *testing.B) {
		var h Histogram
		for i := 0; i < b.N; i++ {
			h.Observe(time.Duration(i&0xffff) * time.Microsecond)
		}
	})
	b.Run("client_golang", func(b *testing.B) {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "x", Buckets: BucketBounds()})
		for i := 0; i < b.N; i++ {
			h.Observe(float64(i&0xffff) * 1e-6)
		}
	})
	b.Run("link-completed", func(b *testing.B) {
		e := NewEngine(nil)
		defer e.Close()
		l := e.Link("tcp", "bench")
		for i := 0; i < b.N; i++ {
			l.Completed(1, 4096, time.Duration(i&0xffff)*time.Microsecond)
		}
	})
}
