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

	"github.com/kvferry/kvferry/internal/memfd"
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

// TestMapGlobalFirstTouch: a populated shared segment is a memfd (mapped
// by same-host peers) unless the host faults on first touches of populated
// pages; then it is anonymous memory, which peers copy with process_vm_*.
// A lazy segment stays a memfd either way (its first touches fault
// anyway), and an unshared one is anonymous.
func TestMapGlobalFirstTouch(t *testing.T) {
	saved := firstTouchCostly
	defer func() { firstTouchCostly = saved }()
	const n = 4 << 20
	for _, tc := range []struct {
		name                     string
		costly, populate, shared bool
		wantMemfd                bool
	}{
		{"cheap populated shared", false, true, true, true},
		{"costly populated shared", true, true, true, false},
		{"costly lazy shared", true, false, true, true},
		{"cheap populated unshared", false, true, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			probed := 0
			firstTouchCostly = func() bool { probed++; return tc.costly }
			m, err := mapGlobal(n, tc.populate, true, tc.shared)
			assert.NilError(t, err)
			defer m.Close()
			_, isMemfd := m.(*memfd.Map)
			assert.Equal(t, isMemfd, tc.wantMemfd)
			assert.Equal(t, m.Len(), uint64(n))
			assert.Equal(t, probed <= 1, true)
			if tc.populate {
				assert.Equal(t, residentPages(t, m.Bytes()), n/os.Getpagesize())
			}
		})
	}
}

// TestProbeFirstTouch runs the probe itself (its answer is the host's).
func TestProbeFirstTouch(t *testing.T) {
	t.Logf("first touch of populated pages costly here: %v", probeFirstTouch())
}
