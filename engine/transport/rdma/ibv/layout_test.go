package ibv_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"gotest.tools/v3/assert"
)

// verbsHeader is where Debian's libibverbs-dev installs rdma-core's header.
const verbsHeader = "/usr/include/infiniband/verbs.h"

// layout builds testdata/verbs_layout.c with the given extra flags and
// returns the lines it prints: every size, alignment, member offset and
// constant of verbs_abi.h.
func layout(t *testing.T, name string, flags ...string) []string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	args := append([]string{"-Wall", "-Wextra", "-I", ".", "-o", bin}, flags...)
	args = append(args, filepath.Join("testdata", "verbs_layout.c"))
	out, err := exec.Command("cc", args...).CombinedOutput()
	assert.NilError(t, err, "cc %s:\n%s", strings.Join(args, " "), out)
	out, err = exec.Command(bin).Output()
	assert.NilError(t, err)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	assert.Assert(t, len(lines) > 400, "only %d lines from %s", len(lines), name)
	return lines
}

// haveVerbsHeader reports whether cc finds rdma-core's <infiniband/verbs.h>.
func haveVerbsHeader(t *testing.T) bool {
	t.Helper()
	if _, err := os.Stat(verbsHeader); err == nil {
		return true
	}
	src := filepath.Join(t.TempDir(), "probe.c")
	assert.NilError(t, os.WriteFile(src, []byte("#include <infiniband/verbs.h>\n"), 0o644))
	return exec.Command("cc", "-fsyntax-only", src).Run() == nil
}

// TestLayoutMatchesRdmaCore compares verbs_abi.h, our declaration of the
// verbs ABI the shim and the fake provider are built against, with
// rdma-core's verbs.h: every struct size and alignment, every member's
// offset and size, every constant, and (at compile time, in the rdma-core
// build) the function types of the entry points the shim resolves with
// dlsym and of the ops it calls. CI installs libibverbs-dev for it.
func TestLayoutMatchesRdmaCore(t *testing.T) {
	if !haveVerbsHeader(t) {
		t.Skip("rdma-core's infiniband/verbs.h is not installed (apt-get install libibverbs-dev): " +
			"verbs_abi.h is compared with the recorded layout only (TestLayoutGolden)")
	}
	theirs := layout(t, "theirs", "-include", "infiniband/verbs.h")
	ours := layout(t, "ours", "-DKVF_LAYOUT_OURS")
	assert.DeepEqual(t, ours, theirs)
}

// TestLayoutGolden compares verbs_abi.h with the layout recorded from
// rdma-core 44 on this architecture (testdata/verbs_layout_GOARCH.golden),
// so a drift fails even where libibverbs-dev is absent.
func TestLayoutGolden(t *testing.T) {
	golden := filepath.Join("testdata", "verbs_layout_"+runtime.GOARCH+".golden")
	want, err := os.ReadFile(golden)
	if os.IsNotExist(err) {
		t.Skipf("no recorded verbs layout for %s", runtime.GOARCH)
	}
	assert.NilError(t, err)
	ours := layout(t, "ours", "-DKVF_LAYOUT_OURS")
	assert.DeepEqual(t, ours, strings.Split(strings.TrimSpace(string(want)), "\n"))
}
