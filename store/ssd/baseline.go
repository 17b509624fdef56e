package ssd

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// SequentialBaseline is the yardstick the disk tier's benchmarks print
// beside their own figures (bench/ssd.sh): in dir it writes one file of n
// blocks of block (block must be Align-aligned memory of a multiple of
// Align bytes), sequentially, then reads it back in blocks of the same size
// into block, with O_DIRECT where the filesystem takes it, as fio's
// sequential psync job does. It returns both durations and whether O_DIRECT
// was used, and removes the file.
func SequentialBaseline(dir string, block []byte, n int) (write, read time.Duration, direct bool, err error) {
	direct = probeDirect(dir)
	flags := 0
	if direct {
		flags = syscall.O_DIRECT
	}
	p := filepath.Join(dir, "kvferry-sequential-baseline"+tmpSuffix)
	defer os.Remove(p)
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC|flags, 0o644)
	if err != nil {
		return 0, 0, direct, fmt.Errorf("sequential baseline: %w", err)
	}
	start := time.Now()
	for range n {
		if _, err := f.Write(block); err != nil {
			f.Close()
			return 0, 0, direct, fmt.Errorf("sequential baseline write: %w", err)
		}
	}
	write = time.Since(start)
	if err := f.Close(); err != nil {
		return 0, 0, direct, fmt.Errorf("sequential baseline write: %w", err)
	}
	if f, err = os.OpenFile(p, os.O_RDONLY|flags, 0); err != nil {
		return 0, 0, direct, fmt.Errorf("sequential baseline: %w", err)
	}
	defer f.Close()
	start = time.Now()
	for i := range n {
		if _, err := f.ReadAt(block, int64(i)*int64(len(block))); err != nil {
			return 0, 0, direct, fmt.Errorf("sequential baseline read: %w", err)
		}
	}
	return write, time.Since(start), direct, nil
}
