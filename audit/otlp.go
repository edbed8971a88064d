package audit

import (
	"context"
	"errors"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploghttp"
	otellog "go.opentelemetry.io/otel/log"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	"go.opentelemetry.io/otel/sdk/resource"
)

// EventName is the OpenTelemetry event name of an audit log record.
const EventName = "knowledge_sidecar.audit.disclosure"

// emit sends e as an OpenTelemetry log record: the event's JSON line as the
// body, and the fields a collector routes or indexes on as attributes.
func (l *Log) emit(ctx context.Context, e Event, line []byte) {
	var r otellog.Record
	r.SetTimestamp(e.Time)
	r.SetEventName(EventName)
	r.SetSeverity(otellog.SeverityInfo)
	r.SetBody(attribute.StringValue(string(line)))
	r.AddAttributes(
		attribute.String("audit.endpoint", e.Endpoint),
		attribute.String("audit.route", e.Route),
		attribute.String("audit.principal_id", e.PrincipalID),
		attribute.String("audit.status", e.Status),
		attribute.Int("audit.documents", len(e.Documents)),
	)
	l.otlp.Emit(ctx, r)
}

// OTLP is an OpenTelemetry logger provider exporting over OTLP/HTTP, set up
// from the standard OTEL_EXPORTER_OTLP_[LOGS_]* variables.
type OTLP struct {
	Provider *sdklog.LoggerProvider
}

// NewOTLP builds the provider (batching; the exporter reads the
// OTEL_EXPORTER_OTLP_[LOGS_]ENDPOINT, _HEADERS, … variables). Only the
// http/protobuf protocol is supported for logs.
func NewOTLP(ctx context.Context, serviceName, version string) (*OTLP, error) {
	proto := strings.TrimSpace(os.Getenv("OTEL_EXPORTER_OTLP_LOGS_PROTOCOL"))
	if proto == "" {
		proto = strings.TrimSpace(os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL"))
	}
	if proto != "" && proto != "http/protobuf" {
		return nil, errors.New("audit.otlp: OTEL_EXPORTER_OTLP_LOGS_PROTOCOL must be http/protobuf (set it when traces use grpc)")
	}
	exp, err := otlploghttp.New(ctx)
	if err != nil {
		return nil, err
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", serviceName), attribute.String("service.version", version)),
		resource.WithFromEnv())
	if err != nil && res == nil {
		return nil, err
	}
	p := sdklog.NewLoggerProvider(sdklog.WithResource(res), sdklog.WithProcessor(sdklog.NewBatchProcessor(exp)))
	return &OTLP{Provider: p}, nil
}

// Logger is the audit's logger of the provider.
func (o *OTLP) Logger() otellog.Logger {
	return o.Provider.Logger("github.com/bailinghub/knowledge-sidecar/audit")
}

// Shutdown flushes queued records and stops the exporter.
func (o *OTLP) Shutdown(ctx context.Context) error {
	if o == nil {
		return nil
	}
	return o.Provider.Shutdown(ctx)
}
