package netem

import (
	"container/heap"
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Params is what the emulator does to each packet, in netem's terms.
type Params struct {
	// Delay is added to every packet; Jitter spreads it uniformly over
	// [Delay-Jitter, Delay+Jitter], which reorders packets as netem does.
	Delay, Jitter time.Duration
	// Loss is the percentage of packets dropped.
	Loss float64
	// Reorder is the percentage of packets sent at once instead of
	// delayed (netem's "reorder"), so they overtake the delayed ones.
	Reorder float64
	// Rate limits the link to this many bits per second (0: unlimited);
	// packets queue behind each other as on a slow link.
	Rate uint64
}

// String formats p as ParseParams reads it.
func (p Params) String() string {
	var f []string
	if p.Delay > 0 {
		f = append(f, "delay="+p.Delay.String())
	}
	if p.Jitter > 0 {
		f = append(f, "jitter="+p.Jitter.String())
	}
	if p.Loss > 0 {
		f = append(f, "loss="+strconv.FormatFloat(p.Loss, 'g', -1, 64))
	}
	if p.Reorder > 0 {
		f = append(f, "reorder="+strconv.FormatFloat(p.Reorder, 'g', -1, 64))
	}
	if p.Rate > 0 {
		f = append(f, "rate="+strconv.FormatUint(p.Rate, 10))
	}
	return strings.Join(f, ",")
}

// ParseParams reads "delay=20ms,jitter=5ms,loss=2,reorder=25,rate=100000000".
func ParseParams(s string) (Params, error) {
	var p Params
	for _, kv := range strings.Split(s, ",") {
		if kv == "" {
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		var err error
		switch k {
		case "delay":
			p.Delay, err = time.ParseDuration(v)
		case "jitter":
			p.Jitter, err = time.ParseDuration(v)
		case "loss":
			p.Loss, err = strconv.ParseFloat(v, 64)
		case "reorder":
			p.Reorder, err = strconv.ParseFloat(v, 64)
		case "rate":
			p.Rate, err = strconv.ParseUint(v, 10, 64)
		default:
			err = fmt.Errorf("unknown parameter")
		}
		if err != nil {
			return p, fmt.Errorf("netem parameter %q: %w", kv, err)
		}
	}
	return p, nil
}

// Stats counts what the emulator did.
type Stats struct {
	Packets, Dropped, Reordered uint64
}

type held struct {
	at time.Time
	id uint32
}

type heldHeap []held

func (h heldHeap) Len() int           { return len(h) }
func (h heldHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h heldHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *heldHeap) Push(x any)        { *h = append(*h, x.(held)) }
func (h *heldHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Run emulates p on q until ctx is done; each packet gets exactly one
// verdict (those still held at the end are accepted).
func Run(ctx context.Context, q *Queue, p Params, seed uint64) (Stats, error) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var (
		mu    sync.Mutex
		hq    heldHeap
		st    Stats
		wake  = make(chan struct{}, 1)
		link  time.Time // when the rate-limited link is free again
		rerr  = make(chan error, 1)
		alive = make(chan struct{})
	)
	go func() { // reader
		defer close(alive)
		buf := make([]byte, 1<<20)
		var ps []Packet
		var drop, now []uint32
		for {
			var err error
			ps, err = q.Read(buf, ps[:0])
			if err != nil {
				if ctx.Err() == nil {
					rerr <- err
				}
				return
			}
			drop, now = drop[:0], now[:0]
			t := time.Now()
			mu.Lock()
			for _, pk := range ps {
				st.Packets++
				if p.Loss > 0 && rng.Float64()*100 < p.Loss {
					st.Dropped++
					drop = append(drop, pk.ID)
					continue
				}
				at := t
				if p.Rate > 0 {
					if link.Before(t) {
						link = t
					}
					link = link.Add(time.Duration(float64(pk.Len*8) / float64(p.Rate) * float64(time.Second)))
					at = link
				}
				if p.Reorder > 0 && rng.Float64()*100 < p.Reorder {
					st.Reordered++
				} else {
					d := p.Delay
					if p.Jitter > 0 {
						d += time.Duration((rng.Float64()*2 - 1) * float64(p.Jitter))
					}
					at = at.Add(max(d, 0))
				}
				if !at.After(t) {
					now = append(now, pk.ID)
					continue
				}
				heap.Push(&hq, held{at: at, id: pk.ID})
			}
			mu.Unlock()
			if err := q.Verdicts(drop, false); err != nil {
				rerr <- err
				return
			}
			if err := q.Verdicts(now, true); err != nil {
				rerr <- err
				return
			}
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var due []uint32
	for {
		mu.Lock()
		t := time.Now()
		due = due[:0]
		for len(hq) > 0 && !hq[0].at.After(t) && len(due) < 512 {
			due = append(due, heap.Pop(&hq).(held).id)
		}
		next := time.Hour
		if len(hq) > 0 {
			next = hq[0].at.Sub(t)
		}
		mu.Unlock()
		if err := q.Verdicts(due, true); err != nil {
			return st, err
		}
		if len(due) == 512 {
			continue
		}
		timer.Reset(next)
		select {
		case <-ctx.Done():
			mu.Lock()
			due = due[:0]
			for len(hq) > 0 {
				due = append(due, heap.Pop(&hq).(held).id)
			}
			s := st
			mu.Unlock()
			for len(due) > 0 {
				n := min(len(due), 512)
				_ = q.Verdicts(due[:n], true)
				due = due[n:]
			}
			return s, nil
		case err := <-rerr:
			return st, err
		case <-wake:
		case <-timer.C:
		}
	}
}
