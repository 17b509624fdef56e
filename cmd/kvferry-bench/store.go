package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/internal/cmem"
	"github.com/kvferry/kvferry/internal/hostenv"
	"github.com/kvferry/kvferry/store/client"
	"github.com/kvferry/kvferry/store/embedded"
)

var (
	storeFlags = flag.NewFlagSet("kvferry-bench store", flag.ExitOnError)
	sMode      = storeFlags.String("mode", "run", "holder, run or latency")
	sMaster    = storeFlags.String("master", "127.0.0.1:50051", "master address (host:port or etcd://...)")
	sSegment   = storeFlags.Uint64("segment", 4<<30, "holder: bytes lent to the store")
	sOp        = storeFlags.String("op", "both", "run: put, get or both")
	sSize      = storeFlags.Uint64("size", 1<<20, "value size in bytes")
	sThreads   = storeFlags.Int("threads", 1, "client goroutines")
	sOps       = storeFlags.Int("ops", 400, "operations in total (split over the threads)")
	sPrefix    = storeFlags.String("prefix", "b", "key prefix")
	sLocalSeg  = storeFlags.Uint64("local_segment", 0, "run, latency: bytes the runner itself lends (with -master=embedded: single-process mode)")
	sSegHuge   = storeFlags.Bool("segment_hugepages", true, "advise the lent memory for transparent huge pages (the store's default)")
	sRPC       = storeFlags.String("master_rpc", "auto", "how to call a remote master: auto (mux, else gRPC), mux or grpc")
	sSpec      = storeFlags.Bool("speculative_gets", true, "read a hinted replica during the master round trip (the store's default; store/client spec.go)")
	sRedisAt   = storeFlags.String("redis", "127.0.0.1:6379", "redis: the redis-server address")
	sCPUProf   = storeFlags.String("cpuprofile", "", "write a Go CPU profile of the whole run to this file")
	sQuiet     = storeFlags.Bool("quiet", false, "no progress on stderr")
	sKeep      = storeFlags.Bool("keep", false, "run: keep the objects at the end (default: remove them)")
)

// StoreResult is one measured phase.
type StoreResult struct {
	Op      string  `json:"op"`
	Size    uint64  `json:"size"`
	Threads int     `json:"threads"`
	Ops     int     `json:"ops"`
	Seconds float64 `json:"seconds"`
	OpsPerS float64 `json:"ops_per_s"`
	GBps    float64 `json:"gb_per_s"`
	Errors  int     `json:"errors"`
	// Transports counts the engine slices of the phase by transport (cma
	// between processes of this host; none when every replica is local).
	Transports map[string]uint64 `json:"transports"`
}

