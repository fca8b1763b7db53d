package launcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/portico-io/portico/internal/eventually"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/pki"
	"github.com/portico-io/portico/internal/tlsfiles"
	"github.com/portico-io/portico/internal/xdstest"
)

// The store decides ratelimitsvc's settings and its place in the start
// order; an unknown one is refused before anything starts.
func TestProcessesRateLimitStore(t *testing.T) {
	find := func(ps []Process, name string) int {
		return slices.IndexFunc(ps, func(p Process) bool { return p.Name == name })
	}
	for _, tc := range []struct {
		store, addr string
		env         []string // beside the address
		after       string   // the process ratelimitsvc must follow
	}{
		{"", "127.0.0.1:56379", nil, "extauthz"},
		{StoreRedis, "127.0.0.1:56379", nil, "extauthz"},
		{StoreCache, "127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003,127.0.0.1:7004,127.0.0.1:7005",
			[]string{"PORTICO_REDIS_TLS_SERVER_ROLE=cachenode"}, fmt.Sprintf("cachenode-%d", CacheNodes-1)},
	} {
		ps, err := Processes("/r", tc.store)
		if err != nil {
			t.Fatalf("%q: %v", tc.store, err)
		}
		i := find(ps, "ratelimitsvc")
		if i < 0 || i != find(ps, tc.after)+1 {
			t.Errorf("%q: ratelimitsvc at %d, want right after %s (%d)", tc.store, i, tc.after, find(ps, tc.after))
			continue
		}
		rl := ps[i]
		for _, want := range append([]string{"PORTICO_REDIS_ADDR=" + tc.addr}, tc.env...) {
			if !slices.Contains(rl.Env, want) {
				t.Errorf("%q: env %v lacks %s", tc.store, rl.Env, want)
			}
		}
		if !slices.Contains(rl.Args, "--redis-ready-at-start") {
			t.Errorf("%q: args %v: ratelimitsvc would be ready before its store answers", tc.store, rl.Args)
		}
	}
	if _, err := Processes("/r", "memory"); !errors.Is(err, ErrStore) {
		t.Errorf("store memory: %v, want ErrStore", err)
	}
}

