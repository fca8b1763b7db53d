package service_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/ratelimitsvc/bucket"
	"github.com/portico-io/portico/ratelimitsvc/rules"
	"github.com/portico-io/portico/ratelimitsvc/service"
	"github.com/portico-io/portico/ratelimitsvc/throttle"
)

const (
	OK   = rlsv3.RateLimitResponse_OK
	OVER = rlsv3.RateLimitResponse_OVER_LIMIT
)

// base is day-aligned so fixed windows start at offset 0.
var base = time.UnixMilli(19675 * 86_400_000)

type clock struct{ ms atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ms.Store(base.UnixMilli())
	return c
}
func (c *clock) Now() time.Time          { return time.UnixMilli(c.ms.Load()) }
func (c *clock) Advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) *ratelimitcommonv3.RateLimitDescriptor {
	d := &ratelimitcommonv3.RateLimitDescriptor{}
	for i := 0; i < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitcommonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func req(domain string, ds ...*ratelimitcommonv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds}
}

func rule(id string, limit, burst uint32, window time.Duration, path ...string) *rules.Rule {
	r := &rules.Rule{ID: id, Name: id, Source: rules.SourceXDS, Domain: "portico", Limit: limit, Burst: burst, Window: window}
	for i := 0; i < len(path); i += 2 {
		r.Descriptors = append(r.Descriptors, rules.Entry{Key: path[i], Value: path[i+1]})
	}
	return r
}

func prefix(t testing.TB) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "portico:test:" + t.Name() + ":" + hex.EncodeToString(b[:]) + ":"
}

