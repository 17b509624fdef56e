package hostenv

import (
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/kvferry/kvferry/internal/ratelog"
)

// Logger returns the library's logger: text to stderr (or KVFERRY_LOG_FILE)
// at the level of KVFERRY_LOG_LEVEL (debug, info, warn, error, off) or
// MC_LOG_LEVEL (TRACE, INFO, WARNING, ERROR). Unset means warn: refusals
// of hostile or broken peers and other warnings reach the log, and nothing
// else is printed. Warnings and errors are limited to one line per message
// every few seconds (ratelog), with the count of lines held back.
func (e Env) Logger() *slog.Logger {
	v, ok := e.Str("KVFERRY_LOG_LEVEL", "MC_LOG_LEVEL")
	if !ok {
		return e.textLogger(slog.LevelWarn)
	}
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "off", "none", "silent":
		return slog.New(slog.DiscardHandler)
	}
	return e.textLogger(parseLevel(v))
}

// Logger is Lookup.Logger.
func Logger() *slog.Logger { return Lookup.Logger() }

// NIXLLogger returns the logger of the NIXL backend: Logger's when
// KVFERRY_LOG_LEVEL or MC_LOG_LEVEL is set, else one at the level of the
// host's NIXL_LOG_LEVEL (TRACE, DEBUG, INFO, WARN, ERROR, FATAL), whose
// default is NIXL's own, WARN: inside a NIXL program the backend logs as
// NIXL's own plugins do, so a failed createBackend says why by default.
func NIXLLogger() *slog.Logger {
	if _, ok := Lookup.Str("KVFERRY_LOG_LEVEL", "MC_LOG_LEVEL"); ok {
		return Logger()
	}
	lvl := slog.LevelWarn
	if v, ok := Lookup.Str("NIXL_LOG_LEVEL"); ok {
		lvl = parseLevel(v)
	}
	return Lookup.textLogger(lvl)
}

// parseLevel maps a level name of kvferry, Mooncake or NIXL to a slog
// level; unknown names mean info.
func parseLevel(v string) slog.Level {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "trace", "debug":
		return slog.LevelDebug
	case "warn", "warning":
		return slog.LevelWarn
	case "error", "fatal":
		return slog.LevelError
	}
	return slog.LevelInfo
}

// textLogger logs text at lvl to stderr, or to KVFERRY_LOG_FILE.
func (e Env) textLogger(lvl slog.Level) *slog.Logger {
	var w io.Writer = os.Stderr
	if p, ok := e.Str("KVFERRY_LOG_FILE"); ok {
		if f, err := os.OpenFile(p, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err == nil {
			w = f
		}
	}
	h := slog.NewTextHandler(w, &slog.HandlerOptions{Level: lvl})
	return slog.New(ratelog.NewHandler(h, 0)).With("lib", "kvferry")
}
