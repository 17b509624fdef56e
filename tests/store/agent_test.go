//go:build storeproc

package store

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/kvferry/kvferry/store/client"
	"github.com/kvferry/kvferry/store/wire"
	"github.com/kvferry/kvferry/tests/internal/child"
)

// agentEnv holds the JSON agentConfig when the test binary runs as a store
// client process.
const agentEnv = "KVFERRY_STORE_AGENT"

type agentConfig struct {
	Master        string `json:"master"`
	ClusterID     string `json:"cluster_id"`
	SegmentBytes  uint64 `json:"segment_bytes"`
	PingMillis    int    `json:"ping_ms"`
	RPCTimeoutSec int    `json:"rpc_timeout_s"`
}

// runAgent is the client process: it sets up a store client and answers
// one command per stdin line with one stdout line ("ok ..." or "err <code>
// <text>"). Commands:
//
//	put <key> <size> <seed> <replicas> [hard] [prefer=<seg>,<seg>]
//	get <key>            -> ok <size> <crc32>
//	exist <key>          -> ok 1|0
//	remove <key> [force] -> ok
//	quit
func runAgent(spec string) int {
	var cfg agentConfig
	if err := json.Unmarshal([]byte(spec), &cfg); err != nil {
		fmt.Println("err -1 bad agent config:", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	c, err := client.New(ctx, client.Config{
		LocalHostname:     "127.0.0.1",
		MasterServerAddr:  cfg.Master,
		ClusterID:         cfg.ClusterID,
		GlobalSegmentSize: cfg.SegmentBytes,
		PingInterval:      time.Duration(cfg.PingMillis) * time.Millisecond,
		RPCTimeout:        time.Duration(cfg.RPCTimeoutSec) * time.Second,
	})
	cancel()
	if err != nil {
		fmt.Printf("err %d %v\n", wire.CodeOf(err), err)
		return 1
	}
	defer c.Close()
	fmt.Printf("ready %s\n", c.Hostname())
	if child.Serve(os.Stdin, func(f []string) { fmt.Println(agentCommand(c, f)) }) {
		fmt.Println("ok")
	}
	return 0
}

func agentCommand(c *client.Client, f []string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reply := func(err error, ok string) string {
		if err != nil {
			return fmt.Sprintf("err %d %s", wire.CodeOf(err), strings.ReplaceAll(err.Error(), "\n", " "))
		}
		return "ok" + ok
	}
	switch {
	case f[0] == "put" && len(f) >= 5:
		size, _ := strconv.Atoi(f[2])
		seed, _ := strconv.Atoi(f[3])
		replicas, _ := strconv.Atoi(f[4])
		cfg := client.ReplicateConfig{ReplicaNum: replicas}
		for _, opt := range f[5:] {
			switch {
			case opt == "hard":
				cfg.HardPin = true
			case strings.HasPrefix(opt, "prefer="):
				cfg.PreferredSegments = strings.Split(strings.TrimPrefix(opt, "prefer="), ",")
			}
		}
		return reply(c.Put(ctx, f[1], pattern(size, seed), cfg), "")
	case f[0] == "get" && len(f) == 2:
		b, err := c.Get(ctx, f[1])
		return reply(err, fmt.Sprintf(" %d %d", len(b), crc32.ChecksumIEEE(b)))
	case f[0] == "exist" && len(f) == 2:
		ok, err := c.IsExist(ctx, f[1])
		v := " 0"
		if ok {
			v = " 1"
		}
		return reply(err, v)
	case f[0] == "remove" && len(f) >= 2:
		return reply(c.Remove(ctx, f[1], len(f) > 2 && f[2] == "force"), "")
	}
	return "err -600 bad command"
}

// pattern returns n bytes derived from seed.
func pattern(n, seed int) []byte {
	b := make([]byte, n)
	x := uint32(seed)*2654435761 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}
