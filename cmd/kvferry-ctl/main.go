// Command kvferry-ctl inspects a live kvferry deployment through its
// metadata backend, its store master and the processes' metrics endpoints.
//
//	kvferry-ctl [global flags] segments [NAME...]     segments, their transports and memory
//	kvferry-ctl [global flags] transports NAME...      what each segment's descriptor offers
//	kvferry-ctl [global flags] buffers NAME...         each segment's registered buffers
//	kvferry-ctl [global flags] probe NAME...           RPC and data-path round trips per transport
//	kvferry-ctl [global flags] links                   per-peer links of processes (from --metrics)
//	kvferry-ctl [global flags] top                     refreshing per-peer throughput (from --metrics)
//	kvferry-ctl [global flags] objects                 store objects (from the master's admin port)
//	kvferry-ctl [global flags] usage                   per-segment store use, disk tiers included
//	kvferry-ctl [global flags] drain create|query|wait|cancel ...   drain jobs (move replicas off segments)
//	kvferry-ctl [global flags] master                  the serving master (HA: the leader in etcd)
//	kvferry-ctl [global flags] nics                    RDMA NIC ports: this host's (sysfs) or, with --metrics, the processes'
//	kvferry-ctl [global flags] hw                      this host's CUDA driver and devices, RDMA devices (make hw-check)
//
// Global flags: --metadata (P2PHANDSHAKE, http://host:port/metadata or
// etcd://host:port), --master_admin host:port (kvferry-master --metrics_port),
// --master (etcd://... for HA), --metrics URL,... (KVFERRY_METRICS_ADDR
// endpoints), --json (machine-readable output) and --timeout. Without
// names, segments lists those the master knows (--master_admin).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"
)

// options are the global flags.
type options struct {
	metadata    string
	masterAdmin string
	master      string
	clusterID   string
	metrics     []string
	json        bool
	timeout     time.Duration
	out         io.Writer
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "kvferry-ctl:", err)
		os.Exit(1)
	}
}

const usage = `usage: kvferry-ctl [flags] COMMAND [args]
commands: segments, transports, buffers, probe, links, top, objects, usage, drain, master, nics, hw
flags:`

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("kvferry-ctl", flag.ContinueOnError)
	o := &options{out: out}
	fs.StringVar(&o.metadata, "metadata", "P2PHANDSHAKE", "metadata connection string (P2PHANDSHAKE, http://host:port/metadata, etcd://host:port, redis://[:password@]host:port[/db])")
	fs.StringVar(&o.masterAdmin, "master_admin", "", "store master admin address host:port (kvferry-master --metrics_port)")
	fs.StringVar(&o.master, "master", "", "store master for HA: etcd://host:port[;host:port] (the leader's view)")
	fs.StringVar(&o.clusterID, "cluster_id", "mooncake_cluster", "HA cluster id")
	metricsList := fs.String("metrics", "", "metrics endpoints, comma-separated (host:port or URLs of /metrics)")
	fs.BoolVar(&o.json, "json", false, "print JSON instead of tables")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "deadline of each network operation")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, m := range strings.Split(*metricsList, ",") {
		if m = strings.TrimSpace(m); m != "" {
			o.metrics = append(o.metrics, m)
		}
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return fmt.Errorf("no command")
	}
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	switch cmd {
	case "segments":
		return cmdSegments(ctx, o, rest)
	case "transports":
		return cmdTransports(ctx, o, rest)
	case "buffers":
		return cmdBuffers(ctx, o, rest)
	case "probe":
		return cmdProbe(ctx, o, rest)
	case "links":
		return cmdLinks(ctx, o, rest)
	case "top":
		return cmdTop(ctx, o, rest)
	case "objects":
		return cmdObjects(ctx, o, rest)
	case "usage":
		return cmdUsage(ctx, o, rest)
	case "drain":
		return cmdDrain(ctx, o, rest)
	case "master":
		return cmdMaster(ctx, o, rest)
	case "nics":
		return cmdNICs(ctx, o, rest)
	case "hw":
		return cmdHW(ctx, o, rest)
	}
	return fmt.Errorf("unknown command %q (segments, transports, buffers, probe, links, top, objects, usage, drain, master, nics, hw)", cmd)
}

// emit prints v as JSON with --json, else the table rows (header first).
func (o *options) emit(v any, header []string, rows [][]string) error {
	if o.json {
		enc := json.NewEncoder(o.out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	tw := tabwriter.NewWriter(o.out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// bytesName formats n bytes with a binary unit.
func bytesName(n float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for n >= 1024 && i < len(units)-1 {
		n /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%.0f B", n)
	}
	return fmt.Sprintf("%.1f %s", n, units[i])
}

// rateName formats a rate of bytes per second.
func rateName(n float64) string { return bytesName(n) + "/s" }

func durName(sec float64) string {
	switch {
	case sec <= 0:
		return "-"
	case sec < 1e-3:
		return fmt.Sprintf("%.0f µs", sec*1e6)
	case sec < 1:
		return fmt.Sprintf("%.2f ms", sec*1e3)
	}
	return fmt.Sprintf("%.2f s", sec)
}
