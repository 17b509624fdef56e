// Package doccheck holds the documentation's checks, run as tests by
// `make test`: README.md stays short (at most 400 lines), and every
// relative link in README.md and docs/**/*.md points at a file that exists
// and, when it names an #anchor, at a heading of that file.
package doccheck
