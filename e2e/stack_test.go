package e2e_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/portico-io/portico/controlplane"
	"github.com/portico-io/portico/controlplane/cptest"
	"github.com/portico-io/portico/extauthz"
	"github.com/portico-io/portico/extauthz/authz"
	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/internal/tlsfiles"
	"github.com/portico-io/portico/internal/xdstest"
	"github.com/portico-io/portico/ratelimitsvc"
)

// convergeTimeout bounds every wait for a pushed version to be ACKed or
// applied; on an idle machine it takes milliseconds.
const convergeTimeout = 20 * time.Second

// testLogger logs to stderr at debug level when PORTICO_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("PORTICO_TEST_LOG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// runInProcess runs one component's Run in a goroutine until the test ends.
// run must send the component's addresses on ready once it listens; the
// cleanup cancels its context and fails the test if Run returns an error.
func runInProcess[A any](t testing.TB, name string, run func(ctx context.Context, ready chan<- A) error) A {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan A, 1)
	done := make(chan error, 1)
	go func() { done <- run(ctx, ready) }()
	var addrs A
	select {
	case addrs = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("%s exited before it was ready: %v", name, err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatalf("%s not ready after 30s", name)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: %v", name, err)
		}
	})
	return addrs
}

// startControlPlane runs a control-plane replica on the database at dbURL
// (from testdeps.Postgres; several replicas may share one). The admin
// clients below present its bootstrap admin token.
func startControlPlane(t testing.TB, dbURL string, cfg controlplane.Config) controlplane.Addrs {
	t.Helper()
	cfg.DatabaseURL, cfg.Logger = dbURL, testLogger()
	cp := cptest.Start(t, cfg)
	adminTokens.Store(cp.Addrs.Admin, cp.Token)
	return cp.Addrs
}

// adminTokens maps a running control plane's admin address to its
// bootstrap admin token.
var adminTokens sync.Map

// authorize adds the bearer token of the control plane req is sent to.
func authorize(req *http.Request) {
	if tok, ok := adminTokens.Load(req.URL.Host); ok {
		req.Header.Set("Authorization", "Bearer "+tok.(string))
	}
}

// startExtauthz runs extauthz as xDS node nodeID of the plaintext control
// plane at xdsAddr.
func startExtauthz(t testing.TB, xdsAddr, grpcAddr, nodeID string) extauthz.Addrs {
	return startExtauthzTLS(t, xdsAddr, grpcAddr, nodeID, tlsfiles.Config{})
}

// startExtauthzTLS is startExtauthz presenting the certificate files tc to
// the control plane (plaintext when tc is empty).
func startExtauthzTLS(t testing.TB, xdsAddr, grpcAddr, nodeID string, tc tlsfiles.Config) extauthz.Addrs {
	t.Helper()
	cfg := extauthz.Config{GRPCAddr: grpcAddr, HTTPAddr: "127.0.0.1:0", XDSAddr: xdsAddr, NodeID: nodeID, StateDir: t.TempDir(),
		XDSMinBackoff: 20 * time.Millisecond, XDSMaxBackoff: 200 * time.Millisecond, Logger: testLogger(),
		TLS: tc, InsecurePlaintext: !tc.IsSet()}
	return runInProcess(t, "extauthz", func(ctx context.Context, ready chan<- extauthz.Addrs) error {
		cfg.Ready = ready
		return extauthz.Run(ctx, cfg)
	})
}

// startRateLimit runs ratelimitsvc on the shared Redis, under a key prefix
// of this test's own, as xDS node nodeID of the plaintext control plane at
// xdsAddr. The Redis timeout is generous: a timeout would put it in
// degraded mode (local buckets), and the tests assert exact remaining
// counts.
func startRateLimit(t testing.TB, xdsAddr, grpcAddr, nodeID string) ratelimitsvc.Addrs {
	return startRateLimitTLS(t, xdsAddr, grpcAddr, nodeID, tlsfiles.Config{})
}

// startRateLimitTLS is startRateLimit presenting the certificate files tc.
func startRateLimitTLS(t testing.TB, xdsAddr, grpcAddr, nodeID string, tc tlsfiles.Config) ratelimitsvc.Addrs {
	t.Helper()
	cfg := ratelimitsvc.Config{GRPCAddr: grpcAddr, HTTPAddr: "127.0.0.1:0", XDSAddr: xdsAddr, NodeID: nodeID, StateDir: t.TempDir(),
		RedisAddr: testdeps.Redis(t), RedisTimeout: 5 * time.Second, Logger: testLogger(),
		TLS: tc, InsecurePlaintext: !tc.IsSet(),
		KeyPrefix: fmt.Sprintf("portico:e2e:%s:%d:", t.Name(), time.Now().UnixNano())}
	return runInProcess(t, "ratelimitsvc", func(ctx context.Context, ready chan<- ratelimitsvc.Addrs) error {
		cfg.Ready = ready
		return ratelimitsvc.Run(ctx, cfg)
	})
}

