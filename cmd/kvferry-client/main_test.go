package main

import (
	"testing"

	"gotest.tools/v3/assert"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]uint64{
		"4 GB": 4 << 30, "16MB": 16 << 20, "1gb": 1 << 30, "0": 0, "4096": 4096, "2KiB": 2 << 10, "1.5 GB": 3 << 29,
	} {
		got, err := parseSize(in)
		assert.NilError(t, err, in)
		assert.Equal(t, got, want, in)
	}
	for _, bad := range []string{"", "GB", "-1", "4 XB", "1e9"} {
		_, err := parseSize(bad)
		assert.Assert(t, err != nil, bad)
	}
}

func TestFlagsRefused(t *testing.T) {
	assert.ErrorContains(t, run([]string{"--global_segment_size=lots"}), "global_segment_size")
	assert.ErrorContains(t, run([]string{"--enable_offload"}), "ssd_offload_path")
	assert.ErrorContains(t, run([]string{"--log_level=loud"}), "log_level")
}
