package etcd

import (
	"context"
	"log/slog"

	"go.uber.org/zap/zapcore"
)

// slogCore forwards the etcd client's zap logs to a slog.Logger: errors and
// worse at Warn, everything else at Debug (the client reports every retry
// of an outage, which the KV already summarizes as state changes).
type slogCore struct {
	log    *slog.Logger
	fields []zapcore.Field
}

func newSlogCore(l *slog.Logger) zapcore.Core { return &slogCore{log: l} }

func level(l zapcore.Level) slog.Level {
	if l >= zapcore.ErrorLevel {
		return slog.LevelWarn
	}
	return slog.LevelDebug
}

func (c *slogCore) Enabled(l zapcore.Level) bool {
	return c.log.Enabled(context.Background(), level(l))
}

func (c *slogCore) With(fields []zapcore.Field) zapcore.Core {
	return &slogCore{log: c.log, fields: append(append([]zapcore.Field(nil), c.fields...), fields...)}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fields {
		f.AddTo(enc)
	}
	attrs := make([]slog.Attr, 0, len(enc.Fields)+1)
	for k, v := range enc.Fields {
		attrs = append(attrs, slog.Any(k, v))
	}
	attrs = append(attrs, slog.String("component", "etcd-client"))
	c.log.LogAttrs(context.Background(), level(e.Level), e.Message, attrs...)
	return nil
}

func (c *slogCore) Sync() error { return nil }
