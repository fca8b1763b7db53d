package authz_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	jose "github.com/go-jose/go-jose/v4"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portico-io/portico/extauthz/authz"
	"github.com/portico-io/portico/extauthz/policy"
	authv1 "github.com/portico-io/portico/proto/portico/auth/v1"
)

const (
	issuer   = "https://idp.test"
	audience = "portico"
)

var (
	keysOnce sync.Once
	rsaKey1  *rsa.PrivateKey
	rsaKey2  *rsa.PrivateKey
	ecKey    *ecdsa.PrivateKey
	edKey    ed25519.PrivateKey
)

func keys(t testing.TB) {
	t.Helper()
	keysOnce.Do(func() {
		rsaKey1, _ = rsa.GenerateKey(rand.Reader, 2048)
		rsaKey2, _ = rsa.GenerateKey(rand.Reader, 2048)
		ecKey, _ = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		_, edKey, _ = ed25519.GenerateKey(rand.Reader)
	})
}

// clock is a settable test clock.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func (c *clock) Now() time.Time             { return time.Unix(0, c.ns.Load()) }
func (c *clock) Advance(d time.Duration)    { c.ns.Add(int64(d)) }
func (c *clock) Unix(d time.Duration) int64 { return c.Now().Add(d).Unix() }

// jwksServer is an httptest HTTPS JWKS endpoint that counts fetches and
// can be rotated or taken down.
type jwksServer struct {
	*httptest.Server
	fetches atomic.Int64
	mu      sync.Mutex
	set     jose.JSONWebKeySet
	down    bool
}

func newJWKSServer(t testing.TB, ks ...jose.JSONWebKey) *jwksServer {
	t.Helper()
	j := &jwksServer{}
	j.set.Keys = ks
	j.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		j.fetches.Add(1)
		j.mu.Lock()
		defer j.mu.Unlock()
		if j.down {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		_ = json.NewEncoder(w).Encode(j.set)
	}))
	t.Cleanup(j.Close)
	return j
}

func (j *jwksServer) setKeys(ks ...jose.JSONWebKey) {
	j.mu.Lock()
	j.set.Keys = ks
	j.mu.Unlock()
}

func (j *jwksServer) setDown(down bool) {
	j.mu.Lock()
	j.down = down
	j.mu.Unlock()
}

func jwk(key crypto.PublicKey, kid, alg string) jose.JSONWebKey {
	return jose.JSONWebKey{Key: key, KeyID: kid, Algorithm: alg, Use: "sig"}
}

