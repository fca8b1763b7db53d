package authz

import (
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/portico-io/portico/internal/tracing"
)

// Span attributes of a Check (beside tracing's route, consumer, tenant).
const (
	modeKey     = attribute.Key("portico.authz.mode")
	decisionKey = attribute.Key("portico.authz.decision")
	reasonKey   = attribute.Key("portico.authz.reason")
)

// TraceCarrier reads the trace context (traceparent, tracestate, baggage)
// of the downstream request a CheckRequest describes, for
// tracing.Provider.ServerOptions: Envoy puts its own context in the call's
// metadata only when its connection manager traces, and the metadata wins.
// It returns nil for any other message.
func TraceCarrier(req any) propagation.TextMapCarrier {
	r, ok := req.(*authv3.CheckRequest)
	if !ok {
		return nil
	}
	return headerCarrier(headers(r.GetAttributes().GetRequest().GetHttp()))
}

// headerCarrier is a read-only carrier over a header lookup.
type headerCarrier func(string) string

func (h headerCarrier) Get(key string) string { return h(key) }

// Set is never called: the carrier is only extracted from.
func (headerCarrier) Set(string, string) {}

func (headerCarrier) Keys() []string { return nil }

// annotate describes the decision on the Check's span: route, mode,
// decision and reason, the consumer and tenant of an allowed request, the
// HTTP status of a denial. Never a credential: not the token, not the key,
// not the header they came in. A denial on an internal failure (5xx)
// marks the span as failed.
func annotate(sp trace.Span, req *authv3.CheckRequest, d decision) {
	ext := req.GetAttributes().GetContextExtensions()
	attrs := []attribute.KeyValue{tracing.RouteKey.String(ext[CtxRoute]), modeKey.String(ext[CtxMode]), reasonKey.String(d.reason)}
	if d.status == 0 {
		attrs = append(attrs, decisionKey.String("allow"))
		if d.id.consumer != "" {
			attrs = append(attrs, tracing.ConsumerKey.String(d.id.consumer), tracing.TenantKey.String(d.id.tenant))
		}
	} else {
		attrs = append(attrs, decisionKey.String("deny"), semconv.HTTPResponseStatusCode(d.status))
		if d.status >= 500 {
			sp.SetStatus(codes.Error, d.reason)
		}
	}
	sp.SetAttributes(attrs...)
}
