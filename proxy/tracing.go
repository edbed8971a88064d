package proxy

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/bailinghub/knowledge-sidecar/telemetry"
)

// Tracing at the edge (SPEC §9): one SERVER span per request, a CLIENT span
// for the request forwarded to Core (pass-through and turns). Only present
// when Options.TracerProvider is set; with it nil no code here runs.

// serverSpanName is "{METHOD} {route template}" for a route of the table
// matched with its own method, else "{METHOD}" (pass-through: the path is
// Core's business and may be anything). The template uses {route}, the
// OpenTelemetry spelling of echo's :route.
func serverSpanName(method, echoPath string) (name, route string) {
	m, _ := spanMethod(method)
	if rt := routeOf(echoPath); rt != nil && rt.method == method {
		route = strings.Replace(rt.path, ":route", "{route}", 1)
		return m + " " + route, route
	}
	return m, ""
}

// spanMethod is the method as semconv spells it in a span name ("HTTP" for
// one outside the known set) and the http.request.method value ("_OTHER").
func spanMethod(method string) (name, attr string) {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return method, method
	}
	return "HTTP", "_OTHER"
}

// startServerSpan starts the request's SERVER span. The caller's
// traceparent/tracestate are its parent only when the peer is trusted for
// them (forwarding.traceTrusted: by default a trusted proxy, SPEC §9), and
// then parent-based sampling follows the caller's decision. Anyone else's
// request starts a new trace the operator's sampler decides; a valid
// inbound context is kept as a link of a recorded span (a link decides
// nothing). Attributes: method, scheme, protocol version and, for the
// sidecar's own routes, http.route; never the path of a pass-through
// request, the query or a header value.
func (s *Server) startServerSpan(ctx context.Context, r *http.Request, echoPath, requestID string) (context.Context, trace.Span) {
	var link trace.SpanContext
	if s.fw.traceTrusted(s.fw.isTrusted(r.RemoteAddr)) {
		// Two traceparents are invalid (validTraceparent); the
		// propagator alone would take the first.
		if len(r.Header[hdrTraceparent]) < 2 {
			ctx = telemetry.Propagator.Extract(ctx, propagation.HeaderCarrier(r.Header))
		}
	} else if _, ok := r.Header[hdrTraceparent]; ok {
		link = trace.SpanContextFromContext(telemetry.Propagator.Extract(context.Background(), propagation.HeaderCarrier(r.Header)))
	}
	name, route := serverSpanName(r.Method, echoPath)
	ctx, span := s.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer))
	if span.IsRecording() {
		_, m := spanMethod(r.Method)
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		attrs := []attribute.KeyValue{
			attribute.String("http.request.method", m),
			attribute.String("url.scheme", scheme),
			attribute.String("network.protocol.version", protoVersion(r)),
			attribute.String("knowledge_sidecar.request_id", requestID),
		}
		if m == "_OTHER" {
			attrs = append(attrs, attribute.String("http.request.method_original", safeMethod(r.Method)))
		}
		if route != "" {
			attrs = append(attrs, attribute.String("http.route", route))
		}
		span.SetAttributes(attrs...)
		if link.IsValid() {
			span.AddLink(trace.Link{SpanContext: link})
		}
	}
	return ctx, span
}

// validTraceparent: v is exactly one traceparent header that parses to a
// valid span context (W3C Trace Context §3.2; two headers are invalid).
func validTraceparent(v []string) bool {
	if len(v) != 1 {
		return false
	}
	h := http.Header{hdrTraceparent: v}
	return trace.SpanContextFromContext(telemetry.Propagator.Extract(context.Background(), propagation.HeaderCarrier(h))).IsValid()
}

// safeMethod bounds an unknown method copied into an attribute.
func safeMethod(m string) string {
	if len(m) > 32 {
		return m[:32]
	}
	return m
}

func protoVersion(r *http.Request) string {
	switch {
	case r.ProtoMajor == 2:
		return "2"
	case r.ProtoMinor == 0:
		return "1.0"
	}
	return "1.1"
}

// endServerSpan records the status the edge counted: 5xx is an error on a
// server span, 4xx is not (semconv).
func endServerSpan(span trace.Span, status int) {
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("http.response.status_code", status))
		if status >= 500 {
			span.SetAttributes(attribute.String("error.type", strconv.Itoa(status)))
			span.SetStatus(codes.Error, "")
		}
	}
	span.End()
}

// tracingTransport wraps the transport to Core. For a request whose span
// records, it makes a CLIENT span (child of the server span) and sends
// that span's context; for one that does not (not sampled), it only injects
// the propagation headers, so Core's logs can be joined at almost no cost.
// The request's header map is the caller's own copy (ReverseProxy's
// outbound request), so it is written in place.
type tracingTransport struct {
	next   http.RoundTripper
	tracer trace.Tracer
}

func (t *tracingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	// Core gets the sidecar's context only: Inject writes no tracestate
	// when the span's is empty, which would leave the caller's in place
	// (one that came with a distrusted or invalid traceparent, SPEC §9).
	delete(req.Header, hdrTraceparent)
	delete(req.Header, hdrTracestate)
	if parent := trace.SpanFromContext(ctx); !parent.IsRecording() {
		if parent.SpanContext().IsValid() {
			telemetry.Propagator.Inject(ctx, propagation.HeaderCarrier(req.Header))
		}
		return t.next.RoundTrip(req)
	}
	name, m := spanMethod(req.Method)
	ctx, span := telemetry.StartCoreSpan(ctx, t.tracer, name, m, req.URL.Hostname(), req.Header)
	res, err := t.next.RoundTrip(req.WithContext(ctx))
	status, errType := 0, ""
	if err != nil {
		errType, _ = classifyUpstreamError(ctx, err)
	} else {
		status = res.StatusCode
	}
	// The span covers the exchange up to Core's response headers; the
	// body streams to the client after it.
	telemetry.EndCoreSpan(span, status, errType)
	return res, err
}

// sampled is the span context of a sampled request (tracing on), for the
// exemplar; the log lines get their ids from telemetry.LogHandler.
func (s *Server) sampled(ctx context.Context) (trace.SpanContext, bool) {
	if s.tracer == nil {
		return trace.SpanContext{}, false
	}
	return telemetry.Sampled(ctx)
}
