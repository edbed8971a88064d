package telemetry

import (
	"context"
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// StartCoreSpan starts the CLIENT span of one request to Core, child of the
// span in ctx, and injects its context into h (traceparent, tracestate).
// A recording span gets the method (as semconv spells it: "_OTHER" for an
// unknown one), Core's host and the peer, then attrs; a span that does not
// record (parent not sampled) costs only the injected headers. The edge's
// pass-through and the Core client both start their spans here.
func StartCoreSpan(ctx context.Context, tracer trace.Tracer, name, method, host string, h http.Header, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	ctx, span := tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient))
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("http.request.method", method),
			attribute.String("server.address", host),
			attribute.String("knowledge_sidecar.peer", "core"),
		)
		span.SetAttributes(attrs...)
	}
	Propagator.Inject(ctx, propagation.HeaderCarrier(h))
	return ctx, span
}

// EndCoreSpan records a Core request's outcome and ends its span: Core's
// status (status > 0), an error for 4xx and 5xx (a client span's rule),
// and errType, when not empty, as the error's type (no answer, or a body
// that failed after one).
func EndCoreSpan(span trace.Span, status int, errType string) {
	if span.IsRecording() {
		if status > 0 {
			span.SetAttributes(attribute.Int("http.response.status_code", status))
			if status >= 400 {
				errType = strconv.Itoa(status)
			}
		}
		if errType != "" {
			span.SetAttributes(attribute.String("error.type", errType))
			span.SetStatus(codes.Error, "")
		}
	}
	span.End()
}
