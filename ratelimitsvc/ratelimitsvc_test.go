package ratelimitsvc_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/portico-io/portico/controlplane"
	"github.com/portico-io/portico/controlplane/cptest"
	"github.com/portico-io/portico/internal/eventually"
	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/ratelimitsvc"
	"github.com/portico-io/portico/ratelimitsvc/source"
)

type instance struct {
	addrs  ratelimitsvc.Addrs
	client rlsv3.RateLimitServiceClient
	stop   func()
}

// start runs ratelimitsvc on loopback ports until the test ends (or stop).
func start(t testing.TB, cfg ratelimitsvc.Config) *instance {
	t.Helper()
	cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.InsecurePlaintext = !cfg.TLS.IsSet()
	ready := make(chan ratelimitsvc.Addrs, 1)
	cfg.Ready = ready
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ratelimitsvc.Run(ctx, cfg) }()
	in := &instance{}
	select {
	case in.addrs = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("ratelimitsvc exited: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("ratelimitsvc not ready after 30s")
	}
	conn, err := grpc.NewClient(in.addrs.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	in.client = rlsv3.NewRateLimitServiceClient(conn)
	var stopped atomic.Bool
	in.stop = func() {
		if stopped.Swap(true) {
			return
		}
		conn.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ratelimitsvc: %v", err)
		}
	}
	t.Cleanup(in.stop)
	return in
}

func (in *instance) check(t *testing.T, domain string, kv ...string) rlsv3.RateLimitResponse_Code {
	t.Helper()
	code, err := in.try(domain, kv...)
	if err != nil {
		t.Fatal(err)
	}
	return code
}

// try is check for goroutines other than the test's.
func (in *instance) try(domain string, kv ...string) (rlsv3.RateLimitResponse_Code, error) {
	d := &ratelimitcommonv3.RateLimitDescriptor{}
	for i := 0; i < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitcommonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := in.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{d}})
	return resp.GetOverallCode(), err
}

type configDump struct {
	Versions map[string]string `json:"versions"`
	Rules    []struct {
		ID    string `json:"id"`
		Limit uint32 `json:"limit"`
	} `json:"rules"`
}

func (in *instance) config(t *testing.T) configDump {
	t.Helper()
	var c configDump
	if code := getJSON(t, "http://"+in.addrs.HTTP+"/config", &c); code != http.StatusOK {
		t.Fatalf("GET /config: %d", code)
	}
	return c
}

