package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kvferry/kvferry/engine"
)

// The notification round trip (--operation=notify): the initiator sends a
// ping to the target's segment and waits until a pong, which the target
// sends back as soon as it sees the ping, arrives in its own queue. One
// round trip is two notifications, each delivered and seen by the
// receiving application (Notify returns once the peer accepted it); the
// target answers every ping without being told to.
//
// The ping also carries the moment it was sent (CLOCK_MONOTONIC, which
// every process of a host shares), and the target answers with how long
// it took until its application saw it: the delivery of one notification
// (sent to the peer, seen by the peer's application), which is what the
// latency target names, measured without the pong's way back. The time
// the sender's Notify call takes (until the peer's acceptance comes back)
// is measured too.
const (
	notifyPing = "kvferry-bench-ping" // Msg: the sender's segment name, '\n', the send time in ns
	notifyPong = "kvferry-bench-pong" // Msg: the ping's delivery time in ns
)

// monoNanos reads CLOCK_MONOTONIC: the same clock in every process of
// this host, so one process can time what another saw.
func monoNanos() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return ts.Nano()
}

// parsePing splits a ping's message into the sender's segment name and
// the time it was sent.
func parsePing(msg string) (segment string, sent int64, ok bool) {
	i := strings.LastIndexByte(msg, '\n')
	if i < 0 {
		return msg, 0, false
	}
	sent, err := strconv.ParseInt(msg[i+1:], 10, 64)
	return msg[:i], sent, err == nil
}

// echoNotifications answers pings until ctx ends (a target's goroutine).
func echoNotifications(ctx context.Context, e *engine.Engine) {
	for ctx.Err() == nil {
		for _, n := range e.WaitNotifications(ctx) {
			if n.Name != notifyPing {
				continue
			}
			seen := monoNanos()
			name, sent, ok := parsePing(n.Msg)
			pong := engine.Notification{Name: notifyPong}
			if ok {
				pong.Msg = strconv.FormatInt(seen-sent, 10)
			}
			seg, err := e.OpenSegment(ctx, name)
			if err == nil {
				err = e.Notify(ctx, seg, pong)
			}
			if err != nil && ctx.Err() == nil {
				fmt.Fprintln(os.Stderr, "kvferry-bench: answer a ping:", err)
			}
		}
	}
}

// notifyPoint runs ping-pongs for --duration seconds (after 200 untimed
// ones) with one thread, and reports them as batches of one.
func notifyPoint(ctx context.Context, e *engine.Engine, seg engine.SegmentID) (Result, error) {
	var lat, deliver, accept samples
	timed := false // whether the round trips count
	var mu sync.Mutex
	pending := 0 // pongs received and not yet counted
	one := func() error {
		t0 := monoNanos()
		ping := engine.Notification{Name: notifyPing, Msg: e.SegmentName() + "\n" + strconv.FormatInt(t0, 10)}
		if err := e.Notify(ctx, seg, ping); err != nil {
			return err
		}
		if timed {
			accept.add(time.Duration(monoNanos() - t0))
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		for {
			mu.Lock()
			if pending > 0 {
				pending--
				mu.Unlock()
				return nil
			}
			mu.Unlock()
			ns := e.WaitNotifications(wctx)
			if wctx.Err() != nil {
				return fmt.Errorf("no pong within 10 s")
			}
			mu.Lock()
			for _, n := range ns {
				if n.Name != notifyPong {
					continue
				}
				pending++
				if d, err := strconv.ParseInt(n.Msg, 10, 64); err == nil && timed {
					deliver.add(time.Duration(d))
				}
			}
			mu.Unlock()
		}
	}
	for range 200 {
		if err := one(); err != nil {
			return Result{}, err
		}
	}
	var n, latNanos uint64
	timed = true
	cpu0, csw0 := cpuTime(), ctxSwitches()
	start := time.Now()
	end := start.Add(time.Duration(*duration) * time.Second)
	for time.Now().Before(end) && ctx.Err() == nil {
		t0 := time.Now()
		if err := one(); err != nil {
			return Result{}, err
		}
		d := time.Since(t0)
		lat.add(d)
		latNanos += uint64(d)
		n++
	}
	elapsed, cpu, csw := time.Since(start).Seconds(), cpuTime()-cpu0, ctxSwitches()-csw0
	r := Result{Operation: "notify", BlockSize: 0, BatchSize: 1, Threads: 1, Duration: elapsed, Batches: n,
		OpsPerSec: float64(n) / elapsed, Transport: "rpc"}
	if n > 0 {
		r.CPUPerOpUs = float64(cpu) / 1e3 / float64(n)
		r.CtxSwitchesPerOp = float64(csw) / float64(n)
		r.AvgBatchUs = float64(latNanos) / float64(n) / 1e3
		r.P50BatchUs, r.P99BatchUs = percentiles([]*samples{&lat})
		r.P50DeliverUs, r.P99DeliverUs = percentiles([]*samples{&deliver})
		r.P50AcceptUs, r.P99AcceptUs = percentiles([]*samples{&accept})
		if *samplesFile != "" {
			if err := writeSamples(*samplesFile, []*samples{&lat}); err != nil {
				return r, err
			}
		}
	}
	return r, nil
}

// notifyInitiator runs the notification round trips against --segment_id
// and prints the result as a transfer run's.
func notifyInitiator(ctx context.Context, e *engine.Engine) error {
	seg, err := e.OpenSegment(ctx, *segmentID)
	if err != nil {
		return err
	}
	r, err := notifyPoint(ctx, e, seg)
	if err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	if *jsonOut {
		return json.NewEncoder(os.Stdout).Encode(r)
	}
	fmt.Printf("Test completed: duration %.2f, %d notification round trips, %.0f/s, avg %.1f us (p50 %.1f, p99 %.1f); one notification sent and seen by the peer: p50 %.1f us, p99 %.1f; the Notify call: p50 %.1f us, p99 %.1f\n",
		r.Duration, r.Batches, r.OpsPerSec, r.AvgBatchUs, r.P50BatchUs, r.P99BatchUs, r.P50DeliverUs, r.P99DeliverUs, r.P50AcceptUs, r.P99AcceptUs)
	return nil
}
