package stack

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"gotest.tools/v3/assert"

	"github.com/kvferry/kvferry/engine"
	"github.com/kvferry/kvferry/engine/transport/rdma"
)

// syncBuf is a log sink safe for concurrent writers.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRequestedProtocolFallsBack: an engine asked for RDMA on a host
// without it starts all the same (Mooncake users rely on that), with TCP,
// and says so once per process, with the reason, at warning level.
func TestRequestedProtocolFallsBack(t *testing.T) {
	cfg := Config{RDMA: rdma.Config{Library: t.TempDir() + "/no-libibverbs.so"}}
	if _, err := rdma.Available(cfg.RDMA); err == nil {
		t.Skip("this host has a usable RDMA device")
	}
	protocolLogged.Clear() // as in a new process (go test -count=N)
	var logs syncBuf
	lg := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	for range 2 {
		c := cfg
		c.Engine = engine.Config{LocalServerName: "127.0.0.1", Logger: lg}
		c.AutoDiscover = true
		c.Protocol = "RDMA"
		e, err := New(context.Background(), c)
		assert.NilError(t, err)
		assert.Equal(t, networkTransport(e), "tcp")
		assert.NilError(t, e.Close())
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if strings.Contains(l, "requested") {
			lines = append(lines, l)
		}
	}
	assert.Equal(t, len(lines), 1, "logged once: %q", logs.String())
	assert.Assert(t, strings.Contains(lines[0], "level=WARN"), lines[0])
	assert.Assert(t, strings.Contains(lines[0], `protocol \"rdma\" requested; transfers to other hosts use tcp`), lines[0])
	assert.Assert(t, strings.Contains(lines[0], "why="), lines[0])
}
