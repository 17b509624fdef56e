// Package suite is what a multi-process suite needs of the checkout it
// runs in: the repository root, the files `make` built, the test programs
// it compiles for itself (C drivers, Go peers), and its settings from the
// environment.
package suite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvferry/kvferry/internal/hostenv"
)

// buildTimeout bounds one compile of a test program.
const buildTimeout = 5 * time.Minute

// Root is the repository root: the nearest directory at or above the
// working directory (a test's package directory) that holds go.mod.
func Root() string {
	rootOnce.Do(func() {
		d, err := os.Getwd()
		if err != nil {
			panic(fmt.Sprintf("suite: working directory: %v", err))
		}
		for {
			if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
				root = d
				return
			}
			up := filepath.Dir(d)
			if up == d {
				panic("suite: no go.mod at or above the working directory")
			}
			d = up
		}
	})
	return root
}

var (
	rootOnce sync.Once
	root     string
)

// Built is path elems under the repository's build/ directory.
func Built(elems ...string) string {
	return filepath.Join(append([]string{Root(), "build"}, elems...)...)
}

// BinDir is where the built programs are: KVFERRY_BIN_DIR, else build/bin.
func BinDir() string {
	if d := Env("KVFERRY_BIN_DIR", ""); d != "" {
		return d
	}
	return Built("bin")
}

// Missing returns an error naming the files of paths that do not exist
// ("run make first"), or nil.
func Missing(paths ...string) error {
	var gone []string
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			gone = append(gone, p)
		}
	}
	if len(gone) > 0 {
		return fmt.Errorf("%s missing: run make first", strings.Join(gone, ", "))
	}
	return nil
}

// Compile runs the compiler command argv (gcc or g++ and its arguments) in
// the repository root, with the flags in the environment variable
// flagsEnv (a sanitizer build's, say) inserted after argv[0]. The error
// carries the compiler's output.
func Compile(flagsEnv string, argv ...string) error {
	if len(argv) == 0 {
		return errors.New("compile: no command")
	}
	args := append(strings.Fields(Env(flagsEnv, "")), argv[1:]...)
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], args...)
	cmd.Dir = Root()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", argv[0], strings.Join(args, " "), err, out)
	}
	return nil
}

// GoBuild builds the Go package pkg into the program out, with the race
// detector where KVFERRY_TEST_RACE is set (race builds of the engine
// processes). The error carries the go tool's output.
func GoBuild(out, pkg string) error {
	args := []string{"build", "-o", out}
	if Env("KVFERRY_TEST_RACE", "") != "" {
		args = append(args, "-race")
	}
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", append(args, pkg)...)
	cmd.Dir = Root()
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return nil
}

// Main is the body of a suite's TestMain: it makes a scratch directory
// for the programs the suite builds, calls setup with it (an error there
// is printed and ends the run with status 1), runs the tests, calls the
// teardown setup returned (if any), removes the directory and exits with
// the tests' status.
func Main(m *testing.M, name string, setup func(dir string) (teardown func(), err error)) {
	dir, err := os.MkdirTemp("", name)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	teardown, err := setup(dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	if teardown != nil {
		teardown()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// Env is the environment variable key, or def where it is unset or empty
// (read as the library reads it: internal/hostenv).
func Env(key, def string) string {
	if v, _ := hostenv.Getenv(key); v != "" {
		return v
	}
	return def
}

// EngineEnv is the environment that gives a child's engines deadline for
// a transfer, a TCP status wait and a handshake connect, and logLevel.
func EngineEnv(deadline time.Duration, logLevel string) []string {
	d := strconv.Itoa(int(deadline / time.Second))
	return []string{"MC_TRANSFER_TIMEOUT=" + d, "MC_TCP_STATUS_TIMEOUT_SEC=" + d, "MC_HANDSHAKE_CONNECT_TIMEOUT=" + d,
		"KVFERRY_LOG_LEVEL=" + logLevel}
}
