package ssd

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/kvferry/kvferry/internal/cmem"
)

// TestBenchSequential measures the disk tier against a sequential baseline
// of the same directory in the same run (bench/ssd.sh runs it): the
// baseline writes and reads one file in 4 MiB O_DIRECT blocks (what fio's
// sequential psync job does, where the filesystem takes O_DIRECT), the tier
// writes the same bytes as 4 MiB objects through its pool of offload
// writers and reads them back with their checksums verified. It is skipped
// unless KVFERRY_SSD_BENCH_DIR names the directory;
// KVFERRY_SSD_BENCH_MIB sets the volume (default 1024).
func TestBenchSequential(t *testing.T) {
	dir := os.Getenv("KVFERRY_SSD_BENCH_DIR")
	if dir == "" {
		t.Skip("set KVFERRY_SSD_BENCH_DIR (bench/ssd.sh)")
	}
	total := 1024 << 20
	if v, err := strconv.Atoi(os.Getenv("KVFERRY_SSD_BENCH_MIB")); err == nil && v > 0 {
		total = v << 20
	}
	const obj = 4 << 20
	n := total / obj
	src, err := cmem.MapAnonPopulate(uint64(obj))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	for i := range src.Bytes() {
		src.Bytes()[i] = byte(i * 7)
	}
	work, err := os.MkdirTemp(dir, "kvferry-ssd-bench-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(work)

	// Baseline: one file, sequential 4 MiB blocks, O_DIRECT when it works.
	baseWrite, baseRead, direct, err := SequentialBaseline(work, src.Bytes(), n)
	if err != nil {
		t.Fatal(err)
	}

	// The tier: the same bytes as objects, offload writers in parallel.
	s, err := Open(Config{Dir: filepath.Join(work, "tier"), Capacity: uint64(2 * total)})
	if err != nil {
		t.Fatal(err)
	}
	run := func(workers int, fn func(i int) error) time.Duration {
		var wg sync.WaitGroup
		next := make(chan int, n)
		for i := range n {
			next <- i
		}
		close(next)
		start := time.Now()
		errs := make(chan error, workers)
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					if err := fn(i); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		return time.Since(start)
	}
	tierWrite := run(2, func(i int) error { // the client's offloadWorkers
		_, err := s.Write("", fmt.Sprintf("k%d", i), uint64(i+1), src.Bytes())
		return err
	})
	bufs := make(chan []byte, 4)
	for range 4 {
		m, err := cmem.MapAnonPopulate(uint64(obj))
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		bufs <- m.Bytes()
	}
	tierRead := run(4, func(i int) error { // the client's loadWorkers
		b := <-bufs
		defer func() { bufs <- b }()
		return s.Read("", fmt.Sprintf("k%d", i), uint64(i+1), b)
	})
	mbs := func(d time.Duration) float64 { return float64(total) / d.Seconds() / (1 << 20) }
	fmt.Printf("disk tier, %s (o_direct=%v), %d MiB in %d objects of 4 MiB\n", dir, direct, total>>20, n)
	fmt.Printf("  baseline sequential write %8.0f MiB/s   tier offload write %8.0f MiB/s   ratio %.2f\n",
		mbs(baseWrite), mbs(tierWrite), baseWrite.Seconds()/tierWrite.Seconds())
	fmt.Printf("  baseline sequential read  %8.0f MiB/s   tier read-back     %8.0f MiB/s   ratio %.2f\n",
		mbs(baseRead), mbs(tierRead), baseRead.Seconds()/tierRead.Seconds())
}
