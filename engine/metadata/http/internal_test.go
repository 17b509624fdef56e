package http

import (
	"testing"

	"gotest.tools/v3/assert"
)

// TestNoEnvironmentProxy: http_proxy must never reach this client
// (specs/mooncake.md §9.8).
func TestNoEnvironmentProxy(t *testing.T) {
	t.Setenv("HTTP_PROXY", "http://192.0.2.1:3128")
	t.Setenv("http_proxy", "http://192.0.2.1:3128")
	c, err := NewClient(Config{URL: "http://metadata.example:8080/metadata"})
	assert.NilError(t, err)
	defer c.Close()
	assert.Assert(t, c.tr.Proxy == nil)
}
