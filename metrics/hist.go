package metrics

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// NumBuckets is the number of finite latency buckets: bucket k counts
// durations in [2^(k-1), 2^k) microseconds (bucket 0: under 1 µs), so
// the upper bounds run from 1 µs to 2^24 µs (about 16.8 s); one more
// bucket holds everything longer.
const NumBuckets = 25

// bucketBounds are the buckets' upper bounds in seconds.
var bucketBounds = func() []float64 {
	b := make([]float64, NumBuckets)
	for k := range b {
		b[k] = float64(uint64(1)<<k) * 1e-6
	}
	return b
}()

// BucketBounds returns the finite upper bounds (seconds) of every latency
// histogram.
func BucketBounds() []float64 { return append([]float64(nil), bucketBounds...) }

// Histogram is a latency histogram made of atomic counters: Observe costs
// a shift, a bit count and two uncontended atomic adds, which is why the
// hot paths use it instead of client_golang's Histogram (see
// BenchmarkObserve). The zero value is ready. It is exposed as a
// Prometheus histogram in seconds.
type Histogram struct {
	buckets  [NumBuckets + 1]atomic.Uint64
	sumNanos atomic.Uint64
}

// Observe records one duration.
func (h *Histogram) Observe(d time.Duration) {
	if d < 0 {
		d = 0
	}
	k := bits.Len64(uint64(d) / 1000)
	if k > NumBuckets {
		k = NumBuckets
	}
	h.buckets[k].Add(1)
	h.sumNanos.Add(uint64(d))
}

// HistogramSnapshot is a point-in-time copy of a Histogram, with
// non-cumulative bucket counts.
type HistogramSnapshot struct {
	Buckets  [NumBuckets + 1]uint64
	SumNanos uint64
}

// Snapshot copies h.
func (h *Histogram) Snapshot() HistogramSnapshot {
	var s HistogramSnapshot
	for i := range h.buckets {
		s.Buckets[i] = h.buckets[i].Load()
	}
	s.SumNanos = h.sumNanos.Load()
	return s
}

// Add adds o into s.
func (s *HistogramSnapshot) Add(o *HistogramSnapshot) {
	for i := range s.Buckets {
		s.Buckets[i] += o.Buckets[i]
	}
	s.SumNanos += o.SumNanos
}

// Count is the number of observations.
func (s *HistogramSnapshot) Count() uint64 {
	var n uint64
	for _, b := range s.Buckets {
		n += b
	}
	return n
}

// Quantile estimates the q-quantile (0..1) in seconds from the buckets,
// interpolating linearly inside the bucket that holds it (as Prometheus'
// histogram_quantile does); 0 when empty.
func (s *HistogramSnapshot) Quantile(q float64) float64 {
	n := s.Count()
	if n == 0 {
		return 0
	}
	rank := uint64(q * float64(n))
	if rank >= n {
		rank = n - 1
	}
	var c uint64
	for i, b := range s.Buckets {
		if c+b > rank {
			if i >= NumBuckets {
				return bucketBounds[NumBuckets-1]
			}
			lo := 0.0
			if i > 0 {
				lo = bucketBounds[i-1]
			}
			return lo + (bucketBounds[i]-lo)*float64(rank-c+1)/float64(b)
		}
		c += b
	}
	return bucketBounds[NumBuckets-1]
}

// cumulative returns Prometheus' cumulative bucket map.
func (s *HistogramSnapshot) cumulative() map[float64]uint64 {
	m := make(map[float64]uint64, NumBuckets)
	var c uint64
	for i := 0; i < NumBuckets; i++ {
		c += s.Buckets[i]
		m[bucketBounds[i]] = c
	}
	return m
}

// Size classes of the latency histograms, by request length.
const (
	Size4K = iota
	Size64K
	Size1M
	Size16M
	SizeLarge
	// NumSizeClasses is the number of size classes.
	NumSizeClasses
)

// SizeClassNames are the size_class label values.
var SizeClassNames = [NumSizeClasses]string{"<=4KiB", "<=64KiB", "<=1MiB", "<=16MiB", ">16MiB"}

// SizeClass returns the size class of a request of n bytes.
func SizeClass(n uint64) int {
	switch {
	case n <= 4<<10:
		return Size4K
	case n <= 64<<10:
		return Size64K
	case n <= 1<<20:
		return Size1M
	case n <= 16<<20:
		return Size16M
	}
	return SizeLarge
}

// SizedHistograms is one Histogram per size class.
type SizedHistograms [NumSizeClasses]Histogram

// Observe records a duration for a request of n bytes.
func (h *SizedHistograms) Observe(n uint64, d time.Duration) { h[SizeClass(n)].Observe(d) }
