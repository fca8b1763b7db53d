package e2e_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/portico-io/portico/controlplane"
	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/internal/xdstest"
)

// BenchmarkKeyChangeAtScale loads PORTICO_BENCH_KEYS API keys (default
// 100,000) with one POST /consumers:import, then starts
// PORTICO_BENCH_EXTAUTHZ extauthz replicas (default 3; 0: none), creates
// keys one at a time and measures, per key, the admin POST's latency and
// the time until every replica allows the new key (the control plane
// compiled and published the version, each replica received and applied
// it). Absolute numbers of this machine. Reported:
//
//   - import seconds, and the replicas' initial sync;
//
//   - p50/p99 of the admin POST and of "allowed by every replica";
//
//   - the control plane's mean compile time per version over the creates
//     (portico_controlplane_compile_seconds);
//
//   - bytes of the xDS response that carried the last key change to a
//     replica (portico_extauthz_policy_last_response_bytes: one
//     ApiKeyShard with delta xDS, every shard with state of the world);
//
//   - live heap per key of the control plane (after the import compiled)
//     and of one replica (after the replicas synced), from the process's
//     heap after a GC: every component runs in this process, so each is
//     measured as the growth its step caused.
//
//     go test -run '^$' -bench KeyChangeAtScale -benchtime 1x ./e2e/
//     PORTICO_BENCH_KEYS=1000000 PORTICO_BENCH_CREATES=100 (defaults 100000, 30)
func BenchmarkKeyChangeAtScale(b *testing.B) {
	keys, creates := envInt("PORTICO_BENCH_KEYS", 100_000), envInt("PORTICO_BENCH_CREATES", 30)
	replicas := envInt("PORTICO_BENCH_EXTAUTHZ", 3)
	if os.Getenv("PORTICO_BENCH_EXTAUTHZ") == "0" {
		replicas = 0
	}
	dbURL := testdeps.Postgres(b)
	cp := startControlPlane(b, dbURL, controlplane.Config{})
	api := newAdminAPI(b, cp.Admin)
	api.seedKeyed()
	heap0 := liveHeap()

	// One consumer per 100 keys, keys given by hash.
	type key struct {
		ID     string `json:"id"`
		SHA256 string `json:"sha256"`
	}
	type consumer struct {
		Name   string `json:"name"`
		Tenant string `json:"tenant"`
		Keys   []key  `json:"keys"`
	}
	var body struct {
		Consumers []consumer `json:"consumers"`
	}
	for i := 0; i < keys; i += 100 {
		c := consumer{Name: fmt.Sprintf("bulk-%07d", i/100), Tenant: "bulk"}
		for j := i; j < min(i+100, keys); j++ {
			sum := sha256.Sum256(fmt.Appendf(nil, "bench-secret-%d", j))
			c.Keys = append(c.Keys, key{ID: fmt.Sprintf("bk%08d", j), SHA256: hex.EncodeToString(sum[:])})
		}
		body.Consumers = append(body.Consumers, c)
	}
	raw, err := json.Marshal(body)
	if err != nil {
		b.Fatal(err)
	}
	body.Consumers = nil
	_, compiledBefore := compileSeconds(b, cp.Admin)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+cp.Admin+"/admin/v1/consumers:import", bytes.NewReader(raw))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "bench-import")
	authorize(req)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	var answer struct {
		Version int64 `json:"version"`
	}
	err = json.NewDecoder(resp.Body).Decode(&answer)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusCreated {
		b.Fatalf("import: %d %v", resp.StatusCode, err)
	}
	importTook := time.Since(start)
	waitCompilesSettle(b, cp.Admin, compiledBefore+1)
	b.Logf("%d keys: import answered in %v, compiled after %v (%d bytes of request)", keys, importTook, time.Since(start), len(raw))
	raw = nil
	heap1 := liveHeap()
	cpPerKey := float64(int64(heap1)-int64(heap0)) / float64(keys)

	var clients []authv3.AuthorizationClient
	var metricsAddrs []string
	var extauthzPerKey float64
	if replicas > 0 {
		syncStart := time.Now()
		for i := range replicas {
			id := fmt.Sprintf("bench-scale-extauthz-%d", i)
			ea := startExtauthz(b, cp.XDS, "127.0.0.1:0", id)
			conn, err := grpc.NewClient(ea.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			clients = append(clients, authv3.NewAuthorizationClient(conn))
			metricsAddrs = append(metricsAddrs, ea.HTTP)
		}
		for i := range replicas {
			api.waitAckedWithin(10*time.Minute, fmt.Sprintf("bench-scale-extauthz-%d", i), "portico-extauthz", answer.Version, extauthzTypes...)
		}
		b.Logf("%d extauthz replicas synced %d keys in %v", replicas, keys, time.Since(syncStart))
		heap2 := liveHeap()
		extauthzPerKey = float64(int64(heap2)-int64(heap1)) / float64(keys) / float64(replicas)
	}

	sum0, n0 := compileSeconds(b, cp.Admin)
	var admin, allowed []time.Duration
	for b.Loop() {
		for range creates {
			var k struct{ Key string }
			t0 := time.Now()
			api.create("consumers/acme/keys", map[string]any{}, &k)
			admin = append(admin, time.Since(t0))
			if len(clients) == 0 {
				continue
			}
			for _, client := range clients {
				waitAllowed(b, client, k.Key, t0)
			}
			allowed = append(allowed, time.Since(t0))
		}
	}
	if len(clients) == 0 {
		waitCompilesSettle(b, cp.Admin, n0+1)
		allowed = admin
	}
	sum1, n1 := compileSeconds(b, cp.Admin)
	compileMs := (sum1 - sum0) / (n1 - n0) * 1000
	b.Logf("mean compile per version over the creates: %.1f ms (%v versions)", compileMs, n1-n0)
	b.ReportMetric(compileMs, "compile-ms")
	pct := func(d []time.Duration, p float64) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[min(len(s)-1, int(float64(len(s))*p))].Microseconds()) / 1000
	}
	b.Logf("create one key at %d keys: admin p50 %.1f ms p99 %.1f ms; allowed by all %d extauthz p50 %.1f ms p99 %.1f ms",
		keys, pct(admin, 0.5), pct(admin, 0.99), replicas, pct(allowed, 0.5), pct(allowed, 0.99))
	b.ReportMetric(importTook.Seconds(), "import-s")
	b.ReportMetric(pct(admin, 0.5), "admin-p50-ms")
	b.ReportMetric(pct(admin, 0.99), "admin-p99-ms")
	b.ReportMetric(pct(allowed, 0.5), "allowed-p50-ms")
	b.ReportMetric(pct(allowed, 0.99), "allowed-p99-ms")
	b.ReportMetric(cpPerKey, "controlplane-B/key")
	if len(metricsAddrs) > 0 {
		// Reported after b.Loop, which resets metrics reported before it.
		b.ReportMetric(extauthzPerKey, "extauthz-B/key")
		b.ReportMetric(metricValue(b, metricsAddrs[0], "portico_extauthz_policy_last_response_bytes"), "bytes/change")
	}
}

