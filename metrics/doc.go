// Package metrics is kvferry's metrics catalogue and the cheap counters
// the data paths update.
//
// Every metric any kvferry process exports is declared once, in
// catalogue.go, with its type, help text and labels; docs/METRICS.md is
// generated from that list (Markdown) and a test keeps the two equal.
// Metrics live on private Prometheus registries only: the process
// collector (Collector, NewRegistry) for engines, transports and store
// clients; the store master's and the metadata server's own.
//
// The hot path never touches client_golang: an engine counts each request
// with atomic adds on a Link resolved once per (transport, peer) and
// submission, and times it with a Histogram of atomic buckets; the
// collector turns those into Prometheus samples at scrape time. Peer
// labels are bounded: past KVFERRY_METRICS_MAX_PEERS distinct peers (64
// by default) further peers share the label "other". Counters of engines
// and store clients that closed stay in the process totals, so no counter
// goes backwards.
//
// Transports register their connection counters with
// Engine.Conn(transport, peer) and their serving-side counters with
// Engine.Server(transport); nothing else is needed for a new transport to
// show up in kvferry_transport_*.
package metrics

import (
	"fmt"
	"strings"
)

// Markdown renders the catalogue as docs/METRICS.md.
func Markdown() string {
	var b strings.Builder
	b.WriteString("# kvferry metrics\n\n")
	b.WriteString("Generated from `metrics/catalogue.go` (`go test ./metrics -run TestMetricsDoc -update` rewrites it).\n")
	b.WriteString("Every kvferry process exports these on private registries only: the library through\n")
	b.WriteString("`KVFERRY_METRICS_ADDR` (`/metrics`, plus `/debug/pprof/` with `KVFERRY_METRICS_PPROF=1`),\n")
	b.WriteString("`kvferry_metrics_text()` and Python `kvferry.metrics_text()`; `kvferry-master` on its admin port\n")
	b.WriteString("(`--metrics_port`); `kvferry-metadata` on its own port (`/metrics`).\n\n")
	b.WriteString("Labels: `transport` is the transport name (tcp, local, cma, shm, rdma, nvlink); `peer` the remote\n")
	b.WriteString("segment name, folded into `other` beyond `KVFERRY_METRICS_MAX_PEERS` distinct peers (default 64);\n")
	b.WriteString("`op` read or write; `size_class` one of " + "`" + strings.Join(SizeClassNames[:], "`, `") + "`" + " (request length);\n")
	b.WriteString("`cause` of an error: `" + strings.Join(CauseNames[:], "`, `") + "`; of a refusal: `" + strings.Join(RefusalNames[:], "`, `") + "`.\n")
	b.WriteString(fmt.Sprintf("Latency histograms have %d buckets, from 1 µs doubling to about 16.8 s.\n", NumBuckets))
	b.WriteString("`KVFERRY_METRICS=off` stops the per-request counters and histograms (for measuring their cost).\n")
	comp := ""
	for _, s := range catalogue {
		if s.Component != comp {
			comp = s.Component
			fmt.Fprintf(&b, "\n## %s\n\n| metric | type | labels | help |\n|---|---|---|---|\n", comp)
		}
		labels := ""
		if len(s.Labels) > 0 {
			labels = "`" + strings.Join(s.Labels, "`, `") + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", s.Name, s.Kind, labels, strings.ReplaceAll(s.Help, "|", "\\|"))
	}
	return b.String()
}
