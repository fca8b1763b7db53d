package extauthz_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	jose "github.com/go-jose/go-jose/v4"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/portico-io/portico/controlplane"
	"github.com/portico-io/portico/controlplane/compile"
	"github.com/portico-io/portico/controlplane/cptest"
	"github.com/portico-io/portico/extauthz"
	"github.com/portico-io/portico/extauthz/policy"
	ev "github.com/portico-io/portico/internal/eventually"
	"github.com/portico-io/portico/internal/testdeps"
)

// Context-extension keys and type URLs are shared through
// internal/xdscontract; shard names are computed on both sides, so they are
// checked here: extauthz refuses a key in a shard other than the compiler's.
func TestShardNamesMatchCompiler(t *testing.T) {
	for _, secret := range []string{"a", "b", "c", "d"} {
		sum := sha256.Sum256([]byte(secret))
		if got, want := policy.ShardName(sum[0]), compile.ShardName(fmt.Sprintf("%x", sum)); got != want {
			t.Fatalf("shard name %q, the compiler's %q", got, want)
		}
	}
}

func testLogger() *slog.Logger {
	if os.Getenv("PORTICO_TEST_LOG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// runControlPlane runs the real control plane on dbURL; its bootstrap
// admin token authorizes the admin calls below.
func runControlPlane(t *testing.T, dbURL string) (controlplane.Addrs, func()) {
	t.Helper()
	cp := cptest.Start(t, controlplane.Config{DatabaseURL: dbURL, Logger: testLogger()})
	adminToken = cp.Token
	return cp.Addrs, cp.Stop
}

// adminToken is the running control plane's admin token.
var adminToken string

type extauthzProc struct {
	addrs  extauthz.Addrs
	client authv3.AuthorizationClient
	stop   func()
}

func runExtauthz(t *testing.T, xdsAddr, stateDir string) *extauthzProc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan extauthz.Addrs, 1)
	done := make(chan error, 1)
	go func() {
		done <- extauthz.Run(ctx, extauthz.Config{
			GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", XDSAddr: xdsAddr, NodeID: "extauthz-test", StateDir: stateDir,
			XDSMinBackoff: 20 * time.Millisecond, XDSMaxBackoff: 200 * time.Millisecond, Ready: ready, Logger: testLogger(),
			InsecurePlaintext: true,
		})
	}()
	p := &extauthzProc{}
	select {
	case p.addrs = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("extauthz exited: %v", err)
	}
	conn, err := grpc.NewClient(p.addrs.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	p.client = authv3.NewAuthorizationClient(conn)
	var stopped atomic.Bool
	p.stop = func() {
		if !stopped.Swap(true) {
			conn.Close()
			cancel()
			if err := <-done; err != nil {
				t.Errorf("extauthz: %v", err)
			}
		}
	}
	t.Cleanup(p.stop)
	return p
}

var idem atomic.Int64

func admin(t *testing.T, method, url string, body any, hdr map[string]string, out any) (int, http.Header) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, url, rd)
	req.Header.Set("Content-Type", "application/json")
	if method == http.MethodPost {
		req.Header.Set("Idempotency-Key", fmt.Sprintf("extauthz-test-%d", idem.Add(1)))
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: %d %s", method, url, resp.StatusCode, raw)
		}
	}
	return resp.StatusCode, resp.Header
}

func mustCreate(t *testing.T, base, path string, body any, out any) {
	t.Helper()
	var raw map[string]any
	if out == nil {
		out = &raw
	}
	if code, _ := admin(t, http.MethodPost, base+path, body, nil, out); code != http.StatusCreated {
		t.Fatalf("POST %s: %d %v", path, code, out)
	}
}

// envoyCheck builds the CheckRequest Envoy sends for a route compiled with
// auth {mode, provider, requiredScopes}.
func envoyCheck(mode, provider, scopes string, hdrs map[string]string) *authv3.CheckRequest {
	ext := map[string]string{compile.CtxRoute: "echo", compile.CtxMode: mode}
	if provider != "" {
		ext[compile.CtxProvider] = provider
	}
	if scopes != "" {
		ext[compile.CtxScopes] = scopes
	}
	h := map[string]string{":authority": "api.test", ":method": "GET", ":path": "/echo/x", ":scheme": "http",
		"user-agent": "curl/8", "x-forwarded-proto": "http", "x-request-id": "1f2e", "x-portico-consumer": "spoofed"}
	for k, v := range hdrs {
		h[k] = v
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source:      &authv3.AttributeContext_Peer{},
		Destination: &authv3.AttributeContext_Peer{},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Id: "1f2e", Method: "GET", Headers: h, Path: "/echo/x", Host: "api.test", Scheme: "http", Protocol: "HTTP/1.1",
		}},
		ContextExtensions: ext,
	}}
}

