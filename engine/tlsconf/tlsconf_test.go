package tlsconf

import (
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"gotest.tools/v3/assert"
)

func TestLoadRefusesIncompleteFiles(t *testing.T) {
	p, err := Load(Files{})
	assert.NilError(t, err)
	assert.Assert(t, p == nil, "no files: TLS off")
	assert.Assert(t, p.ServerConfig() == nil && p.ClientConfig() == nil)

	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.pem")
	assert.NilError(t, os.WriteFile(junk, []byte("not pem"), 0o600))
	for _, f := range []Files{
		{Cert: "c.pem"},                    // no key
		{Key: "k.pem"},                     // no certificate
		{Cert: "c.pem", Key: "k.pem"},      // no CA
		{CA: filepath.Join(dir, "absent")}, // unreadable CA
		{CA: junk},                         // no certificate in the CA file
	} {
		_, err := Load(f)
		assert.Assert(t, errors.Is(err, ErrFiles), "%+v: %v", f, err)
	}
}

func TestForAddr(t *testing.T) {
	p := &Pair{Client: nil}
	assert.Assert(t, p.ClientConfig() == nil)
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS13}
	c := ForAddr(tlsConfig, "10.1.2.3:50051")
	assert.Equal(t, c.ServerName, "10.1.2.3")
	assert.Equal(t, tlsConfig.ServerName, "", "the original is not changed")
	tlsConfig.ServerName = "master.example"
	assert.Equal(t, ForAddr(tlsConfig, "10.1.2.3:50051").ServerName, "master.example")
}
