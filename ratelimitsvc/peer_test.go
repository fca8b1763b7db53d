package ratelimitsvc_test

// Side by side with envoyproxy/ratelimit's service_cmd (the peer): same
// YAML, same Redis, same requests. `make peers` (run by make test and make
// bench) installs the binary into .run/bin and the Makefile points
// PORTICO_RATELIMIT_PEER_BIN at it (or put service_cmd on PATH), see
// README.md. Without it these tests and benchmarks skip, except in CI where
// they fail — never skip for Redis.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/portico-io/portico/internal/eventually"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/peerbench"
	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/internal/tlstest"
	"github.com/portico-io/portico/ratelimitsvc"
)

// peerVersion is the envoyproxy/ratelimit version the peer is built from.
const peerVersion = "v1.4.1-0.20260122083618-3fb702589d36"

// exampleYAML returns envoyproxy/ratelimit's documented example config
// (examples/ratelimit/config/example.yaml), unchanged, from the module
// cache the peer was installed from — it is read, not copied into this
// repository — or from PORTICO_RATELIMIT_PEER_EXAMPLE.
func exampleYAML(t testing.TB) string {
	p := os.Getenv("PORTICO_RATELIMIT_PEER_EXAMPLE")
	if p == "" {
		out, err := exec.Command("go", "env", "GOMODCACHE").Output()
		if err != nil {
			t.Fatal(err)
		}
		p = filepath.Join(strings.TrimSpace(string(out)), "github.com/envoyproxy/ratelimit@"+peerVersion, "examples/ratelimit/config/example.yaml")
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Skipf("envoyproxy/ratelimit's example.yaml not found (%v): install the peer as in ratelimitsvc/README.md or set PORTICO_RATELIMIT_PEER_EXAMPLE", err)
	}
	return string(b)
}

// peerBin finds service_cmd or skips.
func peerBin(t testing.TB) string {
	if p := os.Getenv("PORTICO_RATELIMIT_PEER_BIN"); p != "" {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("service_cmd"); err == nil {
		return p
	}
	if os.Getenv("CI") != "" { // make test installs it (make peers)
		t.Fatal("envoyproxy/ratelimit service_cmd not found: PORTICO_RATELIMIT_PEER_BIN=" + os.Getenv("PORTICO_RATELIMIT_PEER_BIN") + "; run make peers")
	}
	t.Skip("envoyproxy/ratelimit service_cmd not found: set PORTICO_RATELIMIT_PEER_BIN or put it on PATH (see ratelimitsvc/README.md)")
	return ""
}

func freePort(t testing.TB) int { return testdeps.FreePort(t) }

// peerProc is a running service_cmd.
type peerProc struct {
	client rlsv3.RateLimitServiceClient
	// dir is its config directory: it reloads every file there on a change.
	dir  string
	proc *peerbench.Proc
}

// putFile replaces dir/name atomically (a rename), so neither service's
// reload ever reads it half-written.
func putFile(t testing.TB, dir, name, doc string) {
	t.Helper()
	tmp := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(tmp, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

// runPeer runs service_cmd with files (name → YAML) as its config.
func runPeer(t testing.TB, bin, redisAddr, keyPrefix string, files map[string]string, env []string, creds credentials.TransportCredentials) *peerProc {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, doc := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	grpcPort := freePort(t)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(),
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redisAddr, "USE_STATSD=false",
		"RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"HOST=127.0.0.1", "PORT="+strconv.Itoa(freePort(t)),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(freePort(t)),
		"GRPC_HOST=127.0.0.1", "GRPC_PORT="+strconv.Itoa(grpcPort),
		"CACHE_KEY_PREFIX="+keyPrefix, "LOG_LEVEL=warn")
	cmd.Env = append(cmd.Env, env...)
	proc := peerbench.Start(t, "service_cmd", cmd)
	return &peerProc{client: dialServing(t, proc, grpcPort, creds), dir: dir, proc: proc}
}

// dialServing connects to a rate-limit service process on loopback port
// and returns its client once it answers ShouldRateLimit (any domain), or
// fails t after 30 s or when the process exits.
func dialServing(t testing.TB, proc *peerbench.Proc, port int, creds credentials.TransportCredentials) rlsv3.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", port), grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := rlsv3.NewRateLimitServiceClient(conn)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "ping", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{
			{Entries: []*ratelimitcommonv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}, grpc.WaitForReady(true))
		cancel()
		if err == nil {
			return c
		}
		select {
		case <-proc.Exited():
			t.Fatalf("%s exited: %s", proc.Name, proc.Output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not serving after 30s: %v\n%s", proc.Name, err, proc.Output())
		}
	}
}

