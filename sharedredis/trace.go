package sharedredis

import (
	"context"
	"errors"
	"net"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// traceScope is the instrumentation scope (the one telemetry.ScopeName;
// repeated here so this package imports no other package of the sidecar).
const traceScope = "github.com/bailinghub/knowledge-sidecar"

// traceHook is a go-redis hook making one CLIENT span per command or
// pipeline. It records the command's name only: never its arguments (the
// keys hold turn ids, the values modes), the address or the URL.
// (redisotel is not used: it records the server address and, unless told
// otherwise, the statement with its arguments.)
type traceHook struct{ tracer trace.Tracer }

func (traceHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h traceHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !trace.SpanFromContext(ctx).IsRecording() {
			return next(ctx, cmd)
		}
		name := cmd.Name()
		ctx, span := h.tracer.Start(ctx, "redis "+name, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(
				attribute.String("db.system.name", "redis"),
				attribute.String("db.operation.name", name),
			))
		err := next(ctx, cmd)
		endRedisSpan(span, err)
		return err
	}
}

func (h traceHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !trace.SpanFromContext(ctx).IsRecording() {
			return next(ctx, cmds)
		}
		ctx, span := h.tracer.Start(ctx, "redis pipeline", trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(
				attribute.String("db.system.name", "redis"),
				attribute.String("db.operation.name", "pipeline"),
				attribute.Int("db.operation.batch.size", len(cmds)),
			))
		err := next(ctx, cmds)
		endRedisSpan(span, err)
		return err
	}
}

// endRedisSpan records a failure by kind only (a go-redis error may quote
// the address or a key). redis.Nil (no such key) is an answer, not an error.
func endRedisSpan(span trace.Span, err error) {
	if err != nil && !errors.Is(err, redis.Nil) {
		kind := "redis"
		var ne net.Error
		switch {
		case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
			kind = "timeout"
		case errors.Is(err, context.Canceled):
			kind = "canceled"
		case ne != nil:
			kind = "network"
		}
		span.SetAttributes(attribute.String("error.type", kind))
		span.SetStatus(codes.Error, "")
	}
	span.End()
}
