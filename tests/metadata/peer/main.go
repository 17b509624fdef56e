// Command peer is one transfer-engine process for the multi-process
// metadata tests (tests/metadata). It starts an engine through
// engine/stack with the metadata connection string given on the command
// line, then reads one command per line on stdin and answers each with one
// JSON line on stdout. Memory it registers is anonymous mmap, outside the
// Go heap. Logs go to stderr.
//
// Commands (numbers are decimal):
//
//	info                              segment name, host, rpc port
//	alloc <bytes>                     mmap and register; answers addr
//	free <addr>                       unregister and munmap
//	fill <addr> <bytes> <byte>        set memory
//	check <addr> <bytes> <byte>       verify memory
//	open <segment>                    OpenSegment; answers id
//	remove <segment>                  drop a cached segment
//	sync                              SyncSegmentCache
//	xfer read|write <id> <local> <remote> <bytes>    transfer and wait
//	submit read|write <id> <local> <remote> <bytes>  submit; answers batch
//	wait <batch>                      wait for a batch and free it
//	notify <id> <name> <msg>          send a notification
//	notifs                            drain received notifications
//	quit                              close the engine and exit
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/metadata"
	"github.com/kvferry/kvferry/engine/metadata/etcd"
	"github.com/kvferry/kvferry/engine/metadata/open"
	"github.com/kvferry/kvferry/engine/metadata/redis"
	"github.com/kvferry/kvferry/engine/stack"
	"github.com/kvferry/kvferry/tests/internal/child"
)

func main() {
	if err := run(); err != nil {
		reply(map[string]any{"ok": false, "error": err.Error()})
		os.Exit(1)
	}
}

func reply(v map[string]any) {
	b, _ := json.Marshal(v)
	fmt.Println(string(b))
}

func run() error {
	conn := flag.String("metadata", metadata.P2PHandshake, "metadata connection string")
	name := flag.String("name", "127.0.0.1", "local server name (segment name outside P2P mode)")
	cluster := flag.String("cluster", "", "metadata cluster id")
	republish := flag.Duration("republish", time.Second, "metadata re-publish interval")
	ttl := flag.Duration("lease-ttl", 2*time.Second, "etcd lease TTL, and TTL of Redis keys")
	timeout := flag.Duration("transfer-timeout", 5*time.Second, "transfer timeout")
	level := flag.String("log-level", "info", "log level")
	flag.Parse()
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})).With("proc", *name)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	e, err := stack.New(ctx, stack.Config{
		Engine: engine.Config{
			MetadataConn:    *conn,
			LocalServerName: *name,
			BindAddress:     "127.0.0.1",
			Transports:      []string{"tcp"},
			TransferTimeout: *timeout,
			ConnectTimeout:  2 * time.Second,
			MetadataTimeout: 5 * time.Second,
			Logger:          log,
		},
		Metadata: open.Options{
			KV:    metadata.KVConfig{ClusterID: *cluster, RepublishInterval: *republish, RetryInterval: 100 * time.Millisecond},
			Etcd:  etcd.Config{LeaseTTL: *ttl, DialTimeout: 3 * time.Second},
			Redis: redis.Config{KeyTTL: *ttl, DialTimeout: 3 * time.Second, OpTimeout: 3 * time.Second},
		},
	})
	cancel()
	if err != nil {
		return err
	}
	p := &peer{e: e, timeout: *timeout, mem: map[uintptr][]byte{}}
	reply(map[string]any{"ok": true, "segment": e.SegmentName(), "host": e.Host(), "rpc_port": e.RPCPort()})

	child.Serve(os.Stdin, func(f []string) {
		start := time.Now()
		out, err := p.do(f)
		if out == nil {
			out = map[string]any{}
		}
		out["ms"] = time.Since(start).Milliseconds()
		out["ok"] = err == nil
		if err != nil {
			out["error"] = err.Error()
		}
		reply(out)
	})
	err = e.Close()
	for _, m := range p.mem {
		_ = unix.Munmap(m)
	}
	if err != nil {
		return fmt.Errorf("close engine: %w", err)
	}
	reply(map[string]any{"ok": true, "closed": true})
	return nil
}

type peer struct {
	e       *engine.Engine
	timeout time.Duration
	mem     map[uintptr][]byte
}

func num(s string) (uint64, error) { return strconv.ParseUint(s, 10, 64) }

func nums(f []string, n int) ([]uint64, error) {
	if len(f) != n {
		return nil, fmt.Errorf("want %d numbers, got %d", n, len(f))
	}
	out := make([]uint64, n)
	for i, s := range f {
		v, err := num(s)
		if err != nil {
			return nil, fmt.Errorf("number %q: %w", s, err)
		}
		out[i] = v
	}
	return out, nil
}

