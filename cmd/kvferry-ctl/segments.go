package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/descriptor"
	"github.com/kvferry/kvferry/engine/metadata"
	"github.com/kvferry/kvferry/engine/metadata/open"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/internal/cmem"
)

// segmentInfo is one segment as the metadata backend describes it.
type segmentInfo struct {
	Name       string              `json:"name"`
	Endpoint   string              `json:"rpc_endpoint"`
	Protocol   string              `json:"protocol"`
	Transports []string            `json:"transports"`
	DataPort   int                 `json:"tcp_data_port,omitempty"`
	Devices    []string            `json:"rdma_devices,omitempty"`
	Buffers    []descriptor.Buffer `json:"buffers"`
	Bytes      uint64              `json:"registered_bytes"`
	PID        int                 `json:"pid,omitempty"`
	Error      string              `json:"error,omitempty"`
}

func (o *options) openMetadata(ctx context.Context) (metadata.Backend, error) {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	return stack.OpenMetadata(ctx, o.metadata, engine.Config{ConnectTimeout: o.timeout, MetadataTimeout: o.timeout}, open.Options{})
}

// names returns args, or the segments the master knows when there are none.
func (o *options) names(ctx context.Context, args []string) ([]string, error) {
	if len(args) > 0 {
		return args, nil
	}
	if o.masterAdmin == "" {
		return nil, errors.New("name the segments, or give --master_admin to list the store's")
	}
	body, err := o.adminGet(ctx, "/get_all_segments")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out, nil
}

func (o *options) describe(ctx context.Context, args []string) ([]segmentInfo, error) {
	names, err := o.names(ctx, args)
	if err != nil {
		return nil, err
	}
	mb, err := o.openMetadata(ctx)
	if err != nil {
		return nil, err
	}
	defer mb.Close()
	var out []segmentInfo
	for _, n := range names {
		n = strings.TrimPrefix(n, "/")
		si := segmentInfo{Name: n}
		c, cancel := context.WithTimeout(ctx, o.timeout)
		ep, err := mb.Endpoint(c, n)
		var d *descriptor.Segment
		if err == nil {
			d, err = mb.Fetch(c, n)
		}
		cancel()
		if err != nil {
			si.Error = err.Error()
			out = append(out, si)
			continue
		}
		si.Endpoint = ep.Addr()
		si.Protocol = d.Protocol
		si.Transports = d.Transports
		if len(si.Transports) == 0 && d.Protocol != "" {
			si.Transports = []string{d.Protocol}
		}
		si.DataPort = d.TCPDataPort
		for _, dev := range d.Devices {
			si.Devices = append(si.Devices, dev.Name)
		}
		si.Buffers = d.Buffers
		for _, b := range d.Buffers {
			si.Bytes += b.Length
		}
		if d.Host != nil {
			si.PID = d.Host.PID
		}
		out = append(out, si)
	}
	return out, nil
}

func cmdSegments(ctx context.Context, o *options, args []string) error {
	segs, err := o.describe(ctx, args)
	if err != nil {
		return err
	}
	var rows [][]string
	for _, s := range segs {
		if s.Error != "" {
			rows = append(rows, []string{s.Name, "-", "-", "-", "-", "error: " + s.Error})
			continue
		}
		rows = append(rows, []string{s.Name, s.Endpoint, strings.Join(s.Transports, ","), strconv.Itoa(len(s.Buffers)), bytesName(float64(s.Bytes)), pidName(s.PID)})
	}
	return o.emit(segs, []string{"SEGMENT", "RPC", "TRANSPORTS", "BUFFERS", "REGISTERED", "PID"}, rows)
}

func pidName(p int) string {
	if p == 0 {
		return "-"
	}
	return strconv.Itoa(p)
}

