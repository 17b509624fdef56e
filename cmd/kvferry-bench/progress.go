package main

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// progress reports a run on stderr: on a terminal a bar redrawn ten times
// a second, otherwise one plain line per second.
type progress struct {
	done chan struct{}
	wg   sync.WaitGroup
	tty  bool
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// startProgress starts reporting label; frac says how far the run is
// (0..1) after el, moved returns the bytes moved so far.
func startProgress(label string, frac func(el time.Duration) float64, moved func() uint64) *progress {
	p := &progress{done: make(chan struct{}), tty: isTerminal(os.Stderr)}
	every := time.Second
	if p.tty {
		every = 100 * time.Millisecond
	}
	start := time.Now()
	p.wg.Add(1)
	go func() { // stopped by stop
		defer p.wg.Done()
		tick := time.NewTicker(every)
		defer tick.Stop()
		var last uint64
		lastT := start
		rate := 0.0
		for {
			select {
			case <-p.done:
				if p.tty {
					fmt.Fprint(os.Stderr, "\r\033[K")
				}
				return
			case now := <-tick.C:
				n := moved()
				if dt := now.Sub(lastT).Seconds(); dt >= 0.5 || !p.tty {
					rate = float64(n-last) / dt
					last, lastT = n, now
				}
				el := now.Sub(start)
				f := max(0, min(frac(el), 1))
				if p.tty {
					const width = 30
					fill := int(f * width)
					fmt.Fprintf(os.Stderr, "\r\033[K%s [%s%s] %3.0f%% %5.1fs %s", label,
						strings.Repeat("=", fill), strings.Repeat(" ", width-fill), 100*f, el.Seconds(), formatRate(rate))
				} else {
					fmt.Fprintf(os.Stderr, "%s: %3.0f%% after %.0fs, %s\n", label, 100*f, el.Seconds(), formatRate(rate))
				}
			}
		}
	}()
	return p
}

// stop ends the report (nil-safe).
func (p *progress) stop() {
	if p == nil {
		return
	}
	close(p.done)
	p.wg.Wait()
}
