package hostenv

import (
	"context"
	"log/slog"
	"os"
	"testing"

	"gotest.tools/v3/assert"
)

// TestNIXLLoggerLevel checks that the NIXL backend logs at NIXL's level
// (default WARN) unless kvferry's own level is set.
func TestNIXLLoggerLevel(t *testing.T) {
	for _, k := range []string{"KVFERRY_LOG_LEVEL", "MC_LOG_LEVEL", "NIXL_LOG_LEVEL", "KVFERRY_LOG_FILE"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	ctx := context.Background()
	enabled := func(l *slog.Logger) (debug, info, warn bool) {
		return l.Enabled(ctx, slog.LevelDebug), l.Enabled(ctx, slog.LevelInfo), l.Enabled(ctx, slog.LevelWarn)
	}
	d, i, w := enabled(NIXLLogger())
	assert.Assert(t, !d && !i && w, "default: NIXL's WARN")
	d, i, w = enabled(Logger())
	assert.Assert(t, !d && !i && w, "the library's own logger warns by default (refusals reach the log)")
	t.Setenv("KVFERRY_LOG_LEVEL", "off")
	_, _, w = enabled(Logger())
	assert.Assert(t, !w, "KVFERRY_LOG_LEVEL=off silences it")
	os.Unsetenv("KVFERRY_LOG_LEVEL")

	t.Setenv("NIXL_LOG_LEVEL", "DEBUG")
	d, _, _ = enabled(NIXLLogger())
	assert.Assert(t, d, "NIXL_LOG_LEVEL=DEBUG")
	t.Setenv("NIXL_LOG_LEVEL", "ERROR")
	_, _, w = enabled(NIXLLogger())
	assert.Assert(t, !w, "NIXL_LOG_LEVEL=ERROR")

	t.Setenv("KVFERRY_LOG_LEVEL", "info")
	d, i, _ = enabled(NIXLLogger())
	assert.Assert(t, !d && i, "KVFERRY_LOG_LEVEL wins over NIXL_LOG_LEVEL")
}
