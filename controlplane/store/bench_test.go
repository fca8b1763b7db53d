package store

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/portico-io/portico/controlplane/spec"
	"github.com/portico-io/portico/internal/testdeps"
)

// BenchmarkChangeOneOfManyKeys measures one write (a key rotation) against a
// config holding many API keys: the cost that must stay small as key counts
// grow, since versions copy nothing that did not change. PORTICO_BENCH_KEYS
// replaces the default sizes (10,000 and 100,000) with one.
func BenchmarkChangeOneOfManyKeys(b *testing.B) {
	sizes := []int{10_000, 100_000}
	if n, err := strconv.Atoi(os.Getenv("PORTICO_BENCH_KEYS")); err == nil && n > 0 {
		sizes = []int{n}
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			s := openStore(b, testdeps.Postgres(b))
			ctx := context.Background()
			mustApply(b, s, put(&spec.Consumer{Name: "acme", Tenant: "acme"}, ""))
			const batch = 10_000
			for i := 0; i < n; i += batch {
				changes := make([]Change, 0, batch)
				for j := i; j < i+batch && j < n; j++ {
					changes = append(changes, put(&spec.APIKey{Name: fmt.Sprintf("key%07d", j), Consumer: "acme", SHA256: hashOf(fmt.Sprint(j))}, ""))
				}
				mustApply(b, s, changes...)
			}
			before := counts(b, s)["resources"]
			i := 0
			for b.Loop() {
				k := &spec.APIKey{Name: "key0000042", Consumer: "acme", SHA256: hashOf(fmt.Sprint("rotated", i))}
				if _, err := s.Apply(ctx, meta, []Change{put(k, IfMatchAny)}, nil); err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.StopTimer()
			b.ReportMetric(float64(counts(b, s)["resources"]-before)/float64(i), "rows/op")
		})
	}
}
