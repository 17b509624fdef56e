package client

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
	"gotest.tools/v3/assert"
)

// vmFlagsOf returns the VmFlags of the mapping that holds addr (the kernel
// may have merged ours with a neighbour of the same flags).
func vmFlagsOf(t *testing.T, addr uintptr) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/smaps")
	assert.NilError(t, err)
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if lo, hi, ok := strings.Cut(f[0], "-"); ok && !strings.HasSuffix(f[0], ":") {
			l, err1 := strconv.ParseUint(lo, 16, 64)
			h, err2 := strconv.ParseUint(hi, 16, 64)
			in = err1 == nil && err2 == nil && uint64(addr) >= l && uint64(addr) < h
			continue
		}
		if in && f[0] == "VmFlags:" {
			return f[1:]
		}
	}
	t.Fatalf("no mapping holds %#x", addr)
	return nil
}

// residentPages counts the pages of b in memory.
func residentPages(t *testing.T, b []byte) int {
	t.Helper()
	vec := make([]byte, (len(b)+os.Getpagesize()-1)/os.Getpagesize())
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0])))
	assert.Assert(t, errno == 0, "mincore: %v", errno)
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
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
			flags := vmFlagsOf(t, m.Addr())
			assert.Equal(t, slices.Contains(flags, "hg"), tc.huge, "VmFlags %v", flags)
			want := 0
			if tc.populate {
				want = n / os.Getpagesize()
			}
			assert.Equal(t, residentPages(t, m.Bytes()), want)
		})
	}
}
