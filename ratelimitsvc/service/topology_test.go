package service_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/internal/xdstest"
	"github.com/portico-io/portico/ratelimitsvc/bucket"
	"github.com/portico-io/portico/ratelimitsvc/rules"
	"github.com/portico-io/portico/ratelimitsvc/service"
)

// On a Redis Cluster the buckets of different callers lie on different
// masters. When one master dies, the buckets on it fail open to local ones
// (its breaker opens) while buckets on the other masters keep their shared
// state; when it returns, the breaker closes without a restart.
func TestRedisCluster(t *testing.T) {
	procs := testdeps.RedisCluster(t, 3)
	client := bucket.NewClient(bucket.ClientConfig{Addr: procs[0].Addr, Cluster: true})
	t.Cleanup(func() { _ = client.Close() })
	warmUp(t, client)
	rd, err := bucket.NewRedis(bucket.RedisConfig{Client: client, Timeout: 300 * time.Millisecond, BreakerDelay: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s := newService(t, rd, rule("per-consumer", 3, 0, time.Hour, "consumer", ""), rule("per-path", 100, 0, time.Hour, "path", ""))
	const consumers = 30
	for i := range consumers {
		// Two descriptors, two slots: three requests pass, the fourth is
		// denied and consumes nothing from the path limit.
		r := req("portico", desc("consumer", fmt.Sprintf("c%02d", i)), desc("path", "/x"))
		var got []string
		for range 4 {
			got = append(got, call(t, s, r).GetOverallCode().String())
		}
		if strings.Join(got, " ") != "OK OK OK OVER_LIMIT" {
			t.Fatalf("consumer c%02d: %v", i, got)
		}
	}
	if st := call(t, s, req("portico", desc("path", "/x"))).GetStatuses()[0]; st.GetLimitRemaining() != 100-3*consumers-1 {
		t.Fatalf("path remaining %d, want %d (the denied requests consumed nothing)", st.GetLimitRemaining(), 100-3*consumers-1)
	}

	// Which master holds each consumer's bucket.
	owner := map[string]string{}
	consumerKey := regexp.MustCompile(`consumer=(c\d\d)\}`)
	for _, p := range procs {
		out, err := p.CLI("--scan")
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range consumerKey.FindAllStringSubmatch(out, -1) {
			owner[m[1]] = p.Addr
		}
	}
	dead := procs[0]
	var onDead, onLive []string
	for i := range consumers {
		c := fmt.Sprintf("c%02d", i)
		switch owner[c] {
		case "":
			t.Fatalf("no bucket of %s on any master", c)
		case dead.Addr:
			onDead = append(onDead, c)
		default:
			onLive = append(onLive, c)
		}
	}
	if len(onDead) < 2 || len(onLive) == 0 {
		t.Fatalf("consumers on the master to kill %v, on the others %v; the test needs two and one", onDead, onLive)
	}

	dead.Kill()
	for i := range 3 { // local bucket at 3/1 replicas
		if resp := call(t, s, req("portico", desc("consumer", onDead[0]))); resp.GetOverallCode() != OK {
			t.Fatalf("%s request %d with its master down: %v, want OK (fail open)", onDead[0], i, resp.GetOverallCode())
		}
	}
	if rd.Degraded() != 1 {
		t.Fatalf("degraded shards %d, want 1", rd.Degraded())
	}
	for _, c := range onLive {
		// Spent in the shared bucket: a local fallback would admit it.
		if resp := call(t, s, req("portico", desc("consumer", c))); resp.GetOverallCode() != OVER {
			t.Fatalf("%s on a live master: %v, want OVER_LIMIT from the shared bucket", c, resp.GetOverallCode())
		}
	}

	// The master returns (empty: no persistence); the breaker's probe
	// closes it and its buckets are shared again.
	dead.Start()
	testdeps.WaitClusterOK(t, procs...)
	xdstest.Eventually(t, 20*time.Second, "the returned master's breaker closed", func() bool {
		call(t, s, req("portico", desc("consumer", onDead[1])))
		return rd.Degraded() == 0
	})
	// onDead[0] spent its local bucket during the outage; on the returned
	// (empty) master it starts afresh.
	var got []string
	for range 4 {
		got = append(got, call(t, s, req("portico", desc("consumer", onDead[0]))).GetOverallCode().String())
	}
	if strings.Join(got, " ") != "OK OK OK OVER_LIMIT" {
		t.Fatalf("%s after recovery: %v", onDead[0], got)
	}
}

// Sentinel: the client follows the master Sentinel names; after the master
// dies and Sentinel promotes the replica, requests are decided on the new
// master without a restart, with fail-open in between.
func TestRedisSentinelFailover(t *testing.T) {
	master := testdeps.RedisServer(t)
	replica := testdeps.RedisServer(t, "--replicaof", "127.0.0.1", fmt.Sprint(master.Port))
	xdstest.Eventually(t, 10*time.Second, "the replica in sync", func() bool {
		out, err := replica.CLI("info", "replication")
		return err == nil && strings.Contains(out, "master_link_status:up")
	})
	sentinel := testdeps.RedisSentinel(t, "rl", master, time.Second)
	client := bucket.NewClient(bucket.ClientConfig{Addr: sentinel.Addr, MasterName: "rl"})
	t.Cleanup(func() { _ = client.Close() })
	warmUp(t, client)
	rd, err := bucket.NewRedis(bucket.RedisConfig{Client: client, Timeout: 300 * time.Millisecond, BreakerDelay: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	per := rule("per", 2, 0, time.Hour, "consumer", "")
	s := newService(t, rd, per)
	acme := req("portico", desc("consumer", "acme"))
	var got []string
	for range 3 {
		got = append(got, call(t, s, acme).GetOverallCode().String())
	}
	if strings.Join(got, " ") != "OK OK OVER_LIMIT" {
		t.Fatalf("through Sentinel: %v", got)
	}
	// Replication is asynchronous, so wait until the replica has the bucket
	// before the crash (the documented loss window is what was not copied).
	xdstest.Eventually(t, 10*time.Second, "the bucket replicated", func() bool {
		out, err := replica.CLI("dbsize")
		return err == nil && strings.TrimSpace(out) != "0"
	})
	master.Kill()
	xdstest.Eventually(t, 30*time.Second, "Sentinel to promote the replica", func() bool {
		out, err := sentinel.CLI("sentinel", "get-master-addr-by-name", "rl")
		return err == nil && strings.Contains(out, fmt.Sprint(replica.Port))
	})
	// The promoted replica holds acme's spent bucket: still denied, and a
	// new consumer gets the shared bucket again.
	xdstest.Eventually(t, 20*time.Second, "requests decided on the new master", func() bool {
		return call(t, s, acme).GetOverallCode() == OVER && rd.Degraded() == 0
	})
	got = got[:0]
	for range 3 {
		got = append(got, call(t, s, req("portico", desc("consumer", "newco"))).GetOverallCode().String())
	}
	if strings.Join(got, " ") != "OK OK OVER_LIMIT" {
		t.Fatalf("after failover: %v", got)
	}
}

var _ service.Backend = (*bucket.Redis)(nil)

// TestRedisClusterSpreadsCallers: on a 3-primary Cluster, callers' buckets
// spread over every primary, and each limit is counted once, exactly,
// whatever other descriptors come along in a request and in whichever
// order: a denied request consumes nothing from its other buckets, even
// when they live in another slot. Many callers run at once, each sending
// the same sequence of request shapes:
//
//	D [consumer=c, op=write] [consumer=c]   op: 2 per caller (sliding window)
//	A [consumer=c]                          consumer: 5 per caller (token bucket)
//	B [consumer=c] [consumer=c, path=/p]    path: 1000 per caller
//	C [route=r] [consumer=c]                route: shared, never reached
func TestRedisClusterSpreadsCallers(t *testing.T) {
	procs := testdeps.RedisCluster(t, 3)
	var seeds []string
	for _, p := range procs {
		seeds = append(seeds, p.Addr)
	}
	client := bucket.NewClient(bucket.ClientConfig{Addr: strings.Join(seeds, ",")})
	t.Cleanup(func() { _ = client.Close() })
	rd, err := bucket.NewRedis(bucket.RedisConfig{Client: client, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	perConsumer := rule("consumer", 5, 0, time.Hour, "consumer", "")
	op := rule("op", 2, 0, time.Hour, "consumer", "", "op", "write")
	op.Algorithm = rules.SlidingWindow
	path := rule("path", 1000, 0, time.Hour, "consumer", "", "path", "")
	route := rule("route", 1_000_000, 0, time.Hour, "route", "r")
	route.Algorithm = rules.FixedWindow
	live := rules.NewLive()
	if err := live.Update(rules.SourceXDS, "1", []*rules.Rule{perConsumer, op, path, route}); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	s, err := service.New(service.Config{Rules: live, Backend: rd, KeyPrefix: prefix(t), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}

	const callers, workers = 120, 16
	type shape struct {
		name  string
		build func(c string) *rlsv3.RateLimitRequest
	}
	d := shape{"D", func(c string) *rlsv3.RateLimitRequest {
		return req("portico", desc("consumer", c, "op", "write"), desc("consumer", c))
	}}
	a := shape{"A", func(c string) *rlsv3.RateLimitRequest { return req("portico", desc("consumer", c)) }}
	b := shape{"B", func(c string) *rlsv3.RateLimitRequest {
		return req("portico", desc("consumer", c), desc("consumer", c, "path", "/p"))
	}}
	cc := shape{"C", func(c string) *rlsv3.RateLimitRequest { return req("portico", desc("route", "r"), desc("consumer", c)) }}
	seq := []shape{d, d, d, d, a, b, cc, a, cc, b}
	// op admits 2; the consumer's 5 are spent by D D A B C, and the denied
	// D's gave back what they took from the consumer.
	const want = "D:OK D:OK D:OVER_LIMIT D:OVER_LIMIT A:OK B:OK C:OK A:OVER_LIMIT C:OVER_LIMIT B:OVER_LIMIT"
	hour := time.Now().Truncate(time.Hour)
	got := make([]string, callers)
	next := atomic.Int64{}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < callers; i = int(next.Add(1) - 1) {
				c := fmt.Sprintf("caller-%03d", i)
				var out []string
				for _, sh := range seq {
					resp, err := s.ShouldRateLimit(context.Background(), sh.build(c))
					if err != nil {
						t.Error(err)
						return
					}
					out = append(out, sh.name+":"+resp.GetOverallCode().String())
				}
				got[i] = strings.Join(out, " ")
			}
		})
	}
	wg.Wait()
	admittedC := 0
	for i, g := range got {
		if g != want {
			t.Errorf("caller-%03d:\n got  %s\n want %s", i, g, want)
		}
		admittedC += strings.Count(g, "C:OK")
	}
	// A failing store would fall back to local buckets, which give the same
	// answers here: every request must have been decided by the cluster.
	if n := counter(t, reg, "portico_ratelimitsvc_decisions_total", "fail_open", "local_over_limit"); n != 0 {
		t.Errorf("%v decisions by fail mode; the cluster must decide every request", n)
	}

	// Each caller's two denied D requests (op denied in one slot) and two
	// denied B or C requests (consumer denied) gave back the other slot.
	if given, failed := rd.Refunds(); given != 4*callers || failed != 0 {
		t.Errorf("refunds: %d given, %d failed; want %d given", given, failed, 4*callers)
	}
	if got := counter(t, reg, "portico_ratelimitsvc_refunds_total", "given"); got != 4*callers {
		t.Errorf("portico_ratelimitsvc_refunds_total{result=given} %v, want %d", got, 4*callers)
	}

	// Every primary holds a fair part of the buckets (about a third each).
	total := 0
	sizes := map[string]int{}
	for _, p := range procs {
		out, err := p.CLI("dbsize")
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(strings.TrimSpace(out))
		sizes[p.Addr] = n
		total += n
	}
	t.Logf("keys per primary: %v (total %d)", sizes, total)
	for addr, n := range sizes {
		if n < total/6 {
			t.Errorf("primary %s holds %d of %d keys: the buckets do not spread over the cluster", addr, n, total)
		}
	}

	// The shared route bucket counted exactly the admitted C requests: the
	// denied ones were given back (fixed window: unless the hour turned).
	if st := call(t, s, req("portico", desc("route", "r"))).GetStatuses()[0]; time.Now().Truncate(time.Hour).Equal(hour) {
		if want := uint32(1_000_000 - admittedC - 1); st.GetLimitRemaining() != want {
			t.Errorf("route remaining %d, want %d (%d admitted C requests and this one)", st.GetLimitRemaining(), want, admittedC)
		}
	}
}

// warmUp connects client to every master (asking the Sentinel or loading
// the slot map first) without the store's short timeout: on a loaded test
// machine a cold first call can outlast it and fail open, which these tests
// would misread as a wrong answer.
func warmUp(t *testing.T, client redis.UniversalClient) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	if c, ok := client.(*redis.ClusterClient); ok {
		err = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return m.Ping(ctx).Err() })
	} else {
		err = client.Ping(ctx).Err()
	}
	if err != nil {
		t.Fatalf("warm-up: %v", err)
	}
}

// counter sums the counters name{result=<one of results>} in g.
func counter(t *testing.T, g prometheus.Gatherer, name string, results ...string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum, found := 0.0, false
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && slices.Contains(results, l.GetValue()) {
					sum, found = sum+m.GetCounter().GetValue(), true
				}
			}
		}
	}
	if !found {
		t.Fatalf("no metric %s{result=%v}", name, results)
	}
	return sum
}
