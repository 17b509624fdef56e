package metrics

import (
	"sync"
	"sync/atomic"
)

// Other is the label value that names every peer (or segment) beyond a
// Folder's cap.
const Other = "other"

// DefaultPeerCap is how many distinct peers get their own peer label in a
// process (KVFERRY_METRICS_MAX_PEERS); the rest share "other".
const DefaultPeerCap = 64

// Folder bounds a label's cardinality: the first Cap distinct names keep
// their own value, for as long as the Folder lives (so a series never
// changes its name), and every later name maps to Other.
type Folder struct {
	cap atomic.Int64
	mu  sync.RWMutex
	m   map[string]struct{}
}

// NewFolder returns a Folder keeping up to limit names.
func NewFolder(limit int) *Folder {
	f := &Folder{m: make(map[string]struct{})}
	f.cap.Store(int64(limit))
	return f
}

// SetCap changes the cap; names already admitted keep their label.
func (f *Folder) SetCap(limit int) { f.cap.Store(int64(limit)) }

// Label returns name, or Other when name is beyond the cap. An empty name
// reads as Other too.
func (f *Folder) Label(name string) string {
	if name == "" || name == Other {
		return Other
	}
	f.mu.RLock()
	_, ok := f.m[name]
	n := len(f.m)
	f.mu.RUnlock()
	if ok {
		return name
	}
	if int64(n) >= f.cap.Load() {
		return Other
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.m[name]; ok {
		return name
	}
	if int64(len(f.m)) >= f.cap.Load() {
		return Other
	}
	f.m[name] = struct{}{}
	return name
}

// peers is the process-wide folder of peer labels.
var peers = NewFolder(DefaultPeerCap)

// PeerLabel returns the peer label for the segment called name.
func PeerLabel(name string) string { return peers.Label(name) }

// SetPeerCap sets the process-wide peer label cap.
func SetPeerCap(limit int) { peers.SetCap(limit) }
