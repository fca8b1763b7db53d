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

	"github.com/portico-io/portico/internal/identity"
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

// startPeer runs service_cmd on loopback with yaml as its only config file
// and returns a client; it is stopped when the test ends.
func startPeer(t testing.TB, bin, redisAddr, keyPrefix, yaml string) rlsv3.RateLimitServiceClient {
	t.Helper()
	return startPeerWith(t, bin, redisAddr, keyPrefix, yaml, nil, insecure.NewCredentials())
}

// startPeerWith is startPeer with extra environment for service_cmd and
// the client's transport credentials.
func startPeerWith(t testing.TB, bin, redisAddr, keyPrefix, yaml string, env []string, creds credentials.TransportCredentials) rlsv3.RateLimitServiceClient {
	t.Helper()
	return runPeer(t, bin, redisAddr, keyPrefix, map[string]string{"config.yaml": yaml}, env, creds).client
}

// peerProc is a running service_cmd.
type peerProc struct {
	client rlsv3.RateLimitServiceClient
	// dir is its config directory: it reloads every file there on a change.
	dir string
	// out collects its stdout and stderr (its log).
	out *lockedBuffer
}

// lockedBuffer is an io.Writer a test may read while a process writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
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
	stderr := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", grpcPort), grpc.WithTransportCredentials(creds))
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
			return &peerProc{client: c, dir: dir, out: stderr}
		}
		select {
		case <-exited:
			t.Fatalf("service_cmd exited: %s", stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("service_cmd not serving after 30s: %v\n%s", err, stderr.String())
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
		eventually(t, 10*time.Second, "ratelimitsvc to reject self.yaml", func() bool {
			return strings.Contains(ours.metrics(t), `portico_ratelimitsvc_rule_updates_total{result="rejected",source="file"} 1`)
		})
		eventually(t, 10*time.Second, "envoyproxy/ratelimit to reject self.yaml", func() bool {
			return strings.Contains(peer.out.String(), "replaces should not contain name of same descriptor")
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

type loadResult struct {
	rps      float64
	p50, p99 time.Duration
}

// load sends n requests from callers goroutines and measures them.
func load(b *testing.B, c rlsv3.RateLimitServiceClient, r *rlsv3.RateLimitRequest, callers, n int) loadResult {
	var next atomic.Int64
	lat := make([]time.Duration, n)
	var wg sync.WaitGroup
	began := time.Now()
	for range callers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				t0 := time.Now()
				resp, err := c.ShouldRateLimit(context.Background(), r)
				lat[i] = time.Since(t0)
				if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
					b.Errorf("%v %v", resp, err)
					return
				}
			}
		})
	}
	wg.Wait()
	el := time.Since(began)
	slices.Sort(lat)
	return loadResult{rps: float64(n) / el.Seconds(), p50: lat[n/2], p99: lat[n*99/100]}
}

// benchRules writes the peer benchmarks' rules (two descriptors, limits
// never reached) to a directory of their own and returns it and the YAML.
func benchRules(b *testing.B) (dir, doc string) {
	doc = "domain: bench\ndescriptors:\n  - key: consumer\n    rate_limit: {unit: second, requests_per_unit: 4000000000}\n  - key: path\n    rate_limit: {unit: second, requests_per_unit: 4000000000}\n"
	dir = b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bench.yaml"), []byte(doc), 0o644); err != nil {
		b.Fatal(err)
	}
	return dir, doc
}

// BenchmarkPeer: ShouldRateLimit over loopback gRPC, Portico vs
// envoyproxy/ratelimit's service_cmd, same Redis, same two descriptors per
// request, same client load (callers goroutines sharing one connection
// each side), one after the other. Reported: each side's throughput and
// p50/p99, and the ratios portico/peer (throughput: higher is better;
// latency: lower is better).
func BenchmarkPeer(b *testing.B) {
	bin := peerBin(b)
	redis := testdeps.Redis(b)
	dir, doc := benchRules(b)
	pfx := fmt.Sprintf("portico:peerbench:%d:", time.Now().UnixNano())
	// The production timeout (5ms) would fail open under saturation on a
	// small machine and flatter Portico; the peer has no timeout at all.
	ours := start(b, ratelimitsvc.Config{ConfigDir: dir, RedisAddr: redis, RedisTimeout: time.Second, KeyPrefix: pfx + "ours:"})
	peer := startPeer(b, bin, redis, pfx+"peer:", doc)
	r := rlReq("bench", []string{"consumer", "acme"}, []string{"path", "/x"})
	for _, callers := range []int{4, 32} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			// make bench runs -benchtime 1x: still enough requests for a p99.
			n := max(b.N, 20000)
			load(b, ours.client, r, callers, min(n, 1000)) // warm up both
			load(b, peer, r, callers, min(n, 1000))
			b.ResetTimer()
			o := load(b, ours.client, r, callers, n)
			p := load(b, peer, r, callers, n)
			b.StopTimer()
			b.ReportMetric(o.rps, "portico-req/s")
			b.ReportMetric(p.rps, "peer-req/s")
			b.ReportMetric(o.rps/p.rps, "throughput-ratio")
			b.ReportMetric(float64(o.p50.Microseconds()), "portico-p50-µs")
			b.ReportMetric(float64(p.p50.Microseconds()), "peer-p50-µs")
			b.ReportMetric(float64(o.p99.Microseconds()), "portico-p99-µs")
			b.ReportMetric(float64(p.p99.Microseconds()), "peer-p99-µs")
			b.ReportMetric(float64(o.p99)/float64(p.p99), "p99-ratio")
			b.ReportMetric(float64(o.p50)/float64(p.p50), "p50-ratio")
		})
	}
}

