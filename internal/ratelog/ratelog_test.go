package ratelog

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

func TestEvery(t *testing.T) {
	var e Every
	t0 := time.Unix(1000, 0)
	ok, n := e.allowAt("a", t0)
	assert.Assert(t, ok)
	assert.Equal(t, n, uint64(0))
	for i := range 5 {
		ok, _ = e.allowAt("a", t0.Add(time.Duration(i)*time.Second))
		assert.Assert(t, !ok)
	}
	ok, _ = e.allowAt("b", t0)
	assert.Assert(t, ok, "keys are independent")
	ok, n = e.allowAt("a", t0.Add(DefaultInterval))
	assert.Assert(t, ok)
	assert.Equal(t, n, uint64(5))
}

func TestEveryBoundedKeys(t *testing.T) {
	var e Every
	t0 := time.Unix(1000, 0)
	for i := range 10 * maxKeys {
		e.allowAt(strings.Repeat("k", i%50)+string(rune('a'+i%26))+time.Duration(i).String(), t0)
	}
	e.mu.Lock()
	n := len(e.mu.last)
	e.mu.Unlock()
	assert.Assert(t, n <= maxKeys, "%d keys kept", n)
}

func TestHandler(t *testing.T) {
	var buf bytes.Buffer
	h := NewHandler(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}), time.Hour)
	log := slog.New(h).With("c", "x")
	for range 100 {
		log.Warn("refused", "peer", "1.2.3.4")
		log.Debug("detail")
	}
	out := buf.String()
	assert.Equal(t, strings.Count(out, "refused"), 1, out)
	assert.Equal(t, strings.Count(out, "detail"), 100)
}
