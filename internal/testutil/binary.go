package testutil

import (
	"errors"
	"os"
	"os/exec"
	"testing"
)

// Binary returns the server binary a test starts: path (where its Debian
// package installs it) when it exists, else name found on PATH, else path.
func Binary(path, name string) string {
	if _, err := os.Stat(path); err == nil {
		return path
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	return path
}

// SkipIfAbsent skips t when binary bin does not exist, naming the Debian
// package that installs it; any other problem is left to fail the test.
func SkipIfAbsent(t testing.TB, bin, pkg string) {
	t.Helper()
	if _, err := os.Stat(bin); errors.Is(err, os.ErrNotExist) {
		t.Skipf("%s absent (install Debian package %s)", bin, pkg)
	}
}