func (in *instance) metrics(t *testing.T) string {
	t.Helper()
	resp, err := http.Get("http://" + in.addrs.HTTP + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func getJSON(t *testing.T, url string, out any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil {
		_ = json.Unmarshal(b, out)
	}
	return resp.StatusCode
}

func codes(t *testing.T, in *instance, n int, domain string, kv ...string) string {
	var out []string
	for range n {
		out = append(out, in.check(t, domain, kv...).String())
	}
	return strings.Join(out, " ")
}

// Files in envoyproxy/ratelimit format load at boot and reload on change;
// a broken edit keeps the previous rules.
func TestFileRulesHotReload(t *testing.T) {
	dir := t.TempDir()
	// Files are replaced atomically (as a ConfigMap update does), so a poll
	// never sees one half-written.
	put := func(doc string) {
		tmp := filepath.Join(t.TempDir(), "rules.yaml")
		if err := os.WriteFile(tmp, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "rules.yaml")); err != nil {
			t.Fatal(err)
		}
	}
	write := func(n uint32) {
		put(fmt.Sprintf("domain: files\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: hour\n      requests_per_unit: %d\n", n))
	}
	write(2)
	in := start(t, ratelimitsvc.Config{ConfigDir: dir, PollInterval: 10 * time.Millisecond})
	if code := getJSON(t, "http://"+in.addrs.HTTP+"/readyz", nil); code != http.StatusOK {
		t.Fatalf("/readyz %d", code)
	}
	v1 := in.config(t).Versions["file"]
	if got := codes(t, in, 3, "files", "user", "a"); got != "OK OK OVER_LIMIT" {
		t.Fatalf("limit 2: %s", got)
	}
	write(4)
	eventually.True(t, 10*time.Second, "the new file version", func() bool { return in.config(t).Versions["file"] != v1 })
	if got := codes(t, in, 3, "files", "user", "a"); got != "OK OK OVER_LIMIT" {
		t.Fatalf("limit 4 (2 used): %s", got)
	}
	v2 := in.config(t).Versions["file"]
	put("domain: files\ndescriptors: [{key: user, rate_limit: {unit: eon}}]")
	// The rejection is a signal (a metric), not a sleep.
	eventually.True(t, 10*time.Second, "the broken file to be rejected", func() bool {
		return strings.Contains(in.metrics(t), `portico_ratelimitsvc_rule_updates_total{result="rejected",source="file"}`)
	})
	if c := in.config(t); c.Versions["file"] != v2 || len(c.Rules) != 1 || c.Rules[0].Limit != 4 {
		t.Fatalf("broken file replaced the rules: %+v", c)
	}
	metrics := in.metrics(t)
	for _, want := range []string{
		`portico_ratelimitsvc_decisions_total{mode="enforce",result="over_limit"} 2`,
		`portico_ratelimitsvc_rule_updates_total{result="applied",source="file"} 2`,
		`portico_ratelimitsvc_rule_updates_total{result="rejected",source="file"} 1`,
		`portico_ratelimitsvc_rules{source="file"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Fatalf("metrics lack %s:\n%s", want, metrics)
		}
	}
}

// startControlPlane runs a real control plane on a fresh database; its
// bootstrap admin token authorizes postRule.
func startControlPlane(t *testing.T) (controlplane.Addrs, func()) {
	t.Helper()
	cp := cptest.Start(t, controlplane.Config{DatabaseURL: testdeps.Postgres(t)})
	adminTokens.Store(cp.Addrs.Admin, cp.Token)
	return cp.Addrs, cp.Stop
}

// adminTokens maps a control plane's admin address to its admin token.
var adminTokens sync.Map

var idem atomic.Int64

func postRule(t *testing.T, admin string, rule map[string]any) {
	t.Helper()
	if code := postRuleStatus(t, admin, rule); code != http.StatusCreated {
		t.Fatalf("POST ratelimit-rules: %d", code)
	}
}

func postRuleStatus(t *testing.T, admin string, rule map[string]any) int {
	t.Helper()
	b, _ := json.Marshal(rule)
	req, _ := http.NewRequest(http.MethodPost, "http://"+admin+"/admin/v1/ratelimit-rules", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", fmt.Sprintf("rls-test-%d-%d", time.Now().UnixNano(), idem.Add(1)))
	if tok, ok := adminTokens.Load(admin); ok {
		req.Header.Set("Authorization", "Bearer "+tok.(string))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Logf("POST ratelimit-rules: %d %s", resp.StatusCode, body)
	}
	return resp.StatusCode
}

type nodeTypes struct {
	Items []struct {
		ID    string `json:"id"`
		Types map[string]struct {
			AckedVersion string `json:"ackedVersion"`
			Nack         *struct {
				Version string `json:"version"`
				Error   string `json:"error"`
			} `json:"nack"`
		} `json:"types"`
	} `json:"items"`
}

// The whole path: admin API → control plane → xDS → ratelimitsvc enforces;
// an unsupported rule is NACKed and the old rules stay; with the control
// plane gone a restarted ratelimitsvc boots from its persisted rules.
func TestControlPlaneRules(t *testing.T) {
	cp, stopCP := startControlPlane(t)
	state := t.TempDir()
	redis := testdeps.Redis(t)
	prefix := fmt.Sprintf("portico:test:%s:%d:", t.Name(), time.Now().UnixNano())
	cfg := ratelimitsvc.Config{XDSAddr: cp.XDS, NodeID: "rls-test-1", StateDir: state, RedisAddr: redis,
		RedisTimeout: time.Second, KeyPrefix: prefix}
	in := start(t, cfg)
	// Ready once the first (empty) rule set arrives; the rule comes later,
	// on the live stream.
	eventually.True(t, 30*time.Second, "/readyz with no rules yet", func() bool {
		return getJSON(t, "http://"+in.addrs.HTTP+"/readyz", nil) == http.StatusOK
	})
	postRule(t, cp.Admin, map[string]any{"name": "per-consumer", "domain": "portico",
		"descriptors": []any{map[string]any{"key": "consumer"}}, "limit": 2, "window": "1h", "burst": 1})
	eventually.True(t, 30*time.Second, "the rule over xDS", func() bool { return len(in.config(t).Rules) == 1 })
	if got := codes(t, in, 4, "portico", "consumer", "acme"); got != "OK OK OK OVER_LIMIT" {
		t.Fatalf("limit 2 + burst 1: %s", got)
	}
	// A replica on the standard RateLimitConfig gets the same rule in
	// envoyproxy/ratelimit's terms: 2 per hour, fixed window, no burst.
	std := start(t, ratelimitsvc.Config{XDSAddr: cp.XDS, XDSType: source.ConfigType, NodeID: "rls-test-std", StateDir: t.TempDir()})
	eventually.True(t, 30*time.Second, "the RateLimitConfig over xDS", func() bool {
		c := std.config(t)
		return len(c.Rules) == 1 && c.Rules[0].ID == "xds-config:portico:consumer"
	})
	if got := codes(t, std, 3, "portico", "consumer", "acme"); got != "OK OK OVER_LIMIT" {
		t.Fatalf("RateLimitConfig replica: %s", got)
	}
	std.stop()
	v1 := in.config(t).Versions["xds"]

	// The control plane refuses what ratelimitsvc would NACK (a burst on a
	// SLIDING_WINDOW rule) instead of shipping a version every replica
	// rejects; nothing changes. The NACK path itself is tested in source/
	// against a scripted ADS server.
	if code := postRuleStatus(t, cp.Admin, map[string]any{"name": "sliding", "domain": "portico", "algorithm": "SLIDING_WINDOW",
		"descriptors": []any{map[string]any{"key": "path"}}, "limit": 2, "window": "1s", "burst": 1}); code != http.StatusUnprocessableEntity {
		t.Fatalf("SLIDING_WINDOW rule with burst: %d, want 422", code)
	}
	if c := in.config(t); c.Versions["xds"] != v1 || len(c.Rules) != 1 {
		t.Fatalf("rules changed after a refused rule: %+v", c)
	}
	if got := in.check(t, "portico", "consumer", "acme"); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("after the refused rule: %v", got)
	}

	// Control plane down: a new replica boots from the state dir and keeps
	// enforcing (same Redis buckets).
	in.stop()
	stopCP()
	again := start(t, cfg)
	if c := again.config(t); c.Versions["xds"] != v1 || len(c.Rules) != 1 {
		t.Fatalf("booted without the persisted rules: %+v", c)
	}
	if code := getJSON(t, "http://"+again.addrs.HTTP+"/readyz", nil); code != http.StatusOK {
		t.Fatalf("/readyz %d after boot from disk", code)
	}
	if got := again.check(t, "portico", "consumer", "acme"); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("after restart: %v", got)
	}
	if got := again.check(t, "portico", "consumer", "other"); got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("other consumer after restart: %v", got)
	}

	// Down for longer than XDSStaleAfter: /readyz says the rules are stale
	// and why, and the limits keep being enforced from them.
	again.stop()
	staleCfg := cfg
	staleCfg.XDSStaleAfter = 300 * time.Millisecond
	stale := start(t, staleCfg)
	var failed struct{ Failed map[string]string }
	eventually.True(t, 10*time.Second, "/readyz to report stale rules", func() bool {
		return getJSON(t, "http://"+stale.addrs.HTTP+"/readyz", &failed) == http.StatusServiceUnavailable
	})
	if why := failed.Failed["xds-rules-fresh"]; !strings.HasPrefix(why, "policy stale since ") || !strings.Contains(why, "Unavailable") {
		t.Fatalf("/readyz failures %v", failed.Failed)
	}
	if got := stale.check(t, "portico", "consumer", "acme"); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("with stale rules: %v", got)
	}
}

// 50 goroutines on 4 replicas sharing Redis hammer one key: no overshoot
// beyond limit + burst (plus what refills while the test runs).
func TestHammerFourInstances(t *testing.T) {
	cp, _ := startControlPlane(t)
	const limit, burst = 100, 50
	postRule(t, cp.Admin, map[string]any{"name": "hot", "domain": "portico",
		"descriptors": []any{map[string]any{"key": "consumer"}}, "limit": limit, "window": "1h", "burst": burst})
	redis := testdeps.Redis(t)
	prefix := fmt.Sprintf("portico:test:%s:%d:", t.Name(), time.Now().UnixNano())
	var ins []*instance
	for i := range 4 {
		in := start(t, ratelimitsvc.Config{XDSAddr: cp.XDS, NodeID: fmt.Sprintf("hammer-%d", i), StateDir: t.TempDir(),
			RedisAddr: redis, RedisTimeout: 2 * time.Second, KeyPrefix: prefix})
		eventually.True(t, 30*time.Second, "the rule over xDS", func() bool { return len(in.config(t).Rules) == 1 })
		ins = append(ins, in)
	}
	began := time.Now()
	var admitted, denied, failed atomic.Int64
	done := make(chan struct{})
	for g := range 50 {
		go func() {
			defer func() { done <- struct{}{} }()
			in := ins[g%len(ins)]
			for range 20 {
				switch code, err := in.try("portico", "consumer", "hot"); {
				case err != nil:
					failed.Add(1)
				case code == rlsv3.RateLimitResponse_OK:
					admitted.Add(1)
				default:
					denied.Add(1)
				}
			}
		}()
	}
	for range 50 {
		<-done
	}
	if f := failed.Load(); f > 0 {
		t.Fatalf("%d calls failed", f)
	}
	// One token refills every 36s (100 per hour).
	refill := int64(time.Since(began) / (36 * time.Second))
	t.Logf("admitted %d, denied %d of 1000 in %v", admitted.Load(), denied.Load(), time.Since(began))
	if a := admitted.Load(); a < limit+burst || a > limit+burst+refill {
		t.Fatalf("admitted %d, want %d (+%d refilled)", a, limit+burst, refill)
	}
}

// Replicas sharing a Redis count each other (the default, Replicas 0), so
// degraded mode splits limits by the live count; one leaving is seen.
func TestReplicasCountThemselves(t *testing.T) {
	redis := testdeps.Redis(t)
	prefix := "portico:test:replicas:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	var ins []*instance
	for i := range 3 {
		ins = append(ins, start(t, ratelimitsvc.Config{RedisAddr: redis, KeyPrefix: prefix, NodeID: "rls-count-" + strconv.Itoa(i)}))
	}
	const three, two = "portico_ratelimitsvc_replicas 3\n", "portico_ratelimitsvc_replicas 2\n"
	eventually.True(t, 20*time.Second, "every replica counting 3", func() bool {
		for _, in := range ins {
			if !strings.Contains(in.metrics(t), three) {
				return false
			}
		}
		return true
	})
	ins[2].stop()
	eventually.True(t, 20*time.Second, "the others counting 2", func() bool {
		return strings.Contains(ins[0].metrics(t), two) && strings.Contains(ins[1].metrics(t), two)
	})
}
