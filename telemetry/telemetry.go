// Package telemetry sets up OpenTelemetry tracing for the sidecar (SPEC §9):
// the SDK's tracer provider with a batch span processor and an OTLP
// exporter, all configured by the standard OTEL_* variables, plus the small
// pieces the other packages share (the W3C propagator, a log handler that
// adds trace ids, the trace id of a sampled context).
//
// With tracing off nothing here runs per request: callers hold a nil
// trace.TracerProvider and skip every tracing call.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/bailinghub/knowledge-sidecar/internal/prom"
)

// ServiceName is service.name unless OTEL_SERVICE_NAME (or service.name in
// OTEL_RESOURCE_ATTRIBUTES) says otherwise.
const ServiceName = "knowledge-sidecar"

// ScopeName is the instrumentation scope of every span the sidecar makes.
const ScopeName = "github.com/bailinghub/knowledge-sidecar"

// Propagator is the one propagator: W3C traceparent and tracestate.
var Propagator propagation.TextMapPropagator = propagation.TraceContext{}

// Tracer is the sidecar's tracer of tp, or nil when tp is nil (tracing off).
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(ScopeName)
}

// Metrics count what happened to finished spans. Registered whether or
// not tracing is on, so dashboards read 0 rather than no data.
type Metrics struct {
	Exported prometheus.Counter
	Dropped  prometheus.Counter
}

// NewMetrics builds and registers the span counters on reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Exported: prom.Counter("tracing_spans_exported_total", "Spans the OTLP exporter delivered to the collector."),
		Dropped: prom.Counter("tracing_spans_dropped_total",
			"Finished spans never delivered: the export queue was full or the collector failed or could not be reached."),
	}
	if reg != nil {
		reg.MustRegister(m.Exported, m.Dropped)
	}
	return m
}

// Options of Setup. Zero values are the defaults.
type Options struct {
	Version string       // service.version
	Metrics *Metrics     // nil: counted nowhere
	Logger  *slog.Logger // SDK errors (export failures) at debug; nil: discarded
	// Exporter replaces the OTLP exporter (tests).
	Exporter sdktrace.SpanExporter
	// QueueSize bounds the finished spans waiting for export; ≤ 0: 2048
	// (or OTEL_BSP_MAX_QUEUE_SIZE).
	QueueSize int
}

// Tracing is a running tracer provider.
type Tracing struct {
	Provider *sdktrace.TracerProvider
}

// Setup builds the tracer provider from the OTEL_* variables, or returns
// nil (tracing off) when OTEL_SDK_DISABLED is true. Errors name the variable,
// never a header value.
func Setup(ctx context.Context, o Options) (*Tracing, error) {
	env := os.Getenv
	if strings.EqualFold(strings.TrimSpace(env("OTEL_SDK_DISABLED")), "true") {
		return nil, nil
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// The SDK reports export failures here; the default handler would
	// print them unstructured on stderr. They are counted (Dropped).
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Debug("tracing", slog.String("error", err.Error()))
	}))
	exp := o.Exporter
	if exp == nil {
		var err error
		if exp, err = newExporter(ctx, env); err != nil {
			return nil, err
		}
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", ServiceName)),
		resource.WithAttributes(attribute.String("service.version", o.Version)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil && res == nil {
		return nil, fmt.Errorf("tracing: OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	queue := o.QueueSize
	if queue <= 0 {
		queue = envInt(env, "OTEL_BSP_MAX_QUEUE_SIZE", sdktrace.DefaultMaxQueueSize)
	}
	counted := &countingExporter{next: exp, m: o.Metrics}
	bsp := sdktrace.NewBatchSpanProcessor(counted, sdktrace.WithMaxQueueSize(queue))
	tp := sdktrace.NewTracerProvider(
		// The sampler comes from OTEL_TRACES_SAMPLER / _ARG (the SDK reads
		// them); unset, it is parentbased_always_on.
		sdktrace.WithResource(res),
		sdktrace.WithSpanProcessor(&gate{next: bsp, max: int64(queue), exp: counted, m: o.Metrics}),
	)
	return &Tracing{Provider: tp}, nil
}

// Shutdown flushes the spans still queued and stops the exporter, giving up
// when ctx ends (what is left is dropped).
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.Provider.Shutdown(ctx)
}

func newExporter(ctx context.Context, env func(string) string) (sdktrace.SpanExporter, error) {
	proto := strings.TrimSpace(env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
	if proto == "" {
		proto = strings.TrimSpace(env("OTEL_EXPORTER_OTLP_PROTOCOL"))
	}
	switch proto {
	case "", "http/protobuf":
		// Endpoint, headers, TLS, compression and timeout come from the
		// OTEL_EXPORTER_OTLP_[TRACES_]* variables, read by the exporter.
		return otlptracehttp.New(ctx)
	case "grpc":
		return otlptracegrpc.New(ctx)
	}
	return nil, errors.New("tracing: OTEL_EXPORTER_OTLP_PROTOCOL must be http/protobuf or grpc")
}

func envInt(env func(string) string, key string, def int) int {
	var n int
	if _, err := fmt.Sscan(strings.TrimSpace(env(key)), &n); err != nil || n <= 0 {
		return def
	}
	return n
}

// gate is in front of the batch processor: it counts the spans handed on
// and not yet exported, and drops (and counts) a span once the queue holds
// max of them, where the batch processor would drop it silently. A request
// never waits for the exporter.
type gate struct {
	next sdktrace.SpanProcessor
	max  int64
	exp  *countingExporter
	m    *Metrics
}

func (g *gate) OnStart(ctx context.Context, s sdktrace.ReadWriteSpan) { g.next.OnStart(ctx, s) }

func (g *gate) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	if g.exp.pending.Add(1) > g.max {
		g.exp.pending.Add(-1)
		g.m.Dropped.Inc()
		return
	}
	g.next.OnEnd(s)
}

func (g *gate) Shutdown(ctx context.Context) error {
	err := g.next.Shutdown(ctx)
	// What the processor did not get out before ctx ended is lost.
	if n := g.exp.pending.Swap(0); n > 0 {
		g.m.Dropped.Add(float64(n))
	}
	return err
}

func (g *gate) ForceFlush(ctx context.Context) error { return g.next.ForceFlush(ctx) }

// countingExporter counts exported and failed spans.
type countingExporter struct {
	next    sdktrace.SpanExporter
	m       *Metrics
	pending atomic.Int64
}

func (e *countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.next.ExportSpans(ctx, spans)
	e.pending.Add(-int64(len(spans)))
	if err != nil {
		e.m.Dropped.Add(float64(len(spans)))
	} else {
		e.m.Exported.Add(float64(len(spans)))
	}
	return err
}

func (e *countingExporter) Shutdown(ctx context.Context) error { return e.next.Shutdown(ctx) }

// Sampled is the trace and span id of ctx's span when it is sampled.
func Sampled(ctx context.Context) (trace.SpanContext, bool) {
	sc := trace.SpanContextFromContext(ctx)
	return sc, sc.IsSampled()
}

// LogHandler adds trace_id and span_id to every record logged with the
// context of a sampled span.
func LogHandler(h slog.Handler) slog.Handler { return logHandler{h} }

type logHandler struct{ slog.Handler }

func (h logHandler) Handle(ctx context.Context, r slog.Record) error {
	if ctx != nil {
		if sc, ok := Sampled(ctx); ok {
			r = r.Clone()
			r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return logHandler{h.Handler.WithAttrs(as)}
}

func (h logHandler) WithGroup(name string) slog.Handler {
	return logHandler{h.Handler.WithGroup(name)}
}
