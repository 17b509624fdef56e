// Command kvferry-metadata is an HTTP metadata server that speaks
// Mooncake's REST protocol (specs/mooncake.md §3.4): GET, PUT and DELETE
// of /metadata?key=<key>, and GET /health. Transfer engines (kvferry or
// Mooncake) use it with the connection string
// "http://<host>:<port>/metadata".
//
// With -snapshot it keeps every entry in a file, written atomically before
// each change is acknowledged and read at start, so a restart keeps the
// registrations. With -ttl it drops entries not re-published for that long
// (kvferry engines re-publish every 10 s by default).
//
// It prints "listening on <addr>" on stdout once it accepts connections
// (useful with -port 0) and logs to stderr.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	nethttp "net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	mdhttp "github.com/kvferry/kvferry/engine/metadata/http"
	"github.com/kvferry/kvferry/engine/peerauth"
	"github.com/kvferry/kvferry/engine/tlsconf"
	"github.com/kvferry/kvferry/internal/hostenv"
	"github.com/kvferry/kvferry/internal/ratelog"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "kvferry-metadata:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("kvferry-metadata", flag.ContinueOnError)
	addr := fs.String("addr", "0.0.0.0", "listen address: a host, or host:port (then -port is ignored)")
	port := fs.Int("port", 8080, "listen port (0 picks a free one)")
	path := fs.String("path", mdhttp.DefaultPath, "URL path of the metadata protocol")
	snapshot := fs.String("snapshot", "", "snapshot file that keeps entries across restarts (empty: memory only)")
	ttl := fs.Duration("ttl", 0, "drop entries not re-published for this long (0: never)")
	idle := fs.Duration("idle-timeout", 120*time.Second, "close keep-alive connections idle this long")
	maxValue := fs.Int64("max-value-bytes", mdhttp.DefaultServerMaxValueBytes, "largest accepted value in bytes")
	defKey, _ := hostenv.Getenv("KVFERRY_AUTH_KEY_FILE")
	keyFile := fs.String("auth-key-file", defKey, "cluster key file: every peer must prove it holds the key (default KVFERRY_AUTH_KEY_FILE)")
	envTLS := tlsconf.FilesFromEnv(hostenv.Lookup)
	var tf tlsconf.Files
	fs.StringVar(&tf.Cert, "tls-cert-file", envTLS.Cert, "TLS certificate: serve https (default KVFERRY_TLS_CERT_FILE)")
	fs.StringVar(&tf.Key, "tls-key-file", envTLS.Key, "TLS private key (default KVFERRY_TLS_KEY_FILE)")
	fs.StringVar(&tf.CA, "tls-ca-file", envTLS.CA, "CA that signs client certificates; required with TLS (default KVFERRY_TLS_CA_FILE)")
	level := fs.String("log-level", "info", "log level: debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		return fmt.Errorf("-log-level %q: %w", *level, err)
	}
	log := slog.New(ratelog.NewHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}), 0))

	listen, err := listenAddr(*addr, *port)
	if err != nil {
		return err
	}
	srv, err := mdhttp.NewServer(mdhttp.ServerConfig{
		Path:          *path,
		SnapshotPath:  *snapshot,
		TTL:           *ttl,
		MaxValueBytes: *maxValue,
		Logger:        log,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		_ = srv.Close()
		return fmt.Errorf("listen on %s: %w", listen, err)
	}
	hs := mdhttp.HTTPServer(mdhttp.Instrument(srv, srv.Len), *idle, log)
	ln = mdhttp.GuardListener(ln, "metadata", log)
	if *keyFile == "" {
		peerauth.WarnIfOpen(log, "metadata", listen, nil)
	}
	if *keyFile != "" {
		ks, err := peerauth.LoadKeyFile(*keyFile)
		if err != nil {
			ln.Close()
			_ = srv.Close()
			return err
		}
		ln = peerauth.Listen(ln, peerauth.NewGuard(ks, peerauth.RoleMetadata, 0, log))
		log.Info("peer authentication on", "key", ks.Fingerprint())
	}
	if tf.Enabled() {
		p, err := tlsconf.Load(tf)
		if err == nil && p.Server == nil {
			err = fmt.Errorf("%w: TLS needs -tls-cert-file and -tls-key-file", tlsconf.ErrFiles)
		}
		if err != nil {
			ln.Close()
			_ = srv.Close()
			return err
		}
		ln = tls.NewListener(ln, p.Server)
		log.Info("TLS on (clients need certificates signed by the CA)")
	}
	log.Info("metadata server started", "addr", ln.Addr().String(), "path", *path,
		"snapshot", *snapshot, "ttl", *ttl, "entries", srv.Len())
	fmt.Printf("listening on %s\n", ln.Addr())

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case <-ctx.Done():
		log.Info("metadata server stopping")
	case err = <-errc:
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if serr := hs.Shutdown(sctx); serr != nil && err == nil {
		err = serr
	}
	if cerr := srv.Close(); cerr != nil && err == nil {
		err = cerr
	}
	if errors.Is(err, nethttp.ErrServerClosed) {
		err = nil
	}
	return err
}

// listenAddr combines -addr and -port; an -addr with a port (":8080",
// "0.0.0.0:8080", as Mooncake's example server takes) wins.
func listenAddr(addr string, port int) (string, error) {
	if h, p, err := net.SplitHostPort(addr); err == nil {
		if n, err := strconv.Atoi(p); err != nil || n < 0 || n > 65535 {
			return "", fmt.Errorf("-addr %q: bad port", addr)
		}
		return net.JoinHostPort(h, p), nil
	}
	if port < 0 || port > 65535 {
		return "", fmt.Errorf("-port %d out of range", port)
	}
	return net.JoinHostPort(strings.Trim(addr, "[]"), strconv.Itoa(port)), nil
}