// eventually polls Check until pred holds or 30s pass.
func eventually(t *testing.T, p *extauthzProc, req *authv3.CheckRequest, what string, pred func(*authv3.CheckResponse) bool) *authv3.CheckResponse {
	t.Helper()
	var (
		last *authv3.CheckResponse
		err  error
	)
	if !ev.Within(30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var resp *authv3.CheckResponse
		if resp, err = p.client.Check(ctx, req); err == nil {
			last = resp
		}
		return err == nil && pred(resp)
	}) {
		t.Fatalf("%s: not reached in 30s; last %v (err %v)", what, last, err)
	}
	return last
}

func allowed(r *authv3.CheckResponse) bool {
	return r.GetOkResponse() != nil && r.GetStatus().GetCode() == 0
}

func denyCode(code string) func(*authv3.CheckResponse) bool {
	return func(r *authv3.CheckResponse) bool {
		return r.GetDeniedResponse() != nil && strings.Contains(r.GetDeniedResponse().GetBody(), `"code":"`+code+`"`)
	}
}

func headersOf(r *authv3.CheckResponse) map[string]string {
	out := map[string]string{}
	for _, h := range r.GetOkResponse().GetHeaders() {
		out[h.GetHeader().GetKey()] = h.GetHeader().GetValue()
	}
	return out
}

func signRS256(t *testing.T, key *rsa.PrivateKey, kid string, claims map[string]any) string {
	t.Helper()
	hb, _ := json.Marshal(map[string]any{"alg": "RS256", "kid": kid, "typ": "JWT"})
	cb, _ := json.Marshal(claims)
	input := base64.RawURLEncoding.EncodeToString(hb) + "." + base64.RawURLEncoding.EncodeToString(cb)
	d := sha256.Sum256([]byte(input))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, d[:])
	if err != nil {
		t.Fatal(err)
	}
	return input + "." + base64.RawURLEncoding.EncodeToString(sig)
}

