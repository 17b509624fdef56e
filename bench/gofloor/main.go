// Command gofloor is bench/pingpong.c in Go: the round-trip floor of a Go
// process on loopback TCP, with the Go runtime's scheduler and the polling
// primitive the engine uses (internal/spin), and nothing of the engine.
// Beside pingpong.c's C floor it tells what of a transfer's latency, and of
// its tail, the runtime alone costs on this machine.
//
// Two processes (it runs itself as the server): the client writes a
// request of -q bytes, the server reads it whole and answers -r bytes, the
// client reads the answer whole; one round trip per iteration, one in
// flight, TCP_NODELAY on both sides. Reads either block (the network
// poller parks the goroutine: thread wake-ups per round trip) or poll
// (-s: spin.Reader, yielding between polls as the engine's waits do, for
// up to spin.Max before a blocking read).
//
//	gofloor [-s] [-q REQ] [-r RESP] [-n ITERS] [-w WARMUP]
//
// Prints one JSON object, as pingpong.c does: mode, bytes, iterations,
// mean/p50/p99 in µs. Loopback only.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"time"

	"github.com/kvferry/kvferry/internal/spin"
)

var (
	spinning = flag.Bool("s", false, "poll the socket (default: blocking reads)")
	reqBytes = flag.Int("q", 4096, "request bytes")
	rspBytes = flag.Int("r", 8, "answer bytes")
	iters    = flag.Int("n", 20000, "timed round trips")
	warm     = flag.Int("w", 2000, "untimed round trips first")
	serve    = flag.String("serve", "", "internal: run as the server on this listening address's descriptor")
)

// result is pingpong.c's JSON line.
type result struct {
	Mode       string  `json:"mode"`
	ReqBytes   int     `json:"req_bytes"`
	RespBytes  int     `json:"resp_bytes"`
	Iterations int     `json:"iterations"`
	MeanUS     float64 `json:"mean_us"`
	P50US      float64 `json:"p50_us"`
	P99US      float64 `json:"p99_us"`
}

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "gofloor:", err)
		os.Exit(1)
	}
}

func run() error {
	if *serve != "" {
		return server()
	}
	if *reqBytes < 1 || *rspBytes < 1 || *iters < 1 || *warm < 0 {
		return fmt.Errorf("sizes and iterations must be positive")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	args := append([]string{"-serve", "fd3"}, os.Args[1:]...)
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		return fmt.Errorf("listener descriptor: %w", err)
	}
	srv := exec.Command(os.Args[0], args...)
	srv.ExtraFiles = []*os.File{f}
	srv.Stderr = os.Stderr
	if err := srv.Start(); err != nil {
		return fmt.Errorf("start the server: %w", err)
	}
	f.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	ln.Close()
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	rd := newReader(c)
	q, r := make([]byte, *reqBytes), make([]byte, *rspBytes)
	lat := make([]time.Duration, 0, *iters)
	var sum time.Duration
	for i := -*warm; i < *iters; i++ {
		t0 := time.Now()
		q[len(q)-1] = byte(i)
		if _, err := c.Write(q); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		if err := rd.full(r); err != nil {
			return fmt.Errorf("read the answer: %w", err)
		}
		if d := time.Since(t0); i >= 0 {
			lat = append(lat, d)
			sum += d
		}
	}
	c.Close()
	_ = srv.Wait()
	slices.Sort(lat)
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	mode := "block"
	if *spinning {
		mode = "spin"
	}
	return json.NewEncoder(os.Stdout).Encode(result{Mode: mode, ReqBytes: *reqBytes, RespBytes: *rspBytes, Iterations: *iters,
		MeanUS: us(sum) / float64(*iters), P50US: us(lat[len(lat)/2]), P99US: us(lat[int(float64(len(lat))*0.99)])})
}

// server answers every whole request until the client hangs up.
func server() error {
	ln, err := net.FileListener(os.NewFile(3, "listener"))
	if err != nil {
		return fmt.Errorf("listener: %w", err)
	}
	c, err := ln.Accept()
	ln.Close()
	if err != nil {
		return fmt.Errorf("accept: %w", err)
	}
	defer c.Close()
	rd := newReader(c)
	q, r := make([]byte, *reqBytes), make([]byte, *rspBytes)
	for {
		if err := rd.full(q); err == io.EOF {
			return nil
		} else if err != nil {
			return fmt.Errorf("read a request: %w", err)
		}
		r[0] = q[len(q)-1]
		if _, err := c.Write(r); err != nil {
			return fmt.Errorf("write: %w", err)
		}
	}
}

// reader reads whole messages, polling first when spinning.
type reader struct {
	c  net.Conn
	rd io.Reader
}

func newReader(c net.Conn) *reader {
	_ = c.(*net.TCPConn).SetNoDelay(true)
	rd := io.Reader(c)
	if *spinning {
		rd = spin.Reading(c, spin.Max, true)
	}
	return &reader{c: c, rd: rd}
}

// full reads len(b) bytes; io.EOF when the stream ended before any.
func (r *reader) full(b []byte) error {
	_, err := io.ReadFull(r.rd, b)
	return err
}