// region returns the mapped memory [addr, addr+n).
func (p *peer) region(addr, n uint64) ([]byte, error) {
	for base, m := range p.mem {
		if addr >= uint64(base) && addr+n <= uint64(base)+uint64(len(m)) {
			off := addr - uint64(base)
			return m[off : off+n], nil
		}
	}
	return nil, fmt.Errorf("%#x+%d is not allocated here", addr, n)
}

func (p *peer) do(f []string) (map[string]any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout+10*time.Second)
	defer cancel()
	switch f[0] {
	case "info":
		return map[string]any{"segment": p.e.SegmentName(), "host": p.e.Host(), "rpc_port": p.e.RPCPort()}, nil
	case "alloc":
		v, err := nums(f[1:], 1)
		if err != nil {
			return nil, err
		}
		m, err := unix.Mmap(-1, 0, int(v[0]), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
		if err != nil {
			return nil, fmt.Errorf("mmap: %w", err)
		}
		addr := uintptr(unsafe.Pointer(&m[0]))
		if err := p.e.RegisterMemory(addr, v[0], "cpu:0", true); err != nil {
			_ = unix.Munmap(m)
			return nil, err
		}
		p.mem[addr] = m
		return map[string]any{"addr": uint64(addr)}, nil
	case "free":
		v, err := nums(f[1:], 1)
		if err != nil {
			return nil, err
		}
		m, ok := p.mem[uintptr(v[0])]
		if !ok {
			return nil, errors.New("not allocated")
		}
		if err := p.e.UnregisterMemory(uintptr(v[0])); err != nil {
			return nil, err
		}
		delete(p.mem, uintptr(v[0]))
		return nil, unix.Munmap(m)
	case "fill", "check":
		v, err := nums(f[1:], 3)
		if err != nil {
			return nil, err
		}
		b, err := p.region(v[0], v[1])
		if err != nil {
			return nil, err
		}
		for i := range b {
			if f[0] == "fill" {
				b[i] = byte(v[2])
			} else if b[i] != byte(v[2]) {
				return nil, fmt.Errorf("byte %d is %#x, want %#x", i, b[i], byte(v[2]))
			}
		}
		return nil, nil
	case "open":
		if len(f) != 2 {
			return nil, errors.New("open <segment>")
		}
		id, err := p.e.OpenSegment(ctx, f[1])
		if err != nil {
			return nil, err
		}
		return map[string]any{"id": int(id)}, nil
	case "remove":
		if len(f) != 2 {
			return nil, errors.New("remove <segment>")
		}
		return nil, p.e.RemoveSegment(f[1])
	case "sync":
		return nil, p.e.SyncSegmentCache(ctx)
	case "xfer", "submit":
		if len(f) != 6 {
			return nil, fmt.Errorf("%s read|write <id> <local> <remote> <bytes>", f[0])
		}
		op := engine.OpRead
		if f[1] == "write" {
			op = engine.OpWrite
		}
		v, err := nums(f[2:], 4)
		if err != nil {
			return nil, err
		}
		req := engine.Request{Op: op, Target: engine.SegmentID(v[0]), Source: uintptr(v[1]), TargetOffset: v[2], Length: v[3]}
		if f[0] == "xfer" {
			return nil, p.e.Transfer(ctx, []engine.Request{req})
		}
		id, err := p.e.AllocateBatch(1)
		if err != nil {
			return nil, err
		}
		if err := p.e.Submit(id, []engine.Request{req}); err != nil {
			return map[string]any{"batch": uint64(id)}, err
		}
		return map[string]any{"batch": uint64(id)}, nil
	case "wait":
		v, err := nums(f[1:], 1)
		if err != nil {
			return nil, err
		}
		bs, err := p.e.Wait(ctx, engine.BatchID(v[0]))
		out := map[string]any{"state": bs.State.String()}
		if bs.Err != nil {
			out["task_error"] = bs.Err.Error()
		}
		if err != nil {
			return out, err
		}
		return out, p.e.FreeBatch(engine.BatchID(v[0]))
	case "notify":
		if len(f) != 4 {
			return nil, errors.New("notify <id> <name> <msg>")
		}
		id, err := num(f[1])
		if err != nil {
			return nil, err
		}
		return nil, p.e.Notify(ctx, engine.SegmentID(id), engine.Notification{Name: f[2], Msg: f[3]})
	case "notifs":
		var out []map[string]string
		for _, n := range p.e.Notifications() {
			out = append(out, map[string]string{"name": n.Name, "msg": n.Msg})
		}
		return map[string]any{"notifs": out}, nil
	}
	return nil, fmt.Errorf("unknown command %q", f[0])
}