func anyOf(t testing.TB, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// fixture is a Server with one JWT provider "idp" (RS256, ES256, EdDSA) on a
// JWKS server and an API key. Its HTTP client trusts httptest's TLS
// servers; secretsDir is its secrets directory.
type fixture struct {
	srv        *authz.Server
	reg        *prometheus.Registry
	secretsDir string
	clock      *clock
	jwks       *jwksServer
	prov       *authv1.JwtProvider
	keys       []*authv1.ApiKey
	revoke     []*authv1.Revocation
	ver        int
}

const apiSecret = "pk_test_secret_one"

func newFixture(t testing.TB) *fixture {
	t.Helper()
	keys(t)
	f := &fixture{clock: newClock()}
	f.jwks = newJWKSServer(t, jwk(&rsaKey1.PublicKey, "k1", "RS256"), jwk(&ecKey.PublicKey, "ec1", "ES256"), jwk(edKey.Public(), "ed1", "EdDSA"))
	f.prov = &authv1.JwtProvider{
		Name: "idp", Issuer: issuer, Audiences: []string{audience}, JwksUri: f.jwks.URL,
		Algorithms: []string{"RS256", "ES256", "EdDSA"}, ClockSkew: durationpb.New(30 * time.Second),
	}
	sum := sha256.Sum256([]byte(apiSecret))
	f.keys = []*authv1.ApiKey{{Id: "key1", Sha256: sum[:], Consumer: "acme", Tenant: "acme-corp", Tier: "pro", Scopes: []string{"echo:read"}}}
	f.reg, f.secretsDir = prometheus.NewRegistry(), t.TempDir()
	f.srv = authz.New(authz.Config{TimeNow: f.clock.Now, MinJWKSRefreshInterval: 30 * time.Second,
		HTTPClient: f.jwks.Client(), SecretsDir: f.secretsDir, Registerer: f.reg})
	f.push(t)
	return f
}

// push builds a policy from the fixture's resources and applies it, as one
// xDS push would.
func (f *fixture) push(t testing.TB) {
	t.Helper()
	f.ver++
	v := string(rune('0' + f.ver%10))
	res := policy.Resources{
		policy.JwtProviderType:    {Version: v, Resources: []*anypb.Any{anyOf(t, f.prov)}},
		policy.ApiKeyShardType:    {Version: v, Resources: f.shards(t)},
		policy.RevocationListType: {Version: v, Resources: []*anypb.Any{anyOf(t, &authv1.RevocationList{Name: "revocations", Revocations: f.revoke})}},
	}
	p, err := policy.Build(res, f.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	f.srv.SetPolicy(p)
}

// shards spreads the fixture's keys over their ApiKeyShards, as the
// control plane does.
func (f *fixture) shards(t testing.TB) []*anypb.Any {
	t.Helper()
	byShard := map[byte]*authv1.ApiKeyShard{}
	var out []*anypb.Any
	for _, k := range f.keys {
		i := k.GetSha256()[0]
		if byShard[i] == nil {
			byShard[i] = &authv1.ApiKeyShard{Name: policy.ShardName(i)}
		}
		byShard[i].Keys = append(byShard[i].Keys, k)
	}
	for _, s := range byShard {
		out = append(out, anyOf(t, s))
	}
	return out
}

func (f *fixture) claims(mod func(map[string]any)) map[string]any {
	c := map[string]any{
		"iss": issuer, "aud": audience, "sub": "alice", "tenant": "t1", "tier": "gold",
		"exp": f.clock.Unix(time.Hour), "iat": f.clock.Unix(-time.Minute), "nbf": f.clock.Unix(-time.Minute),
		"jti": "jti-1", "scope": "echo:read echo:write",
	}
	if mod != nil {
		mod(c)
	}
	return c
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// sign produces a compact JWS. key is *rsa.PrivateKey, *ecdsa.PrivateKey,
// ed25519.PrivateKey or []byte (HMAC); alg "none" gives an empty signature.
func sign(t testing.TB, hdr map[string]any, claims map[string]any, key any) string {
	t.Helper()
	hb, _ := json.Marshal(hdr)
	cb, _ := json.Marshal(claims)
	input := b64(hb) + "." + b64(cb)
	alg, _ := hdr["alg"].(string)
	var sig []byte
	var err error
	switch k := key.(type) {
	case *rsa.PrivateKey:
		d := sha256.Sum256([]byte(input))
		if alg == "PS256" {
			sig, err = rsa.SignPSS(rand.Reader, k, crypto.SHA256, d[:], &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash})
		} else {
			sig, err = rsa.SignPKCS1v15(rand.Reader, k, crypto.SHA256, d[:])
		}
	case *ecdsa.PrivateKey:
		d := sha256.Sum256([]byte(input))
		r, s, e := ecdsa.Sign(rand.Reader, k, d[:])
		err = e
		sig = make([]byte, 64)
		r.FillBytes(sig[:32])
		s.FillBytes(sig[32:])
	case ed25519.PrivateKey:
		sig = ed25519.Sign(k, []byte(input))
	case []byte:
		m := hmac.New(sha256.New, k)
		m.Write([]byte(input))
		sig = m.Sum(nil)
	case nil:
	}
	if err != nil {
		t.Fatal(err)
	}
	return input + "." + b64(sig)
}

func rs256(t testing.TB, claims map[string]any) string {
	return sign(t, map[string]any{"alg": "RS256", "kid": "k1", "typ": "JWT"}, claims, rsaKey1)
}

func rsaPublicPEM(t testing.TB, k *rsa.PublicKey) []byte {
	der, err := x509.MarshalPKIXPublicKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// checkReq builds a CheckRequest the way Envoy does for a route with the
// given mode/provider/scopes.
func checkReq(mode, provider, scopes string, hdrs map[string]string) *authv3.CheckRequest {
	ext := map[string]string{"route": "echo", "mode": mode}
	if provider != "" {
		ext["provider"] = provider
	}
	if scopes != "" {
		ext["scopes"] = scopes
	}
	h := map[string]string{":method": "GET", ":path": "/echo", ":authority": "api.test"}
	for k, v := range hdrs {
		h[k] = v
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Method: "GET", Path: "/echo", Host: "api.test", Scheme: "http", Protocol: "HTTP/1.1", Headers: h,
		}},
		ContextExtensions: ext,
	}}
}

func bearer(tok string) map[string]string { return map[string]string{"authorization": "Bearer " + tok} }

// result summarizes a CheckResponse.
type result struct {
	allowed bool
	status  int
	code    string
	set     map[string]string
	removed []string
	www     string
	body    string
}

func check(t testing.TB, s *authz.Server, req *authv3.CheckRequest) result {
	t.Helper()
	resp, err := s.Check(context.Background(), req)
	if err != nil {
		t.Fatalf("Check returned an error: %v", err)
	}
	var r result
	if ok := resp.GetOkResponse(); ok != nil && resp.GetStatus().GetCode() == 0 {
		r.allowed = true
		r.set = map[string]string{}
		for _, h := range ok.GetHeaders() {
			r.set[h.GetHeader().GetKey()] = h.GetHeader().GetValue()
		}
		r.removed = ok.GetHeadersToRemove()
		return r
	}
	d := resp.GetDeniedResponse()
	if d == nil || resp.GetStatus().GetCode() == 0 {
		t.Fatalf("neither allowed nor denied: %v", resp)
	}
	r.status = int(d.GetStatus().GetCode())
	r.body = d.GetBody()
	var body struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal([]byte(d.GetBody()), &body); err != nil {
		t.Fatalf("deny body %q: %v", d.GetBody(), err)
	}
	r.code = body.Error.Code
	for _, h := range d.GetHeaders() {
		if h.GetHeader().GetKey() == "www-authenticate" {
			r.www = h.GetHeader().GetValue()
		}
	}
	return r
}

// counter returns the value of counter name with labels (0 when absent).
func counter(t testing.TB, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

var _ = timestamppb.Now
