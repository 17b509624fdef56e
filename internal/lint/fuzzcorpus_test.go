package lint

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"gotest.tools/v3/assert"
)

// Bounds on the committed fuzz corpora (scripts/fuzz.sh keeps them under
// tighter caps of its own): every go test runs every entry, and the
// repository carries them all.
const (
	maxCorpusEntryBytes = 16 << 10
	maxCorpusTotalBytes = 2 << 20
)

// TestFuzzCorpusBounded holds the testdata/fuzz/<Target> directories to
// their bounds and checks that every entry is a Go corpus file.
func TestFuzzCorpusBounded(t *testing.T) {
	r := root(t)
	var total int64
	err := filepath.WalkDir(r, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "build", ".git", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		if filepath.Base(filepath.Dir(filepath.Dir(p))) != "fuzz" || filepath.Base(filepath.Dir(filepath.Dir(filepath.Dir(p)))) != "testdata" {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(r, p)
		assert.Assert(t, info.Size() <= maxCorpusEntryBytes, "%s: %d bytes, more than %d", rel, info.Size(), maxCorpusEntryBytes)
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		line, _ := bufio.NewReader(f).ReadString('\n')
		f.Close()
		assert.Equal(t, line, "go test fuzz v1\n", "%s is no Go corpus entry", rel)
		total += info.Size()
		return nil
	})
	assert.NilError(t, err)
	assert.Assert(t, total <= maxCorpusTotalBytes, "fuzz corpora hold %d bytes, more than %d", total, maxCorpusTotalBytes)
}

// TestFuzzLedger checks docs/reports/fuzz-ledger.tsv, the cumulative
// record of make fuzz-long: its header, one line per target named in
// scripts/fuzz.sh, and counts that are numbers.
func TestFuzzLedger(t *testing.T) {
	r := root(t)
	script, err := os.ReadFile(filepath.Join(r, "scripts", "fuzz.sh"))
	assert.NilError(t, err)
	known := fuzzTargets(t, string(script))
	known["tests/cfuzz te"] = true
	known["tests/cfuzz store"] = true
	data, err := os.ReadFile(filepath.Join(r, "docs", "reports", "fuzz-ledger.tsv"))
	assert.NilError(t, err)
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	assert.Equal(t, lines[0], "target\tkind\texecutions\tseconds\twall_seconds\truns\tcorpus\tupdated_utc\tcommit")
	seen := map[string]bool{}
	for _, line := range lines[1:] {
		f := strings.Split(line, "\t")
		assert.Equal(t, len(f), 9, "ledger line %q", line)
		assert.Assert(t, known[f[0]], "ledger line for %q, which scripts/fuzz.sh does not list", f[0])
		assert.Assert(t, !seen[f[0]], "two ledger lines for %q", f[0])
		seen[f[0]] = true
		for _, n := range f[2:6] {
			_, err := strconv.ParseUint(n, 10, 64)
			assert.NilError(t, err, "ledger line %q", line)
		}
	}
}

// fuzzTargets returns the "package target" names of scripts/fuzz.sh's
// TARGETS list.
func fuzzTargets(t *testing.T, body string) map[string]bool {
	t.Helper()
	start := strings.Index(body, "\nTARGETS=\"\n")
	assert.Assert(t, start >= 0, "scripts/fuzz.sh has no TARGETS list")
	body = body[start+len("\nTARGETS=\"\n"):]
	known := map[string]bool{}
	for _, line := range strings.Split(body[:strings.Index(body, "\"")], "\n") {
		if f := strings.Fields(line); len(f) == 3 {
			known[f[0]+" "+f[1]] = true
		}
	}
	return known
}

// TestFuzzTargetsListed holds scripts/fuzz.sh's TARGETS list to every
// Fuzz function of the module's tests, so make fuzz-long and the ledger
// leave none out and name none that is gone.
func TestFuzzTargetsListed(t *testing.T) {
	r := root(t)
	script, err := os.ReadFile(filepath.Join(r, "scripts", "fuzz.sh"))
	assert.NilError(t, err)
	listed := fuzzTargets(t, string(script))
	found := map[string]bool{}
	err = filepath.WalkDir(r, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "build", ".git", "node_modules", "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		rel, err := filepath.Rel(r, filepath.Dir(p))
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, "func Fuzz") {
				continue
			}
			name, _, ok := strings.Cut(strings.TrimPrefix(line, "func "), "(")
			if ok && strings.HasSuffix(line, "(f *testing.F) {") {
				found[filepath.ToSlash(rel)+" "+name] = true
			}
		}
		return sc.Err()
	})
	assert.NilError(t, err)
	assert.Assert(t, len(found) > 0, "no Fuzz functions found under %s", r)
	for k := range found {
		assert.Assert(t, listed[k], "%s is not in scripts/fuzz.sh's TARGETS list", k)
	}
	for k := range listed {
		assert.Assert(t, found[k], "scripts/fuzz.sh lists %s, which has no such Fuzz function", k)
	}
}
