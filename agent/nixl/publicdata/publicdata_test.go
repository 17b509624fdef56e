package publicdata

import (
	"errors"
	"testing"
)

func TestPublicData(t *testing.T) {
	for _, c := range []struct {
		blob    string
		ok      bool
		addr, n uint64
		seg     string
	}{
		{"kvf1 7f0000001000 1048576 127.0.0.1:15001", true, 0x7f0000001000, 1 << 20, "127.0.0.1:15001"},
		{"kvf1 10 1 name with spaces", true, 0x10, 1, "name with spaces"},
		{"kvf1 10 0 seg", false, 0, 0, ""},
		{"kvf1 ffffffffffffffff 2 seg", false, 0, 0, ""},
		{"kvf1 10 1", false, 0, 0, ""},
		{"kvf1 10 1 ", false, 0, 0, ""},
		{"kvf2 10 1 seg", false, 0, 0, ""},
		{"", false, 0, 0, ""},
		{"\x00\x01garbage", false, 0, 0, ""},
	} {
		addr, n, seg, err := Parse(c.blob)
		if (err == nil) != c.ok || addr != c.addr || n != c.n || seg != c.seg {
			t.Fatalf("%q: %#x %d %q %v, want %#x %d %q ok=%v", c.blob, addr, n, seg, err, c.addr, c.n, c.seg, c.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Fatalf("%q: %v is not ErrInvalid", c.blob, err)
		}
		if c.ok && Format(addr, n, seg) != c.blob {
			t.Fatalf("%q formats as %q", c.blob, Format(addr, n, seg))
		}
	}
}