func rlReq(domain string, descs ...[]string) *rlsv3.RateLimitRequest {
	r := &rlsv3.RateLimitRequest{Domain: domain}
	for _, kv := range descs {
		d := &ratelimitcommonv3.RateLimitDescriptor{}
		for i := 0; i < len(kv); i += 2 {
			d.Entries = append(d.Entries, &ratelimitcommonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		r.Descriptors = append(r.Descriptors, d)
	}
	return r
}

// peerSequence is the request sequence both services answer. Requests with
// several descriptors come first and are all allowed: past a denial the
// two differ by design (envoyproxy/ratelimit increments every descriptor
// of a denied request; Portico consumes nothing).
func peerSequence() []*rlsv3.RateLimitRequest {
	var seq []*rlsv3.RateLimitRequest
	rep := func(n int, r *rlsv3.RateLimitRequest) {
		for range n {
			seq = append(seq, r)
		}
	}
	// An unlimited limit's replaces drop the named limit too (compatYAML).
	rep(3, rlReq("compat", []string{"user", "u2"}, []string{"tier", "free"}))
	// category=account (4/min) replaces fake_name (2/min): three pass.
	rep(3, rlReq("rl", []string{"source_cluster", "proxy", "destination_cluster", "fake"}, []string{"category", "account"}))
	rep(2, rlReq("rl", []string{"category", "account"}))
	rep(3, rlReq("rl", []string{"source_cluster", "proxy", "destination_cluster", "fake"}))
	rep(3, rlReq("rl", []string{"source_cluster", "proxy", "destination_cluster", "bkthomps"}))
	rep(2, rlReq("rl", []string{"source_cluster", "proxy", "destination_cluster", "mock"}))
	rep(3, rlReq("rl", []string{"source_cluster", "proxy", "destination_cluster", "override"}))
	rep(2, rlReq("rl", []string{"source_cluster", "proxy", "destination_cluster", "unknown"}))
	rep(3, rlReq("rl", []string{"foo", "f1"}))
	rep(4, rlReq("rl", []string{"foo", "f2", "bar", "b"}))
	rep(2, rlReq("rl", []string{"foo", "f3", "bar", "bkthomps"}))
	rep(2, rlReq("rl", []string{"foo", "f4", "bar", "banned"}))
	rep(4, rlReq("rl", []string{"foo", "f5", "baz", "not-so-shady"}))
	rep(4, rlReq("rl", []string{"foo", "f6", "baz", "shady"}))
	rep(3, rlReq("rl", []string{"foo", "f7", "bay", "any"}))
	rep(3, rlReq("rl", []string{"unspec", "u"}))
	rep(3, rlReq("rl", []string{"qux", "q"}))
	rep(2, rlReq("rl", []string{"nothing", "here"}))
	rep(2, rlReq("other-domain", []string{"category", "account"}))
	// Values declared without rate_limit are whitelisted: an exact value
	// over a prefix wildcard or the bare key, a wildcard over the bare key,
	// at any depth (compatYAML).
	for _, kv := range [][]string{{"user", "u1"}, {"user", "vip"}, {"path", "/api/x"}, {"path", "/api/health"},
		{"team", "abc"}, {"team", "b"}, {"org", "o1", "user", "u"}, {"org", "o1", "user", "vip"}} {
		rep(3, rlReq("compat", kv))
	}
	return seq
}

// compatYAML holds the cases beyond envoyproxy/ratelimit's example: values
// declared without rate_limit beside limited siblings (limits of 2 a
// minute: the third request tells them apart), and an unlimited limit
// that replaces another.
const compatYAML = `domain: compat
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2, name: per_user}
  - key: user
    value: vip
  - key: path
    value: /api*
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: /api/health
  - key: team
    value: a*
  - key: team
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: org
    value: o1
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 2}
      - key: user
        value: vip
  - key: tier
    value: free
    rate_limit: {unlimited: true, replaces: [{name: per_user}]}
`

// selfReplacingYAML is refused by both: its limit replaces its own name.
const selfReplacingYAML = `domain: self
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1, name: lim, replaces: [{name: lim}]}
`

// peerSequenceAfterReject runs once both have refused selfReplacingYAML:
// each still answers from the rules it had (the counts go on), and the
// refused file's domain is unknown to both.
func peerSequenceAfterReject() []*rlsv3.RateLimitRequest {
	return []*rlsv3.RateLimitRequest{
		rlReq("compat", []string{"user", "u1"}),
		rlReq("compat", []string{"user", "vip"}),
		rlReq("rl", []string{"foo", "f1"}),
		rlReq("self", []string{"k", "v"}),
		rlReq("self", []string{"k", "v"}),
	}
}

func answer(t testing.TB, c rlsv3.RateLimitServiceClient, r *rlsv3.RateLimitRequest) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	parts := []string{resp.GetOverallCode().String()}
	for _, st := range resp.GetStatuses() {
		parts = append(parts, st.GetCode().String())
	}
	return strings.Join(parts, "/")
}

// envoyproxy/ratelimit's documented example config, and compatYAML,
// give the same allow/deny sequence (overall and per descriptor) in both
// services; then both refuse a file whose limit replaces itself, keep
// their rules, and answer alike again.
func TestPeerSameSequence(t *testing.T) {
	bin := peerBin(t)
	files := map[string]string{"example.yaml": exampleYAML(t), "compat.yaml": compatYAML}
	redis := testdeps.Redis(t)
	seq, after := peerSequence(), peerSequenceAfterReject()
	// Fixed minute windows from two clocks: a run that straddles a minute
	// is not comparable, so it is run again on fresh keys.
	for attempt := range 3 {
		pfx := fmt.Sprintf("portico:peer:%d:%d:", time.Now().UnixNano(), attempt)
		dir := t.TempDir()
		for name, doc := range files {
			putFile(t, dir, name, doc)
		}
		ours := start(t, ratelimitsvc.Config{ConfigDir: dir, PollInterval: 20 * time.Millisecond,
			RedisAddr: redis, RedisTimeout: 2 * time.Second, KeyPrefix: pfx + "ours:"})
		peer := runPeer(t, bin, redis, pfx+"peer:", files, nil, insecure.NewCredentials())
		began := time.Now()
		var diffs []string
		denied := 0
		compare := func(phase string, seq []*rlsv3.RateLimitRequest) {
			for i, r := range seq {
				a, b := answer(t, ours.client, r), answer(t, peer.client, r)
				if strings.HasPrefix(b, "OVER_LIMIT") {
					denied++
				}
				if a != b {
					diffs = append(diffs, fmt.Sprintf("%s#%d %v: portico %s, envoyproxy/ratelimit %s", phase, i, r.GetDescriptors(), a, b))
				}
			}
		}
		compare("", seq)
		// Both reject the whole directory on this file and keep what they
		// had; each says so (a metric here, a log line there).
		putFile(t, dir, "self.yaml", selfReplacingYAML)
		putFile(t, peer.dir, "self.yaml", selfReplacingYAML)
		eventually.True(t, 10*time.Second, "ratelimitsvc to reject self.yaml", func() bool {
			return strings.Contains(ours.metrics(t), `portico_ratelimitsvc_rule_updates_total{result="rejected",source="file"} 1`)
		})
		eventually.True(t, 10*time.Second, "envoyproxy/ratelimit to reject self.yaml", func() bool {
			return strings.Contains(peer.proc.Output(), "replaces should not contain name of same descriptor")
		})
		compare("after self.yaml ", after)
		if began.Truncate(time.Minute) != time.Now().Truncate(time.Minute) {
			t.Logf("attempt %d straddled a minute boundary; again", attempt)
			continue
		}
		if len(diffs) > 0 {
			t.Fatalf("%d of %d answers differ:\n%s", len(diffs), len(seq)+len(after), strings.Join(diffs, "\n"))
		}
		if denied == 0 {
			t.Fatal("no request was denied: the sequence tests nothing")
		}
		t.Logf("%d requests (%d denied), same answers", len(seq)+len(after), denied)
		return
	}
	t.Fatal("every attempt straddled a minute boundary")
}

// The side-by-side benchmarks (BENCHMARKS.md, "ratelimitsvc vs
// envoyproxy/ratelimit"). Both services are processes of their own, built
// from their real commands (ours by peerbench.Build, the peer by make
// peers), answering the same client (this process) over loopback gRPC,
// counting in the same private redis-server (started for the benchmark, so
// other tests on the shared one do not weigh on a round, and its CPU per
// request is measured) under their own key prefixes. What is levelled:
//   - Redis pool: 64 connections each (ours is fixed at 64 in
//     bucket.NewClient; the peer's REDIS_POOL_SIZE, default 10, is raised
//     to match).
//   - Redis timeout: 1 s each (ours: --redis-timeout, whose 5 ms production
//     default would fail open under saturation and answer without Redis;
//     the peer's REDIS_TIMEOUT, default 10 s).
//   - Metrics: both export Prometheus metrics, unscraped (the peer's
//     USE_PROMETHEUS; without a sink it would dump every stat to stdout
//     every 10 s, megabytes with 10,000 consumers).
//   - Everything else at each side's defaults: GOMAXPROCS, our replica
//     counting through Redis, the peer's per-descriptor stats, neither
//     side's local over-limit cache (the peer's LOCAL_CACHE_SIZE_IN_BYTES
//     is 0 by default; ours has none), no Redis pipelining window on the
//     peer (REDIS_PIPELINE_WINDOW 0).
//   - Rounds alternate ours, peer, peer, ours (peerbench.Order); both
//     processes stay up throughout, idle while the other is measured.

// Load mixes. A request carries two descriptors, [consumer=c] and
// [path=/x]; the consumer "over" has a limit of 1 an hour (so every request
// of it but the first is denied), the others are far from theirs, spread
// over mixConsumers consumers (each its own counter, as a gateway sees).
const (
	mixConsumers   = 10000
	benchRulesYAML = `domain: bench
descriptors:
  - key: consumer
    rate_limit: {unit: second, requests_per_unit: 4000000000}
  - key: consumer
    value: over
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: path
    rate_limit: {unit: second, requests_per_unit: 4000000000}
`
)

// loadMix is a share of over-limit requests, in percent.
type loadMix struct {
	name      string
	deniedPct int
}

var loadMixes = []loadMix{
	{name: "mostly-allowed", deniedPct: 1}, // what a gateway mostly sees
	{name: "mostly-denied", deniedPct: 90}, // a client hammering past its limit
}

// requests returns n requests of the mix: request i is over the limit
// when i%100 < deniedPct, so every stretch of 100 has the same share.
func (m loadMix) requests(n int) []*rlsv3.RateLimitRequest {
	reqs := make([]*rlsv3.RateLimitRequest, n)
	for i := range reqs {
		c := "c" + strconv.Itoa(i%mixConsumers)
		if i%100 < m.deniedPct {
			c = "over"
		}
		reqs[i] = rlReq("bench", []string{"consumer", c}, []string{"path", "/x"})
	}
	return reqs
}

type loadResult struct {
	rps      float64
	p50, p99 time.Duration
	denied   int
	// cpuPerReq and redisCPUPerReq are the server process's and the Redis
	// server's CPU time over the requests.
	cpuPerReq, redisCPUPerReq time.Duration
}

func (r loadResult) String() string {
	return fmt.Sprintf("%.0f req/s, p50 %v p99 %v, CPU-µs/req %.1f (Redis %.1f), %d denied", r.rps, r.p50, r.p99,
		float64(r.cpuPerReq)/float64(time.Microsecond), float64(r.redisCPUPerReq)/float64(time.Microsecond), r.denied)
}

// rlSide is one service under load: its client, its process and its
// Redis (the benchmark's own, shared by both sides).
type rlSide struct {
	name   string
	client rlsv3.RateLimitServiceClient
	proc   *peerbench.Proc
	redis  *testdeps.RedisProc
}

// load sends reqs from callers goroutines sharing side's one connection
// and measures them, with the server's CPU time.
func load(b *testing.B, side rlSide, reqs []*rlsv3.RateLimitRequest, callers int) loadResult {
	n := len(reqs)
	var next, denied atomic.Int64
	lat := make([]time.Duration, n)
	var wg sync.WaitGroup
	cpu0, rcpu0 := peerbench.CPUTime(side.proc.Pid()), peerbench.CPUTime(side.redis.Pid())
	began := time.Now()
	for range callers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				t0 := time.Now()
				resp, err := side.client.ShouldRateLimit(context.Background(), reqs[i])
				lat[i] = time.Since(t0)
				switch {
				case err != nil:
					b.Errorf("%s: %v", side.name, err)
					return
				case resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT:
					denied.Add(1)
				case resp.GetOverallCode() != rlsv3.RateLimitResponse_OK:
					b.Errorf("%s: %v", side.name, resp)
					return
				}
			}
		})
	}
	wg.Wait()
	el := time.Since(began)
	cpu, rcpu := peerbench.CPUTime(side.proc.Pid())-cpu0, peerbench.CPUTime(side.redis.Pid())-rcpu0
	slices.Sort(lat)
	return loadResult{rps: float64(n) / el.Seconds(), p50: lat[n/2], p99: lat[n*99/100], denied: int(denied.Load()),
		cpuPerReq: cpu / time.Duration(n), redisCPUPerReq: rcpu / time.Duration(n)}
}

