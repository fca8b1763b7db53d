package bucket_test

import (
	"context"
	"testing"
	"time"

	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/ratelimitsvc/bucket"
)

// BenchmarkRedisCheck: one Check of two token buckets (a request with two
// descriptors) against the shared single Redis, one caller: the round trip
// of one EVALSHA plus what the client adds (see -benchmem).
func BenchmarkRedisCheck(b *testing.B) {
	c := bucket.NewRedisClient(testdeps.Redis(b))
	b.Cleanup(func() { _ = c.Close() })
	rd, err := bucket.NewRedis(bucket.RedisConfig{Client: c, Timeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	pfx := prefix(b)
	items := []bucket.Item{
		{Key: pfx + "{portico|consumer=acme}:r1:1000", Limit: 4_000_000_000, Capacity: 4_000_000_000, Window: time.Second, Cost: 1, Veto: true},
		{Key: pfx + "{portico|path=%2Fx}:r2:1000", Limit: 4_000_000_000, Capacity: 4_000_000_000, Window: time.Second, Cost: 1, Veto: true},
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if d, err := rd.Check(ctx, items); err != nil || !d.Committed {
			b.Fatalf("%+v %v", d, err)
		}
	}
}
