package main

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"time"
)

// maxSamples bounds the latencies one run keeps (8 bytes each); past it
// every other sample is dropped, evenly over the run.
const maxSamples = 1 << 22

// samples collects one goroutine's latencies for exact percentiles (a
// bucketed histogram misstates a p50 by up to its bucket's width, too
// coarse for figures compared against a round-trip floor).
type samples struct {
	d    []time.Duration
	keep int // keep one sample in keep (a power of two)
	seen int
}

func (s *samples) add(d time.Duration) {
	if s.keep == 0 {
		s.keep = 1
	}
	s.seen++
	if s.seen%s.keep != 0 {
		return
	}
	if len(s.d) >= maxSamples {
		// Halve what is kept, and keep half as often from now on.
		n := 0
		for i := 1; i < len(s.d); i += 2 {
			s.d[n] = s.d[i]
			n++
		}
		s.d = s.d[:n]
		s.keep *= 2
	}
	s.d = append(s.d, d)
}

// percentiles merges the goroutines' samples and returns the p50 and p99
// in microseconds.
func percentiles(all []*samples) (p50, p99 float64) {
	var d []time.Duration
	for _, s := range all {
		d = append(d, s.d...)
	}
	if len(d) == 0 {
		return 0, 0
	}
	slices.Sort(d)
	at := func(q float64) float64 {
		return float64(d[min(int(q*float64(len(d))), len(d)-1)]) / float64(time.Microsecond)
	}
	return at(0.5), at(0.99)
}

// writeSamples writes every kept latency in the order measured, one line
// each: the goroutine's index and the latency in nanoseconds (--samples_file,
// for finding which operations are the slow ones: periodic, clustered,
// after an idle gap). Later runs of a sweep append.
func writeSamples(path string, all []*samples) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("samples file: %w", err)
	}
	w := bufio.NewWriter(f)
	for g, s := range all {
		for _, d := range s.d {
			fmt.Fprintf(w, "%d %d\n", g, d.Nanoseconds())
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("samples file: %w", err)
	}
	return f.Close()
}
