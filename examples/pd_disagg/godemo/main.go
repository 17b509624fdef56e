// Command godemo is the PD-disaggregation demo of examples/pd_disagg in Go,
// on kvferry's public Go packages (store/embedded, store/client, engine,
// engine/stack) and without Python: a prefill process publishes a request's
// KV cache (N layers of fp16, as Mooncake tensor objects) through the store,
// and a decode process reads each layer straight from the prefill's memory
// with the transfer engine, checks it bit for bit and prints GB/s, per-layer
// latency and the total time-to-KV. The prefill's store client runs an
// embedded master and the engines use the P2P handshake: nothing else to
// start.
//
//	go run ./examples/pd_disagg/godemo [-layers N] [-blocks N] ...
//
// Without -role it is the launcher (as run.py): it starts itself twice, as
// -role prefill and -role decode, passes its flags to both, and exits
// non-zero when either fails or a layer does not verify. The figures go to
// stderr; each side's stdout carries one JSON line for the launcher.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const mib = 1 << 20

// options are the flags of every role (the same as the Python demo's).
type options struct {
	role, master, host, request string
	layers, blocks, blockSize   int
	kvHeads, headDim            int
	seed                        uint64
	timeout                     time.Duration
	noWarmup, noStorePass       bool
}

// errUsage is a flag the flag package has already reported.
var errUsage = errors.New("usage")

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("godemo", flag.ContinueOnError)
	fs.StringVar(&o.role, "role", "", `"prefill", "decode", or "" to run both`)
	fs.StringVar(&o.master, "master", "", "decode: the prefill's master address")
	fs.StringVar(&o.host, "host", "127.0.0.1", "the engines' host")
	fs.StringVar(&o.request, "request", "req-0001", "request id (key prefix)")
	fs.IntVar(&o.layers, "layers", 32, "layers of KV cache")
	fs.IntVar(&o.blocks, "blocks", 64, "KV blocks per layer")
	fs.IntVar(&o.blockSize, "block-size", 16, "tokens per block")
	fs.IntVar(&o.kvHeads, "kv-heads", 8, "KV heads")
	fs.IntVar(&o.headDim, "head-dim", 128, "head dimension")
	fs.Uint64Var(&o.seed, "seed", 2026, "seed of the KV contents")
	secs := fs.Float64("timeout", 120, "seconds for any wait")
	fs.BoolVar(&o.noWarmup, "no-warmup", false, "prefill: do not touch the lent memory before publishing")
	fs.BoolVar(&o.noStorePass, "no-store-pass", false, "decode: skip the comparison read through BatchGetInto")
	if err := fs.Parse(args); err != nil {
		return o, errUsage
	}
	o.timeout = time.Duration(*secs * float64(time.Second))
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for _, v := range []int{o.layers, o.blocks, o.blockSize, o.kvHeads, o.headDim} {
		if v <= 0 || v > 1<<16 {
			return o, fmt.Errorf("sizes must be in 1..%d", 1<<16)
		}
	}
	// In float64: the product of the sizes may not fit 64 bits.
	if kv := 4 * float64(o.layers) * float64(o.blocks) * float64(o.blockSize) * float64(o.kvHeads) *
		float64(o.headDim); kv > 64<<30 {
		return o, fmt.Errorf("%.0f GiB of KV cache is more than this demo's 64 GiB", kv/(1<<30))
	}
	if o.timeout <= 0 {
		return o, errors.New("-timeout must be a positive number of seconds")
	}
	return o, nil
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		if err != errUsage {
			fmt.Fprintln(os.Stderr, "godemo:", err)
		}
		os.Exit(2)
	}
	switch o.role {
	case "":
		err = launch(os.Args[1:], o.timeout)
	case "prefill":
		err = prefill(o)
	case "decode":
		err = decode(o)
	default:
		err = fmt.Errorf("unknown -role %q", o.role)
	}
	if err != nil {
		logf(o.role, "FAILED: %v", err)
		if o.role == "prefill" {
			emit(map[string]any{"error": err.Error()})
		}
		os.Exit(1)
	}
}

