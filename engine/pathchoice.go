package engine

import (
	"log/slog"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// Measured path choice. For some memory ends two installed transports
// reach a peer by different routes, and which is faster depends on the
// machine: host memory on one side and GPU memory of another process on
// the other is copied either through a mapping of the GPU memory (nvlink:
// one cuMemcpy between the host memory and the mapping) or through a pinned
// staging buffer (shm: a memcpy into shared memory, then the owner's
// cuMemcpy from that pinned chunk). A pageable source makes the first slow
// on real GPUs; a small request makes the second's round trip dominate.
// So the engine measures instead of ranking: per peer, memory ends,
// direction and size class, it sends the first submissions alternately to
// both, keeps a moving average of each route's throughput (bytes of a
// submission's requests over the time until its last one completed), uses
// the faster one, and now and then sends one submission to the other to
// follow changes. Config.PathChoice pins the choice instead
// (KVFERRY_GPU_HOST_PATH).

// Alternative is implemented by a transport that can carry, by another
// route, requests that a better-ranked transport carries too; the engine
// then measures both (see above) instead of always taking the better-ranked.
type Alternative interface {
	// AlternativeTo reports whether the transport stands in for the
	// transport called name for requests between the memory of e.
	AlternativeTo(name string, e Ends) bool
}

// Path-choice tuning.
const (
	// pathCalibration is how many submissions each route gets first.
	pathCalibration = 3
	// pathReprobeMin and pathReprobeMax bound the pause between two
	// submissions sent to the slower route; it doubles each time the
	// slower route is confirmed slower.
	pathReprobeMin = time.Second
	pathReprobeMax = 64 * time.Second
	// pathFailurePause is how long a route whose submission failed is
	// left alone (unless the other failed too).
	pathFailurePause = 10 * time.Second
	// pathSizeClasses is the number of size classes (powers of four from
	// 16 KiB up to more than 16 MiB).
	pathSizeClasses = 7
)

// sizeClass returns the size class of a request of n bytes: 0 up to
// 16 KiB, then one class per power of four, the last above 16 MiB.
func sizeClass(n uint64) uint8 {
	c := (bits.Len64(max(n, 1)-1) - 13) / 2
	return uint8(min(max(c, 0), pathSizeClasses-1))
}

// measuredEnds completes e with the request's direction and size class
// when its memory ends are ones alternatives may exist for: GPU device
// memory at exactly one end.
func measuredEnds(e Ends, op OpCode, n uint64) Ends {
	if (e.Local == MemoryDevice) != (e.Remote == MemoryDevice) {
		e.Op, e.SizeClass = op, sizeClass(n)+1
	}
	return e
}

// measured reports whether e came from measuredEnds with a class set.
func (e Ends) measured() bool { return e.SizeClass != 0 }

// pathRoute is one of the two routes of a pathStats.
type pathRoute struct {
	name     string
	nsPerKiB float64 // moving average; 0 before the first sample
	samples  int
	inflight int
	lastUse  time.Time
	failedAt time.Time
}

// pathStats measures the two routes for one (peer, memory ends).
type pathStats struct {
	log     *slog.Logger // nil: quiet
	mu      sync.Mutex
	routes  [2]pathRoute // [0] the better-ranked transport
	best    int
	reprobe time.Duration
	switchs uint64
}

// pathProbe measures one submission's requests on one route: the last of
// them to finish records the route's throughput.
type pathProbe struct {
	ps        *pathStats
	route     int
	start     time.Time
	bytes     uint64
	remaining atomic.Int32
	failed    atomic.Bool
	canceled  atomic.Bool // not the route's fault: no sample
}

// pick returns the route (0 or 1) for the next submission and its probe.
func (ps *pathStats) pick(now time.Time) *pathProbe {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	r := ps.choose(now)
	ps.routes[r].inflight++
	ps.routes[r].lastUse = now
	return &pathProbe{ps: ps, route: r, start: now}
}

func (ps *pathStats) choose(now time.Time) int {
	a, b := &ps.routes[0], &ps.routes[1]
	aFailed := !a.failedAt.IsZero() && now.Sub(a.failedAt) < pathFailurePause
	bFailed := !b.failedAt.IsZero() && now.Sub(b.failedAt) < pathFailurePause
	switch {
	case aFailed && !bFailed:
		return 1
	case bFailed && !aFailed:
		return 0
	}
	// Calibration: the route with fewer samples (counting submissions in
	// flight, so that concurrent submitters do not all take one route).
	na, nb := a.samples+a.inflight, b.samples+b.inflight
	if a.samples < pathCalibration || b.samples < pathCalibration {
		if nb < na {
			return 1
		}
		return 0
	}
	other := 1 - ps.best
	if o := &ps.routes[other]; o.inflight == 0 && now.Sub(o.lastUse) >= ps.reprobe {
		return other
	}
	return ps.best
}

// done records the outcome of the probe's submission.
func (pp *pathProbe) done(now time.Time) {
	ps := pp.ps
	ps.mu.Lock()
	defer ps.mu.Unlock()
	r := &ps.routes[pp.route]
	r.inflight--
	switch {
	case pp.failed.Load():
		r.failedAt = now
		return
	case pp.canceled.Load():
		return
	}
	cost := float64(now.Sub(pp.start).Nanoseconds()) * 1024 / float64(max(pp.bytes, 1))
	if r.samples == 0 {
		r.nsPerKiB = cost
	} else {
		r.nsPerKiB = (r.nsPerKiB + cost) / 2
	}
	r.samples++
	a, b := &ps.routes[0], &ps.routes[1]
	if a.samples < pathCalibration || b.samples < pathCalibration {
		return
	}
	best := 0
	if b.nsPerKiB < a.nsPerKiB {
		best = 1
	}
	switch {
	case ps.reprobe == 0 || best != ps.best:
		if ps.reprobe != 0 {
			ps.switchs++
		}
		ps.best, ps.reprobe = best, pathReprobeMin
		if ps.log != nil {
			ps.log.Info("route measured", "using", ps.routes[best].name,
				ps.routes[0].name+"_MBps", int(1024*1e3/max(a.nsPerKiB, 1)), ps.routes[1].name+"_MBps", int(1024*1e3/max(b.nsPerKiB, 1)))
		}
	case pp.route != ps.best:
		// The slower route, probed, is still slower: probe it less often.
		ps.reprobe = min(2*ps.reprobe, pathReprobeMax)
	}
}

// PathChoice reports a measured choice between two routes to a peer (see
// Engine.PathChoices).
type PathChoice struct {
	// Segment is the peer.
	Segment string
	// Ends are the memory ends, direction and size class measured.
	Ends Ends
	// Routes are the two transports, the better-ranked first.
	Routes [2]string
	// MBps is each route's measured throughput (MB/s; 0 before a sample).
	MBps [2]float64
	// Samples counts each route's measured submissions.
	Samples [2]int
	// Best is the route in use (index into Routes).
	Best int
	// Switches counts how often the choice changed after calibration.
	Switches uint64
}

// PathChoices lists the measured route choices of every open peer.
func (e *Engine) PathChoices() []PathChoice {
	var out []PathChoice
	e.segments.RLock()
	peers := make([]*Peer, 0, len(e.segments.byName))
	for _, p := range e.segments.byName {
		peers = append(peers, p)
	}
	e.segments.RUnlock()
	for _, p := range peers {
		p.paths.Range(func(k, v any) bool {
			ps := v.(*pathStats)
			ps.mu.Lock()
			c := PathChoice{Segment: p.Name, Ends: k.(Ends), Best: ps.best, Switches: ps.switchs}
			for i, r := range ps.routes {
				c.Routes[i], c.Samples[i] = r.name, r.samples
				if r.nsPerKiB > 0 {
					c.MBps[i] = 1024 * 1e3 / r.nsPerKiB
				}
			}
			ps.mu.Unlock()
			out = append(out, c)
			return true
		})
	}
	return out
}

// pathFor returns p's measurement for ends between routes a and b; log
// receives its decisions.
func (p *Peer) pathFor(ends Ends, a, b string, log *slog.Logger) *pathStats {
	if v, ok := p.paths.Load(ends); ok {
		ps := v.(*pathStats)
		if ps.routes[0].name == a && ps.routes[1].name == b {
			return ps
		}
	}
	ps := &pathStats{}
	ps.routes[0].name, ps.routes[1].name = a, b
	if log != nil {
		ps.log = log.With("segment", p.Name, "local", ends.Local, "remote", ends.Remote, "op", ends.Op, "size_class", ends.SizeClass-1)
	}
	v, _ := p.paths.LoadOrStore(ends, ps)
	if got := v.(*pathStats); got.routes[0].name == a && got.routes[1].name == b {
		return got
	}
	p.paths.Store(ends, ps) // the transports changed
	return ps
}

// taskDone counts one of the probe's requests as ended in state st; the
// last one records the submission.
func (pp *pathProbe) taskDone(st TaskState) {
	switch st {
	case StateFailed:
		pp.failed.Store(true)
	case StateCanceled:
		pp.canceled.Store(true)
	}
	if pp.remaining.Add(-1) == 0 {
		pp.done(time.Now())
	}
}

// abandon releases a probe none of whose requests ran.
func (pp *pathProbe) abandon() {
	pp.canceled.Store(true)
	pp.done(time.Now())
}
