//go:build !linux

package client

import "github.com/kvferry/kvferry/internal/cmem"

// mapSegment maps n bytes of anonymous memory for the lent segment; huge
// pages are a Linux feature.
func mapSegment(n uint64, populate, _ bool) (*cmem.Map, error) {
	if populate {
		return cmem.MapAnonPopulate(n)
	}
	return cmem.MapAnon(n)
}

// mapGlobal maps the lent segment: anonymous memory (memfds are Linux's).
func mapGlobal(n uint64, populate, huge, _ bool) (segmentMemory, error) {
	return mapSegment(n, populate, huge)
}