func cmdTransports(ctx context.Context, o *options, args []string) error {
	segs, err := o.describe(ctx, args)
	if err != nil {
		return err
	}
	type tr struct {
		Segment   string `json:"segment"`
		Transport string `json:"transport"`
		Detail    string `json:"detail"`
	}
	var list []tr
	var rows [][]string
	for _, s := range segs {
		if s.Error != "" {
			list = append(list, tr{s.Name, "-", "error: " + s.Error})
			rows = append(rows, []string{s.Name, "-", "error: " + s.Error})
			continue
		}
		for _, t := range s.Transports {
			detail := ""
			switch t {
			case "tcp":
				detail = fmt.Sprintf("data port %d", s.DataPort)
			case "rdma":
				detail = "devices " + strings.Join(s.Devices, ",")
			case "cma", "shm", "nvlink":
				detail = fmt.Sprintf("same host only (owner pid %s)", pidName(s.PID))
			}
			list = append(list, tr{s.Name, t, detail})
			rows = append(rows, []string{s.Name, t, detail})
		}
	}
	return o.emit(list, []string{"SEGMENT", "TRANSPORT", "DETAIL"}, rows)
}

func cmdBuffers(ctx context.Context, o *options, args []string) error {
	segs, err := o.describe(ctx, args)
	if err != nil {
		return err
	}
	type buf struct {
		Segment  string `json:"segment"`
		Addr     uint64 `json:"addr"`
		Length   uint64 `json:"length"`
		Location string `json:"location"`
		Memory   string `json:"memory"`
	}
	var list []buf
	var rows [][]string
	for _, s := range segs {
		if s.Error != "" {
			rows = append(rows, []string{s.Name, "-", "-", "-", "error: " + s.Error})
			continue
		}
		for _, b := range s.Buffers {
			mem := b.Mem
			if mem == "" {
				mem = "host"
				if strings.HasPrefix(b.Name, "cuda:") {
					mem = "device"
				}
			}
			list = append(list, buf{s.Name, b.Addr, b.Length, b.Name, mem})
			rows = append(rows, []string{s.Name, fmt.Sprintf("%#x", b.Addr), bytesName(float64(b.Length)), b.Name, mem})
		}
	}
	return o.emit(list, []string{"SEGMENT", "ADDRESS", "LENGTH", "LOCATION", "MEMORY"}, rows)
}

// probeResult is one (segment, path) probe.
type probeResult struct {
	Segment string  `json:"segment"`
	Path    string  `json:"path"` // "rpc" or a transport name
	Count   int     `json:"count"`
	FirstUs float64 `json:"first_us"`
	MinUs   float64 `json:"min_us"`
	AvgUs   float64 `json:"avg_us"`
	MaxUs   float64 `json:"max_us"`
	Bytes   uint64  `json:"bytes,omitempty"`
	Error   string  `json:"error,omitempty"`
}

func cmdProbe(ctx context.Context, o *options, args []string) error {
	fs := newSubFlags("probe")
	count := fs.Int("count", 10, "round trips per path")
	size := fs.Uint64("size", 4096, "bytes each data-path probe reads from the segment's first buffer")
	only := fs.String("transports", "", "transports to probe, comma-separated (default: those the segment offers, but local and nvlink)")
	local := fs.String("local_server_name", "127.0.0.1", "the probing engine's host (P2P) or segment name prefix")
	if err := fs.Parse(args); err != nil {
		return err
	}
	segs, err := o.describe(ctx, fs.Args())
	if err != nil {
		return err
	}
	var results []probeResult
	for _, s := range segs {
		if s.Error != "" {
			results = append(results, probeResult{Segment: s.Name, Path: "metadata", Error: s.Error})
			continue
		}
		results = append(results, o.probeRPC(ctx, s, *count, *local))
		ts := s.Transports
		if *only != "" {
			ts = strings.Split(*only, ",")
		}
		for _, t := range ts {
			if (t == "local" || t == "nvlink") && *only == "" {
				continue // same process only; GPU memory only: nothing to probe from here with host memory
			}
			results = append(results, o.probeData(ctx, s, t, *count, *size, *local))
		}
	}
	var rows [][]string
	failed := 0
	for _, r := range results {
		if r.Error != "" {
			failed++
			rows = append(rows, []string{r.Segment, r.Path, "-", "-", "-", "-", "error: " + r.Error})
			continue
		}
		rows = append(rows, []string{r.Segment, r.Path, us(r.FirstUs), us(r.MinUs), us(r.AvgUs), us(r.MaxUs), strconv.Itoa(r.Count)})
	}
	if err := o.emit(results, []string{"SEGMENT", "PATH", "FIRST", "MIN", "AVG", "MAX", "COUNT"}, rows); err != nil {
		return err
	}
	if failed == len(results) {
		return errors.New("every probe failed")
	}
	return nil
}