func newService(t testing.TB, b service.Backend, rs ...*rules.Rule) *service.Service {
	t.Helper()
	live := rules.NewLive()
	if err := live.Update(rules.SourceXDS, "1", rs); err != nil {
		t.Fatal(err)
	}
	s, err := service.New(service.Config{Rules: live, Backend: b, KeyPrefix: prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func redisBackend(t testing.TB, clk *clock, timeout time.Duration) *bucket.Redis {
	t.Helper()
	c := bucket.NewRedisClient(testdeps.Redis(t))
	t.Cleanup(func() { _ = c.Close() })
	cfg := bucket.RedisConfig{Client: c, Timeout: timeout}
	if clk != nil {
		cfg.Now = clk.Now
	}
	rd, err := bucket.NewRedis(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rd
}

// backends runs body against the memory store and Redis (both on clk).
func backends(t *testing.T, body func(t *testing.T, b service.Backend, clk *clock)) {
	t.Run("memory", func(t *testing.T) {
		clk := newClock()
		m := bucket.NewMemory()
		m.Now = clk.Now
		body(t, m, clk)
	})
	t.Run("redis", func(t *testing.T) {
		clk := newClock()
		body(t, redisBackend(t, clk, 2*time.Second), clk)
	})
}

func call(t testing.TB, s *service.Service, r *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := s.ShouldRateLimit(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func headers(resp *rlsv3.RateLimitResponse) string {
	var hs []string
	for _, h := range resp.GetResponseHeadersToAdd() {
		hs = append(hs, h.GetKey()+"="+h.GetValue())
	}
	return strings.Join(hs, " ")
}

func TestResponses(t *testing.T) {
	backends(t, func(t *testing.T, b service.Backend, clk *clock) {
		// 2 per second, burst 1: capacity 3.
		s := newService(t, b, rule("per-consumer", 2, 1, time.Second, "consumer", ""))
		acme := req("portico", desc("consumer", "acme"))
		for i, want := range []string{
			"X-RateLimit-Limit=2 X-RateLimit-Remaining=2 X-RateLimit-Reset=1",
			"X-RateLimit-Limit=2 X-RateLimit-Remaining=1 X-RateLimit-Reset=1",
			"X-RateLimit-Limit=2 X-RateLimit-Remaining=0 X-RateLimit-Reset=2",
		} {
			resp := call(t, s, acme)
			if resp.GetOverallCode() != OK || headers(resp) != want {
				t.Fatalf("request %d: %v %q, want OK %q", i, resp.GetOverallCode(), headers(resp), want)
			}
		}
		resp := call(t, s, acme)
		st := resp.GetStatuses()[0]
		if resp.GetOverallCode() != OVER || st.GetCode() != OVER || st.GetLimitRemaining() != 0 ||
			st.GetCurrentLimit().GetRequestsPerUnit() != 2 || st.GetCurrentLimit().GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND ||
			st.GetDurationUntilReset().AsDuration() != 1500*time.Millisecond {
			t.Fatalf("4th: %v", resp)
		}
		// One token every 500ms: Retry-After rounds 500ms up to 1s.
		if h := headers(resp); h != "X-RateLimit-Limit=2 X-RateLimit-Remaining=0 X-RateLimit-Reset=2 Retry-After=1" {
			t.Fatalf("4th headers %q", h)
		}
		// Another consumer has its own bucket (empty value = per value).
		if resp := call(t, s, req("portico", desc("consumer", "other"))); resp.GetOverallCode() != OK {
			t.Fatalf("other consumer: %v", resp)
		}
		clk.Advance(500 * time.Millisecond)
		if resp := call(t, s, acme); resp.GetOverallCode() != OK {
			t.Fatalf("after refill: %v", resp)
		}
		// Weighted cost: hits_addend 3 needs 1.5s of refill: Retry-After 2.
		heavy := req("portico", desc("consumer", "acme"))
		heavy.HitsAddend = 3
		if resp := call(t, s, heavy); resp.GetOverallCode() != OVER || !strings.HasSuffix(headers(resp), "Retry-After=2") {
			t.Fatalf("cost 3: %v %q", resp.GetOverallCode(), headers(resp))
		}
		// A descriptor's own hits_addend wins over the request's.
		d := desc("consumer", "acme")
		d.HitsAddend = wrapperspb.UInt64(0)
		heavy.Descriptors = []*ratelimitcommonv3.RateLimitDescriptor{d}
		if resp := call(t, s, heavy); resp.GetOverallCode() != OK {
			t.Fatalf("cost 0 peek: %v", resp)
		}
	})
}

// SLIDING_WINDOW through ShouldRateLimit: no doubling at the window edge,
// headers from the weighted estimate, and the same answers on both stores.
func TestSlidingWindowRule(t *testing.T) {
	backends(t, func(t *testing.T, b service.Backend, clk *clock) {
		r := rule("sliding", 4, 0, time.Minute, "consumer", "")
		r.Algorithm = rules.SlidingWindow
		s := newService(t, b, r)
		acme := req("portico", desc("consumer", "acme"))
		clk.Advance(time.Minute - time.Duration(clk.Now().UnixMilli()%60_000)*time.Millisecond - time.Second) // 1s before a window edge
		var got []string
		for range 5 {
			got = append(got, call(t, s, acme).GetOverallCode().String())
		}
		clk.Advance(time.Second) // the edge: a fixed window would admit 4 more
		resp := call(t, s, acme)
		got = append(got, resp.GetOverallCode().String())
		if want := "OK OK OK OK OVER_LIMIT OVER_LIMIT"; strings.Join(got, " ") != want {
			t.Fatalf("sequence %v, want %s", got, want)
		}
		// 4×(60−x)/60 + 1 ≤ 4 ⇔ x ≥ 15s into the new window.
		if h := headers(resp); h != "X-RateLimit-Limit=4 X-RateLimit-Remaining=0 X-RateLimit-Reset=60 Retry-After=15" {
			t.Fatalf("headers %q", h)
		}
		clk.Advance(15 * time.Second)
		if resp := call(t, s, acme); resp.GetOverallCode() != OK {
			t.Fatalf("after 15s: %v", resp)
		}
	})
}

// One denied descriptor means nothing is consumed from the others.
func TestMultiDescriptorCommitsAllOrNothing(t *testing.T) {
	backends(t, func(t *testing.T, b service.Backend, _ *clock) {
		s := newService(t, b,
			rule("per-consumer", 10, 0, time.Hour, "consumer", ""),
			rule("per-path", 1, 0, time.Hour, "path", ""))
		both := req("portico", desc("consumer", "acme"), desc("path", "/pay"))
		if resp := call(t, s, both); resp.GetOverallCode() != OK {
			t.Fatalf("first: %v", resp)
		}
		for range 5 {
			resp := call(t, s, both)
			if resp.GetOverallCode() != OVER || resp.GetStatuses()[0].GetCode() != OK || resp.GetStatuses()[1].GetCode() != OVER {
				t.Fatalf("denied request: %v", resp)
			}
		}
		// Five denials consumed nothing from per-consumer: 9 remain.
		resp := call(t, s, req("portico", desc("consumer", "acme")))
		if got := resp.GetStatuses()[0].GetLimitRemaining(); got != 8 {
			t.Fatalf("per-consumer remaining %d after one more request, want 8", got)
		}
	})
}

func TestShadowModeAllowsAndCounts(t *testing.T) {
	backends(t, func(t *testing.T, b service.Backend, _ *clock) {
		sh := rule("new-rule", 1, 0, time.Hour, "consumer", "")
		sh.Mode = rules.Shadow
		s := newService(t, b, sh, rule("per-path", 100, 0, time.Hour, "path", ""))
		for range 3 {
			r := call(t, s, req("portico", desc("consumer", "acme"), desc("path", "/x")))
			if r.GetOverallCode() != OK || r.GetStatuses()[0].GetCode() != OK {
				t.Fatalf("shadow denial must be OK: %v", r)
			}
		}
		// The enforced rule kept counting: 97 left.
		r := call(t, s, req("portico", desc("path", "/x")))
		if got := r.GetStatuses()[0].GetLimitRemaining(); got != 96 {
			t.Fatalf("per-path remaining %d, want 96", got)
		}
	})
}

// Unknown domains and descriptors are OK without a limit.
func TestUnknownAndUnlimited(t *testing.T) {
	un := rule("vip", 0, 0, 0, "consumer", "vip")
	un.Unlimited = true
	s := newService(t, bucket.NewMemory(), rule("c", 1, 0, time.Hour, "consumer", ""), un)
	for _, r := range []*rlsv3.RateLimitRequest{
		req("nope", desc("consumer", "acme")),
		req("portico", desc("other", "x")),
		req("portico"),
		req("portico", desc()),
		req("portico", desc("consumer", "vip"), desc("consumer", "vip")),
	} {
		for range 3 {
			resp := call(t, s, r)
			if resp.GetOverallCode() != OK {
				t.Fatalf("%v: %v", r, resp)
			}
		}
	}
	if _, err := s.ShouldRateLimit(context.Background(), req("")); err == nil {
		t.Fatal("empty domain accepted")
	}
}

// An unlimited limit's replaces drop the named limits as any matched
// limit's do (envoyproxy/ratelimit collects replaces before it sets
// unlimited descriptors aside): the replaced limit is neither checked nor
// consumed.
func TestUnlimitedReplaces(t *testing.T) {
	un := rule("free", 0, 0, 0, "tier", "free")
	un.Unlimited, un.Replaces = true, []string{"per-consumer"}
	s := newService(t, bucket.NewMemory(), rule("per-consumer", 1, 0, time.Hour, "consumer", ""), un)
	var got []string
	for _, r := range []*rlsv3.RateLimitRequest{
		req("portico", desc("consumer", "c1"), desc("tier", "free")),
		req("portico", desc("consumer", "c1"), desc("tier", "free")),
		req("portico", desc("consumer", "c1")),
		req("portico", desc("consumer", "c1")),
	} {
		resp := call(t, s, r)
		got = append(got, resp.GetOverallCode().String())
		if len(r.GetDescriptors()) == 2 && resp.GetStatuses()[1].GetLimitRemaining() != math.MaxUint32 {
			t.Errorf("unlimited status: %v", resp.GetStatuses()[1])
		}
	}
	if want := "OK OK OK OVER_LIMIT"; strings.Join(got, " ") != want {
		t.Fatalf("got  %s\nwant %s", strings.Join(got, " "), want)
	}
}

// An envoyproxy/ratelimit YAML file gives its fixed-window allow/deny
// sequence, window edges included.
func TestEnvoyYAMLFixedWindowSequence(t *testing.T) {
	_, rs, err := rules.ParseYAML("t.yaml", []byte(`
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: minute
          requests_per_unit: 3
  - key: to_number
    rate_limit:
      unit: second
      requests_per_unit: 100
`))
	if err != nil {
		t.Fatal(err)
	}
	backends(t, func(t *testing.T, b service.Backend, clk *clock) {
		live := rules.NewLive()
		if err := live.Update(rules.SourceFile, "1", rs); err != nil {
			t.Fatal(err)
		}
		s, err := service.New(service.Config{Rules: live, Backend: b, KeyPrefix: prefix(t)})
		if err != nil {
			t.Fatal(err)
		}
		m := req("messaging", desc("message_type", "marketing", "to_number", "2061111111"))
		clk.Advance(58 * time.Second)
		var got []string
		step := func() {
			got = append(got, call(t, s, m).GetOverallCode().String())
		}
		for range 4 {
			step()
		}
		clk.Advance(2 * time.Second) // next minute
		for range 4 {
			step()
		}
		want := "OK OK OK OVER_LIMIT OK OK OK OVER_LIMIT"
		if strings.Join(got, " ") != want {
			t.Fatalf("sequence %v, want %s", got, want)
		}
	})
}

// blackhole accepts connections and never answers: a hung Redis.
func blackhole(t *testing.T) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	return lis.Addr().String()
}

func closedPort(t *testing.T) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

// Redis unreachable: OPEN rules allow, CLOSED rules deny, and each call is
// bounded by the timeout (asserted at 10× to stay a correctness bound on a
// loaded machine, not a benchmark).
func TestRedisUnreachableFailModes(t *testing.T) {
	const timeout = 25 * time.Millisecond
	for name, addr := range map[string]string{"refused": closedPort(t), "hung": blackhole(t)} {
		t.Run(name, func(t *testing.T) {
			c := bucket.NewRedisClient(addr)
			defer c.Close()
			rd, err := bucket.NewRedis(bucket.RedisConfig{Client: c, Timeout: timeout})
			if err != nil {
				t.Fatal(err)
			}
			open := rule("open", 100, 0, time.Hour, "consumer", "") // local fallback: 100 per hour
			closed := rule("closed", 1, 0, time.Hour, "login", "")
			closed.FailMode = rules.FailClosed
			s := newService(t, rd, open, closed)
			for range 5 {
				for _, tc := range []struct {
					r    *rlsv3.RateLimitRequest
					want rlsv3.RateLimitResponse_Code
				}{
					{req("portico", desc("consumer", "acme")), OK},
					{req("portico", desc("login", "bob")), OVER},
					{req("portico", desc("consumer", "acme"), desc("login", "bob")), OVER},
				} {
					start := time.Now()
					resp := call(t, s, tc.r)
					if el := time.Since(start); el > 10*timeout {
						t.Fatalf("call took %v with a %v timeout", el, timeout)
					}
					if resp.GetOverallCode() != tc.want {
						t.Fatalf("%v: %v, want %v", tc.r, resp, tc.want)
					}
				}
			}
		})
	}
}

func FuzzShouldRateLimit(f *testing.F) {
	f.Add("portico", "consumer", "acme", "path", "/x", uint32(1))
	f.Add("", "", "", "", "", uint32(0))
	f.Add("messaging", "message_type", "marketing", "to_number", "1", uint32(1<<31))
	f.Add("portico", "tenant", "acme", "consumer", "{x}", uint32(7))
	un := rule("vip", 0, 0, 0, "consumer", "vip")
	un.Unlimited = true
	pre := rule("pre", 5, 0, time.Minute, "path", "/adm*")
	pre.Algorithm = rules.FixedWindow
	sw := rule("sw", 2, 0, time.Minute, "path", "")
	sw.Algorithm = rules.SlidingWindow
	live := rules.NewLive()
	if err := live.Update(rules.SourceXDS, "1", []*rules.Rule{rule("c", 3, 2, time.Second, "consumer", ""), un, pre, sw,
		rule("nested", 1, 0, time.Hour, "consumer", "acme", "path", "")}); err != nil {
		f.Fatal(err)
	}
	s, err := service.New(service.Config{Rules: live, Backend: bucket.NewMemory()})
	if err != nil {
		f.Fatal(err)
	}
	known := map[string]bool{"consumer": true, "path": true}
	f.Add("portico", "consumer", "acme", "consumer", "acme", uint32(0))
	f.Fuzz(func(t *testing.T, domain, k1, v1, k2, v2 string, hits uint32) {
		huge := desc(k1, v1)
		huge.HitsAddend = wrapperspb.UInt64(uint64(hits) << 32)
		r := &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: hits,
			Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{desc(k1, v1), desc(k1, v1, k2, v2), desc(k2, v2), nil, huge}}
		resp, err := s.ShouldRateLimit(context.Background(), r)
		if domain == "" {
			if err == nil {
				t.Fatal("empty domain accepted")
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetStatuses()) != len(r.GetDescriptors()) {
			t.Fatalf("%d statuses for %d descriptors", len(resp.GetStatuses()), len(r.GetDescriptors()))
		}
		if domain != "portico" || (!known[k1] && !known[k2]) {
			if resp.GetOverallCode() != OK {
				t.Fatalf("unknown domain/descriptors: %v", resp)
			}
			for _, st := range resp.GetStatuses() {
				if st.GetCode() != OK || st.GetCurrentLimit() != nil {
					t.Fatalf("unknown descriptor status %v", st)
				}
			}
		}
	})
}

func benchmark(b *testing.B, backend service.Backend, parallelism int) {
	s := newService(b, backend, rule("per-consumer", 1<<30, 0, time.Second, "consumer", ""), rule("per-path", 1<<30, 0, time.Second, "path", ""))
	r := req("portico", desc("consumer", "acme"), desc("path", "/x"))
	var mu sync.Mutex
	var lat []time.Duration
	b.SetParallelism(parallelism)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var mine []time.Duration
		for pb.Next() {
			start := time.Now()
			if _, err := s.ShouldRateLimit(context.Background(), r); err != nil {
				b.Error(err)
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
}

// BenchmarkShouldRateLimit: two descriptors per request, in process (no
// gRPC). The comparison with envoyproxy/ratelimit is a later increment.
func BenchmarkShouldRateLimit(b *testing.B) {
	b.Run("memory", func(b *testing.B) { benchmark(b, bucket.NewMemory(), 1) })
	// 8 callers per CPU: Redis calls are network-bound.
	b.Run("redis", func(b *testing.B) { benchmark(b, redisBackend(b, nil, time.Second), 8) })
}

// A huge hits_addend is denied and never wraps into a refill.
func TestHugeHitsAddend(t *testing.T) {
	backends(t, func(t *testing.T, b service.Backend, _ *clock) {
		s := newService(t, b, rule("c", 2, 0, time.Hour, "consumer", ""))
		d := desc("consumer", "acme")
		d.HitsAddend = wrapperspb.UInt64(math.MaxUint64)
		for range 3 {
			if resp := call(t, s, req("portico", d, d)); resp.GetOverallCode() != OVER {
				t.Fatalf("huge cost: %v", resp)
			}
		}
		got := []string{}
		for range 3 {
			got = append(got, call(t, s, req("portico", desc("consumer", "acme"))).GetOverallCode().String())
		}
		if strings.Join(got, " ") != "OK OK OVER_LIMIT" {
			t.Fatalf("after huge costs: %v", got)
		}
	})
}

// A rule update keeps the bucket when only limit or burst change (the new
// capacity applies at once) and starts a fresh one when the window changes.
func TestRuleUpdateAndBuckets(t *testing.T) {
	backends(t, func(t *testing.T, b service.Backend, _ *clock) {
		live := rules.NewLive()
		set := func(limit uint32, window time.Duration) {
			if err := live.Update(rules.SourceXDS, "v", []*rules.Rule{rule("c", limit, 0, window, "consumer", "")}); err != nil {
				t.Fatal(err)
			}
		}
		set(2, time.Hour)
		s, err := service.New(service.Config{Rules: live, Backend: b, KeyPrefix: prefix(t)})
		if err != nil {
			t.Fatal(err)
		}
		acme := req("portico", desc("consumer", "acme"))
		seq := func(n int) string {
			var out []string
			for range n {
				out = append(out, call(t, s, acme).GetOverallCode().String())
			}
			return strings.Join(out, " ")
		}
		if got := seq(3); got != "OK OK OVER_LIMIT" {
			t.Fatalf("limit 2: %s", got)
		}
		set(3, time.Hour) // same bucket (empty), capacity 3: still nothing left
		if got := seq(1); got != "OVER_LIMIT" {
			t.Fatalf("limit raised: %s", got)
		}
		set(3, 2*time.Hour) // new window: fresh bucket
		if got := seq(4); got != "OK OK OK OVER_LIMIT" {
			t.Fatalf("new window: %s", got)
		}
	})
}

// Wildcards as in envoyproxy/ratelimit: per value by default, one shared
// bucket with share_threshold; quota_mode never denies.
func TestEnvoyWildcardsAndQuotaMode(t *testing.T) {
	_, rs, err := rules.ParseYAML("w.yaml", []byte(`
domain: files
descriptors:
  - key: shared
    value: a*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: each
    value: a*
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: quota
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
`))
	if err != nil {
		t.Fatal(err)
	}
	backends(t, func(t *testing.T, b service.Backend, _ *clock) {
		live := rules.NewLive()
		if err := live.Update(rules.SourceFile, "1", rs); err != nil {
			t.Fatal(err)
		}
		s, err := service.New(service.Config{Rules: live, Backend: b, KeyPrefix: prefix(t)})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, kv := range [][2]string{
			{"shared", "a1"}, {"shared", "a2"}, {"shared", "a3"}, {"shared", "b1"},
			{"each", "a1"}, {"each", "a2"}, {"each", "a1"},
			{"quota", "x"}, {"quota", "x"},
		} {
			got = append(got, call(t, s, req("files", desc(kv[0], kv[1]))).GetOverallCode().String())
		}
		if want := "OK OK OVER_LIMIT OK OK OK OVER_LIMIT OK OK"; strings.Join(got, " ") != want {
			t.Fatalf("got  %s\nwant %s", strings.Join(got, " "), want)
		}
	})
}

// requests_per_unit: 0 bans (envoyproxy/ratelimit's example "banned"): the
// request is denied without a bucket, and the other descriptors consume
// nothing; a shadow ban only counts.
func TestZeroLimitBans(t *testing.T) {
	backends(t, func(t *testing.T, b service.Backend, clk *clock) {
		ban := rule("ban", 0, 0, time.Minute, "user", "banned")
		shadowBan := rule("shadow-ban", 0, 0, time.Minute, "user", "watched")
		shadowBan.Mode = rules.Shadow
		per := rule("per", 1, 0, time.Hour, "consumer", "")
		s := newService(t, b, ban, shadowBan, per)
		for range 3 {
			if got := call(t, s, req("portico", desc("consumer", "acme"), desc("user", "banned"))); got.GetOverallCode() != OVER ||
				got.GetStatuses()[0].GetCode() != OK || got.GetStatuses()[1].GetCode() != OVER {
				t.Fatalf("ban: %v", got)
			}
		}
		if got := call(t, s, req("portico", desc("user", "watched"), desc("consumer", "acme"))).GetOverallCode(); got != OK {
			t.Fatalf("shadow ban, first use of consumer: %v", got)
		}
		if got := call(t, s, req("portico", desc("consumer", "acme"))).GetOverallCode(); got != OVER {
			t.Fatalf("consumer after one use: %v", got)
		}
	})
}

type collected struct {
	mu     sync.Mutex
	events []throttle.Event
}

func (c *collected) Publish(e throttle.Event) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, e)
	return true
}

// A denial (and a shadow would-be denial) publishes one throttle event per
// descriptor; allowed requests publish nothing.
func TestThrottleEvents(t *testing.T) {
	live := rules.NewLive()
	sh := rule("sh", 1, 0, time.Hour, "path", "")
	sh.Mode = rules.Shadow
	if err := live.Update(rules.SourceXDS, "1", []*rules.Rule{rule("per", 1, 0, time.Hour, "consumer", ""), sh}); err != nil {
		t.Fatal(err)
	}
	ev := &collected{}
	s, err := service.New(service.Config{Rules: live, Backend: bucket.NewMemory(), Events: ev})
	if err != nil {
		t.Fatal(err)
	}
	r := req("portico", desc("consumer", "a&b"), desc("path", "/x"))
	call(t, s, r)
	if len(ev.events) != 0 {
		t.Fatalf("allowed request published %v", ev.events)
	}
	call(t, s, r) // consumer denied, and the shadow rule would deny too
	var got []string
	for _, e := range ev.events {
		got = append(got, fmt.Sprintf("%s %s %s shadow=%v", e.Domain, e.Rule, e.Descriptor, e.Shadow))
	}
	want := []string{"portico per consumer=a%26b shadow=false", "portico sh path=%2Fx shadow=true"}
	if !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
}

// Braces in the key prefix would become every bucket's Redis Cluster hash
// tag, putting them all in one slot: refused.
func TestKeyPrefixWithoutBraces(t *testing.T) {
	for _, p := range []string{"app{x}:", "app}:"} {
		if _, err := service.New(service.Config{Rules: rules.NewLive(), Backend: bucket.NewMemory(), KeyPrefix: p}); err == nil {
			t.Errorf("KeyPrefix %q accepted", p)
		}
	}
}