// adminAPI is an operator's client of the control plane's admin API.
type adminAPI struct {
	t      testing.TB
	addr   string // host:port
	scheme string
	client *http.Client
	seq    atomic.Int64
}

// newAdminAPI calls a plaintext control plane's admin API.
func newAdminAPI(t testing.TB, addr string) *adminAPI {
	return &adminAPI{t: t, addr: addr, scheme: "http", client: http.DefaultClient}
}

// newAdminAPITLS calls the admin API of a control plane that has
// certificate files (its admin port is TLS then) with client configuration c.
func newAdminAPITLS(t testing.TB, addr string, c *tls.Config) *adminAPI {
	return &adminAPI{t: t, addr: addr, scheme: "https", client: &http.Client{Transport: &http.Transport{TLSClientConfig: c}}}
}

// do sends one request to /admin/v1/<path> and decodes a JSON answer into
// out (when non-nil). POSTs carry a fresh Idempotency-Key.
func (a *adminAPI) do(method, path string, body any, hdr map[string]string, out any) (int, http.Header) {
	a.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			a.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, a.scheme+"://"+a.addr+"/admin/v1/"+path, rd)
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Portico-Author", "e2e")
	if method == http.MethodPost {
		req.Header.Set("Idempotency-Key", fmt.Sprintf("e2e-%s-%d", a.t.Name(), a.seq.Add(1)))
	}
	authorize(req)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := a.client.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			a.t.Fatalf("%s %s: %d %s: %v", method, path, resp.StatusCode, raw, err)
		}
	}
	if resp.StatusCode/100 != 2 && out == nil {
		a.t.Logf("%s %s: %d %s", method, path, resp.StatusCode, raw)
	}
	return resp.StatusCode, resp.Header
}

// version reads the config version an accepted change created.
func (a *adminAPI) version(h http.Header, what string) int64 {
	a.t.Helper()
	v, err := strconv.ParseInt(h.Get("X-Portico-Config-Version"), 10, 64)
	if err != nil || v <= 0 {
		a.t.Fatalf("%s: no config version in the answer (X-Portico-Config-Version %q)", what, h.Get("X-Portico-Config-Version"))
	}
	return v
}

// create POSTs body to path, wants 201, decodes the answer into out (when
// non-nil) and returns the new config version.
func (a *adminAPI) create(path string, body, out any) int64 {
	a.t.Helper()
	var raw json.RawMessage
	code, h := a.do(http.MethodPost, path, body, nil, &raw)
	if code != http.StatusCreated {
		a.t.Fatalf("POST %s: %d %s", path, code, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			a.t.Fatal(err)
		}
	}
	return a.version(h, "POST "+path)
}

// etag GETs path and returns its ETag.
func (a *adminAPI) etag(path string) string {
	a.t.Helper()
	code, h := a.do(http.MethodGet, path, nil, nil, nil)
	if code != http.StatusOK || h.Get("ETag") == "" {
		a.t.Fatalf("GET %s: %d, ETag %q", path, code, h.Get("ETag"))
	}
	return h.Get("ETag")
}

// patch applies a merge patch under If-Match and returns the new version.
func (a *adminAPI) patch(path string, patch any) int64 {
	a.t.Helper()
	var raw json.RawMessage
	code, h := a.do(http.MethodPatch, path, patch, map[string]string{"If-Match": a.etag(path)}, &raw)
	if code != http.StatusOK {
		a.t.Fatalf("PATCH %s: %d %s", path, code, raw)
	}
	return a.version(h, "PATCH "+path)
}

// remove DELETEs path under If-Match and returns the new version.
func (a *adminAPI) remove(path string) int64 {
	a.t.Helper()
	code, h := a.do(http.MethodDelete, path, nil, map[string]string{"If-Match": a.etag(path)}, nil)
	if code != http.StatusNoContent && code != http.StatusOK {
		a.t.Fatalf("DELETE %s: %d", path, code)
	}
	return a.version(h, "DELETE "+path)
}

type nack struct {
	Version string `json:"version"`
	Error   string `json:"error"`
}

type typeState struct {
	AckedVersion string `json:"ackedVersion"`
	Nack         *nack  `json:"nack"`
}

type nodeView struct {
	ID       string               `json:"id"`
	Cluster  string               `json:"cluster"`
	Identity string               `json:"identity"`
	Group    string               `json:"group"`
	Types    map[string]typeState `json:"types"`
}

