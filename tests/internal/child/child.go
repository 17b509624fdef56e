// Package child is the child's side of the multi-process suites' line
// protocol (tests/internal/proc is the parent's): a peer or agent reads
// one command a line on its standard input and answers each on its
// standard output.
package child

import (
	"bufio"
	"io"
	"strings"
)

// Quit is the command that ends a child's command loop.
const Quit = "quit"

// Serve calls do with the fields of each non-empty line of in, in order,
// until in ends or a line's first field is Quit; it reports whether Quit
// came. Lines longer than 1 MiB end the loop as the end of in does.
func Serve(in io.Reader, do func(fields []string)) (quit bool) {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if f[0] == Quit {
			return true
		}
		do(f)
	}
	return false
}
