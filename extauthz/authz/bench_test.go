package authz_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/portico-io/portico/extauthz/authz"
)

// BenchmarkCheck measures Check on one goroutine (one core) for (a) valid
// RS256 tokens seen for the first time, (b) a cached token, (c) an API key,
// and reports checks/s with p50 and p99 latency. Each b.N iteration runs a
// fixed batch so `make bench` (-benchtime 1x) still yields percentiles.
func BenchmarkCheck(b *testing.B) {
	const batch = 20000
	f := newFixture(b)
	cached := rs256(b, f.claims(nil))
	// First-seen tokens: distinct jtis, and a cache too small to keep them
	// (one entry per shard), so nearly every check verifies a signature.
	fresh := make([]*authv3.CheckRequest, 256)
	for i := range fresh {
		fresh[i] = checkReq("jwt", "idp", "echo:read", bearer(rs256(b, f.claims(func(c map[string]any) { c["jti"] = fmt.Sprint("j", i) }))))
	}
	small := authz.New(authz.Config{TimeNow: f.clock.Now, TokenCacheSize: 1, HTTPClient: f.jwks.Client()})
	small.SetPolicy(f.srv.Policy())
	cases := []struct {
		name string
		srv  *authz.Server
		req  func(i int) *authv3.CheckRequest
	}{
		{"jwt_first_seen", small, func(i int) *authv3.CheckRequest { return fresh[i%len(fresh)] }},
		{"jwt_cached", f.srv, func() func(int) *authv3.CheckRequest {
			r := checkReq("jwt", "idp", "echo:read", bearer(cached))
			return func(int) *authv3.CheckRequest { return r }
		}()},
		{"apikey", f.srv, func() func(int) *authv3.CheckRequest {
			r := checkReq("apikey", "", "echo:read", map[string]string{"x-api-key": apiSecret})
			return func(int) *authv3.CheckRequest { return r }
		}()},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			ctx := context.Background()
			if r, _ := tc.srv.Check(ctx, tc.req(0)); r.GetOkResponse() == nil {
				b.Fatalf("not allowed: %v", r)
			}
			lat := make([]time.Duration, 0, batch)
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				for i := range batch {
					t0 := time.Now()
					r, _ := tc.srv.Check(ctx, tc.req(i))
					lat = append(lat, time.Since(t0))
					if r.GetOkResponse() == nil {
						b.Fatal("denied")
					}
				}
			}
			total := time.Since(start)
			b.StopTimer()
			slices.Sort(lat)
			n := len(lat)
			b.ReportMetric(float64(n)/total.Seconds(), "checks/s")
			b.ReportMetric(float64(lat[n/2])/1e3, "p50-µs")
			b.ReportMetric(float64(lat[n*99/100])/1e3, "p99-µs")
		})
	}
}
