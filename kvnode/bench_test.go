package kvnode

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/portico-io/portico/internal/authz"
	"github.com/portico-io/portico/kvnode/storage"
	kvv1 "github.com/portico-io/portico/proto/portico/kv/v1"
)

const (
	benchKeys    = 1000
	benchOps     = 6000
	benchClients = 16
	benchValue   = 1024
)

type benchStats struct {
	opsPerSec float64
	p50, p99  time.Duration
	errors    int
}

func summarize(lat []time.Duration, elapsed time.Duration, errs int) benchStats {
	slices.Sort(lat)
	return benchStats{
		opsPerSec: float64(len(lat)) / elapsed.Seconds(),
		p50:       lat[len(lat)/2],
		p99:       lat[len(lat)*99/100],
		errors:    errs,
	}
}

// runMix runs benchOps operations, 70% reads and 30% writes of 1 KB values
// over benchKeys keys, from benchClients concurrent clients.
func runMix(op func(r *rand.Rand, read bool, key string, val []byte) error) benchStats {
	var mu sync.Mutex
	var all []time.Duration
	errs := 0
	var wg sync.WaitGroup
	start := time.Now()
	for c := range benchClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(c), 99))
			val := bytes.Repeat([]byte{byte('a' + c)}, benchValue)
			lat := make([]time.Duration, 0, benchOps/benchClients)
			bad := 0
			for range benchOps / benchClients {
				key := fmt.Sprintf("bench:%d", r.IntN(benchKeys))
				t0 := time.Now()
				if err := op(r, r.IntN(10) < 7, key, val); err != nil {
					bad++
					continue
				}
				lat = append(lat, time.Since(t0))
			}
			mu.Lock()
			all = append(all, lat...)
			errs += bad
			mu.Unlock()
		}()
	}
	wg.Wait()
	return summarize(all, time.Since(start), errs)
}

// BenchmarkQuorumVsPebble measures a 3-node cluster (HTTP API, internode
// gRPC, fsynced pebble on each node) at QUORUM and at ONE against raw
// single-node pebble doing the same 70/30 mix, and reports the ratios.
// Each run does a fixed workload whatever b.N is, so `-benchtime 1x`
// measures something.
func BenchmarkQuorumVsPebble(b *testing.B) {
	c := newCluster(b, 3, func(cfg *Config) { cfg.NoSync = false })
	client := roleClient(authz.Admin, &http.Transport{MaxIdleConnsPerHost: benchClients}, 10*time.Second)
	ids := c.ids()
	val := bytes.Repeat([]byte("x"), benchValue)
	for i := range benchKeys {
		c.mustDo("PUT", ids[i%3], fmt.Sprintf("/v1/kv/bench:%d?consistency=ALL", i), val, nil, http.StatusOK)
	}
	httpOp := func(level string) func(r *rand.Rand, read bool, key string, val []byte) error {
		return func(r *rand.Rand, read bool, key string, val []byte) error {
			url := c.url(ids[r.IntN(len(ids))], "/v1/kv/"+key+"?consistency="+level)
			var req *http.Request
			if read {
				req, _ = http.NewRequest(http.MethodGet, url, nil)
			} else {
				req, _ = http.NewRequest(http.MethodPut, url, bytes.NewReader(val))
			}
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("status %d", resp.StatusCode)
			}
			return nil
		}
	}

	st, err := storage.Open(b.TempDir(), storage.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	for i := range benchKeys {
		if _, err := st.Apply(fmt.Appendf(nil, "bench:%d", i), []*kvv1.Record{{Timestamp: 1, Value: val}}); err != nil {
			b.Fatal(err)
		}
	}
	var ts uint64 = 1
	var tsMu sync.Mutex
	pebbleOp := func(_ *rand.Rand, read bool, key string, val []byte) error {
		if read {
			_, err := st.Get([]byte(key))
			return err
		}
		tsMu.Lock()
		ts++
		t := ts
		tsMu.Unlock()
		_, err := st.Apply([]byte(key), []*kvv1.Record{{Timestamp: t, Value: val}})
		return err
	}

	b.ResetTimer()
	var q, one, raw benchStats
	for b.Loop() {
		q = runMix(httpOp("QUORUM"))
		one = runMix(httpOp("ONE"))
		raw = runMix(pebbleOp)
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(q.opsPerSec, "quorum_ops/s")
	b.ReportMetric(ms(q.p50), "quorum_p50_ms")
	b.ReportMetric(ms(q.p99), "quorum_p99_ms")
	b.ReportMetric(one.opsPerSec, "one_ops/s")
	b.ReportMetric(ms(one.p50), "one_p50_ms")
	b.ReportMetric(ms(one.p99), "one_p99_ms")
	b.ReportMetric(raw.opsPerSec, "pebble_ops/s")
	b.ReportMetric(q.opsPerSec/raw.opsPerSec, "quorum/pebble")
	b.ReportMetric(one.opsPerSec/raw.opsPerSec, "one/pebble")
	b.ReportMetric(q.opsPerSec/one.opsPerSec, "quorum/one")
	b.Logf("70/30 mix, 1 KB values, %d ops, %d clients, fsynced writes", benchOps, benchClients)
	b.Logf("%-26s %10s %9s %9s %6s", "", "ops/s", "p50", "p99", "errors")
	for _, row := range []struct {
		name string
		s    benchStats
	}{{"3 nodes, QUORUM (HTTP)", q}, {"3 nodes, ONE (HTTP)", one}, {"raw pebble, 1 node", raw}} {
		b.Logf("%-26s %10.0f %9s %9s %6d", row.name, row.s.opsPerSec, row.s.p50.Round(time.Microsecond), row.s.p99.Round(time.Microsecond), row.s.errors)
	}
	if q.errors+one.errors > 0 {
		b.Fatalf("%d errors during the run", q.errors+one.errors)
	}
}
