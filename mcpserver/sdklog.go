package mcpserver

import (
	"context"
	"log/slog"
)

// sdkLogger is the logger handed to the MCP SDK: its records below WARN are
// written at DEBUG. The SDK logs every stateless request's session
// lifecycle at INFO ("server session connected", "session initialized", …:
// three lines per request), which would bury an INFO-level server log;
// its warnings and errors keep their level.
func sdkLogger(l *slog.Logger) *slog.Logger {
	return slog.New(demoted{l.Handler()})
}

// demoted is a slog.Handler that moves INFO-range records to DEBUG.
type demoted struct{ h slog.Handler }

func demote(l slog.Level) slog.Level {
	if l >= slog.LevelInfo && l < slog.LevelWarn {
		return slog.LevelDebug
	}
	return l
}

func (d demoted) Enabled(ctx context.Context, l slog.Level) bool {
	return d.h.Enabled(ctx, demote(l))
}

func (d demoted) Handle(ctx context.Context, r slog.Record) error {
	r.Level = demote(r.Level)
	return d.h.Handle(ctx, r)
}

func (d demoted) WithAttrs(as []slog.Attr) slog.Handler { return demoted{d.h.WithAttrs(as)} }
func (d demoted) WithGroup(name string) slog.Handler    { return demoted{d.h.WithGroup(name)} }
