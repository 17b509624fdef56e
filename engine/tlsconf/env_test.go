package tlsconf

import (
	"testing"

	"gotest.tools/v3/assert"
)

// TestFilesFromEnv reads the three file names; an empty one is unset.
func TestFilesFromEnv(t *testing.T) {
	m := map[string]string{"KVFERRY_TLS_CERT_FILE": "/c.pem", "KVFERRY_TLS_KEY_FILE": "/k.pem", "KVFERRY_TLS_CA_FILE": ""}
	f := FilesFromEnv(func(name string) (string, bool) { v, ok := m[name]; return v, ok })
	assert.DeepEqual(t, f, Files{Cert: "/c.pem", Key: "/k.pem"})
}
