package client

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"gotest.tools/v3/assert"
)

// smapsOf returns the smaps fields of the mapping that starts at addr.
func smapsOf(t *testing.T, addr uintptr) map[string]string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/smaps")
	assert.NilError(t, err)
	head := fmt.Sprintf("%x-", addr)
	var out map[string]string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") {
			if out != nil {
				return out
			}
			if strings.HasPrefix(f[0], head) {
				out = map[string]string{}
			}
			continue
		}
		if out != nil {
			out[strings.TrimSuffix(f[0], ":")] = strings.Join(f[1:], " ")
		}
	}
	assert.Assert(t, out != nil, "no mapping at %#x", addr)
	return out
}

// TestMapSegment: the lent memory is advised for huge pages (VmFlags hg)
// unless asked not to, and faulted in unless lazy.
func TestMapSegment(t *testing.T) {
	const n = 8 << 20
	for _, tc := range []struct {
		name           string
		populate, huge bool
	}{
		{"huge populated", true, true},
		{"huge lazy", false, true},
		{"plain populated", true, false},
		{"plain lazy", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := mapSegment(n, tc.populate, tc.huge)
			assert.NilError(t, err)
			defer m.Close()
			assert.Equal(t, m.Len(), uint64(n))
			sm := smapsOf(t, m.Addr())
			flags := strings.Fields(sm["VmFlags"])
			hg := false
			for _, f := range flags {
				hg = hg || f == "hg"
			}
			assert.Equal(t, hg, tc.huge, "VmFlags %v", flags)
			rss, err := strconv.ParseUint(strings.TrimSuffix(sm["Rss"], " kB"), 10, 64)
			assert.NilError(t, err)
			if tc.populate {
				assert.Equal(t, rss*1024, uint64(n))
			} else {
				assert.Equal(t, rss, uint64(0))
			}
		})
	}
}