func us(v float64) string { return durName(v / 1e6) }

// probeEngine starts an engine of the ctl with one transport forced.
func (o *options) probeEngine(ctx context.Context, transport, local string) (*engine.Engine, error) {
	var cfg stack.Config
	cfg.Engine.MetadataConn = o.metadata
	cfg.Engine.LocalServerName = local
	if !strings.EqualFold(o.metadata, metadata.P2PHandshake) && o.metadata != "" {
		cfg.Engine.LocalServerName = fmt.Sprintf("%s/kvferry-ctl-%d-%d", local, time.Now().UnixNano()%1e6, len(transport))
		cfg.Engine.BindAddress = "127.0.0.1"
	}
	cfg.Engine.ConnectTimeout = o.timeout
	cfg.Engine.TransferTimeout = max(o.timeout, 5*time.Second)
	cfg.Engine.MetadataTimeout = o.timeout
	if transport != "" {
		cfg.Engine.Transports = []string{transport}
		cfg.Engine.ForceTransport = transport
	} else {
		cfg.Engine.Transports = []string{"tcp"}
	}
	c, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	return stack.New(c, cfg)
}

func (o *options) probeRPC(ctx context.Context, s segmentInfo, count int, local string) probeResult {
	r := probeResult{Segment: s.Name, Path: "rpc"}
	e, err := o.probeEngine(ctx, "", local)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer e.Close()
	var ds []time.Duration
	for range count {
		t0 := time.Now()
		if err := e.Probe(ctx, s.Name); err != nil {
			r.Error = err.Error()
			return r
		}
		ds = append(ds, time.Since(t0))
	}
	r.fill(ds)
	return r
}

func (o *options) probeData(ctx context.Context, s segmentInfo, transport string, count int, size uint64, local string) probeResult {
	r := probeResult{Segment: s.Name, Path: transport}
	if len(s.Buffers) == 0 {
		r.Error = "the segment registered no buffer"
		return r
	}
	b := s.Buffers[0]
	size = min(size, b.Length)
	r.Bytes = size
	e, err := o.probeEngine(ctx, transport, local)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer e.Close()
	m, err := cmem.MapAnon(max(size, 4096))
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer m.Close()
	if err := e.RegisterMemory(m.Addr(), m.Len(), "cpu:0", true); err != nil {
		r.Error = err.Error()
		return r
	}
	id, err := e.OpenSegment(ctx, s.Name)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	var ds []time.Duration
	for range count {
		t0 := time.Now()
		// A read: the probe never writes into the segment's memory.
		c, cancel := context.WithTimeout(ctx, o.timeout)
		err := e.Transfer(c, []engine.Request{{Op: engine.OpRead, Source: m.Addr(), Target: id, TargetOffset: b.Addr, Length: size}})
		cancel()
		if err != nil {
			r.Error = err.Error()
			return r
		}
		ds = append(ds, time.Since(t0))
	}
	r.fill(ds)
	return r
}

func (r *probeResult) fill(ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	r.Count = len(ds)
	r.FirstUs = float64(ds[0]) / 1e3
	rest := ds
	if len(ds) > 1 {
		rest = ds[1:] // the first pays for connecting
	}
	sorted := append([]time.Duration(nil), rest...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	var sum time.Duration
	for _, d := range sorted {
		sum += d
	}
	r.MinUs = float64(sorted[0]) / 1e3
	r.MaxUs = float64(sorted[len(sorted)-1]) / 1e3
	r.AvgUs = float64(sum) / float64(len(sorted)) / 1e3
}

// adminGet fetches path from the master's admin port.
func (o *options) adminGet(ctx context.Context, path string) (string, error) {
	if o.masterAdmin == "" {
		return "", errors.New("--master_admin is required")
	}
	base := o.masterAdmin
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	return httpGet(ctx, base+path, o.timeout)
}

func httpGet(ctx context.Context, url string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	hc := &http.Client{Transport: &http.Transport{Proxy: nil}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return "", fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: HTTP %d: %.200s", url, resp.StatusCode, b)
	}
	return string(b), nil
}