// storeMain runs `kvferry-bench store ARGS`, which measures the kvferry store between processes (what
// bench/store.sh runs; it was bench/storebench):
//
//	kvferry-bench store -mode=holder -master=127.0.0.1:50051 -segment=4294967296
//	kvferry-bench store -mode=run -master=127.0.0.1:50051 -op=put -size=1048576 -threads=4 -ops=400
//	kvferry-bench store -mode=latency -master=127.0.0.1:50051 -size=4096 -ops=2000
//	kvferry-bench store -mode=run -master=embedded -local_segment=4294967296 ...
//	kvferry-bench store -mode=redis -redis=127.0.0.1:6379 -size=1048576 -threads=4 -ops=400
//
// The holder lends memory to the store and serves it until stdin closes
// (like redis-server holding the data). The runner is a pure client (it
// lends nothing, as redis-benchmark): every byte goes to or comes from the
// holder's memory through the transfer engine (between processes of one
// host: cma, one kernel copy). Its buffers are registered, so puts and gets
// are zero-copy (put_from / get_into, as SGLang and vLLM use the store). It
// prints one JSON line per phase, with the engine slices of the phase by
// transport. -op=put writes keys t<thread>_<i>; -op=get reads them back
// (run put first); -op=both runs put then get on the same keys and prints
// both lines. latency prints the p50/p99 of a whole small put (master
// round trips plus the transfer) and of one master round trip (ExistKey).
// With -master=embedded and -local_segment, the runner is the single-host
// embedded setup: master and memory in its own process, replicas written
// and read with memcpy, master calls without gRPC. redis runs the same
// harness against redis-server (SET then GET of one key per client over
// one connection each, one request in flight, RESP written with writev and
// read into a preallocated buffer): a second yardstick beside
// redis-benchmark, whose client costs more per large GET than the server.
func storeMain(args []string) error {
	_ = storeFlags.Parse(args)
	serveMetrics()
	if *sCPUProf != "" {
		f, err := os.Create(*sCPUProf)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	var err error
	switch *sMode {
	case "holder":
		err = holder()
	case "run":
		err = storeRun()
	case "latency":
		err = latency()
	case "redis":
		err = redisRun()
	default:
		err = fmt.Errorf("unknown -mode %q", *sMode)
	}
	return err
}

func newStoreClient(segmentBytes uint64) (*client.Client, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return embedded.NewClient(ctx, client.Config{
		Stack:             stack.ConfigFromEnv(hostenv.Lookup), // KVFERRY_SPIN_US and the like apply
		LocalHostname:     "127.0.0.1",
		MasterServerAddr:  *sMaster,
		GlobalSegmentSize: segmentBytes,
		NoHugePages:       !*sSegHuge,
		MasterRPC:         *sRPC,
		NoSpeculativeGets: !*sSpec,
	})
}

func holder() error {
	c, err := newStoreClient(*sSegment)
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Printf("ready %s\n", c.Hostname())
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}

type worker struct {
	buf  *cmem.Map
	keys []string
}

func storeRun() error {
	c, err := newStoreClient(*sLocalSeg)
	if err != nil {
		return err
	}
	defer c.Close()
	ws := make([]*worker, *sThreads)
	per := max(*sOps / *sThreads, 1)
	for t := range ws {
		m, err := cmem.MapAnon(*sSize)
		if err != nil {
			return err
		}
		defer m.Close()
		b := m.Bytes()
		for i := range b {
			b[i] = byte(i*7 + t)
		}
		if err := c.RegisterBuffer(m.Addr(), m.Len()); err != nil {
			return err
		}
		w := &worker{buf: m}
		for i := range per {
			w.keys = append(w.keys, fmt.Sprintf("%s_%d_%d_%d", *sPrefix, *sSize, t, i))
		}
		ws[t] = w
	}
	ctx := context.Background()
	phase := func(name string, f func(w *worker, key string) error) StoreResult {
		var wg sync.WaitGroup
		var mu sync.Mutex
		errs := 0
		before := c.Engine().Metrics().SlicesByTransport
		var done atomic.Uint64
		start := time.Now()
		total := per * len(ws)
		var prog *progress
		if !*sQuiet {
			prog = startProgress(fmt.Sprintf("store %s %s x %d", name, sizeName(*sSize), len(ws)),
				func(time.Duration) float64 { return float64(done.Load()) / float64(total) },
				func() uint64 { return done.Load() * *sSize })
		}
		for _, w := range ws {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n := 0
				for _, k := range w.keys {
					if f(w, k) != nil {
						n++
					}
					done.Add(1)
				}
				mu.Lock()
				errs += n
				mu.Unlock()
			}()
		}
		wg.Wait()
		prog.stop()
		secs := time.Since(start).Seconds()
		tr := map[string]uint64{}
		for k, v := range c.Engine().Metrics().SlicesByTransport {
			if d := v - before[k]; d > 0 {
				tr[k] = d
			}
		}
		return StoreResult{Op: name, Size: *sSize, Threads: len(ws), Ops: total, Seconds: secs,
			OpsPerS: float64(total) / secs, GBps: float64(total) * float64(*sSize) / secs / 1e9, Errors: errs,
			Transports: tr}
	}
	put := func(w *worker, k string) error {
		return c.PutFrom(ctx, k, w.buf.Addr(), *sSize, client.ReplicateConfig{})
	}
	get := func(w *worker, k string) error {
		n, err := c.GetInto(ctx, k, w.buf.Addr(), *sSize)
		if err == nil && n != *sSize {
			return fmt.Errorf("short read")
		}
		return err
	}
	enc := json.NewEncoder(os.Stdout)
	if *sOp == "put" || *sOp == "both" {
		// One untimed pass warms the holder's pages and the connections;
		// then the keys are removed and put again, timed.
		phase("warm", put)
		if _, err := c.RemoveAll(ctx, true); err != nil {
			return err
		}
		if err := enc.Encode(phase("put", put)); err != nil {
			return err
		}
	}
	if *sOp == "get" || *sOp == "both" {
		if err := enc.Encode(phase("get", get)); err != nil {
			return err
		}
	}
	if *sKeep {
		return nil
	}
	_, err = c.RemoveAll(ctx, true)
	return err
}

// Latency is the small-put latency report.
type Latency struct {
	Size       uint64  `json:"size"`
	Ops        int     `json:"ops"`
	PutP50us   float64 `json:"put_p50_us"`
	PutP99us   float64 `json:"put_p99_us"`
	RPCp50us   float64 `json:"rpc_p50_us"`
	RPCp99us   float64 `json:"rpc_p99_us"`
	GetP50us   float64 `json:"get_p50_us"`
	GetP99us   float64 `json:"get_p99_us"`
	PutErrors  int     `json:"put_errors"`
	RPCErrors  int     `json:"rpc_errors"`
	GetErrorsN int     `json:"get_errors"`
}

