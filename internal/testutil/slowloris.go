package testutil

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Slowloris keeps n connections to addr open from this host, each having
// sent prefix (the first bytes of a frame header, say) and nothing more,
// and reconnects each one the server cuts, until Stop. Dials that fail
// (an accept queue full) are retried every 10 ms.
type Slowloris struct {
	stop  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup
	dials atomic.Int64
}

// StartSlowloris starts the attack.
func StartSlowloris(addr string, n int, prefix []byte) *Slowloris {
	a := &Slowloris{stop: make(chan struct{})}
	for range n {
		a.wg.Add(1)
		go a.run(addr, prefix) // owned by a; stopped by Stop
	}
	return a
}

// Dials returns the connections made so far.
func (a *Slowloris) Dials() int64 { return a.dials.Load() }

// Stop ends the attack: its connections close and Stop waits for them.
func (a *Slowloris) Stop() {
	a.once.Do(func() { close(a.stop) })
	a.wg.Wait()
}

func (a *Slowloris) run(addr string, prefix []byte) {
	defer a.wg.Done()
	d := net.Dialer{Timeout: time.Second}
	var b [1]byte
	for {
		select {
		case <-a.stop:
			return
		default:
		}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			select {
			case <-a.stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		a.dials.Add(1)
		_, _ = c.Write(prefix)
		cut := make(chan struct{})
		go func() { // closes c on Stop; ends when c is cut
			select {
			case <-a.stop:
				c.Close()
			case <-cut:
			}
		}()
		_, _ = c.Read(b[:]) // until the server cuts it (or Stop)
		close(cut)
		c.Close()
	}
}
