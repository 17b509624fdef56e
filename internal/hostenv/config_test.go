package hostenv

import (
	"os"
	"testing"

	"gotest.tools/v3/assert"
)

// TestMaxPolledConns reads KVFERRY_TCP_MAX_POLLED_CONNS into the TCP
// config: unset, bad or out of range leaves the transport's default (0).
func TestMaxPolledConns(t *testing.T) {
	t.Setenv("KVFERRY_TCP_MAX_POLLED_CONNS", "")
	os.Unsetenv("KVFERRY_TCP_MAX_POLLED_CONNS")
	assert.Equal(t, StackConfig().TCP.MaxPolledConns, 0)
	for v, want := range map[string]int{"16": 16, "1": 1, "0": 0, "-5": 0, "junk": 0, "99999999": 0} {
		t.Setenv("KVFERRY_TCP_MAX_POLLED_CONNS", v)
		assert.Equal(t, StackConfig().TCP.MaxPolledConns, want, "KVFERRY_TCP_MAX_POLLED_CONNS=%s", v)
	}
}