func httpStatus(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestWithControlPlane runs the real control plane on a fresh database and
// extauthz against it: config made through the admin API reaches extauthz
// over xDS; revocations take effect after one push; a provider extauthz
// cannot use is NACKed with the old policy kept; and with the control plane
// gone a restarted extauthz boots from its persisted policy.
func TestWithControlPlane(t *testing.T) {
	dbURL := testdeps.Postgres(t)
	cp, stopCP := runControlPlane(t, dbURL)
	base := "http://" + cp.Admin + "/admin/v1"

	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	jwksSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"}}})
	}))
	defer jwksSrv.Close()

	stateDir := t.TempDir()
	ea := runExtauthz(t, cp.XDS, stateDir)

	// Ready once the (empty) initial policy arrives, before any config exists.
	deadline := time.Now().Add(30 * time.Second)
	for httpStatus(t, "http://"+ea.addrs.HTTP+"/readyz") != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("extauthz not ready with the control plane's initial snapshot")
		}
		tick := time.NewTimer(20 * time.Millisecond)
		<-tick.C
	}

	// The JWKS is plain http on loopback: the provider has to say so.
	mustCreate(t, base, "/jwt-providers", map[string]any{"name": "idp", "issuer": "https://idp.test", "audiences": []string{"portico"},
		"jwksUri": jwksSrv.URL, "allowInsecureLoopback": true, "algorithms": []string{"RS256"}}, nil)
	mustCreate(t, base, "/consumers", map[string]any{"name": "acme", "tenant": "acme", "tier": "pro"}, nil)
	var created struct{ ID, Key string }
	mustCreate(t, base, "/consumers/acme/keys", map[string]any{"scopes": []string{"echo:read"}}, &created)
	if created.Key == "" || created.ID == "" {
		t.Fatalf("key not returned: %+v", created)
	}

	// API key.
	keyReq := envoyCheck("apikey", "", "echo:read", map[string]string{"x-api-key": created.Key})
	resp := eventually(t, ea, keyReq, "API key allowed", allowed)
	want := map[string]string{"x-portico-consumer": "acme", "x-portico-tenant": "acme", "x-portico-tier": "pro", "x-portico-scopes": "echo:read"}
	if got := headersOf(resp); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("headers %v, want %v", got, want)
	}
	if r, _ := ea.client.Check(context.Background(), envoyCheck("apikey", "", "echo:write", map[string]string{"authorization": "ApiKey " + created.Key})); !denyCode("insufficient_scope")(r) {
		t.Fatalf("missing scope: %v", r)
	}

	// JWT.
	now := time.Now()
	claims := map[string]any{"iss": "https://idp.test", "aud": "portico", "sub": "alice", "tenant": "acme", "scope": "echo:read",
		"exp": now.Add(time.Hour).Unix(), "iat": now.Unix(), "jti": "laptop-token"}
	tok := signRS256(t, key, "k1", claims)
	jwtReq := envoyCheck("jwt", "idp", "echo:read", map[string]string{"authorization": "Bearer " + tok})
	resp = eventually(t, ea, jwtReq, "JWT allowed", allowed)
	if h := headersOf(resp); h["x-portico-consumer"] != "alice" || h["x-portico-tenant"] != "acme" {
		t.Fatalf("JWT headers %v", h)
	}

	// Revoke the API key and the token: denied after the push.
	keyURL := base + "/consumers/acme/keys/" + created.ID
	_, h := admin(t, http.MethodGet, keyURL, nil, nil, nil)
	if code, _ := admin(t, http.MethodDelete, keyURL, nil, map[string]string{"If-Match": h.Get("ETag")}, nil); code != http.StatusNoContent {
		t.Fatalf("DELETE key: %d", code)
	}
	mustCreate(t, base, "/revocations", map[string]any{"jti": "laptop-token", "expiresAt": now.Add(time.Hour).UTC().Format(time.RFC3339)}, nil)
	eventually(t, ea, keyReq, "revoked API key denied", denyCode("invalid_api_key"))
	eventually(t, ea, jwtReq, "revoked JWT denied", denyCode("token_revoked"))

	// NACK: an inline JWKS the control plane accepts (a non-empty key list)
	// but whose key extauthz cannot parse. The old providers stay in force.
	mustCreate(t, base, "/jwt-providers", map[string]any{"name": "broken", "issuer": "https://broken.test", "audiences": []string{"portico"},
		"inlineJwks": `{"keys":[{"kty":"bogus","kid":"x"}]}`, "algorithms": []string{"RS256"}}, nil)
	nackDeadline := time.Now().Add(30 * time.Second)
	for {
		var nodes struct {
			Items []struct {
				ID    string
				Types map[string]struct {
					AckedVersion string
					Nack         *struct{ Version, Error string }
				}
			}
		}
		admin(t, http.MethodGet, base+"/nodes", nil, nil, &nodes)
		var nackErr string
		for _, n := range nodes.Items {
			if n.ID == "extauthz-test" {
				if ts := n.Types[policy.JwtProviderType]; ts.Nack != nil {
					nackErr = ts.Nack.Error
				}
			}
		}
		if nackErr != "" {
			if !strings.Contains(nackErr, `"broken"`) || !strings.Contains(nackErr, "inline_jwks") {
				t.Fatalf("NACK message %q does not say what is wrong", nackErr)
			}
			break
		}
		if time.Now().After(nackDeadline) {
			t.Fatalf("no NACK recorded: %+v", nodes)
		}
		tm := time.NewTimer(20 * time.Millisecond)
		<-tm.C
	}
	other := signRS256(t, key, "k1", map[string]any{"iss": "https://idp.test", "aud": "portico", "sub": "bob", "scope": "echo:read",
		"exp": now.Add(time.Hour).Unix(), "jti": "other"})
	otherReq := envoyCheck("jwt", "idp", "echo:read", map[string]string{"authorization": "Bearer " + other})
	if r, _ := ea.client.Check(context.Background(), otherReq); !allowed(r) {
		t.Fatalf("after the NACK the old policy should still decide: %v", r)
	}
	if _, err := os.Stat(stateDir + "/" + policy.StateFile); err != nil {
		t.Fatalf("policy not persisted: %v", err)
	}

	// Control plane gone: a restarted extauthz boots from disk and decides.
	ea.stop()
	stopCP()
	ea2 := runExtauthz(t, cp.XDS, stateDir)
	if code := httpStatus(t, "http://"+ea2.addrs.HTTP+"/readyz"); code != http.StatusOK {
		t.Fatalf("readyz after booting from disk: %d", code)
	}
	hc := healthpb.NewHealthClient(mustConn(t, ea2.addrs.GRPC))
	if st, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "envoy.service.auth.v3.Authorization"}); err != nil || st.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("grpc health: %v %v", st, err)
	}
	if r, _ := ea2.client.Check(context.Background(), otherReq); !allowed(r) {
		t.Fatalf("JWT after restart from disk: %v", r)
	}
	if r, _ := ea2.client.Check(context.Background(), jwtReq); !denyCode("token_revoked")(r) {
		t.Fatalf("revoked JWT after restart from disk: %v", r)
	}
	if r, _ := ea2.client.Check(context.Background(), keyReq); !denyCode("invalid_api_key")(r) {
		t.Fatalf("revoked API key after restart from disk: %v", r)
	}
}

func mustConn(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
