package e2e_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portico-io/portico/controlplane"
	"github.com/portico-io/portico/controlplane/compile"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/internal/tlstest"
	"github.com/portico-io/portico/internal/xdstest"
)

// upstream is a test HTTP server that counts requests and remembers the
// last request's headers. status is what it answers; slow paths wait.
type upstream struct {
	*httptest.Server
	hits     atomic.Int64
	inflight atomic.Int64 // requests inside the handler
	status   int
	mu       sync.Mutex
	last     http.Header
}

func newUpstream(t *testing.T, status int) *upstream {
	u := &upstream{status: status}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		u.inflight.Add(1)
		defer u.inflight.Add(-1)
		u.mu.Lock()
		u.last = r.Header.Clone()
		u.mu.Unlock()
		if strings.HasSuffix(r.URL.Path, "/slow") {
			time.Sleep(time.Second)
		}
		w.WriteHeader(u.status)
		fmt.Fprint(w, "upstream")
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) port() int { return u.Listener.Addr().(*net.TCPAddr).Port }

func (u *upstream) header(name string) string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.last.Get(name)
}

// startEnvoy runs envoy/bootstrap.yaml against the control plane at xdsAddr
// with free admin and stats ports, until the test ends. Envoy reaches the
// control plane over mTLS as a gateway of p: the bootstrap's SDS files are
// copied with make run's .run/pki replaced by p's directory.
func startEnvoy(t *testing.T, bin, xdsAddr string, p *tlstest.PKI) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "envoy", "bootstrap.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(p.Dir, "gateway.crt")); err != nil {
		p.Files(t, identity.Gateway, "gateway")
	}
	dir := t.TempDir()
	boot := string(raw)
	for _, sds := range []string{"gateway-cert.yaml", "platform-ca.yaml"} {
		b, err := os.ReadFile(filepath.Join("..", "envoy", "sds", sds))
		if err != nil {
			t.Fatal(err)
		}
		copyPath := filepath.Join(dir, sds)
		if err := os.WriteFile(copyPath, []byte(strings.ReplaceAll(string(b), ".run/pki", p.Dir)), 0o644); err != nil {
			t.Fatal(err)
		}
		boot = strings.ReplaceAll(boot, "envoy/sds/"+sds, copyPath)
	}
	_, xdsPort, _ := net.SplitHostPort(xdsAddr)
	adminPort, statsPort := freePort(t), freePort(t)
	boot = strings.ReplaceAll(boot, "port_value: 18000", "port_value: "+xdsPort)
	boot = strings.ReplaceAll(boot, "port_value: 9901", fmt.Sprintf("port_value: %d", adminPort))
	boot = strings.ReplaceAll(boot, "port_value: 19001", fmt.Sprintf("port_value: %d", statsPort))
	path := filepath.Join(dir, "bootstrap.yaml")
	if err := os.WriteFile(path, []byte(boot), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "-c", path, "--base-id", fmt.Sprint(adminPort), "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
}

type reply struct {
	code int
	hdr  http.Header
}

func get(t *testing.T, url string, hdr ...string) reply {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return reply{resp.StatusCode, resp.Header}
}

