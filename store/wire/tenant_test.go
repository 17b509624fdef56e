package wire

import (
	"strings"
	"testing"

	"gotest.tools/v3/assert"
)

func TestTenantID(t *testing.T) {
	for _, tc := range []struct {
		raw, want string
		ok        bool
	}{
		{"", DefaultTenant, true},
		{"default", DefaultTenant, true},
		{"tenant-a", "tenant-a", true},
		{"a b/c:d~", "a b/c:d~", true},
		{"é", "é", true}, // bytes >= 0x80 are allowed, as in Mooncake
		{"_system", "", false},
		{"_", "", false},
		{"a\x00b", "", false},
		{"a\nb", "", false},
		{"\x1f", "", false},
		{"del\x7f", "", false},
		{strings.Repeat("t", MaxTenantIDBytes), strings.Repeat("t", MaxTenantIDBytes), true},
		{strings.Repeat("t", MaxTenantIDBytes+1), "", false},
	} {
		got, err := TenantID(tc.raw)
		if !tc.ok {
			assert.Equal(t, CodeOf(err), ErrInvalidParams, "tenant %q", tc.raw)
			continue
		}
		assert.NilError(t, err, "tenant %q", tc.raw)
		assert.Equal(t, got, tc.want)
	}
}
