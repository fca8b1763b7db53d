package e2e_test

import (
	"context"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/portico-io/portico/controlplane"
	"github.com/portico-io/portico/controlplane/compile"
	"github.com/portico-io/portico/internal/testdeps"
)

// TestRateLimitHeadersOnce: each X-RateLimit-* header reaches the client
// once. ratelimitsvc returns X-RateLimit-Limit, -Remaining and -Reset in
// response_headers_to_add; a ratelimit filter compiled with
// enable_x_ratelimit_headers (DRAFT_VERSION_03) would have Envoy append its
// own set computed from the descriptor statuses, and clients would get every
// header twice in two formats ("1, 1;w=3600" and "1"), as they did before
// controlplane/compile dropped that option.
func TestRateLimitHeadersOnce(t *testing.T) {
	// Two replicas, as in TestFullConfigPath: one serves ratelimitsvc, the
	// other, told where it listens, the gateway.
	dbURL := testdeps.Postgres(t)
	cp := startControlPlane(t, dbURL, controlplane.Config{})
	const node = "e2e-ratelimit-headers"
	rlAddr := startRateLimit(t, cp.XDS, "127.0.0.1:0", node).GRPC
	gwCP := startControlPlane(t, dbURL, controlplane.Config{Compile: compile.Options{RateLimitAddress: rlAddr}})
	api := newAdminAPI(t, cp.Admin)
	api.create("clusters", map[string]any{"name": "echo", "endpoints": []any{map[string]any{"address": "127.0.0.1", "port": 18900}}}, nil)
	api.create("routes", map[string]any{"name": "open", "match": map[string]any{"pathPrefix": "/open"}, "cluster": "echo",
		"auth":       map[string]any{"mode": "none"},
		"rateLimits": []any{map[string]any{"descriptors": []any{map[string]any{"key": "route", "value": "open"}}}}}, nil)
	v := api.create("ratelimit-rules", map[string]any{"name": "open", "domain": "portico",
		"descriptors": []any{map[string]any{"key": "route", "value": "open"}}, "limit": 1, "window": "1h"}, nil)
	api.waitAcked(node, "portico-ratelimit", v, ratelimitTypes...)
	gw := fetchGatewayView(t, gwCP.XDS, "e2e-gateway-headers", v)
	rls := rlsv3.NewRateLimitServiceClient(dialGRPC(t, gw.ratelimitAddr))

	r := newRequest("GET", "http://api.e2e.test/open")
	req := gw.rateLimitRequest(t, gw.route(t, r), r)
	if got := descriptors(req); got != "route=open" {
		t.Fatalf("descriptors %q", got)
	}
	for _, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := rls.ShouldRateLimit(ctx, req)
		cancel()
		if err != nil || resp.GetOverallCode() != want {
			t.Fatalf("ShouldRateLimit: %v %v, want %v", resp.GetOverallCode(), err, want)
		}
		seen := map[string]int{}
		for _, h := range gw.clientRateLimitHeaders(resp) {
			seen[h]++
		}
		for _, h := range []string{"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"} {
			if seen[h] != 1 {
				t.Errorf("%v: the client gets %s %d times (headers %v, ratelimitsvc's %v)", want, h, seen[h],
					gw.clientRateLimitHeaders(resp), resp.GetResponseHeadersToAdd())
			}
		}
	}
}
