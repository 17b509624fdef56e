package testutil

import (
	"encoding/json"
	"os"
	"sync"
)

// Results appends one JSON line per result to a file (the long suites'
// result tables: tests/faults, tests/kill). A Results for no file, or
// whose file could not be opened, records nothing. Safe for concurrent use.
type Results struct {
	mu sync.Mutex
	f  *os.File
}

// OpenResults opens path for appending ("" records nothing).
func OpenResults(path string) *Results {
	r := &Results{}
	if path != "" {
		if f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err == nil {
			r.f = f
		}
	}
	return r
}

// Add appends v as one JSON line.
func (r *Results) Add(v any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f != nil {
		b, _ := json.Marshal(v)
		r.f.Write(append(b, '\n'))
	}
}

// Close closes the file.
func (r *Results) Close() {
	if r.f != nil {
		r.f.Close()
	}
}