// BenchmarkPeerTLS is BenchmarkPeer with both servers on mutual TLS, as a
// production deployment runs them: ratelimitsvc admitting gateway
// identities only, envoyproxy/ratelimit with GRPC_SERVER_USE_TLS and a
// client CA (it verifies the chain; ours also checks the SPIFFE role).
// Both present the same server certificate; the clients present the same
// gateway certificate over one connection each. Rounds alternate the
// order and each is logged; the reported ratios are the medians.
//
//	go test -run '^$' -bench PeerTLS -benchtime 1x ./ratelimitsvc/
func BenchmarkPeerTLS(b *testing.B) {
	bin := peerBin(b)
	redis := testdeps.Redis(b)
	dir, doc := benchRules(b)
	ca := tlstest.New(b)
	srv := ca.Files(b, identity.RateLimit, "ratelimit")
	gw := ca.Load(b, identity.Gateway, "gateway")
	pfx := fmt.Sprintf("portico:peerbenchtls:%d:", time.Now().UnixNano())
	ours := start(b, ratelimitsvc.Config{ConfigDir: dir, RedisAddr: redis, RedisTimeout: time.Second, KeyPrefix: pfx + "ours:", TLS: srv})
	conn, err := grpc.NewClient(ours.addrs.GRPC, grpc.WithTransportCredentials(credentials.NewTLS(
		gw.ClientConfig(identity.Policy{Roles: []identity.Role{identity.RateLimit}}))))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	oursTLS := rlsv3.NewRateLimitServiceClient(conn)
	// The peer's client verifies its server by host name (localhost, a SAN
	// of the same certificate), as its documentation sets it up.
	peerClient := ca.ClientTLS(nil)
	peerClient.GetClientCertificate = gw.ClientConfig(identity.Policy{}).GetClientCertificate
	peer := startPeerWith(b, bin, redis, pfx+"peer:", doc, []string{"GRPC_SERVER_USE_TLS=true",
		"GRPC_SERVER_TLS_CERT=" + srv.CertFile, "GRPC_SERVER_TLS_KEY=" + srv.KeyFile, "GRPC_CLIENT_TLS_CACERT=" + srv.CAFile},
		credentials.NewTLS(peerClient))
	r := rlReq("bench", []string{"consumer", "acme"}, []string{"path", "/x"})
	const rounds, n = 4, 20000
	for _, callers := range []int{4, 32} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			load(b, oursTLS, r, callers, 1000) // warm up both
			load(b, peer, r, callers, 1000)
			var tput, p99 []float64
			for round := range rounds {
				var o, p loadResult
				if round%2 == 0 {
					o, p = load(b, oursTLS, r, callers, n), load(b, peer, r, callers, n)
				} else {
					p, o = load(b, peer, r, callers, n), load(b, oursTLS, r, callers, n)
				}
				b.Logf("round %d: portico %.0f req/s p50 %v p99 %v | envoyproxy/ratelimit %.0f req/s p50 %v p99 %v | throughput ratio %.2f",
					round+1, o.rps, o.p50, o.p99, p.rps, p.p50, p.p99, o.rps/p.rps)
				tput = append(tput, o.rps/p.rps)
				p99 = append(p99, float64(o.p99)/float64(p.p99))
			}
			slices.Sort(tput)
			slices.Sort(p99)
			b.ReportMetric(tput[len(tput)/2], "throughput-ratio")
			b.ReportMetric(p99[len(p99)/2], "p99-ratio")
		})
	}
}
