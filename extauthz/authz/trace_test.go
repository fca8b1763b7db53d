package authz_test

import (
	"context"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/portico-io/portico/extauthz/authz"
)

// The downstream request's trace context is read from the CheckRequest
// whichever way Envoy encodes its headers.
func TestTraceCarrier(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for name, h := range map[string]*authv3.AttributeContext_HttpRequest{
		"headers":    {Headers: map[string]string{"traceparent": tp}},
		"header_map": {HeaderMap: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: "Traceparent", RawValue: []byte(tp)}}}},
	} {
		req := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{Http: h}}}
		sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), authz.TraceCarrier(req)))
		if sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != "00f067aa0ba902b7" || !sc.IsSampled() || !sc.IsRemote() {
			t.Errorf("%s: extracted %v", name, sc)
		}
	}
	if authz.TraceCarrier(&authv3.DeniedHttpResponse{}) != nil {
		t.Error("a carrier for a message that is not a CheckRequest")
	}
}
