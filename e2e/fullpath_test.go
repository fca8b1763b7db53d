package e2e_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	jose "github.com/go-jose/go-jose/v4"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/portico-io/portico/controlplane"
	"github.com/portico-io/portico/controlplane/compile"
	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/internal/xdstest"
)

const (
	extauthzNode  = "e2e-extauthz"
	ratelimitNode = "e2e-ratelimit"
	issuer        = "https://idp.e2e.test"
)

// extauthzTypes and ratelimitTypes are what each service subscribes to.
var (
	extauthzTypes  = []string{compile.JwtProviderType, compile.ApiKeyShardType, compile.RevocationListType}
	ratelimitTypes = []string{compile.RateLimitRuleType}
)

// fullStack is a control plane with extauthz and ratelimitsvc connected to
// it over xDS, and the gRPC clients Envoy's filters would use.
type fullStack struct {
	api   *adminAPI
	authz authv3.AuthorizationClient
	rls   rlsv3.RateLimitServiceClient
	gw    *gatewayView
}

// outcome is what the gateway's filters decide for one request.
type outcome struct {
	route *routev3.Route
	// check is nil when the route disables ext_authz.
	check *authv3.CheckResponse
	// rlReq and limit are nil when the request was denied or no
	// descriptor applies.
	rlReq *rlsv3.RateLimitRequest
	limit *rlsv3.RateLimitResponse
	// upstream is the request headers the upstream would receive.
	upstream map[string]string
}

// send derives, from the compiled route configuration, the Check and
// ShouldRateLimit calls for r and makes them against the real services.
func (s *fullStack) send(t *testing.T, r *httpRequest) outcome {
	t.Helper()
	var o outcome
	s.gw.enter(t, r)
	var vh *routev3.VirtualHost
	if o.route, vh = s.gw.match(t, r); o.route == nil {
		return o
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if req := checkRequest(t, o.route, vh, r); req != nil {
		resp, err := s.authz.Check(ctx, req)
		if err != nil {
			t.Fatalf("Check: %v", err)
		}
		o.check = resp
		if resp.GetOkResponse() == nil {
			return o
		}
		applyAllowed(t, r, resp.GetOkResponse())
	}
	o.upstream = r.headers
	if o.rlReq = s.gw.rateLimitRequest(t, o.route, r); o.rlReq != nil {
		resp, err := s.rls.ShouldRateLimit(ctx, o.rlReq)
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		o.limit = resp
	}
	return o
}

// specRoute is the admin API route an Envoy route was compiled from (the
// compiler may split one into variants named "<route>/<variant>").
func specRoute(rt *routev3.Route) string {
	name, _, _ := strings.Cut(rt.GetName(), "/")
	return name
}

func dialGRPC(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// deniedWith asserts a denial with HTTP status code and error code reason.
func deniedWith(t *testing.T, what string, o outcome, status int, reason string) {
	t.Helper()
	d := o.check.GetDeniedResponse()
	if d == nil {
		t.Fatalf("%s: not denied: %v", what, o.check)
	}
	if int(d.GetStatus().GetCode()) != status || !strings.Contains(d.GetBody(), `"code":"`+reason+`"`) {
		t.Fatalf("%s: denied with %d %s, want %d and code %s", what, d.GetStatus().GetCode(), d.GetBody(), status, reason)
	}
	if o.check.GetStatus().GetCode() == int32(codes.OK) {
		t.Fatalf("%s: denied response with gRPC status OK (Envoy would let it through)", what)
	}
	if o.limit != nil {
		t.Fatalf("%s: a denied request reached the rate limiter", what)
	}
}

func allowedAs(t *testing.T, what string, o outcome, consumer string) {
	t.Helper()
	if o.check.GetOkResponse() == nil || o.check.GetStatus().GetCode() != int32(codes.OK) {
		t.Fatalf("%s: not allowed: %v", what, o.check)
	}
	if got := o.upstream["x-portico-consumer"]; got != consumer {
		t.Fatalf("%s: upstream would see x-portico-consumer %q, want %q", what, got, consumer)
	}
}

func headerMap(hs []*corev3.HeaderValue) map[string]string {
	out := map[string]string{}
	for _, h := range hs {
		out[strings.ToLower(h.GetKey())] = h.GetValue()
	}
	return out
}

// descriptors renders a request's descriptors as "k=v,k=v;k=v".
func descriptors(req *rlsv3.RateLimitRequest) string {
	var ds []string
	for _, d := range req.GetDescriptors() {
		var es []string
		for _, e := range d.GetEntries() {
			es = append(es, e.GetKey()+"="+e.GetValue())
		}
		ds = append(ds, strings.Join(es, ","))
	}
	return strings.Join(ds, ";")
}

type signer struct {
	t   *testing.T
	key *ecdsa.PrivateKey
}

// token signs an ES256 JWT for sub with the given scope and jti.
func (s signer) token(sub, scope, jti string) string {
	s.t.Helper()
	sg, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: s.key, KeyID: "k1"}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		s.t.Fatal(err)
	}
	now := time.Now()
	claims, _ := json.Marshal(map[string]any{"iss": issuer, "aud": "portico", "sub": sub, "tenant": "acme", "scope": scope,
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix(), "jti": jti})
	jws, err := sg.Sign(claims)
	if err != nil {
		s.t.Fatal(err)
	}
	tok, err := jws.CompactSerialize()
	if err != nil {
		s.t.Fatal(err)
	}
	return tok
}