// waitAllowed polls client until it allows key, as a client would (there
// is no signal to wait on); a minute after t0 it fails the benchmark.
func waitAllowed(b *testing.B, client authv3.AuthorizationClient, key string, t0 time.Time) {
	xdstest.Eventually(b, time.Minute-time.Since(t0), "a created key to be allowed", func() bool {
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := client.Check(cctx, keyedCheck(key))
		ccancel()
		if err != nil {
			b.Fatal(err)
		}
		return resp.GetStatus().GetCode() == int32(code.Code_OK)
	})
}

// liveHeap is the process's live heap after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// metricValue reads one unlabelled sample from a component's /metrics.
func metricValue(b *testing.B, addr, name string) float64 {
	b.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == name {
			v, _ := strconv.ParseFloat(f[1], 64)
			return v
		}
	}
	b.Fatalf("%s: no %s", addr, name)
	return 0
}

// compileSeconds reads portico_controlplane_compile_seconds' sum and count.
func compileSeconds(b *testing.B, admin string) (sum, count float64) {
	b.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		v, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "portico_controlplane_compile_seconds_sum":
			sum = v
		case "portico_controlplane_compile_seconds_count":
			count = v
		}
	}
	return sum, count
}

// waitCompilesSettle waits for n compiles, then until no compile has
// started for a second (the publisher compiles the newest version it was
// told about, so versions created while it compiles may share one).
func waitCompilesSettle(b *testing.B, admin string, n float64) {
	b.Helper()
	waitCompiles(b, admin, n)
	_, last := compileSeconds(b, admin)
	for {
		time.Sleep(time.Second) // polling /metrics; no signal to wait on from outside
		_, c := compileSeconds(b, admin)
		if c == last {
			return
		}
		last = c
	}
}

// waitCompiles waits until the control plane has compiled at least n
// versions since it started.
func waitCompiles(b *testing.B, admin string, n float64) {
	b.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		if _, c := compileSeconds(b, admin); c >= n {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("fewer than %v versions compiled after 5 minutes", n)
		}
		time.Sleep(10 * time.Millisecond) // polling /metrics; no signal to wait on from outside
	}
}
