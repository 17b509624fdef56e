package fabric

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"gotest.tools/v3/assert"
)

// fabricHeader is where Debian's libfabric-dev installs libfabric's header.
const fabricHeader = "/usr/include/rdma/fabric.h"

// layout builds testdata/fabric_layout.c with the given extra flags and
// returns the lines it prints: every size, member offset and constant of
// fabric_abi.h.
func layout(t *testing.T, name string, flags ...string) []string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	args := append([]string{"-Wall", "-Wextra", "-I", ".", "-o", bin}, flags...)
	args = append(args, filepath.Join("testdata", "fabric_layout.c"))
	out, err := exec.Command("cc", args...).CombinedOutput()
	assert.NilError(t, err, "cc %s:\n%s", strings.Join(args, " "), out)
	out, err = exec.Command(bin).Output()
	assert.NilError(t, err)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	assert.Assert(t, len(lines) > 200, "only %d lines from %s", len(lines), name)
	return lines
}

// TestLayoutMatchesLibfabric compares fabric_abi.h, our declaration of the
// libfabric ABI the shim is built against, with libfabric's own headers:
// every struct size and alignment, every member's offset and size, the
// places of the ops-table entries the shim calls, and every constant. CI
// installs libfabric-dev for it.
func TestLayoutMatchesLibfabric(t *testing.T) {
	if _, err := os.Stat(fabricHeader); err != nil {
		t.Skip("libfabric's rdma/fabric.h is not installed (apt-get install libfabric-dev): " +
			"fabric_abi.h is compared with the recorded layout only (TestLayoutGolden)")
	}
	var include []string // libfabric's headers, force-included: no file of ours names them
	for _, h := range []string{"fabric.h", "fi_cm.h", "fi_domain.h", "fi_endpoint.h", "fi_eq.h", "fi_errno.h", "fi_rma.h"} {
		include = append(include, "-include", "rdma/"+h)
	}
	theirs := layout(t, "theirs", include...)
	ours := layout(t, "ours", "-DKVF_LAYOUT_OURS")
	assert.DeepEqual(t, ours, theirs)
}

// TestLayoutGolden compares fabric_abi.h with the layout recorded from
// libfabric 1.17 on this architecture (testdata/fabric_layout_GOARCH.golden),
// so a drift fails even where libfabric-dev is absent.
func TestLayoutGolden(t *testing.T) {
	golden := filepath.Join("testdata", "fabric_layout_"+runtime.GOARCH+".golden")
	want, err := os.ReadFile(golden)
	if os.IsNotExist(err) {
		t.Skipf("no recorded libfabric layout for %s", runtime.GOARCH)
	}
	assert.NilError(t, err)
	ours := layout(t, "ours", "-DKVF_LAYOUT_OURS")
	assert.DeepEqual(t, ours, strings.Split(strings.TrimSpace(string(want)), "\n"))
}
