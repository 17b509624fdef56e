// Package leakcheck finds goroutines that a package's tests left running.
// A test package calls Main from TestMain; after the tests pass it waits
// (bounded) for goroutines running code of this module, the etcd client,
// gRPC or net/http to end, and fails the run if any remain.
package leakcheck

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// watched are stack substrings that mark a goroutine as ours to account for.
var watched = []string{
	"github.com/kvferry/kvferry/",
	"go.etcd.io/etcd/",
	"google.golang.org/grpc",
	"net/http.(*persistConn)",
	"net/http.(*conn).serve",
	"net/http.(*Server).Serve",
}

// ignored are stack substrings of goroutines that are not leaks (the test
// runner itself, and this package).
var ignored = []string{
	"testing.(*M).",
	"testing.tRunner",
	"testing.runFuzzing",
	"leakcheck.Find",
}

// Main runs the tests and then the leak check; it exits the process.
func Main(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaks := Find(10 * time.Second); len(leaks) > 0 {
			fmt.Fprintf(os.Stderr, "leakcheck: %d goroutine(s) left running after the tests:\n\n%s\n",
				len(leaks), strings.Join(leaks, "\n\n"))
			code = 1
		}
	}
	os.Exit(code)
}

// Find waits up to timeout for watched goroutines to end and returns the
// stacks of those still running.
func Find(timeout time.Duration) []string {
	deadline := time.Now().Add(timeout)
	delay := time.Millisecond
	for {
		leaks := scan()
		if len(leaks) == 0 || time.Now().After(deadline) {
			return leaks
		}
		time.Sleep(delay) // polling the runtime has no channel to wait on
		delay = min(2*delay, 100*time.Millisecond)
	}
}

func scan() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var leaks []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if !containsAny(g, watched) || containsAny(g, ignored) {
			continue
		}
		leaks = append(leaks, g)
	}
	return leaks
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
