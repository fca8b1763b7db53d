package service

import (
	"context"
	"errors"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/portico-io/portico/internal/tracing"
	"github.com/portico-io/portico/ratelimitsvc/bucket"
	"github.com/portico-io/portico/ratelimitsvc/rules"
)

// Span attributes of a ShouldRateLimit (beside tracing's consumer and
// tenant).
const (
	domainKey      = attribute.Key("portico.ratelimit.domain")
	descriptorsKey = attribute.Key("portico.ratelimit.descriptors")
	codeKey        = attribute.Key("portico.ratelimit.code")
	degradedKey    = attribute.Key("portico.ratelimit.degraded")
)

// consumerKey is the descriptor entry the control plane fills with the
// consumer extauthz identified.
const consumerKey = "consumer"

// annotate describes a decision on its span: the domain, how many
// descriptors, the overall code, and the consumer and tenant entries.
// Other entry values (addresses, header values) stay out of traces.
func annotate(sp trace.Span, req *rlsv3.RateLimitRequest, resp *rlsv3.RateLimitResponse) {
	attrs := []attribute.KeyValue{domainKey.String(req.GetDomain()), descriptorsKey.Int(len(req.GetDescriptors()))}
	if resp != nil {
		attrs = append(attrs, codeKey.String(resp.GetOverallCode().String()))
	}
	var consumer, tenant string
	for _, d := range req.GetDescriptors() {
		for _, e := range d.GetEntries() {
			switch {
			case e.GetKey() == consumerKey && consumer == "":
				consumer = e.GetValue()
			case e.GetKey() == rules.TenantKey && tenant == "":
				tenant = e.GetValue()
			}
		}
	}
	if consumer != "" {
		attrs = append(attrs, tracing.ConsumerKey.String(consumer))
	}
	if tenant != "" {
		attrs = append(attrs, tracing.TenantKey.String(tenant))
	}
	sp.SetAttributes(attrs...)
}

// degraded records on the request's span that the bucket store failed and
// mode (fail_open: local buckets; fail_closed) decided instead.
func degraded(ctx context.Context, mode string, err error) {
	sp := trace.SpanFromContext(ctx)
	if !sp.IsRecording() {
		return
	}
	cause := "store_error"
	if errors.Is(err, bucket.ErrBreakerOpen) {
		cause = "breaker_open"
	}
	sp.SetAttributes(degradedKey.String(mode))
	sp.AddEvent("bucket store unavailable", trace.WithAttributes(attribute.String("cause", cause)))
}