// launch runs the prefill and the decode side as two processes of this
// program and waits for both (as run.py).
func launch(args []string, timeout time.Duration) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	// The children get the launcher's deadline plus slack, and are killed
	// with it.
	ctx, cancel := context.WithTimeout(context.Background(), 2*timeout+30*time.Second)
	defer cancel()
	pre := exec.CommandContext(ctx, self, append([]string{"-role", "prefill"}, args...)...)
	pre.Stderr = os.Stderr
	out, err := pre.StdoutPipe()
	if err != nil {
		return err
	}
	if err := pre.Start(); err != nil {
		return fmt.Errorf("start prefill: %w", err)
	}
	defer func() { _ = pre.Process.Kill(); _ = pre.Wait() }()

	// The prefill's first stdout line names its master.
	first := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		first <- line
	}()
	var info struct{ Master, Segment, Error string }
	select {
	case line := <-first:
		if err := json.Unmarshal([]byte(line), &info); err != nil || info.Master == "" {
			return fmt.Errorf("prefill did not start: %q", line)
		}
	case <-time.After(60 * time.Second):
		return errors.New("prefill did not start within 60 s")
	}

	dec := exec.CommandContext(ctx, self, append([]string{"-role", "decode", "-master", info.Master}, args...)...)
	dec.Stderr = os.Stderr
	res, err := dec.Output()
	if err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	if err := pre.Wait(); err != nil {
		return fmt.Errorf("prefill: %w", err)
	}
	var result struct{ Verified bool }
	if err := json.Unmarshal(lastLine(res), &result); err != nil || !result.Verified {
		return fmt.Errorf("decode did not verify the KV cache: %q", res)
	}
	return nil
}

// ---- the KV layout, shared by both sides ----

// shape is [K|V, blocks, block_size, kv_heads, head_dim] of one layer.
func (o options) shape() []int64 {
	return []int64{2, int64(o.blocks), int64(o.blockSize), int64(o.kvHeads), int64(o.headDim)}
}

// layerBytes is the fp16 data of one layer.
func (o options) layerBytes() uint64 {
	n := uint64(2) // bytes per fp16
	for _, d := range o.shape() {
		n *= uint64(d)
	}
	return n
}

// objBytes is one layer's store object: the tensor header, then the data.
func (o options) objBytes() uint64 { return tensorHeaderSize + o.layerBytes() }

func layerKey(req string, layer int) string { return fmt.Sprintf("%s/kv/layer%03d", req, layer) }
func manifestKey(req string) string         { return req + "/manifest" }
func timelineKey(req string) string         { return req + "/timeline" }
func readyKey(req string) string            { return req + "/decode_ready" }
func doneKey(req string) string             { return req + "/done" }

// manifest announces a request's keys and layout to the decode side.
type manifest struct {
	Request string   `json:"request"`
	Layers  int      `json:"layers"`
	Shape   []int64  `json:"shape"`
	Dtype   string   `json:"dtype"`
	Keys    []string `json:"keys"`
	Seed    uint64   `json:"seed"`
	// PublishStartNs is CLOCK_MONOTONIC, which both processes share.
	PublishStartNs int64 `json:"publish_start_ns"`
}

// fillKV writes the deterministic KV of one layer into p: random bit
// patterns (splitmix64), so a bit-for-bit comparison checks every bit of
// every fp16, NaNs included.
func fillKV(p []byte, seed uint64, layer int) {
	x := seed*0x9E3779B97F4A7C15 + uint64(layer)*0xD1B54A32D192ED03
	var tail [8]byte
	for i := 0; i < len(p); i += 8 {
		x += 0x9E3779B97F4A7C15
		z := (x ^ x>>30) * 0xBF58476D1CE4E5B9
		z = (z ^ z>>27) * 0x94D049BB133111EB
		if i+8 <= len(p) {
			binary.LittleEndian.PutUint64(p[i:], z^z>>31)
		} else {
			binary.LittleEndian.PutUint64(tail[:], z^z>>31)
			copy(p[i:], tail[:])
		}
	}
}