func latency() error {
	c, err := newStoreClient(*sLocalSeg)
	if err != nil {
		return err
	}
	defer c.Close()
	m, err := cmem.MapAnon(*sSize)
	if err != nil {
		return err
	}
	defer m.Close()
	if err := c.RegisterBuffer(m.Addr(), m.Len()); err != nil {
		return err
	}
	ctx := context.Background()
	measure := func(n int, f func(i int) error) ([]time.Duration, int) {
		d := make([]time.Duration, 0, n)
		errs := 0
		for i := range n {
			t := time.Now()
			if f(i) != nil {
				errs++
				continue
			}
			d = append(d, time.Since(t))
		}
		slices.Sort(d)
		return d, errs
	}
	pct := func(d []time.Duration, p float64) float64 {
		if len(d) == 0 {
			return 0
		}
		return float64(d[min(int(float64(len(d))*p), len(d)-1)]) / float64(time.Microsecond)
	}
	key := func(i int) string { return fmt.Sprintf("%s_lat_%d", *sPrefix, i) }
	// Warm-up.
	for i := range 100 {
		_ = c.PutFrom(ctx, key(-i-1), m.Addr(), *sSize, client.ReplicateConfig{})
	}
	puts, perr := measure(*sOps, func(i int) error {
		return c.PutFrom(ctx, key(i), m.Addr(), *sSize, client.ReplicateConfig{})
	})
	rpcs, rerr := measure(*sOps, func(i int) error {
		_, err := c.IsExist(ctx, key(i))
		return err
	})
	gets, gerr := measure(*sOps, func(i int) error {
		_, err := c.GetInto(ctx, key(i), m.Addr(), *sSize)
		return err
	})
	_, _ = c.RemoveAll(ctx, true)
	return json.NewEncoder(os.Stdout).Encode(Latency{
		Size: *sSize, Ops: *sOps,
		PutP50us: pct(puts, 0.5), PutP99us: pct(puts, 0.99),
		RPCp50us: pct(rpcs, 0.5), RPCp99us: pct(rpcs, 0.99),
		GetP50us: pct(gets, 0.5), GetP99us: pct(gets, 0.99),
		PutErrors: perr, RPCErrors: rerr, GetErrorsN: gerr,
	})
}

// redisRun measures SET then GET of -size bytes with -threads clients, one
// connection and one key each, against redis-server at -redis.
func redisRun() error {
	per := max(*sOps / *sThreads, 1)
	conns := make([]net.Conn, *sThreads)
	for t := range conns {
		c, err := net.DialTimeout("tcp", *sRedisAt, 10*time.Second)
		if err != nil {
			return fmt.Errorf("redis: %w", err)
		}
		defer c.Close()
		conns[t] = c
	}
	val := make([]byte, *sSize)
	for i := range val {
		val[i] = byte(i * 7)
	}
	phase := func(name string, f func(c net.Conn, r *bufio.Reader, key string, buf []byte) error) (StoreResult, error) {
		var wg sync.WaitGroup
		errs := make([]error, len(conns))
		start := time.Now()
		for t, c := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := bufio.NewReaderSize(c, 64<<10)
				buf := make([]byte, *sSize+2)
				key := fmt.Sprintf("%s_redis_%d_%d", *sPrefix, *sSize, t)
				for range per {
					if err := f(c, r, key, buf); err != nil {
						errs[t] = err
						return
					}
				}
			}()
		}
		wg.Wait()
		secs := time.Since(start).Seconds()
		if err := errors.Join(errs...); err != nil {
			return StoreResult{}, fmt.Errorf("redis %s: %w", name, err)
		}
		total := per * len(conns)
		return StoreResult{Op: name, Size: *sSize, Threads: len(conns), Ops: total, Seconds: secs,
			OpsPerS: float64(total) / secs, GBps: float64(total) * float64(*sSize) / secs / 1e9}, nil
	}
	set := func(c net.Conn, r *bufio.Reader, key string, _ []byte) error {
		hdr := fmt.Appendf(nil, "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n", len(key), key, len(val))
		bufs := net.Buffers{hdr, val, []byte("\r\n")}
		if _, err := bufs.WriteTo(c); err != nil {
			return err
		}
		line, err := r.ReadString('\n')
		if err == nil && line != "+OK\r\n" {
			err = fmt.Errorf("SET answered %q", line)
		}
		return err
	}
	get := func(c net.Conn, r *bufio.Reader, key string, buf []byte) error {
		if _, err := fmt.Fprintf(c, "*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n", len(key), key); err != nil {
			return err
		}
		line, err := r.ReadString('\n')
		if err != nil {
			return err
		}
		if n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$"))); err != nil || n != len(val) {
			return fmt.Errorf("GET answered %q", line)
		}
		_, err = io.ReadFull(r, buf)
		return err
	}
	enc := json.NewEncoder(os.Stdout)
	for _, p := range []struct {
		name string
		f    func(net.Conn, *bufio.Reader, string, []byte) error
	}{{"put", set}, {"get", get}} {
		r, err := phase(p.name, p.f)
		if err != nil {
			return err
		}
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}