// benchSides starts both services on the benchmark rules: ours from its
// command with args added, the peer with env added; creds for both
// clients (peerCreds for the peer's when set).
func benchSides(b *testing.B, ourArgs, peerEnv []string, creds, peerCreds credentials.TransportCredentials) (ours, peer rlSide) {
	b.Helper()
	bin := peerBin(b)
	// A Redis of the benchmark's own: the shared one serves other tests
	// meanwhile, and its CPU per request is part of each side's cost.
	rp := testdeps.RedisServer(b)
	redis := rp.Addr
	ourBin := peerbench.Build(b, "./ratelimitsvc/cmd/ratelimitsvc")
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bench.yaml"), []byte(benchRulesYAML), 0o644); err != nil {
		b.Fatal(err)
	}
	pfx := fmt.Sprintf("portico:peerbench:%d:", time.Now().UnixNano())
	grpcPort := freePort(b)
	cmd := exec.Command(ourBin, append([]string{"--grpc-addr", "127.0.0.1:" + strconv.Itoa(grpcPort),
		"--http-addr", "127.0.0.1:" + strconv.Itoa(freePort(b)), "--redis-addr", redis, "--redis-timeout", "1s",
		"--config-dir", dir, "--state-dir", b.TempDir(), "--log-level", "warn"}, ourArgs...)...)
	// Ours counts under its default key prefix (the command has no flag
	// for it), the peer under its own, both in a Redis fresh for this run.
	proc := peerbench.Start(b, "ratelimitsvc", cmd)
	ours = rlSide{name: "portico", client: dialServing(b, proc, grpcPort, creds), proc: proc, redis: rp}
	if peerCreds == nil {
		peerCreds = creds
	}
	pp := runPeer(b, bin, redis, pfx+"peer:", map[string]string{"bench.yaml": benchRulesYAML},
		append([]string{"REDIS_POOL_SIZE=64", "REDIS_TIMEOUT=1s",
			"USE_PROMETHEUS=true", "PROMETHEUS_ADDR=127.0.0.1:" + strconv.Itoa(freePort(b))}, peerEnv...), peerCreds)
	peer = rlSide{name: "envoyproxy/ratelimit", client: pp.client, proc: pp.proc, redis: rp}
	return ours, peer
}