// dims prints a shape as the Python demo does: [2, 64, 16, 8, 128].
func dims(shape []int64) string {
	s := make([]string, len(shape))
	for i, d := range shape {
		s[i] = strconv.FormatInt(d, 10)
	}
	return "[" + strings.Join(s, ", ") + "]"
}

// ---- Mooncake's tensor object header (specs/mooncake.md §6.3) ----

// The 304-byte TensorMetadata that starts every tensor object, as
// python/kvferry/tensor.py packs it: a full (unsharded) fp16 tensor.
const (
	tensorHeaderSize = 304
	tensorMagic      = 0x4D4F4F4E
	tensorVersion    = 1
	dtypeFloat16     = 11
	maxDims          = 8
)

// putTensorHeader writes the header of a float16 tensor of shape into h.
func putTensorHeader(h []byte, shape []int64, dataBytes uint64) {
	clear(h[:tensorHeaderSize])
	le := binary.LittleEndian
	le.PutUint32(h[0:], tensorMagic)
	le.PutUint16(h[4:], tensorVersion)
	le.PutUint16(h[6:], tensorHeaderSize)
	le.PutUint32(h[8:], dtypeFloat16)
	le.PutUint32(h[12:], uint32(len(shape)))
	// 16: layout kind (0: full), 20: reserved flags.
	le.PutUint64(h[24:], tensorHeaderSize) // data offset
	le.PutUint64(h[32:], dataBytes)
	for i := range maxDims { // global shape at 40, local shape at 104; -1 past ndim
		d := int64(-1)
		if i < len(shape) {
			d = shape[i]
		}
		le.PutUint64(h[40+8*i:], uint64(d))
		le.PutUint64(h[104+8*i:], uint64(d))
	}
	// 168: axis count (0), 172: reserved, 176..304: the unused axes.
}

// checkTensorHeader reports whether h is the header putTensorHeader writes.
func checkTensorHeader(h []byte, shape []int64, dataBytes uint64) bool {
	want := make([]byte, tensorHeaderSize)
	putTensorHeader(want, shape, dataBytes)
	return string(h[:tensorHeaderSize]) == string(want)
}

// ---- memory, clocks, output ----

// mapMemory returns n bytes of anonymous memory outside the Go heap, as a
// serving engine's KV pool: the store and the engine move bytes between
// such C memory, never through Go values.
func mapMemory(n uint64) ([]byte, error) {
	b, err := unix.Mmap(-1, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("map %d bytes: %w", n, err)
	}
	return b, nil
}

func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// cMemory is n bytes of C memory at addr (memory the engine registered, not
// Go memory, hence the indirect conversion that go vet accepts).
func cMemory(addr uintptr, n uint64) []byte {
	return unsafe.Slice((*byte)(*(*unsafe.Pointer)(unsafe.Pointer(&addr))), n)
}

// monoNs is CLOCK_MONOTONIC in nanoseconds: comparable across processes of
// one host, unlike Go's per-process monotonic clock.
func monoNs() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// waitFor polls cond every interval until it says done, fails, or d passes.
func waitFor(d, every time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(d)
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("wait for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(every)
	}
}

// emit writes one JSON line on stdout for the launcher.
func emit(v any) {
	b, _ := json.Marshal(v)
	fmt.Println(string(b))
}

func logf(role, format string, args ...any) {
	if role == "" {
		role = "demo"
	}
	fmt.Fprintf(os.Stderr, "[%s] %s\n", role, fmt.Sprintf(format, args...))
}

// lastLine is the last non-empty line of b.
func lastLine(b []byte) []byte {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	return lines[len(lines)-1]
}

func gbps(n uint64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds() / 1e9
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }

// pct is the q-th percentile of ds (nearest rank, as the Python demo).
func pct(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	v := append([]time.Duration(nil), ds...)
	sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
	i := int(q/100*float64(len(v)-1) + 0.5)
	return v[min(len(v)-1, max(0, i))]
}
