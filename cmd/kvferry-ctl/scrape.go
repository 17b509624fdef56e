package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"golang.org/x/sys/unix"
)

func newSubFlags(name string) *flag.FlagSet {
	return flag.NewFlagSet("kvferry-ctl "+name, flag.ContinueOnError)
}

// linkKey names a (process, transport, peer) link.
type linkKey struct{ Endpoint, Transport, Peer string }

// linkStat is what one scrape says about a link.
type linkStat struct {
	Endpoint  string  `json:"endpoint"`
	Transport string  `json:"transport"`
	Peer      string  `json:"peer"`
	Conns     float64 `json:"connections"`
	InFlight  float64 `json:"in_flight"`
	Requests  float64 `json:"requests"`
	Bytes     float64 `json:"bytes"`
	Errors    float64 `json:"errors"`
	Redials   float64 `json:"redials"`
	Retries   float64 `json:"retries"`
}

// scrape is one reading of the endpoints.
type scrape struct {
	at    time.Time
	links map[linkKey]*linkStat
	// buckets: per (endpoint, transport), the request latency buckets
	// (upper bound -> cumulative count), summed over size classes.
	buckets map[[2]string]map[float64]float64
}

func metricsURL(ep string) string {
	if !strings.Contains(ep, "://") {
		ep = "http://" + ep
	}
	if !strings.HasSuffix(ep, "/metrics") {
		ep = strings.TrimSuffix(ep, "/") + "/metrics"
	}
	return ep
}

func (o *options) scrape(ctx context.Context) (*scrape, error) {
	if len(o.metrics) == 0 {
		return nil, fmt.Errorf("--metrics is required (the KVFERRY_METRICS_ADDR endpoints)")
	}
	s := &scrape{at: time.Now(), links: map[linkKey]*linkStat{}, buckets: map[[2]string]map[float64]float64{}}
	for _, ep := range o.metrics {
		body, err := httpGet(ctx, metricsURL(ep), o.timeout)
		if err != nil {
			return nil, err
		}
		p := expfmt.NewTextParser(model.UTF8Validation)
		mfs, err := p.TextToMetricFamilies(strings.NewReader(body))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ep, err)
		}
		s.add(ep, mfs)
	}
	return s, nil
}

func labels(m *dto.Metric) map[string]string {
	l := map[string]string{}
	for _, lp := range m.GetLabel() {
		l[lp.GetName()] = lp.GetValue()
	}
	return l
}

func value(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	}
	return 0
}

func (s *scrape) link(ep string, l map[string]string) *linkStat {
	k := linkKey{ep, l["transport"], l["peer"]}
	ls := s.links[k]
	if ls == nil {
		ls = &linkStat{Endpoint: ep, Transport: k.Transport, Peer: k.Peer}
		s.links[k] = ls
	}
	return ls
}

