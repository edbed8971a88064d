package catalog

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Tracing of catalog queries (SPEC §9): attributes are constants and the
// query's label, never SQL, its arguments or an id.

// startQuerySpan starts the CLIENT span of one catalog query, named by its
// label (a constant of this package): db.system.name mysql and the label as
// db.query.summary, never the SQL or its arguments.
func startQuerySpan(ctx context.Context, tracer trace.Tracer, query string) (context.Context, trace.Span) {
	return tracer.Start(ctx, "catalog "+query, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String("db.system.name", "mysql"),
			attribute.String("db.query.summary", query),
		))
}

// endQuerySpan records a query's outcome (not found is no error).
func endQuerySpan(span trace.Span, outcome string) {
	if span.IsRecording() {
		span.SetAttributes(attribute.String("knowledge_sidecar.outcome", outcome))
		if outcome != OutcomeOK && outcome != OutcomeNotFound {
			span.SetAttributes(attribute.String("error.type", outcome))
			span.SetStatus(codes.Error, "")
		}
	}
	span.End()
}
