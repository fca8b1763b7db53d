package client

import (
	"context"
	"slices"
	"testing"
	"time"
)

// BenchmarkClientGetHit compares Client.Get on a hit with a raw go-redis
// GET of the same key through the same ClusterClient against the same
// three-node in-process cluster. The two alternate within each iteration so
// that load from other work on the machine hits both alike; it reports
// each one's p50 and p99 and the p50 ratio (the target is ≤ 1.10; this is
// reported, never asserted).
const minSamples = 20000

func BenchmarkClientGetHit(b *testing.B) {
	_, addrs := startCluster(b)
	c, err := New(Options{Addrs: addrs, Timeout: time.Second, SoftTTL: time.Hour, HardTTL: 2 * time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	const key = "bench:hit"
	value := make([]byte, 100)
	if _, err := c.Get(ctx, key, func(context.Context) ([]byte, int64, error) { return value, 1, nil }); err != nil {
		b.Fatal(err)
	}
	loader := func(context.Context) ([]byte, int64, error) { b.Fatal("loader called on a hit"); return nil, 0, nil }
	// make bench runs -benchtime 1x: percentiles need samples, so an
	// iteration count below minSamples is raised to it.
	n := max(b.N, minSamples)
	raw := make([]time.Duration, 0, n)
	cli := make([]time.Duration, 0, n)
	b.ReportAllocs()
	b.ResetTimer()
	for range n {
		t0 := time.Now()
		if _, err := c.rdb.Get(ctx, key).Bytes(); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := c.Get(ctx, key, loader); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		raw, cli = append(raw, t1.Sub(t0)), append(cli, t2.Sub(t1))
	}
	b.StopTimer()
	slices.Sort(raw)
	slices.Sort(cli)
	pct := func(d []time.Duration, p float64) float64 { return float64(d[int(p*float64(len(d)-1))].Nanoseconds()) }
	b.ReportMetric(pct(raw, 0.50), "raw-p50-ns")
	b.ReportMetric(pct(cli, 0.50), "get-p50-ns")
	b.ReportMetric(pct(raw, 0.99), "raw-p99-ns")
	b.ReportMetric(pct(cli, 0.99), "get-p99-ns")
	b.ReportMetric(pct(cli, 0.50)/pct(raw, 0.50), "p50-ratio")
}
