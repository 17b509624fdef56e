package testutil

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// leakIgnored are substrings of goroutine stacks that belong to the runtime,
// the testing package or long-lived library internals, not to the code
// under test.
var leakIgnored = []string{
	"testing.(*M).",
	"testing.tRunner",
	"testing.runTests",
	"testing.(*T).Run",
	"runtime.goexit0",
	"os/signal.signal_recv",
	"os/signal.loop",
	"runtime.ensureSigM",
	"created by runtime.gc",
	"runtime.ReadTrace",
	"created by google.golang.org/grpc/internal/grpcsync.NewCallbackSerializer", // grpc's global serializer
	"google.golang.org/grpc/internal/resolver/dns",
	"go.opencensus.io",
	"kvferry/internal/cuda.(*copyStream).runCompleter", // engine/gpu's per-device copiers live as long as the process
	"kvferry/internal/hip.(*copyStream).runCompleter",  // the same, on the HIP runtime
}

// VerifyNoLeaks runs the tests of m and then fails the binary if goroutines
// started by the tests are still running after a grace period. Call it from
// TestMain: os.Exit(testutil.VerifyNoLeaks(m)).
func VerifyNoLeaks(m *testing.M) int {
	code := m.Run()
	if code != 0 {
		return code
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		leaks := leakedGoroutines()
		if len(leaks) == 0 {
			return code
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "leaked goroutines (%d):\n\n%s\n", len(leaks), strings.Join(leaks, "\n\n"))
			return 1
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func leakedGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	stacks := strings.Split(string(buf), "\n\n")
	for i, g := range stacks {
		if i == 0 { // the calling goroutine
			continue
		}
		if isIgnored(g) {
			continue
		}
		out = append(out, g)
	}
	return out
}

func isIgnored(stack string) bool {
	lines := strings.Split(stack, "\n")
	// A goroutine whose creator is the runtime or testing.
	for _, l := range lines {
		if strings.HasPrefix(l, "created by ") {
			if strings.HasPrefix(l, "created by runtime") || strings.HasPrefix(l, "created by testing.") ||
				strings.HasPrefix(l, "created by os/signal") {
				return true
			}
		}
	}
	for _, s := range leakIgnored {
		if strings.Contains(stack, s) {
			return true
		}
	}
	return false
}