// sideBySide runs one sub-benchmark: a warm-up of both, then rounds of n
// requests of mix per side in peerbench order, every round logged, and
// the reported means and ratios.
func sideBySide(b *testing.B, ours, peer rlSide, mix loadMix, callers int) {
	const rounds, n, warm = 4, 20000, 2000
	reqs := mix.requests(n)
	load(b, ours, reqs[:warm], callers)
	load(b, peer, reqs[:warm], callers)
	b.Logf("%d rounds of %d requests per side (%d%% over the limit), %d callers on one connection per side; %s",
		rounds, n, mix.deniedPct, callers, peerbench.Machine())
	run := func(side rlSide) func(int) loadResult {
		return func(i int) loadResult {
			r := load(b, side, reqs, callers)
			b.Logf("round %d %-20s %s", i+1, side.name+":", r)
			// Both must answer alike: the same share denied (within 1%; the
			// first request of "over" in an hour is allowed).
			if want := n * mix.deniedPct / 100; r.denied < want-n/100 || r.denied > want+n/100 {
				b.Fatalf("%s denied %d of %d, want about %d", side.name, r.denied, n, want)
			}
			return r
		}
	}
	o, p := peerbench.Rounds(rounds, run(ours), run(peer))
	µs := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	peerbench.ReportMetrics(b, o, p, []peerbench.Metric[loadResult]{
		{Name: "throughput", Unit: "req/s", Of: func(r loadResult) float64 { return r.rps }},
		{Name: "p50", Unit: "p50-µs", Of: func(r loadResult) float64 { return µs(r.p50) }},
		{Name: "p99", Unit: "p99-µs", Of: func(r loadResult) float64 { return µs(r.p99) }},
		{Name: "cpu", Unit: "cpu-µs/req", Of: func(r loadResult) float64 { return µs(r.cpuPerReq) }},
		{Name: "redis-cpu", Unit: "redis-cpu-µs/req", Of: func(r loadResult) float64 { return µs(r.redisCPUPerReq) }},
	})
}

