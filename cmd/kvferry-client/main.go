// Command kvferry-client is the real client of the store's standalone
// storage mode (Mooncake's mooncake_client, with its flags and defaults): a
// process that owns a store client (its transfer engine, the memory it lends
// to the store, the master connection) and serves the dummy clients that
// inference ranks start with MooncakeDistributedStore.setup_dummy(...,
// server_address="127.0.0.1:<port>") (store/standalone). Flags take one or
// two dashes:
//
//	kvferry-client --global_segment_size="4GB" --master_server_address=127.0.0.1:50051 \
//	    --metadata_server=P2PHANDSHAKE --port=50052
//
// --master_server_address=embedded runs the master in this process (a
// kvferry addition, for one host). It prints "ready <segment> <master>
// <socket>" on stdout once it serves, logs to stderr, and stops on SIGINT or
// SIGTERM (the dummies' calls then fail until a real client serves the port
// again; they reconnect by themselves).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/internal/hostenv"
	"github.com/kvferry/kvferry/store/client"
	"github.com/kvferry/kvferry/store/embedded"
	"github.com/kvferry/kvferry/store/standalone"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "kvferry-client:", err)
		os.Exit(1)
	}
}

// parseSize reads Mooncake's sizes: "4 GB", "16MB", "1gb", a byte count.
func parseSize(s string) (uint64, error) {
	m := regexp.MustCompile(`^\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgt]?)(i?b)?\s*$`).FindStringSubmatch(strings.ToLower(s))
	if m == nil {
		return 0, fmt.Errorf("size %q: want a byte count or e.g. 4GB", s)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: %w", s, err)
	}
	mult := map[string]float64{"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[m[2]]
	return uint64(v * mult), nil
}

func run(args []string) error {
	fs := flag.NewFlagSet("kvferry-client", flag.ContinueOnError)
	host := fs.String("host", "0.0.0.0", "local hostname of the transfer engine (host or host:port; 0.0.0.0: the first non-loopback IPv4 address)")
	metadata := fs.String("metadata_server", "http://127.0.0.1:8080/metadata", "transfer-engine metadata connection string (P2PHANDSHAKE for none)")
	devices := fs.String("device_names", "", "RDMA device names, comma-separated")
	masterAddr := fs.String("master_server_address", client.DefaultMasterAddr, "master address (host:port, etcd://h1:2379;h2:2379, or embedded)")
	protocol := fs.String("protocol", "tcp", "transport protocol")
	port := fs.Int("port", standalone.DefaultPort, "the port dummy clients name (server_address host:port)")
	segment := fs.String("global_segment_size", "4 GB", "memory this client lends to the store")
	localBuf := fs.String("local_buffer_size", "0", "staging buffer for unregistered memory (e.g. 16MB)")
	_ = fs.Int("threads", 1, "accepted for Mooncake compatibility (calls run concurrently)")
	tenant := fs.String("tenant_id", "default", "tenant whose namespace the keys of every dummy are in")
	offload := fs.Bool("enable_offload", false, "keep objects evicted from memory on local SSD (needs --ssd_offload_path)")
	offloadPath := fs.String("ssd_offload_path", "", "directory of the SSD tier")
	_ = fs.Bool("start_offload_rpc_server", true, "accepted for Mooncake compatibility")
	_ = fs.Bool("enable_http_server", false, "accepted for Mooncake compatibility (metrics: KVFERRY_METRICS_ADDR)")
	_ = fs.Int("http_port", 9300, "accepted for Mooncake compatibility")
	logLevel := fs.String("log_level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log_level: %w", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	gss, err := parseSize(*segment)
	if err != nil {
		return fmt.Errorf("--global_segment_size: %w", err)
	}
	lbs, err := parseSize(*localBuf)
	if err != nil {
		return fmt.Errorf("--local_buffer_size: %w", err)
	}
	local := *host
	if h, _, ok := strings.Cut(local, ":"); h == "0.0.0.0" || (ok && h == "") {
		local = ""
	}
	cfg := client.Config{
		LocalHostname:     local,
		MetadataServer:    *metadata,
		GlobalSegmentSize: gss,
		LocalBufferSize:   lbs,
		NoLocalBuffer:     lbs == 0,
		Protocol:          *protocol,
		DeviceName:        *devices,
		MasterServerAddr:  *masterAddr,
		TenantID:          *tenant,
		Stack:             stack.ConfigFromEnv(hostenv.Lookup),
		Logger:            log,
	}
	if *offload {
		if *offloadPath == "" {
			return errors.New("--enable_offload needs --ssd_offload_path")
		}
		cfg.SSDOffloadPath = *offloadPath
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.RPCTimeout+time.Minute)
	c, err := embedded.NewClient(ctx, cfg)
	cancel()
	if err != nil {
		return fmt.Errorf("store client: %w", err)
	}
	defer c.Close()
	srv, err := standalone.Serve(c, standalone.ServerConfig{Port: *port, Logger: log})
	if err != nil {
		return err
	}
	defer srv.Close()
	fmt.Printf("ready %s %s @%s\n", c.Hostname(), c.MasterAddr(), standalone.SocketName(*port))
	sig, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	<-sig.Done()
	log.Info("kvferry-client stopping")
	return nil
}