// The whole stack behind a live Envoy: admin API → Postgres → xDS → Envoy,
// extauthz and ratelimitsvc, requests through Envoy's listener. 404 for
// unknown routes, 401 without credentials, 200 with an API key and the
// consumer header seen upstream, 429 with Retry-After and X-RateLimit-*
// after the limit, retries and outlier ejection against a failing endpoint,
// client retry headers ignored, and a config change that drops nothing in
// flight.
func TestLiveEnvoyStack(t *testing.T) {
	envoy := envoyBinary(t)
	dbURL := testdeps.Postgres(t)
	// One replica serves extauthz and ratelimitsvc; a second one, told where
	// they listen, serves Envoy (both on one database, same versions).
	// Every link is mutual TLS, as make run's: xDS for all, and Envoy's calls
	// to extauthz and ratelimitsvc with the gateway certificate.
	gwPKI := tlstest.New(t)
	cp := startControlPlane(t, dbURL, controlplane.Config{TLS: gwPKI.Files(t, identity.ControlPlane, "controlplane")})
	authAddr := startExtauthzTLS(t, cp.XDS, "127.0.0.1:0", "e2e-live-extauthz", gwPKI.Files(t, identity.ExtAuthz, "extauthz")).GRPC
	rlAddr := startRateLimitTLS(t, cp.XDS, "127.0.0.1:0", "e2e-live-ratelimit", gwPKI.Files(t, identity.RateLimit, "ratelimit")).GRPC
	listenerPort := freePort(t)
	gwCert := gwPKI.Files(t, identity.Gateway, "gateway")
	gw := startControlPlane(t, dbURL, controlplane.Config{TLS: gwPKI.Files(t, identity.ControlPlane, "controlplane-gw"),
		Compile: compile.Options{ListenerAddress: "127.0.0.1",
			ListenerPort: uint32(listenerPort), ExtAuthzAddress: authAddr, RateLimitAddress: rlAddr,
			GatewayIdentity: &compile.GatewayIdentity{CertFile: gwCert.CertFile, KeyFile: gwCert.KeyFile, CAFile: gwCert.CAFile,
				TrustDomain: identity.DefaultTrustDomain}}})
	api := newAdminAPITLS(t, cp.Admin, gwPKI.ClientTLS(nil))

	good, bad := newUpstream(t, http.StatusOK), newUpstream(t, http.StatusServiceUnavailable)
	ep := func(u *upstream) map[string]any { return map[string]any{"address": "127.0.0.1", "port": u.port()} }
	api.create("clusters", map[string]any{"name": "good", "endpoints": []any{ep(good)}}, nil)
	api.create("clusters", map[string]any{"name": "mixed", "endpoints": []any{ep(good), ep(bad)}}, nil)
	api.create("clusters", map[string]any{"name": "bad", "endpoints": []any{ep(bad)}}, nil)
	api.create("consumers", map[string]any{"name": "acme", "tenant": "acme"}, nil)
	var key struct {
		Key string `json:"key"`
	}
	api.create("consumers/acme/keys", map[string]any{}, &key)
	api.create("ratelimit-rules", map[string]any{"name": "per-consumer", "domain": "portico",
		"descriptors": []any{map[string]any{"key": "consumer"}}, "limit": 3, "window": "1h"}, nil)
	api.create("routes", map[string]any{"name": "open", "match": map[string]any{"pathPrefix": "/open"}, "cluster": "good",
		"timeout": "4s", "auth": map[string]any{"mode": "none"}}, nil)
	api.create("routes", map[string]any{"name": "keyed", "match": map[string]any{"pathPrefix": "/keyed"}, "cluster": "good",
		"auth":       map[string]any{"mode": "apikey"},
		"rateLimits": []any{map[string]any{"descriptors": []any{map[string]any{"key": "consumer", "fromHeader": "x-portico-consumer"}}}}}, nil)
	api.create("routes", map[string]any{"name": "mixed", "match": map[string]any{"pathPrefix": "/mixed"}, "cluster": "mixed",
		"auth": map[string]any{"mode": "none"}, "retries": map[string]any{"retryOn": []string{"5xx"}, "numRetries": 2}}, nil)
	v := api.create("routes", map[string]any{"name": "noretry", "match": map[string]any{"pathPrefix": "/noretry"}, "cluster": "bad",
		"auth": map[string]any{"mode": "none"}, "retries": map[string]any{"disabled": true}}, nil)
	api.waitAcked("e2e-live-extauthz", "portico-extauthz", v, extauthzTypes...)
	api.waitAcked("e2e-live-ratelimit", "portico-ratelimit", v, ratelimitTypes...)

	startEnvoy(t, envoy, gw.XDS, gwPKI)
	base := fmt.Sprintf("http://127.0.0.1:%d", listenerPort)
	xdstest.Eventually(t, 30*time.Second, "Envoy to serve /open", func() bool {
		resp, err := http.Get(base + "/open")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	if r := get(t, base+"/nope"); r.code != http.StatusNotFound {
		t.Errorf("unknown route: %d, want 404", r.code)
	}
	// The upstream learns the route's deadline (x-envoy-expected-rq-timeout-ms),
	// so it can drop work nobody waits for.
	if got := good.header("x-envoy-expected-rq-timeout-ms"); got == "" {
		t.Errorf("upstream did not get x-envoy-expected-rq-timeout-ms")
	}
	if r := get(t, base+"/keyed"); r.code != http.StatusUnauthorized {
		t.Errorf("no credentials: %d, want 401", r.code)
	}
	for i := range 3 {
		r := get(t, base+"/keyed", "x-api-key", key.Key, "x-portico-consumer", "spoofed")
		if r.code != http.StatusOK {
			t.Fatalf("keyed request %d: %d, want 200", i, r.code)
		}
		if got := good.header("x-portico-consumer"); got != "acme" {
			t.Fatalf("upstream saw x-portico-consumer %q, want acme (set by extauthz, never by the client)", got)
		}
	}
	r := get(t, base+"/keyed", "x-api-key", key.Key)
	if r.code != http.StatusTooManyRequests {
		t.Fatalf("4th keyed request: %d, want 429", r.code)
	}
	for _, h := range []string{"Retry-After", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"} {
		if n := len(r.hdr.Values(h)); n != 1 {
			t.Errorf("429: header %s %d times (%v), want once", h, n, r.hdr.Values(h))
		}
	}

	// Retries hide the failing endpoint; outlier detection (the default:
	// 5 consecutive 5xx) then ejects it, and it stops getting traffic.
	for i := range 20 {
		if r := get(t, base+"/mixed"); r.code != http.StatusOK {
			t.Fatalf("mixed request %d: %d, want 200 (retried on the good endpoint)", i, r.code)
		}
	}
	ejected := bad.hits.Load()
	if ejected < 5 {
		t.Fatalf("the failing endpoint got %d requests before ejection, want at least 5", ejected)
	}
	for range 20 {
		get(t, base+"/mixed")
	}
	if got := bad.hits.Load(); got != ejected {
		t.Errorf("the failing endpoint got %d more requests after its ejection", got-ejected)
	}

	// Clients cannot ask Envoy for retries the route does not allow.
	before := bad.hits.Load()
	if r := get(t, base+"/noretry", "x-envoy-max-retries", "5", "x-envoy-retry-on", "5xx"); r.code != http.StatusServiceUnavailable {
		t.Fatalf("noretry: %d, want 503", r.code)
	}
	if n := bad.hits.Load() - before; n != 1 {
		t.Errorf("a client's x-envoy-max-retries made Envoy try %d times, want 1", n)
	}

	// A config change while requests are in flight drops none of them.
	var wg sync.WaitGroup
	codes := make(chan int, 16)
	for range cap(codes) {
		wg.Go(func() {
			resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(base + "/open/slow")
			if err != nil {
				codes <- 0
				return
			}
			resp.Body.Close()
			codes <- resp.StatusCode
		})
	}
	xdstest.Eventually(t, 10*time.Second, "the slow requests to reach the upstream", func() bool {
		return good.inflight.Load() == int64(cap(codes))
	})
	api.patch("routes/open", map[string]any{"timeout": "5s"})
	api.create("routes", map[string]any{"name": "later", "match": map[string]any{"pathPrefix": "/later"}, "cluster": "good",
		"auth": map[string]any{"mode": "none"}}, nil)
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != http.StatusOK {
			t.Errorf("an in-flight request ended with %d across a config change, want 200", c)
		}
	}
	xdstest.Eventually(t, 30*time.Second, "the new route", func() bool { return get(t, base+"/later").code == http.StatusOK })
}
