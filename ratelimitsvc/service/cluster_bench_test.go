package service_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/ratelimitsvc/bucket"
)

// BenchmarkRedisCluster: ShouldRateLimit in process against a 3-primary
// Redis Cluster, 1000 callers round robin, limits never reached, 8
// concurrent requests per CPU. "one" sends [consumer]; "two" sends
// [consumer] [consumer, path], two buckets whose hash tags differ (one
// script per tag, at once). Reported: req/s, p50 and p99.
//
//	go test -run '^$' -bench RedisCluster -benchtime 20000x ./ratelimitsvc/service/
func BenchmarkRedisCluster(b *testing.B) {
	var seeds []string
	for _, p := range testdeps.RedisCluster(b, 3) {
		seeds = append(seeds, p.Addr)
	}
	client := bucket.NewClient(bucket.ClientConfig{Addr: strings.Join(seeds, ",")})
	b.Cleanup(func() { _ = client.Close() })
	// The production timeout (5ms) would fail open under saturation on a
	// small machine and flatter the numbers.
	rd, err := bucket.NewRedis(bucket.RedisConfig{Client: client, Timeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	s := newService(b, rd, rule("consumer", 4_000_000_000, 0, time.Second, "consumer", ""),
		rule("path", 4_000_000_000, 0, time.Second, "consumer", "", "path", ""))
	const callers = 1000
	for _, shape := range []struct {
		name  string
		build func(c string) *rlsv3.RateLimitRequest
	}{
		{"one", func(c string) *rlsv3.RateLimitRequest { return req("portico", desc("consumer", c)) }},
		{"two", func(c string) *rlsv3.RateLimitRequest {
			return req("portico", desc("consumer", c), desc("consumer", c, "path", "/x"))
		}},
	} {
		reqs := make([]*rlsv3.RateLimitRequest, callers)
		for i := range reqs {
			reqs[i] = shape.build(fmt.Sprintf("c%04d", i))
		}
		b.Run(shape.name, func(b *testing.B) {
			var next atomic.Int64
			var mu sync.Mutex
			var lat []time.Duration
			b.SetParallelism(8)
			b.ResetTimer()
			began := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				var mine []time.Duration
				for pb.Next() {
					r := reqs[next.Add(1)%callers]
					start := time.Now()
					resp, err := s.ShouldRateLimit(context.Background(), r)
					if err != nil || resp.GetOverallCode() != OK {
						b.Errorf("%v %v", resp, err)
						return
					}
					mine = append(mine, time.Since(start))
				}
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			})
			el := time.Since(began)
			b.StopTimer()
			if len(lat) > 0 {
				slices.Sort(lat)
				b.ReportMetric(float64(len(lat))/el.Seconds(), "req/s")
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			}
		})
	}
}
