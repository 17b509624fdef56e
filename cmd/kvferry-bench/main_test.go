package main

import (
	"bytes"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"gotest.tools/v3/assert"
)

func TestParseList(t *testing.T) {
	got, err := parseList("block_size", "4096, 64K,1M,2g")
	assert.NilError(t, err)
	assert.DeepEqual(t, got, []uint64{4096, 64 << 10, 1 << 20, 2 << 30})
	for _, bad := range []string{"", "0", "x", "4096,", "-1", "1T"} {
		_, err := parseList("block_size", bad)
		assert.ErrorContains(t, err, "--block_size", "%q", bad)
	}
}

func TestSweepIsEveryCombination(t *testing.T) {
	*blockSizes, *batchSizes, *threadCounts = "4K,1M", "1,128", "2"
	t.Cleanup(func() { *blockSizes, *batchSizes, *threadCounts = "65536", "128", "12" })
	ps, err := sweep()
	assert.NilError(t, err)
	assert.Equal(t, fmt.Sprint(ps), fmt.Sprint([]point{{4096, 1, 2}, {1 << 20, 1, 2}, {4096, 128, 2}, {1 << 20, 128, 2}}))
}

func TestSizeName(t *testing.T) {
	assert.Equal(t, sizeName(4096), "4 KiB")
	assert.Equal(t, sizeName(3<<20), "3 MiB")
	assert.Equal(t, sizeName(1000), "1000 B")
	assert.Equal(t, sizeName(1<<30), "1 GiB")
}

// TestPlotWritesPNG draws a sweep of two series and decodes the file.
func TestPlotWritesPNG(t *testing.T) {
	var rs []Result
	for _, batch := range []int{1, 128} {
		for _, bs := range []uint64{4096, 65536, 1 << 20} {
			rs = append(rs, Result{Operation: "write", BlockSize: bs, BatchSize: batch, Threads: 4,
				GBps: float64(bs) / 1e6, P50BatchUs: float64(bs) / 100})
		}
	}
	path := filepath.Join(t.TempDir(), "p.png")
	assert.NilError(t, plotResults(path, rs))
	b, err := os.ReadFile(path)
	assert.NilError(t, err)
	img, err := png.Decode(bytes.NewReader(b))
	assert.NilError(t, err)
	assert.Assert(t, img.Bounds().Dx() > 800 && img.Bounds().Dy() > 300, "%v", img.Bounds())
}