// TestMakeRunRateLimitsOnCache is `make run RATELIMIT_STORE=cachenode`:
// the launcher starts ratelimitsvc once the cache cluster is ready, and a
// rate-limit decision asked the way Envoy asks it (ShouldRateLimit over
// mutual TLS with the gateway's certificate, the seeded per-consumer rule)
// is made on a bucket that a cluster client then finds on the cachenodes,
// holding exactly what that decision took.
func TestMakeRunRateLimitsOnCache(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole platform")
	}
	r := startMakeRun(t, nil, StoreCache)

	r.mu.Lock()
	order := slices.Clone(r.started)
	r.mu.Unlock()
	last := fmt.Sprintf("cachenode-%d", CacheNodes-1)
	if rl, c := slices.Index(order, "ratelimitsvc"), slices.Index(order, last); rl < 0 || c < 0 || rl < c {
		t.Errorf("start order %v: ratelimitsvc before %s", order, last)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The seed ran once every process was ready; the rule reaches
	// ratelimitsvc over xDS a moment later.
	xdstest.Eventually(t, time.Minute, "the seeded per-consumer rule in ratelimitsvc", every(200*time.Millisecond, func() bool { return seededRule(ctx) }))

	dir := PKIDir(r.root)
	gw, err := tlsfiles.Load(tlsfiles.Config{CertFile: filepath.Join(dir, "gateway.crt"), KeyFile: filepath.Join(dir, "gateway.key"),
		CAFile: filepath.Join(dir, pki.CACertFile)})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("127.0.0.1:18200", grpc.WithTransportCredentials(credentials.NewTLS(
		gw.ClientConfig(identity.Policy{Roles: []identity.Role{identity.RateLimit}}))))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	op, err := OperatorTLS(r.root)
	if err != nil {
		t.Fatal(err)
	}
	var seeds []string
	for i := range CacheNodes {
		seeds = append(seeds, fmt.Sprintf("127.0.0.1:%d", 7000+i))
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: seeds, TLSConfig: op})
	defer cc.Close()
	rls := rlsv3.NewRateLimitServiceClient(conn)

	// A consumer of one attempt only: capacity 10 (limit 5 + burst 5), and
	// the request costs 4. Its bucket, read as the operator through the
	// cluster, is one key whose tokens (in 1/window-ms units) are 10 − 4.
	// A call that outlives the store timeout (a loaded machine) is decided
	// on a local bucket by fail mode, as designed, and leaves no key: that
	// attempt must show in ratelimitsvc's degraded_total, and another
	// consumer tries again.
	const attempts = 5
	for attempt := 1; ; attempt++ {
		degraded := metricSum(ctx, t, "portico_ratelimitsvc_degraded_total")
		consumer := fmt.Sprintf("oncache-%d", time.Now().UnixNano())
		resp, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "portico", HitsAddend: 4,
			Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{{Entries: []*ratelimitcommonv3.RateLimitDescriptor_Entry{{Key: "consumer", Value: consumer}}}}})
		if err != nil {
			t.Fatal(err)
		}
		if resp.OverallCode != rlsv3.RateLimitResponse_OK || len(resp.Statuses) != 1 || resp.Statuses[0].LimitRemaining != 6 {
			t.Fatalf("ShouldRateLimit: %v, want OK with 6 of 10 left", resp)
		}
		pattern := "portico:rl:{portico|consumer=" + consumer + "}:*"
		keys, err := keysOnPrimaries(ctx, cc, pattern)
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) == 1 {
			if tokens, err := cc.HGet(ctx, keys[0], "t").Result(); err != nil || tokens != "6000" {
				t.Errorf("bucket %s: tokens %q, %v; want 6000 (6 tokens × 1000 ms)", keys[0], tokens, err)
			}
			t.Logf("attempt %d: decided on %s in the cache cluster", attempt, keys[0])
			break
		}
		after := metricSum(ctx, t, "portico_ratelimitsvc_degraded_total")
		if len(keys) > 1 || after == degraded {
			t.Fatalf("keys %s on the cache cluster's primaries: %v, and no degraded decision (%v); want one bucket\n%s",
				pattern, keys, after, logWarnings(r.root, "ratelimitsvc"))
		}
		if attempt == attempts {
			t.Fatalf("%d decisions, every one degraded (the store did not answer in time)\n%s", attempts, logWarnings(r.root, "ratelimitsvc"))
		}
		t.Logf("attempt %d: degraded (the store did not answer in time); trying another consumer", attempt)
	}
	// The replicas count each other through the same store. The entry is
	// renewed every second with a half-second timeout, so on a loaded
	// machine a renewal may not have landed yet (and one that timed out is
	// simply retried): wait for it rather than read once.
	var (
		n      int64
		cntErr error
	)
	if !eventually.Within(15*time.Second, func() bool {
		n, cntErr = cc.ZCard(ctx, "portico:rl:{replicas}").Result()
		return cntErr == nil && n >= 1
	}) {
		t.Errorf("replica entries on the cache cluster after 15 s: %d, %v; want this ratelimitsvc's\n%s",
			n, cntErr, logWarnings(r.root, "ratelimitsvc"))
	}
}

// seededRule reports whether ratelimitsvc's GET /config lists a rule of
// domain portico.
func seededRule(ctx context.Context) bool {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:18201/config", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var c struct {
		Rules []configRule `json:"rules"`
	}
	if json.NewDecoder(resp.Body).Decode(&c) != nil {
		return false
	}
	return slices.ContainsFunc(c.Rules, func(r configRule) bool { return r.Domain == "portico" })
}

// configRule is the part of a GET /config rule the test reads.
type configRule struct {
	Domain string `json:"domain"`
}

// keysOnPrimaries lists the keys matching pattern on every primary of cc.
func keysOnPrimaries(ctx context.Context, cc *redis.ClusterClient, pattern string) ([]string, error) {
	var mu sync.Mutex
	var keys []string
	err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		ks, err := m.Keys(ctx, pattern).Result()
		mu.Lock()
		keys = append(keys, ks...)
		mu.Unlock()
		return err
	})
	return keys, err
}

// metricSum adds up every series of the named metric on ratelimitsvc's
// /metrics.
func metricSum(ctx context.Context, t *testing.T, name string) float64 {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:18201/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, name); ok && (strings.HasPrefix(rest, "{") || strings.HasPrefix(rest, " ")) {
			f := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
			if len(f) > 0 {
				v, err := strconv.ParseFloat(f[0], 64)
				if err != nil {
					t.Fatalf("%s: %q: %v", name, line, err)
				}
				sum += v
			}
		}
	}
	return sum
}

// logWarnings is the WARN and ERROR lines of a process's log in the run.
func logWarnings(root, name string) string {
	b, _ := os.ReadFile(filepath.Join(root, ".run", "logs", name+".log"))
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			out = append(out, line)
		}
	}
	return name + ".log warnings:\n" + strings.Join(out, "\n")
}
