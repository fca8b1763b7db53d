package ratelimitsvc_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	ratelimitcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/ratelimitsvc"
)

// BenchmarkGRPCShouldRateLimit measures the whole service over loopback
// gRPC: two descriptors per request, envoyproxy/ratelimit-format rules, 1
// (light load) and 8 (saturation) concurrent callers per CPU. Side by side
// with envoyproxy/ratelimit's service_cmd: BenchmarkPeer (peer_test.go).
func BenchmarkGRPCShouldRateLimit(b *testing.B) {
	dir := b.TempDir()
	doc := "domain: bench\ndescriptors:\n  - key: consumer\n    rate_limit: {unit: second, requests_per_unit: 4000000000}\n  - key: path\n    rate_limit: {unit: second, requests_per_unit: 4000000000}\n"
	if err := os.WriteFile(filepath.Join(dir, "bench.yaml"), []byte(doc), 0o644); err != nil {
		b.Fatal(err)
	}
	for _, run := range []struct {
		backend string
		perCPU  int
	}{{"memory", 1}, {"memory", 8}, {"redis", 1}, {"redis", 8}} {
		backend := run.backend
		b.Run(fmt.Sprintf("%s/callers-per-cpu=%d", backend, run.perCPU), func(b *testing.B) {
			cfg := ratelimitsvc.Config{ConfigDir: dir, KeyPrefix: fmt.Sprintf("portico:bench:%d:", time.Now().UnixNano())}
			if backend == "redis" {
				cfg.RedisAddr, cfg.RedisTimeout = testdeps.Redis(b), time.Second
			}
			in := start(b, cfg)
			req := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{
				{Entries: []*ratelimitcommonv3.RateLimitDescriptor_Entry{{Key: "consumer", Value: "acme"}}},
				{Entries: []*ratelimitcommonv3.RateLimitDescriptor_Entry{{Key: "path", Value: "/x"}}},
			}}
			var mu sync.Mutex
			var lat []time.Duration
			b.SetParallelism(run.perCPU)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				var mine []time.Duration
				for pb.Next() {
					start := time.Now()
					resp, err := in.client.ShouldRateLimit(context.Background(), req)
					if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
						b.Errorf("%v %v", resp, err)
						return
					}
					mine = append(mine, time.Since(start))
				}
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			})
			b.StopTimer()
			if len(lat) > 0 {
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			}
		})
	}
}