// seedKeyed creates cluster echo, consumer acme with an API key, and route
// keyed (/keyed, auth apikey); it returns the key and the route's version.
func (a *adminAPI) seedKeyed() (key string, v int64) {
	a.t.Helper()
	a.create("clusters", map[string]any{"name": "echo", "endpoints": []any{map[string]any{"address": "127.0.0.1", "port": 18900}}}, nil)
	a.create("consumers", map[string]any{"name": "acme", "tenant": "acme"}, nil)
	var k struct {
		Key string `json:"key"`
	}
	a.create("consumers/acme/keys", map[string]any{}, &k)
	v = a.create("routes", map[string]any{"name": "keyed", "match": map[string]any{"pathPrefix": "/keyed"}, "cluster": "echo",
		"auth": map[string]any{"mode": "apikey"}}, nil)
	return k.Key, v
}

// keyedCheck is the CheckRequest Envoy sends for GET /keyed with key.
func keyedCheck(key string) *authv3.CheckRequest {
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Method: http.MethodGet, Path: "/keyed", Host: "example.test", Headers: map[string]string{"x-api-key": key}}},
		ContextExtensions: map[string]string{authz.CtxMode: "apikey", authz.CtxRoute: "keyed"},
	}}
}

// nodes is GET /admin/v1/nodes by node id.
func (a *adminAPI) nodes() map[string]nodeView {
	a.t.Helper()
	var list struct {
		Items []nodeView `json:"items"`
	}
	if code, _ := a.do(http.MethodGet, "nodes", nil, nil, &list); code != http.StatusOK {
		a.t.Fatalf("GET nodes: %d", code)
	}
	out := map[string]nodeView{}
	for _, n := range list.Items {
		out[n.ID] = n
	}
	return out
}

// waitAcked waits until node id, of node cluster cluster, has ACKed
// version v for every type in types.
func (a *adminAPI) waitAcked(id, cluster string, v int64, types ...string) nodeView {
	a.t.Helper()
	return a.waitAckedWithin(convergeTimeout, id, cluster, v, types...)
}

// waitAckedWithin is waitAcked with its own deadline (benchmarks loading
// a million keys).
func (a *adminAPI) waitAckedWithin(timeout time.Duration, id, cluster string, v int64, types ...string) nodeView {
	a.t.Helper()
	want := strconv.FormatInt(v, 10)
	var n nodeView
	xdstest.Eventually(a.t, timeout, fmt.Sprintf("node %s to ACK version %s of %v", id, want, types), func() bool {
		n = a.nodes()[id]
		for _, typ := range types {
			if n.Types[typ].AckedVersion != want {
				return false
			}
		}
		return true
	})
	if n.Cluster != cluster {
		a.t.Fatalf("node %s listed with cluster %q, want %q", id, n.Cluster, cluster)
	}
	return n
}

// metric reads one sample of the control plane's /metrics (0 when absent).
func (a *adminAPI) metric(series string) float64 {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, a.scheme+"://"+a.addr+"/metrics", nil)
	resp, err := a.client.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	for _, line := range bytes.Split(raw, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, []byte(series+" ")); ok {
			f, err := strconv.ParseFloat(string(bytes.TrimSpace(rest)), 64)
			if err != nil {
				a.t.Fatalf("metric %s: %q", series, rest)
			}
			return f
		}
	}
	return 0
}

// gatewayFetch subscribes over one ADS stream (state of the world) as an
// Envoy gateway — node cluster portico-gateway, user agent envoy — to the
// given types (resource names per type; nil = wildcard), ACKs what arrives
// and returns every type's resources by name once all of them are at
// version v.
func gatewayFetch(t *testing.T, xdsAddr, nodeID string, v int64, subs map[string][]string) map[string]map[string]proto.Message {
	t.Helper()
	conn, err := grpc.NewClient(xdsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), convergeTimeout)
	defer cancel()
	s, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node := &corev3.Node{Id: nodeID, Cluster: "portico-gateway", UserAgentName: "envoy"}
	for typ, names := range subs {
		if err := s.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: typ, ResourceNames: names}); err != nil {
			t.Fatal(err)
		}
	}
	want := strconv.FormatInt(v, 10)
	out := map[string]map[string]proto.Message{}
	for len(out) < len(subs) {
		r, err := s.Recv()
		if err != nil {
			t.Fatalf("gateway ADS stream, waiting for version %s: %v", want, err)
		}
		if err := s.Send(&discovery.DiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResourceNames: subs[r.GetTypeUrl()],
			VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}); err != nil {
			t.Fatal(err)
		}
		if r.GetVersionInfo() != want {
			continue // an older version still being published
		}
		res := map[string]proto.Message{}
		for _, a := range r.GetResources() {
			m, err := a.UnmarshalNew()
			if err != nil {
				t.Fatal(err)
			}
			res[cache.GetResourceName(m)] = m
		}
		out[r.GetTypeUrl()] = res
	}
	return out
}