func (s *scrape) add(ep string, mfs map[string]*dto.MetricFamily) {
	each := func(name string, f func(l map[string]string, v float64)) {
		if mf := mfs[name]; mf != nil {
			for _, m := range mf.GetMetric() {
				f(labels(m), value(m))
			}
		}
	}
	each("kvferry_engine_transferred_bytes_total", func(l map[string]string, v float64) { s.link(ep, l).Bytes += v })
	each("kvferry_engine_tasks_total", func(l map[string]string, v float64) {
		if l["state"] == "completed" {
			s.link(ep, l).Requests += v
		}
	})
	each("kvferry_engine_errors_total", func(l map[string]string, v float64) {
		if l["cause"] != "canceled" {
			s.link(ep, l).Errors += v
		}
	})
	each("kvferry_engine_tasks_in_flight", func(l map[string]string, v float64) { s.link(ep, l).InFlight += v })
	each("kvferry_transport_connections", func(l map[string]string, v float64) { s.link(ep, l).Conns += v })
	each("kvferry_transport_redials_total", func(l map[string]string, v float64) { s.link(ep, l).Redials += v })
	each("kvferry_transport_slice_retries_total", func(l map[string]string, v float64) { s.link(ep, l).Retries += v })
	if mf := mfs["kvferry_engine_task_duration_seconds"]; mf != nil {
		for _, m := range mf.GetMetric() {
			k := [2]string{ep, labels(m)["transport"]}
			b := s.buckets[k]
			if b == nil {
				b = map[float64]float64{}
				s.buckets[k] = b
			}
			inf := false
			for _, bk := range m.GetHistogram().GetBucket() {
				b[bk.GetUpperBound()] += float64(bk.GetCumulativeCount())
				inf = inf || math.IsInf(bk.GetUpperBound(), 1)
			}
			if !inf {
				b[math.Inf(1)] += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
}

func (s *scrape) sorted() []*linkStat {
	out := make([]*linkStat, 0, len(s.links))
	for _, l := range s.links {
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Endpoint != b.Endpoint {
			return a.Endpoint < b.Endpoint
		}
		if a.Transport != b.Transport {
			return a.Transport < b.Transport
		}
		return a.Peer < b.Peer
	})
	return out
}

func cmdLinks(ctx context.Context, o *options, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("links takes no arguments (use --metrics)")
	}
	s, err := o.scrape(ctx)
	if err != nil {
		return err
	}
	links := s.sorted()
	var rows [][]string
	for _, l := range links {
		rows = append(rows, []string{l.Endpoint, l.Transport, l.Peer, num(l.Conns), num(l.InFlight), num(l.Requests),
			bytesName(l.Bytes), num(l.Errors), num(l.Redials), num(l.Retries)})
	}
	return o.emit(links, []string{"PROCESS", "TRANSPORT", "PEER", "CONNS", "IN FLIGHT", "REQUESTS", "BYTES", "ERRORS", "REDIALS", "RETRIES"}, rows)
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// topRow is one link's rates over a refresh interval.
type topRow struct {
	Endpoint    string  `json:"endpoint"`
	Transport   string  `json:"transport"`
	Peer        string  `json:"peer"`
	BytesPerSec float64 `json:"bytes_per_s"`
	ReqPerSec   float64 `json:"requests_per_s"`
	ErrPerSec   float64 `json:"errors_per_s"`
	InFlight    float64 `json:"in_flight"`
	Conns       float64 `json:"connections"`
	P99Seconds  float64 `json:"p99_s"` // of the link's transport in that process
}

func cmdTop(ctx context.Context, o *options, args []string) error {
	fs := newSubFlags("top")
	interval := fs.Duration("interval", time.Second, "refresh interval")
	iterations := fs.Int("iterations", 0, "stop after this many refreshes (0: until interrupted)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	tty := false
	if f, ok := o.out.(*os.File); ok {
		_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
		tty = err == nil
	}
	prev, err := o.scrape(ctx)
	if err != nil {
		return err
	}
	for i := 0; *iterations == 0 || i < *iterations; i++ {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(*interval):
		}
		cur, err := o.scrape(ctx)
		if err != nil {
			return err
		}
		rows := topRows(prev, cur)
		prev = cur
		if o.json {
			if err := o.emit(rows, nil, nil); err != nil {
				return err
			}
			continue
		}
		if tty {
			fmt.Fprint(o.out, "\033[H\033[2J")
		}
		fmt.Fprintf(o.out, "kvferry-ctl top  %s  every %s  %d links\n\n", cur.at.Format("15:04:05"), *interval, len(rows))
		var table [][]string
		for _, r := range rows {
			table = append(table, []string{r.Endpoint, r.Transport, r.Peer, rateName(r.BytesPerSec), fmt.Sprintf("%.0f", r.ReqPerSec),
				fmt.Sprintf("%.1f", r.ErrPerSec), num(r.InFlight), num(r.Conns), durName(r.P99Seconds)})
		}
		if err := o.emit(nil, []string{"PROCESS", "TRANSPORT", "PEER", "THROUGHPUT", "REQ/S", "ERR/S", "IN FLIGHT", "CONNS", "P99"}, table); err != nil {
			return err
		}
		fmt.Fprintln(o.out)
	}
	return nil
}

// topRows computes the rates between two scrapes, busiest first.
func topRows(prev, cur *scrape) []topRow {
	dt := cur.at.Sub(prev.at).Seconds()
	p99 := map[[2]string]float64{}
	for k, b := range cur.buckets {
		p99[k] = quantile(0.99, b, prev.buckets[k])
	}
	var rows []topRow
	for k, c := range cur.links {
		p := prev.links[k]
		if p == nil {
			p = &linkStat{}
		}
		rows = append(rows, topRow{Endpoint: k.Endpoint, Transport: k.Transport, Peer: k.Peer,
			BytesPerSec: max(c.Bytes-p.Bytes, 0) / dt, ReqPerSec: max(c.Requests-p.Requests, 0) / dt,
			ErrPerSec: max(c.Errors-p.Errors, 0) / dt, InFlight: c.InFlight, Conns: c.Conns,
			P99Seconds: p99[[2]string{k.Endpoint, k.Transport}]})
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].BytesPerSec != rows[j].BytesPerSec {
			return rows[i].BytesPerSec > rows[j].BytesPerSec
		}
		return rows[i].Peer < rows[j].Peer
	})
	return rows
}

// quantile estimates the q-quantile of the observations between two
// readings of cumulative buckets (0 when there were none).
func quantile(q float64, cur, prev map[float64]float64) float64 {
	var bounds []float64
	for b := range cur {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	total := cur[math.Inf(1)] - prev[math.Inf(1)]
	if total <= 0 {
		return 0
	}
	rank := q * total
	lo, below := 0.0, 0.0
	for _, b := range bounds {
		c := cur[b] - prev[b]
		if c >= rank {
			if math.IsInf(b, 1) {
				return lo
			}
			if c == below {
				return b
			}
			return lo + (b-lo)*(rank-below)/(c-below)
		}
		lo, below = b, c
	}
	return lo
}
