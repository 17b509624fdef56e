package doccheck

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"gotest.tools/v3/assert"
)

// maxReadmeLines is issue 33's bound on README.md.
const maxReadmeLines = 400

func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	assert.NilError(t, err)
	return dir
}

// markdownFiles returns README.md and every .md file under docs/, relative
// to the module root, with '/'.
func markdownFiles(t *testing.T, r string) []string {
	t.Helper()
	files := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(r, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, err := filepath.Rel(r, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	assert.NilError(t, err)
	return files
}

var (
	fenceRe   = regexp.MustCompile("^\\s*(```|~~~)")
	headingRe = regexp.MustCompile(`^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	// [text](target) and ![alt](target); the text may hold one level of
	// brackets; the target ends at whitespace or ')'.
	linkRe = regexp.MustCompile(`!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^\s)>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// inline code spans, removed before links are looked for.
	codeSpanRe = regexp.MustCompile("`[^`]*`")
	// a link inside a heading, whose text counts in the anchor.
	headingLinkRe = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	// explicit anchors: <a name="x"> or id="x".
	htmlAnchorRe = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
)

// proseLines returns the lines outside fenced and indented code blocks,
// with their 1-based numbers.
func proseLines(src string) (lines []string, numbers []int) {
	inFence := false
	prevBlank := true
	for i, line := range strings.Split(src, "\n") {
		if fenceRe.MatchString(line) {
			inFence = !inFence
			prevBlank = false
			continue
		}
		if inFence {
			continue
		}
		// An indented code block starts after a blank line.
		if prevBlank && (strings.HasPrefix(line, "    ") || strings.HasPrefix(line, "\t")) {
			continue
		}
		prevBlank = strings.TrimSpace(line) == ""
		lines = append(lines, line)
		numbers = append(numbers, i+1)
	}
	return lines, numbers
}

// slug is GitHub's anchor for a heading: markup dropped, lower case,
// every character but letters, digits, spaces, '-' and '_' removed, then
// spaces turned into '-'.
func slug(heading string) string {
	h := headingLinkRe.ReplaceAllString(heading, "$1") // links: their text
	h = strings.ToLower(h)
	var b strings.Builder
	for _, r := range h {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// anchors returns the anchors of a markdown file's headings, numbered as
// GitHub numbers repeated ones ("x", "x-1", ...), plus explicit HTML ones.
func anchors(src string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	lines, _ := proseLines(src)
	for _, line := range lines {
		for _, m := range htmlAnchorRe.FindAllStringSubmatch(line, -1) {
			out[m[1]] = true
		}
		m := headingRe.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		s := slug(m[2])
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

type link struct {
	line   int
	target string
}

func links(src string) []link {
	var out []link
	lines, numbers := proseLines(src)
	for i, line := range lines {
		line = codeSpanRe.ReplaceAllString(line, "")
		for _, m := range linkRe.FindAllStringSubmatch(line, -1) {
			out = append(out, link{numbers[i], m[1]})
		}
	}
	return out
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"Use from C (Mooncake's Transfer Engine C API)":   "use-from-c-mooncakes-transfer-engine-c-api",
		"Living inside someone else's process":            "living-inside-someone-elses-process",
		"The batch-1 tail against the Go runtime's floor": "the-batch-1-tail-against-the-go-runtimes-floor",
		"What `kvferry.h` adds":                           "what-kvferryh-adds",
		"NIXL plugin, and against UCX":                    "nixl-plugin-and-against-ucx",
		"a_b  c":                                          "a_b--c",
	} {
		assert.Equal(t, slug(in), want, in)
	}
}

func TestLinksAndAnchors(t *testing.T) {
	src := "# Top\n\nSee [a](b.md#x), ![img](../p.png) and [c](#top).\n" +
		"`[not](code.md)`\n\n```\n[not](fenced.md)\n```\n\n    [not](indented.md)\n\n" +
		"## Top\n[d](https://example.com/x#y)\n"
	var got []string
	for _, l := range links(src) {
		got = append(got, fmt.Sprintf("%d:%s", l.line, l.target))
	}
	assert.DeepEqual(t, got, []string{"3:b.md#x", "3:../p.png", "3:#top", "13:https://example.com/x#y"})
	assert.DeepEqual(t, anchors(src), map[string]bool{"top": true, "top-1": true})
}

func TestReadmeIsShort(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(root(t), "README.md"))
	assert.NilError(t, err)
	n := strings.Count(string(src), "\n")
	if len(src) > 0 && src[len(src)-1] != '\n' {
		n++
	}
	assert.Assert(t, n <= maxReadmeLines, "README.md has %d lines; at most %d (issue 33): move detail to docs/guide or docs/reports", n, maxReadmeLines)
}

// TestRelativeLinks checks every relative link of README.md and docs/**/*.md:
// its file exists, and its #anchor is a heading of the file it points at.
func TestRelativeLinks(t *testing.T) {
	r := root(t)
	files := markdownFiles(t, r)
	assert.Assert(t, len(files) > 1, "no docs/**/*.md found")
	anchorCache := map[string]map[string]bool{}
	anchorsOf := func(rel string) (map[string]bool, error) {
		if a, ok := anchorCache[rel]; ok {
			return a, nil
		}
		src, err := os.ReadFile(filepath.Join(r, filepath.FromSlash(rel)))
		if err != nil {
			return nil, err
		}
		a := anchors(string(src))
		anchorCache[rel] = a
		return a, nil
	}
	checked := 0
	var problems []string
	for _, file := range files {
		src, err := os.ReadFile(filepath.Join(r, filepath.FromSlash(file)))
		assert.NilError(t, err)
		for _, l := range links(string(src)) {
			target := l.target
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue // not relative
			}
			path, frag, _ := strings.Cut(target, "#")
			rel := file
			if path != "" {
				if strings.HasPrefix(path, "/") {
					problems = append(problems, fmt.Sprintf("%s:%d: %s: absolute path; use a relative one", file, l.line, target))
					continue
				}
				rel = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(file), filepath.FromSlash(path))))
				if rel == ".." || strings.HasPrefix(rel, "../") {
					problems = append(problems, fmt.Sprintf("%s:%d: %s: outside the repository", file, l.line, target))
					continue
				}
				if _, err := os.Stat(filepath.Join(r, filepath.FromSlash(rel))); err != nil {
					problems = append(problems, fmt.Sprintf("%s:%d: %s: %s does not exist", file, l.line, target, rel))
					continue
				}
			}
			checked++
			if frag == "" {
				continue
			}
			if !strings.HasSuffix(rel, ".md") {
				problems = append(problems, fmt.Sprintf("%s:%d: %s: an anchor into a file that is not markdown", file, l.line, target))
				continue
			}
			a, err := anchorsOf(rel)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s:%d: %s: %v", file, l.line, target, err))
				continue
			}
			if !a[strings.ToLower(frag)] {
				problems = append(problems, fmt.Sprintf("%s:%d: %s: no heading of %s has the anchor #%s", file, l.line, target, rel, frag))
			}
		}
	}
	assert.Assert(t, len(problems) == 0, "broken links:\n%s", strings.Join(problems, "\n"))
	assert.Assert(t, checked > 0, "no relative links found")
	t.Logf("%d files, %d relative links checked", len(files), checked)
}