// TestFullConfigPath: configuration made through the admin API reaches
// extauthz and ratelimitsvc over xDS, and the Check and ShouldRateLimit
// calls derived from the route configuration compiled for a gateway give
// the right decisions; revocations, key deletions and a NACKed push behave
// as the architecture says.
func TestFullConfigPath(t *testing.T) {
	// The gateway's configuration says where extauthz and ratelimitsvc
	// listen (compile.Options), and they take random ports. So they start
	// against one control-plane replica, which serves them their policy,
	// and a second replica on the same database, told their addresses,
	// serves the gateway: a fleet spread over replicas (reserving ports
	// ahead instead would race with every other process on the machine).
	dbURL := testdeps.Postgres(t)
	cp := startControlPlane(t, dbURL, controlplane.Config{})
	eaAddr := startExtauthz(t, cp.XDS, "127.0.0.1:0", extauthzNode).GRPC
	rlAddr := startRateLimit(t, cp.XDS, "127.0.0.1:0", ratelimitNode).GRPC
	gwCP := startControlPlane(t, dbURL, controlplane.Config{Compile: compile.Options{ExtAuthzAddress: eaAddr, RateLimitAddress: rlAddr}})
	api := newAdminAPI(t, cp.Admin)

	pk, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	idp := signer{t, pk}
	jwks, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &pk.PublicKey, KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	if err != nil {
		t.Fatal(err)
	}

	// The operator's configuration, in dependency order.
	consumerHeader := []any{map[string]any{"descriptors": []any{map[string]any{"key": "consumer", "fromHeader": "x-portico-consumer"}}}}
	api.create("clusters", map[string]any{"name": "echo", "endpoints": []any{map[string]any{"address": "127.0.0.1", "port": 18900}}}, nil)
	api.create("jwt-providers", map[string]any{"name": "idp", "issuer": issuer, "audiences": []string{"portico"},
		"inlineJwks": string(jwks), "algorithms": []string{"ES256"}}, nil)
	api.create("consumers", map[string]any{"name": "acme", "tenant": "acme", "tier": "pro"}, nil)
	var apiKey struct{ ID, Key string }
	api.create("consumers/acme/keys", map[string]any{"scopes": []string{"echo:read"}}, &apiKey)
	if apiKey.ID == "" || apiKey.Key == "" {
		t.Fatalf("API key not returned: %+v", apiKey)
	}
	api.create("routes", map[string]any{"name": "echo", "match": map[string]any{"pathPrefix": "/echo"}, "cluster": "echo",
		"auth":       map[string]any{"mode": "jwt", "provider": "idp", "requiredScopes": []string{"echo:read"}},
		"rateLimits": consumerHeader}, nil)
	api.create("routes", map[string]any{"name": "keys", "match": map[string]any{"pathPrefix": "/keys"}, "cluster": "echo",
		"auth":       map[string]any{"mode": "apikey", "requiredScopes": []string{"echo:read"}},
		"rateLimits": append(consumerHeader, map[string]any{"descriptors": []any{map[string]any{"key": "route", "value": "keys"}}})}, nil)
	api.create("routes", map[string]any{"name": "public", "match": map[string]any{"pathPrefix": "/public"}, "cluster": "echo",
		"auth": map[string]any{"mode": "none"}, "rateLimits": consumerHeader}, nil)
	api.create("ratelimit-rules", map[string]any{"name": "per-consumer", "domain": "portico",
		"descriptors": []any{map[string]any{"key": "consumer"}}, "limit": 3, "window": "1h"}, nil)
	v := api.create("ratelimit-rules", map[string]any{"name": "keys-route", "domain": "portico",
		"descriptors": []any{map[string]any{"key": "route", "value": "keys"}}, "limit": 1000, "window": "1h"}, nil)

	api.waitAcked(extauthzNode, "portico-extauthz", v, extauthzTypes...)
	api.waitAcked(ratelimitNode, "portico-ratelimit", v, ratelimitTypes...)
	gw := fetchGatewayView(t, gwCP.XDS, "e2e-gateway", v)
	if gw.extauthzAddr != eaAddr || gw.ratelimitAddr != rlAddr || gw.domain != "portico" {
		t.Fatalf("gateway view: extauthz %s ratelimit %s domain %q; want %s %s portico", gw.extauthzAddr, gw.ratelimitAddr, gw.domain, eaAddr, rlAddr)
	}
	s := &fullStack{api: api, gw: gw,
		authz: authv3.NewAuthorizationClient(dialGRPC(t, gw.extauthzAddr)),
		rls:   rlsv3.NewRateLimitServiceClient(dialGRPC(t, gw.ratelimitAddr))}

	// Routing: unknown paths match nothing (Envoy answers 404); a route
	// without auth turns ext_authz off.
	if o := s.send(t, newRequest("GET", "http://api.e2e.test/nope")); o.route != nil {
		t.Fatalf("/nope matched route %s", o.route.GetName())
	}
	// Identity headers a client makes up are stripped on entry: they reach
	// neither the upstream nor a rate-limit descriptor. An anonymous
	// request's consumer entry is skipped (skip_if_absent): Envoy sends an
	// empty descriptor, which no rule matches.
	o := s.send(t, newRequest("GET", "http://api.e2e.test/public/x", "x-portico-consumer", "mallory", "X-Portico-Tenant", "acme"))
	if specRoute(o.route) != "public" || o.check != nil {
		t.Fatalf("/public: route %q, check %v; want public without ext_authz", o.route.GetName(), o.check)
	}
	if len(o.rlReq.GetDescriptors()) != 1 || descriptors(o.rlReq) != "" || o.limit.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("/public: rate-limit request %q answered %v; want one empty descriptor, OK", descriptors(o.rlReq), o.limit)
	}
	if v, ok := o.upstream["x-portico-consumer"]; ok || o.upstream["x-portico-tenant"] != "" {
		t.Fatalf("/public: client-supplied identity headers reach the upstream (consumer %q): %v", v, o.upstream)
	}

	// JWT route: no token → 401 with a challenge; a token without the
	// scope → 403; a good token → OK, and the identity headers replace
	// anything the client sent.
	o = s.send(t, newRequest("GET", "http://api.e2e.test/echo/hello"))
	deniedWith(t, "no token", o, http.StatusUnauthorized, "missing_credentials")
	if h := o.check.GetDeniedResponse().GetHeaders(); !strings.Contains(fmt.Sprint(h), "www-authenticate") {
		t.Fatalf("401 without WWW-Authenticate: %v", h)
	}
	deniedWith(t, "token without the scope", s.send(t, newRequest("GET", "http://api.e2e.test/echo/hello",
		"authorization", "Bearer "+idp.token("alice", "echo:write", "t-0"))), http.StatusForbidden, "insufficient_scope")
	aliceTok := idp.token("alice", "echo:read profile", "t-1")
	alice := func() outcome {
		return s.send(t, newRequest("GET", "http://api.e2e.test/echo/hello", "authorization", "Bearer "+aliceTok, "x-portico-consumer", "bob"))
	}
	o = alice()
	allowedAs(t, "alice's token", o, "alice")
	if specRoute(o.route) != "echo" || o.upstream["x-portico-tenant"] != "acme" {
		t.Fatalf("route %s, upstream headers %v", o.route.GetName(), o.upstream)
	}

	// Rate limit, from the route's actions: the descriptor carries the
	// consumer extauthz identified. Limit 3 per hour: the first call above
	// took one; two more pass, then OVER_LIMIT with the headers Envoy
	// forwards to the client.
	if got := descriptors(o.rlReq); got != "consumer=alice" || o.rlReq.GetDomain() != "portico" {
		t.Fatalf("rate-limit request %s %q, want portico consumer=alice", o.rlReq.GetDomain(), got)
	}
	checkRemaining := func(what string, o outcome, code rlsv3.RateLimitResponse_Code, remaining string) map[string]string {
		t.Helper()
		h := headerMap(o.limit.GetResponseHeadersToAdd())
		if o.limit.GetOverallCode() != code || h["x-ratelimit-limit"] != "3" || h["x-ratelimit-remaining"] != remaining {
			t.Fatalf("%s: %v with headers %v; want %v, X-RateLimit-Limit 3, X-RateLimit-Remaining %s", what, o.limit.GetOverallCode(), h, code, remaining)
		}
		return h
	}
	checkRemaining("1st call", o, rlsv3.RateLimitResponse_OK, "2")
	checkRemaining("2nd call", alice(), rlsv3.RateLimitResponse_OK, "1")
	checkRemaining("3rd call", alice(), rlsv3.RateLimitResponse_OK, "0")
	o = alice()
	h := checkRemaining("4th call", o, rlsv3.RateLimitResponse_OVER_LIMIT, "0")
	if ra, err := strconv.Atoi(h["retry-after"]); err != nil || ra < 1 || ra > 3600 {
		t.Fatalf("OVER_LIMIT Retry-After %q, want 1..3600 seconds", h["retry-after"])
	}
	if reset, err := strconv.Atoi(h["x-ratelimit-reset"]); err != nil || reset < 1 {
		t.Fatalf("OVER_LIMIT X-RateLimit-Reset %q", h["x-ratelimit-reset"])
	}
	// Envoy builds its own x-ratelimit-* headers (DRAFT_VERSION_03) from
	// the descriptor statuses.
	if st := o.limit.GetStatuses(); len(st) != 1 || st[0].GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT ||
		st[0].GetCurrentLimit().GetRequestsPerUnit() != 3 || st[0].GetLimitRemaining() != 0 || st[0].GetDurationUntilReset().AsDuration() <= 0 {
		t.Fatalf("OVER_LIMIT statuses %v", st)
	}

	// API-key route: another consumer, its own bucket; two descriptors
	// (consumer from the identity header, a constant route key).
	keyReq := func() *httpRequest {
		return newRequest("POST", "http://api.e2e.test/keys/items", "x-api-key", apiKey.Key)
	}
	o = s.send(t, keyReq())
	allowedAs(t, "API key", o, "acme")
	if o.upstream["x-portico-tier"] != "pro" || o.upstream["x-portico-scopes"] != "echo:read" {
		t.Fatalf("API key: upstream headers %v", o.upstream)
	}
	if got := descriptors(o.rlReq); got != "consumer=acme;route=keys" {
		t.Fatalf("API-key route descriptors %q", got)
	}
	if o.limit.GetOverallCode() != rlsv3.RateLimitResponse_OK || len(o.limit.GetStatuses()) != 2 {
		t.Fatalf("API-key route rate limit: %v", o.limit)
	}
	deniedWith(t, "wrong API key", s.send(t, newRequest("GET", "http://api.e2e.test/keys/items", "x-api-key", "not-"+apiKey.Key)),
		http.StatusUnauthorized, "invalid_api_key")

	// A revocation takes effect on the first Check after extauthz ACKs its
	// version; other tokens of the same consumer are unaffected (and still
	// share the consumer's exhausted bucket).
	v = api.create("revocations", map[string]any{"jti": "t-1", "expiresAt": time.Now().Add(2 * time.Hour).UTC().Format(time.RFC3339)}, nil)
	api.waitAcked(extauthzNode, "portico-extauthz", v, compile.RevocationListType)
	deniedWith(t, "revoked token", alice(), http.StatusUnauthorized, "token_revoked")
	aliceTok = idp.token("alice", "echo:read", "t-2")
	o = alice()
	allowedAs(t, "alice's new token", o, "alice")
	if o.limit.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("alice's bucket refilled with a new token: %v", o.limit.GetOverallCode())
	}

	// Deleting the API key: the next Check after the ACK denies it.
	v = api.remove("consumers/acme/keys/" + apiKey.ID)
	api.waitAcked(extauthzNode, "portico-extauthz", v, compile.ApiKeyShardType)
	deniedWith(t, "deleted API key", s.send(t, keyReq()), http.StatusUnauthorized, "invalid_api_key")
	good := v

	// NACK: an inline JWKS the admin API accepts (a non-empty key set) but
	// whose key extauthz cannot use. ratelimitsvc and the gateway take the
	// version; extauthz NACKs it, the NACK shows in /admin/v1/nodes and
	// /metrics, is not re-sent in a loop, and extauthz keeps deciding on
	// its last good policy.
	nacksOf := func() float64 {
		return api.metric(`portico_controlplane_xds_nacks_total{type="` + strings.TrimPrefix(compile.JwtProviderType, resource.APITypePrefix) + `"}`)
	}
	before := nacksOf()
	bad := api.create("jwt-providers", map[string]any{"name": "broken", "issuer": "https://broken.e2e.test", "audiences": []string{"portico"},
		"inlineJwks": `{"keys":[{"kty":"bogus","kid":"x"}]}`, "algorithms": []string{"RS256"}}, nil)
	badV := strconv.FormatInt(bad, 10)
	var nk *nack
	xdstest.Eventually(t, convergeTimeout, "extauthz's NACK in /admin/v1/nodes", func() bool {
		nk = api.nodes()[extauthzNode].Types[compile.JwtProviderType].Nack
		return nk != nil && nk.Version == badV
	})
	if !strings.Contains(nk.Error, "broken") {
		t.Fatalf("NACK error %q does not name the provider", nk.Error)
	}
	if n := api.nodes()[extauthzNode].Types[compile.JwtProviderType]; n.AckedVersion == badV {
		t.Fatalf("extauthz both ACKed and NACKed %s", badV)
	}
	api.waitAcked(ratelimitNode, "portico-ratelimit", bad, ratelimitTypes...)
	fetchGatewayView(t, gwCP.XDS, "e2e-gateway-2", bad)
	after := nacksOf()
	if after < before+1 {
		t.Fatalf("portico_controlplane_xds_nacks_total for JWT providers: %v before the push, %v after", before, after)
	}
	xdstest.Consistently(t, 300*time.Millisecond, "no NACK loop", func() bool { return nacksOf() <= after+1 })
	aliceTok = idp.token("alice", "echo:read", "t-3")
	allowedAs(t, "a new token after the NACK", alice(), "alice")
	aliceTok = idp.token("alice", "echo:read", "t-1")
	deniedWith(t, "the revoked jti after the NACK", alice(), http.StatusUnauthorized, "token_revoked")

	// While the provider type stays NACKed (every version carries the bad
	// provider until it is removed), a revocation still gets through: it
	// is another resource type, and a stuck provider must not keep a
	// stolen token alive.
	v = api.create("revocations", map[string]any{"jti": "t-3", "expiresAt": time.Now().Add(2 * time.Hour).UTC().Format(time.RFC3339)}, nil)
	api.waitAcked(extauthzNode, "portico-extauthz", v, compile.RevocationListType)
	xdstest.Eventually(t, convergeTimeout, "the NACK of the providers still carrying the bad one", func() bool {
		nk := api.nodes()[extauthzNode].Types[compile.JwtProviderType].Nack
		return nk != nil && nk.Version == strconv.FormatInt(v, 10)
	})
	aliceTok = idp.token("alice", "echo:read", "t-3")
	deniedWith(t, "a token revoked while the providers are NACKed", alice(), http.StatusUnauthorized, "token_revoked")

	// Removing the bad provider gives a version extauthz takes again.
	fixed := api.remove("jwt-providers/broken")
	if fixed <= bad || bad <= good {
		t.Fatalf("versions not increasing: good %d bad %d fixed %d", good, bad, fixed)
	}
	api.waitAcked(extauthzNode, "portico-extauthz", fixed, extauthzTypes...)
}
