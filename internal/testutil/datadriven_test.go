package testutil

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gotest.tools/v3/assert"
)

const sample = `# comment
echo a=1 b=(x,y) flag
hello
----
echo: a=1 b=(x,y) flag
hello

blank
----
----
one

two
----
----

last
----
stale
`

func TestRunDataDriven(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.txt")
	assert.NilError(t, os.WriteFile(path, []byte(sample), 0o644))
	run := func(t *testing.T, d *TestData) string {
		switch d.Cmd {
		case "echo":
			a, ok := d.Arg("b")
			assert.Assert(t, ok)
			assert.DeepEqual(t, a.Vals, []string{"x", "y"})
			assert.Assert(t, d.HasArg("flag"))
			return "echo: " + d.cmdLine()[5:] + "\n" + d.Input
		case "blank":
			return "one\n\ntwo"
		case "last":
			return "fresh"
		}
		return ""
	}
	cases, err := parseDataDriven(path, strings.Split(sample, "\n"))
	assert.NilError(t, err)
	assert.Equal(t, len(cases), 3)
	assert.Equal(t, cases[1].Expected, "one\n\ntwo\n")

	*rewrite = true
	defer func() { *rewrite = false }()
	RunDataDriven(t, path, run)
	out, err := os.ReadFile(path)
	assert.NilError(t, err)
	assert.Equal(t, string(out), strings.Replace(sample, "stale", "fresh", 1))
	*rewrite = false
	RunDataDriven(t, path, run)
}
