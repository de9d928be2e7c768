package cri

import (
	"context"
	"log/slog"
)

// demoted is the handler cri-client's klog output goes to. cri-client logs
// every failed call at error level, routine ones included (a container
// that is already gone, a runtime without an optional call); the same
// error is returned to our caller, which decides how loud it is. So its
// errors become debug records here.
type demoted struct{ slog.Handler }

func (d demoted) Enabled(ctx context.Context, level slog.Level) bool {
	return d.Handler.Enabled(ctx, demote(level))
}

// Handle checks the level itself: logr passes errors on without asking
// Enabled.
func (d demoted) Handle(ctx context.Context, r slog.Record) error {
	r.Level = demote(r.Level)
	if !d.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return d.Handler.Handle(ctx, r)
}

func (d demoted) WithAttrs(attrs []slog.Attr) slog.Handler {
	return demoted{d.Handler.WithAttrs(attrs)}
}
func (d demoted) WithGroup(name string) slog.Handler { return demoted{d.Handler.WithGroup(name)} }

func demote(l slog.Level) slog.Level {
	if l >= slog.LevelWarn {
		return slog.LevelDebug
	}
	return l
}
