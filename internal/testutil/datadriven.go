// Package testutil holds helpers shared by kvferry's tests: a datadriven file
// runner in pebble's file format. It is imported only from _test.go files.
package testutil

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
)

// rewrite, set with "go test ... -rewrite", makes RunDataDriven write the
// actual output back into the test files instead of comparing.
var rewrite = flag.Bool("rewrite", false, "rewrite datadriven test files with the actual output")

// TestData is one test case of a datadriven file.
//
// A case is a command line, optional input lines, a "----" line and the
// expected output, ended by a blank line:
//
//	put-start key=a size=100 replicas=2
//	preferred seg-1
//	----
//	ok a@seg-1:0x1000+100
//
// When the expected output itself holds blank lines, the separator is doubled
// ("----" twice) and the output ends at a second doubled separator. Lines
// that start with '#' outside a case are comments.
type TestData struct {
	// Pos is "file:line" of the command, for error messages.
	Pos string
	// Cmd is the first word of the command line.
	Cmd string
	// CmdArgs are the remaining words, split on spaces.
	CmdArgs []CmdArg
	// Input is the text between the command line and the separator, without
	// the final newline.
	Input string
	// Expected is the expected output as found in the file.
	Expected string

	line int // index of the command line in the file (0-based)
}

// CmdArg is one "key", "key=value" or "key=(v1,v2)" word of a command line.
type CmdArg struct {
	Key  string
	Vals []string
}

// String returns the argument as written.
func (a CmdArg) String() string {
	switch len(a.Vals) {
	case 0:
		return a.Key
	case 1:
		return a.Key + "=" + a.Vals[0]
	default:
		return a.Key + "=(" + strings.Join(a.Vals, ",") + ")"
	}
}

// HasArg reports whether the command has an argument named key.
func (d *TestData) HasArg(key string) bool {
	_, ok := d.Arg(key)
	return ok
}

// Arg returns the argument named key.
func (d *TestData) Arg(key string) (CmdArg, bool) {
	for _, a := range d.CmdArgs {
		if a.Key == key {
			return a, true
		}
	}
	return CmdArg{}, false
}

// Fatalf fails the test with the case position prepended.
func (d *TestData) Fatalf(tb testing.TB, format string, args ...any) {
	tb.Helper()
	tb.Fatalf("%s: %s", d.Pos, fmt.Sprintf(format, args...))
}

// RunDataDriven runs every case of the file at path through f and compares
// f's output with the expected output. With -rewrite, the file is rewritten
// with the actual output instead. Each case runs in order in the same test,
// so cases may build on state left by earlier ones.
func RunDataDriven(t *testing.T, path string, f func(t *testing.T, d *TestData) string) {
	t.Helper()
	content, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	lines := strings.Split(string(content), "\n")
	cases, err := parseDataDriven(path, lines)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	next := 0 // next line of the file not yet copied to out
	for i := range cases {
		d := &cases[i]
		actual := f(t, d)
		if actual != "" && !strings.HasSuffix(actual, "\n") {
			actual += "\n"
		}
		if *rewrite {
			// Copy everything up to the end of the input, then the new output.
			end := d.line + 1 + strings.Count(d.Input, "\n")
			if d.Input != "" {
				end++
			}
			for ; next < end; next++ {
				out.WriteString(lines[next])
				out.WriteByte('\n')
			}
			next = skipCase(lines, end)
			if strings.Contains(strings.TrimSuffix(actual, "\n"), "\n\n") {
				out.WriteString("----\n----\n" + actual + "----\n----\n")
			} else {
				out.WriteString("----\n" + actual)
			}
			continue
		}
		if actual != d.Expected {
			t.Errorf("%s: %s\noutput mismatch\n--- expected\n%s--- actual\n%s", d.Pos, d.cmdLine(), d.Expected, actual)
		}
	}
	if *rewrite {
		for ; next < len(lines); next++ {
			out.WriteString(lines[next])
			if next != len(lines)-1 {
				out.WriteByte('\n')
			}
		}
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			t.Fatalf("rewrite %s: %v", path, err)
		}
	}
}

func (d *TestData) cmdLine() string {
	var b strings.Builder
	b.WriteString(d.Cmd)
	for _, a := range d.CmdArgs {
		b.WriteByte(' ')
		b.WriteString(a.String())
	}
	return b.String()
}

// skipCase returns the index of the line after the separator and the expected
// output that start at line i.
func skipCase(lines []string, i int) int {
	if i >= len(lines) || lines[i] != "----" {
		return i
	}
	i++
	if i < len(lines) && lines[i] == "----" {
		for i++; i < len(lines); i++ {
			if lines[i] == "----" && i+1 < len(lines) && lines[i+1] == "----" {
				return i + 2
			}
		}
		return i
	}
	for ; i < len(lines) && lines[i] != ""; i++ {
	}
	return i
}

func parseDataDriven(path string, lines []string) ([]TestData, error) {
	var cases []TestData
	for i := 0; i < len(lines); {
		line := strings.TrimSpace(lines[i])
		if line == "" || strings.HasPrefix(line, "#") {
			i++
			continue
		}
		d := TestData{Pos: fmt.Sprintf("%s:%d", path, i+1), line: i}
		if err := parseCmd(line, &d); err != nil {
			return nil, fmt.Errorf("%s: %w", d.Pos, err)
		}
		i++
		var input []string
		for ; i < len(lines) && lines[i] != "----"; i++ {
			if lines[i] == "" {
				return nil, fmt.Errorf("%s: blank line before the ---- separator", d.Pos)
			}
			input = append(input, lines[i])
		}
		if i >= len(lines) {
			return nil, fmt.Errorf("%s: missing ---- separator", d.Pos)
		}
		d.Input = strings.Join(input, "\n")
		i++ // the separator
		var expected strings.Builder
		if i < len(lines) && lines[i] == "----" {
			i++
			for ; i < len(lines); i++ {
				if lines[i] == "----" && i+1 < len(lines) && lines[i+1] == "----" {
					i += 2
					break
				}
				expected.WriteString(lines[i] + "\n")
			}
		} else {
			for ; i < len(lines) && lines[i] != ""; i++ {
				expected.WriteString(lines[i] + "\n")
			}
		}
		d.Expected = expected.String()
		cases = append(cases, d)
	}
	return cases, nil
}

func parseCmd(line string, d *TestData) error {
	fields := strings.Fields(line)
	d.Cmd = fields[0]
	for _, f := range fields[1:] {
		key, val, ok := strings.Cut(f, "=")
		a := CmdArg{Key: key}
		if ok {
			if strings.HasPrefix(val, "(") {
				if !strings.HasSuffix(val, ")") {
					return fmt.Errorf("argument %q: unbalanced parentheses", f)
				}
				val = val[1 : len(val)-1]
				if val != "" {
					a.Vals = strings.Split(val, ",")
				}
			} else {
				a.Vals = []string{val}
			}
		}
		d.CmdArgs = append(d.CmdArgs, a)
	}
	return nil
}

// ScanLines calls f for each non-empty line of s.
func ScanLines(s string, f func(line string)) {
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			f(l)
		}
	}
}
