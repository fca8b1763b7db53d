package e2e_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	ratelimitcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/portico-io/portico/controlplane"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/internal/tlsfiles"
	"github.com/portico-io/portico/internal/tlstest"
)

// BenchmarkMutualTLSCost measures what mutual TLS costs the two services on
// every request's path: extauthz Check (an API key) and ratelimitsvc
// ShouldRateLimit (Redis token bucket), each served twice from the same
// code, once plaintext and once on mTLS for gateways only, with the same
// policy from the same database. Callers share one connection per variant,
// as Envoy reuses its HTTP/2 connections, so the cost measured is the
// record layer's, not handshakes. Rounds alternate the order; every round
// is logged; the reported ratios are the medians (mtls/plaintext).
//
//	go test -run '^$' -bench MutualTLSCost -benchtime 1x ./e2e/
//	PORTICO_BENCH_REQUESTS=50000 PORTICO_BENCH_ROUNDS=6 (defaults 20000, 4)
func BenchmarkMutualTLSCost(b *testing.B) {
	requests, rounds, callers := envInt("PORTICO_BENCH_REQUESTS", 20000), envInt("PORTICO_BENCH_ROUNDS", 4), 16
	dbURL := testdeps.Postgres(b)
	p := tlstest.New(b)
	cpPlain := startControlPlane(b, dbURL, controlplane.Config{})
	cpTLS := startControlPlane(b, dbURL, controlplane.Config{TLS: p.Files(b, identity.ControlPlane, "controlplane")})
	eaPlain := startExtauthz(b, cpPlain.XDS, "127.0.0.1:0", "bench-ea-plain")
	eaTLS := startExtauthzTLS(b, cpTLS.XDS, "127.0.0.1:0", "bench-ea-tls", p.Files(b, identity.ExtAuthz, "extauthz"))
	rlPlain := startRateLimit(b, cpPlain.XDS, "127.0.0.1:0", "bench-rl-plain")
	rlTLS := startRateLimitTLS(b, cpTLS.XDS, "127.0.0.1:0", "bench-rl-tls", p.Files(b, identity.RateLimit, "ratelimit"))

	api := newAdminAPI(b, cpPlain.Admin)
	key, _ := api.seedKeyed()
	v := api.create("ratelimit-rules", map[string]any{"name": "bench", "domain": "portico",
		"descriptors": []any{map[string]any{"key": "consumer"}}, "limit": 1000000000, "window": "1s", "burst": 1000000000}, nil)
	for _, n := range []string{"bench-ea-plain", "bench-ea-tls"} {
		api.waitAcked(n, "portico-extauthz", v, extauthzTypes...)
	}
	for _, n := range []string{"bench-rl-plain", "bench-rl-tls"} {
		api.waitAcked(n, "portico-ratelimit", v, ratelimitTypes...)
	}

	gateway, err := tlsfiles.Load(p.Files(b, identity.Gateway, "gateway"))
	if err != nil {
		b.Fatal(err)
	}
	dial := func(addr string, role identity.Role) *grpc.ClientConn {
		creds := insecure.NewCredentials()
		if role != "" {
			creds = credentials.NewTLS(gateway.ClientConfig(identity.Policy{Roles: []identity.Role{role}}))
		}
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cc.Close() })
		return cc
	}
	check := keyedCheck(key)
	limit := &rlsv3.RateLimitRequest{Domain: "portico", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{
		{Entries: []*ratelimitcommonv3.RateLimitDescriptor_Entry{{Key: "consumer", Value: "acme"}}}}}
	authCall := func(cc *grpc.ClientConn) func(context.Context) error {
		c := authv3.NewAuthorizationClient(cc)
		return func(ctx context.Context) error {
			resp, err := c.Check(ctx, check)
			if err == nil && codes.Code(resp.GetStatus().GetCode()) != codes.OK {
				err = fmt.Errorf("denied: %s", resp.GetStatus().GetMessage())
			}
			return err
		}
	}
	limitCall := func(cc *grpc.ClientConn) func(context.Context) error {
		c := rlsv3.NewRateLimitServiceClient(cc)
		return func(ctx context.Context) error {
			resp, err := c.ShouldRateLimit(ctx, limit)
			if err == nil && resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
				err = fmt.Errorf("code %v", resp.GetOverallCode())
			}
			return err
		}
	}
	for _, svc := range []struct {
		name       string
		plain, tls func(context.Context) error
	}{
		{"extauthz Check", authCall(dial(eaPlain.GRPC, "")), authCall(dial(eaTLS.GRPC, identity.ExtAuthz))},
		{"ratelimitsvc ShouldRateLimit", limitCall(dial(rlPlain.GRPC, "")), limitCall(dial(rlTLS.GRPC, identity.RateLimit))},
	} {
		var tput, p99 []float64
		for r := range rounds {
			order := []string{"plaintext", "mtls"}
			if r%2 == 1 {
				slices.Reverse(order)
			}
			res := map[string]loadResult{}
			for _, variant := range order {
				call := svc.plain
				if variant == "mtls" {
					call = svc.tls
				}
				res[variant] = runLoad(b, call, requests, callers)
			}
			pl, tl := res["plaintext"], res["mtls"]
			b.Logf("%s round %d: plaintext %.0f req/s p50 %v p99 %v | mtls %.0f req/s p50 %v p99 %v | throughput ratio %.3f, p99 ratio %.3f",
				svc.name, r+1, pl.rate, pl.p50, pl.p99, tl.rate, tl.p50, tl.p99, tl.rate/pl.rate, float64(tl.p99)/float64(pl.p99))
			tput = append(tput, tl.rate/pl.rate)
			p99 = append(p99, float64(tl.p99)/float64(pl.p99))
		}
		slices.Sort(tput)
		slices.Sort(p99)
		unit := map[string]string{"extauthz Check": "extauthz", "ratelimitsvc ShouldRateLimit": "ratelimit"}[svc.name]
		b.ReportMetric(tput[len(tput)/2], unit+"-mtls/plain-throughput")
		b.ReportMetric(p99[len(p99)/2], unit+"-mtls/plain-p99")
	}
}

type loadResult struct {
	rate     float64
	p50, p99 time.Duration
}

// runLoad makes n calls from callers goroutines and fails b on any error.
func runLoad(b *testing.B, call func(context.Context) error, n, callers int) loadResult {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	lat := make([]time.Duration, n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	start := time.Now()
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := c; i < n; i += callers {
				t0 := time.Now()
				if err := call(ctx); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				lat[i] = time.Since(t0)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	slices.Sort(lat)
	return loadResult{rate: float64(n) / elapsed.Seconds(), p50: lat[n/2], p99: lat[n*99/100]}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