// BenchmarkPeer: ShouldRateLimit over loopback gRPC, Portico vs
// envoyproxy/ratelimit's service_cmd, both plaintext, for each load mix
// (mostly-allowed: 1% over the limit; mostly-denied: 90%) at 4 and 32
// callers. Reported per sub-benchmark: each side's mean req/s, p50, p99,
// server CPU and Redis CPU per request, and the ratios portico/peer over
// round pairs (throughput-ratio: > 1 favours Portico; p50-, p99-, cpu-,
// redis-cpu-ratio: < 1 does). ns/op is meaningless (both sides run in one
// op).
//
//	go test -run '^$' -bench 'BenchmarkPeer$' -benchtime 1x ./ratelimitsvc/
func BenchmarkPeer(b *testing.B) {
	ours, peer := benchSides(b, []string{"--insecure-plaintext"}, nil, insecure.NewCredentials(), nil)
	for _, mix := range loadMixes {
		for _, callers := range []int{4, 32} {
			b.Run(fmt.Sprintf("mix=%s/callers=%d", mix.name, callers), func(b *testing.B) {
				for range b.N {
					sideBySide(b, ours, peer, mix, callers)
				}
			})
		}
	}
}

// BenchmarkPeerTLS is BenchmarkPeer (mostly-allowed mix) with both servers
// on mutual TLS, as a production deployment runs them: ratelimitsvc
// admitting gateway identities only, envoyproxy/ratelimit with
// GRPC_SERVER_USE_TLS and a client CA (it verifies the chain; ours also
// checks the SPIFFE role). Both present the same server certificate; the
// clients present the same gateway certificate over one connection each.
//
//	go test -run '^$' -bench PeerTLS -benchtime 1x ./ratelimitsvc/
func BenchmarkPeerTLS(b *testing.B) {
	ca := tlstest.New(b)
	srv := ca.Files(b, identity.RateLimit, "ratelimit")
	gw := ca.Load(b, identity.Gateway, "gateway")
	oursCreds := credentials.NewTLS(gw.ClientConfig(identity.Policy{Roles: []identity.Role{identity.RateLimit}}))
	// The peer's client verifies its server by host name (localhost, a SAN
	// of the same certificate), as its documentation sets it up.
	peerClient := ca.ClientTLS(nil)
	peerClient.GetClientCertificate = gw.ClientConfig(identity.Policy{}).GetClientCertificate
	ours, peer := benchSides(b, []string{"--tls-cert-file", srv.CertFile, "--tls-key-file", srv.KeyFile, "--tls-ca-file", srv.CAFile},
		[]string{"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT=" + srv.CertFile, "GRPC_SERVER_TLS_KEY=" + srv.KeyFile,
			"GRPC_CLIENT_TLS_CACERT=" + srv.CAFile}, oursCreds, credentials.NewTLS(peerClient))
	for _, callers := range []int{4, 32} {
		b.Run(fmt.Sprintf("mix=%s/callers=%d", loadMixes[0].name, callers), func(b *testing.B) {
			for range b.N {
				sideBySide(b, ours, peer, loadMixes[0], callers)
			}
		})
	}
}
