package engine

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/internal/testutil"
)

func parseU(t *testing.T, d *testutil.TestData, s string) uint64 {
	v, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		d.Fatalf(t, "bad number %q", s)
	}
	return v
}

// TestRegistryDataDriven runs testdata/registry: register/unregister/find
// against the overlap and exact-start rules of specs/mooncake.md §9.11.
func TestRegistryDataDriven(t *testing.T) {
	var g registry
	testutil.RunDataDriven(t, "testdata/registry", func(t *testing.T, d *testutil.TestData) string {
		switch d.Cmd {
		case "register":
			var rs []*Region
			testutil.ScanLines(d.Input, func(line string) {
				f := strings.Fields(line)
				rs = append(rs, &Region{Addr: uintptr(parseU(t, d, f[0])), Length: parseU(t, d, f[1])})
			})
			if err := g.add(rs); err != nil {
				return "error: " + errName(err)
			}
			return "ok"
		case "unregister":
			var addrs []uintptr
			testutil.ScanLines(d.Input, func(line string) { addrs = append(addrs, uintptr(parseU(t, d, line))) })
			if _, err := g.remove(addrs); err != nil {
				return "error: " + errName(err)
			}
			return "ok"
		case "find":
			var out []string
			testutil.ScanLines(d.Input, func(line string) {
				f := strings.Fields(line)
				r := g.find(parseU(t, d, f[0]), parseU(t, d, f[1]))
				if r == nil {
					out = append(out, line+" -> none")
				} else {
					out = append(out, fmt.Sprintf("%s -> %#x+%d", line, r.Addr, r.Length))
				}
			})
			return strings.Join(out, "\n")
		case "list":
			var out []string
			for _, r := range g.regions() {
				out = append(out, fmt.Sprintf("%#x+%d", r.Addr, r.Length))
			}
			return strings.Join(out, "\n")
		}
		d.Fatalf(t, "unknown command %s", d.Cmd)
		return ""
	})
}

func errName(err error) string {
	for _, e := range []error{ErrAddressOverlapped, ErrAddressNotRegistered, ErrInvalidArgument} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	return err.Error()
}

// TestSlicingDataDriven runs testdata/slicing: how requests are cut.
func TestSlicingDataDriven(t *testing.T) {
	testutil.RunDataDriven(t, "testdata/slicing", func(t *testing.T, d *testutil.TestData) string {
		var out []string
		testutil.ScanLines(d.Input, func(line string) {
			f := strings.Fields(line)
			n, ss := parseU(t, d, f[0]), parseU(t, d, f[1])
			out = append(out, fmt.Sprintf("%s -> %d", line, sliceCount(n, ss)))
		})
		return strings.Join(out, "\n")
	})
}

func TestPinBlocksUnregister(t *testing.T) {
	var g registry
	assert.NilError(t, g.add([]*Region{{Addr: 0x1000, Length: 0x1000}}))
	p := g.pin(0x1800, 16)
	assert.Assert(t, p != nil)
	gone, err := g.remove([]uintptr{0x1000})
	assert.NilError(t, err)
	assert.Assert(t, g.pin(0x1800, 16) == nil, "a region being removed cannot be pinned")
	assert.Assert(t, !waitDrained(gone, 20*time.Millisecond), "pinned region must not drain")
	p.Release()
	assert.Assert(t, waitDrained(gone, time.Second))
}
