package authz_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portico-io/portico/extauthz/authz"
	authv1 "github.com/portico-io/portico/proto/portico/auth/v1"
)

// TestJWTAttacks is the table of attack and edge cases: each row builds a
// token against the fixture's provider (RS256/ES256/EdDSA pinned, skew 30s)
// and names the expected outcome.
func TestJWTAttacks(t *testing.T) {
	f := newFixture(t)
	attacker := newJWKSServer(t, jwk(&rsaKey2.PublicKey, "evil", "RS256"))
	rsaHdr := map[string]any{"alg": "RS256", "kid": "k1"}
	cases := []struct {
		name  string
		token func() string
		want  string // "" = allowed
	}{
		{"valid RS256", func() string { return rs256(t, f.claims(nil)) }, ""},
		{"valid ES256", func() string { return sign(t, map[string]any{"alg": "ES256", "kid": "ec1"}, f.claims(nil), ecKey) }, ""},
		{"valid EdDSA", func() string { return sign(t, map[string]any{"alg": "EdDSA", "kid": "ed1"}, f.claims(nil), edKey) }, ""},
		{"valid without kid", func() string { return sign(t, map[string]any{"alg": "RS256"}, f.claims(nil), rsaKey1) }, ""},
		{"alg none", func() string { return sign(t, map[string]any{"alg": "none", "kid": "k1"}, f.claims(nil), nil) }, authz.ReasonUnsupportedAlg},
		{"alg None", func() string { return sign(t, map[string]any{"alg": "None"}, f.claims(nil), nil) }, authz.ReasonUnsupportedAlg},
		{"HS256 keyed with the RSA public key PEM", func() string {
			return sign(t, map[string]any{"alg": "HS256", "kid": "k1"}, f.claims(nil), rsaPublicPEM(t, &rsaKey1.PublicKey))
		}, authz.ReasonUnsupportedAlg},
		{"HS256 keyed with the RSA modulus", func() string {
			return sign(t, map[string]any{"alg": "HS256", "kid": "k1"}, f.claims(nil), rsaKey1.PublicKey.N.Bytes())
		}, authz.ReasonUnsupportedAlg},
		{"unknown alg", func() string { return sign(t, map[string]any{"alg": "XS999", "kid": "k1"}, f.claims(nil), rsaKey1) }, authz.ReasonUnsupportedAlg},
		{"implemented alg not pinned (PS256)", func() string {
			return sign(t, map[string]any{"alg": "PS256", "kid": "k1"}, f.claims(nil), rsaKey1)
		}, authz.ReasonUnsupportedAlg},
		{"ES256 header with RSA kid", func() string { return sign(t, map[string]any{"alg": "ES256", "kid": "k1"}, f.claims(nil), ecKey) }, authz.ReasonBadSignature},
		{"RS256 signed by another key", func() string { return sign(t, rsaHdr, f.claims(nil), rsaKey2) }, authz.ReasonBadSignature},
		{"tampered payload", func() string {
			tok := rs256(t, f.claims(nil))
			parts := strings.Split(tok, ".")
			other := strings.Split(rs256(t, f.claims(func(c map[string]any) { c["sub"] = "mallory" })), ".")
			return parts[0] + "." + other[1] + "." + parts[2]
		}, authz.ReasonBadSignature},
		{"expired", func() string {
			return rs256(t, f.claims(func(c map[string]any) { c["exp"] = f.clock.Unix(-time.Hour) }))
		}, authz.ReasonExpired},
		{"no exp", func() string { return rs256(t, f.claims(func(c map[string]any) { delete(c, "exp") })) }, authz.ReasonExpired},
		{"exp inside skew", func() string {
			return rs256(t, f.claims(func(c map[string]any) { c["exp"] = f.clock.Unix(-29 * time.Second) }))
		}, ""},
		{"exp outside skew", func() string {
			return rs256(t, f.claims(func(c map[string]any) { c["exp"] = f.clock.Unix(-31 * time.Second) }))
		}, authz.ReasonExpired},
		{"nbf in the future", func() string {
			return rs256(t, f.claims(func(c map[string]any) { c["nbf"] = f.clock.Unix(time.Hour) }))
		}, authz.ReasonNotYetValid},
		{"nbf inside skew", func() string {
			return rs256(t, f.claims(func(c map[string]any) { c["nbf"] = f.clock.Unix(29 * time.Second) }))
		}, ""},
		{"nbf outside skew", func() string {
			return rs256(t, f.claims(func(c map[string]any) { c["nbf"] = f.clock.Unix(31 * time.Second) }))
		}, authz.ReasonNotYetValid},
		{"iat in the future", func() string {
			return rs256(t, f.claims(func(c map[string]any) { c["iat"] = f.clock.Unix(time.Hour) }))
		}, authz.ReasonNotYetValid},
		{"wrong iss", func() string { return rs256(t, f.claims(func(c map[string]any) { c["iss"] = "https://evil.test" })) }, authz.ReasonWrongIssuer},
		{"wrong aud", func() string { return rs256(t, f.claims(func(c map[string]any) { c["aud"] = "someone-else" })) }, authz.ReasonWrongAudience},
		{"aud array containing ours", func() string {
			return rs256(t, f.claims(func(c map[string]any) { c["aud"] = []string{"x", audience} }))
		}, ""},
		{"jku pointing at attacker JWKS", func() string {
			return sign(t, map[string]any{"alg": "RS256", "kid": "evil", "jku": attacker.URL}, f.claims(nil), rsaKey2)
		}, authz.ReasonUnknownKID},
		{"x5u pointing at attacker", func() string {
			return sign(t, map[string]any{"alg": "RS256", "kid": "k1", "x5u": attacker.URL}, f.claims(nil), rsaKey2)
		}, authz.ReasonBadSignature},
		{"embedded jwk of attacker", func() string {
			return sign(t, map[string]any{"alg": "RS256", "jwk": jwk(&rsaKey2.PublicKey, "", "RS256")}, f.claims(nil), rsaKey2)
		}, authz.ReasonBadSignature},
		{"crit header", func() string {
			return sign(t, map[string]any{"alg": "RS256", "kid": "k1", "crit": []string{"exp"}}, f.claims(nil), rsaKey1)
		}, authz.ReasonMalformedToken},
		{"garbage", func() string { return "not-a-jwt" }, authz.ReasonMalformedToken},
		{"two parts", func() string { return "eyJhbGciOiJSUzI1NiJ9.e30" }, authz.ReasonMalformedToken},
		{"exp not a number", func() string { return rs256(t, f.claims(func(c map[string]any) { c["exp"] = "tomorrow" })) }, authz.ReasonMalformedToken},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tok := tc.token()
			r := check(t, f.srv, checkReq("jwt", "idp", "", bearer(tok)))
			if tc.want == "" {
				if !r.allowed {
					t.Fatalf("denied (%d %s), want allowed", r.status, r.code)
				}
				return
			}
			if r.allowed {
				t.Fatalf("allowed, want %s", tc.want)
			}
			if r.code != tc.want {
				t.Fatalf("code %s, want %s (body %s)", r.code, tc.want, r.body)
			}
			if r.status != http.StatusUnauthorized || !strings.HasPrefix(r.www, `Bearer error="invalid_token", error_description="`) {
				t.Fatalf("status %d www-authenticate %q", r.status, r.www)
			}
			if strings.Contains(r.body, tok) || strings.Contains(r.www, tok) {
				t.Fatal("the token is echoed")
			}
		})
	}
	if n := attacker.fetches.Load(); n != 0 {
		t.Fatalf("the attacker's JWKS was fetched %d times", n)
	}
}

func TestMissingAndWrongScheme(t *testing.T) {
	f := newFixture(t)
	for _, h := range []map[string]string{nil, {"authorization": "Basic dXNlcjpwYXNz"}, {"authorization": "Bearer "}, {"authorization": "Bearer"}} {
		r := check(t, f.srv, checkReq("jwt", "idp", "", h))
		if r.allowed || r.code != authz.ReasonMissingCredentials || r.status != 401 {
			t.Fatalf("%v: %+v", h, r)
		}
	}
}

func TestAllowSetsIdentityHeaders(t *testing.T) {
	f := newFixture(t)
	r := check(t, f.srv, checkReq("jwt", "idp", "echo:read", bearer(rs256(t, f.claims(nil)))))
	if !r.allowed {
		t.Fatalf("denied: %+v", r)
	}
	want := map[string]string{"x-portico-consumer": "alice", "x-portico-tenant": "t1", "x-portico-tier": "gold", "x-portico-scopes": "echo:read echo:write"}
	for k, v := range want {
		if r.set[k] != v {
			t.Errorf("%s = %q, want %q", k, r.set[k], v)
		}
	}
	// A token without tenant/tier: those client-supplied headers are removed.
	r = check(t, f.srv, checkReq("jwt", "idp", "", bearer(rs256(t, f.claims(func(c map[string]any) { delete(c, "tenant"); delete(c, "tier") })))))
	if !r.allowed || strings.Join(r.removed, ",") != "x-portico-tenant,x-portico-tier" {
		t.Fatalf("removed %v", r.removed)
	}
}

func TestScopes(t *testing.T) {
	f := newFixture(t)
	tok := rs256(t, f.claims(nil))
	r := check(t, f.srv, checkReq("jwt", "idp", "admin,echo:read", bearer(tok)))
	if r.allowed || r.status != 403 || r.code != authz.ReasonInsufficientScope ||
		!strings.HasPrefix(r.www, `Bearer error="insufficient_scope"`) || !strings.Contains(r.www, `scope="admin"`) {
		t.Fatalf("%+v", r)
	}
	scp := rs256(t, f.claims(func(c map[string]any) { delete(c, "scope"); c["scp"] = []string{"admin", "echo:read"} }))
	if r := check(t, f.srv, checkReq("jwt", "idp", "admin,echo:read", bearer(scp))); !r.allowed {
		t.Fatalf("scp array: %+v", r)
	}
	if r := check(t, f.srv, checkReq("apikey", "", "echo:write", map[string]string{"x-api-key": apiSecret})); r.status != 403 {
		t.Fatalf("api key without scope: %+v", r)
	}
}

func TestRevokedJTI(t *testing.T) {
	f := newFixture(t)
	tok := rs256(t, f.claims(func(c map[string]any) { c["exp"] = f.clock.Unix(10 * time.Minute) }))
	if r := check(t, f.srv, checkReq("jwt", "idp", "", bearer(tok))); !r.allowed {
		t.Fatalf("before revocation: %+v", r) // now cached
	}
	exp := f.clock.Now().Add(10 * time.Minute)
	f.revoke = []*authv1.Revocation{{Jti: "jti-1", ExpiresAt: timestamppb.New(exp)}}
	f.push(t)
	if r := check(t, f.srv, checkReq("jwt", "idp", "", bearer(tok))); r.allowed || r.code != authz.ReasonRevoked {
		t.Fatalf("after revocation: %+v", r)
	}
	if len(f.srv.Policy().Revoked) != 1 {
		t.Fatal("revocation not in memory")
	}
	// Still revoked inside the skew window, where exp alone would accept it.
	f.clock.Advance(10*time.Minute + 20*time.Second)
	f.srv.Prune()
	if r := check(t, f.srv, checkReq("jwt", "idp", "", bearer(tok))); r.allowed || r.code != authz.ReasonRevoked {
		t.Fatalf("inside skew after exp: %+v", r)
	}
	f.clock.Advance(11 * time.Second)
	f.srv.Prune()
	if n := len(f.srv.Policy().Revoked); n != 0 {
		t.Fatalf("%d revocations still in memory after expiry", n)
	}
	if r := check(t, f.srv, checkReq("jwt", "idp", "", bearer(tok))); r.allowed || r.code != authz.ReasonExpired {
		t.Fatalf("after expiry: %+v", r)
	}
}

func TestTokenCache(t *testing.T) {
	f := newFixture(t)
	tok := rs256(t, f.claims(func(c map[string]any) { c["exp"] = f.clock.Unix(time.Minute) }))
	for range 3 {
		if r := check(t, f.srv, checkReq("jwt", "idp", "", bearer(tok))); !r.allowed {
			t.Fatalf("%+v", r)
		}
	}
	// Never beyond exp, even though skew would still accept it: re-verified.
	f.clock.Advance(time.Minute + 10*time.Second)
	if r := check(t, f.srv, checkReq("jwt", "idp", "", bearer(tok))); !r.allowed {
		t.Fatalf("inside skew: %+v", r)
	}
	f.clock.Advance(30 * time.Second)
	if r := check(t, f.srv, checkReq("jwt", "idp", "", bearer(tok))); r.allowed {
		t.Fatal("cached token allowed past exp+skew")
	}
}

// TestTokenCacheInvalidatedByJWKSChange: a key removed from the JWKS stops
// verifying even for tokens already cached.
func TestTokenCacheInvalidatedByJWKSChange(t *testing.T) {
	f := newFixture(t)
	tok := rs256(t, f.claims(nil))
	if r := check(t, f.srv, checkReq("jwt", "idp", "", bearer(tok))); !r.allowed {
		t.Fatalf("%+v", r)
	}
	f.jwks.setKeys(jwk(&rsaKey2.PublicKey, "k2", "RS256"))
	f.clock.Advance(6 * time.Minute) // past the 5m TTL: refresh installs the new set
	other := sign(t, map[string]any{"alg": "RS256", "kid": "k2"}, f.claims(nil), rsaKey2)
	if r := check(t, f.srv, checkReq("jwt", "idp", "", bearer(other))); !r.allowed {
		t.Fatalf("new key: %+v", r)
	}
	if r := check(t, f.srv, checkReq("jwt", "idp", "", bearer(tok))); r.allowed || r.code != authz.ReasonUnknownKID {
		t.Fatalf("old key after rotation: %+v", r)
	}
}

func TestUnknownKIDRotation(t *testing.T) {
	f := newFixture(t)
	if r := check(t, f.srv, checkReq("jwt", "idp", "", bearer(rs256(t, f.claims(nil))))); !r.allowed {
		t.Fatalf("%+v", r)
	}
	before := f.jwks.fetches.Load()
	// The IdP publishes k2 and starts signing with it; past the refresh
	// interval, the first k2 token triggers exactly one refresh.
	f.jwks.setKeys(jwk(&rsaKey1.PublicKey, "k1", "RS256"), jwk(&rsaKey2.PublicKey, "k2", "RS256"))
	f.clock.Advance(31 * time.Second)
	k2 := sign(t, map[string]any{"alg": "RS256", "kid": "k2"}, f.claims(nil), rsaKey2)
	for range 5 {
		if r := check(t, f.srv, checkReq("jwt", "idp", "", bearer(k2))); !r.allowed {
			t.Fatalf("rotated key: %+v", r)
		}
	}
	if n := f.jwks.fetches.Load() - before; n != 1 {
		t.Fatalf("%d JWKS fetches for the rotation, want 1", n)
	}
}

// TestRandomKIDStorm: 10,000 requests with random kids, 64 at a time,
// cost at most one JWKS fetch per refresh interval.
func TestRandomKIDStorm(t *testing.T) {
	f := newFixture(t)
	good := rs256(t, f.claims(nil))
	if r := check(t, f.srv, checkReq("jwt", "idp", "", bearer(good))); !r.allowed {
		t.Fatalf("%+v", r)
	}
	base := f.jwks.fetches.Load()
	storm := func(n int) {
		var wg sync.WaitGroup
		work := make(chan string)
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for tok := range work {
					resp, _ := f.srv.Check(context.Background(), checkReq("jwt", "idp", "", bearer(tok)))
					if resp.GetOkResponse() != nil {
						t.Error("random kid allowed")
					}
				}
			}()
		}
		hdr := map[string]any{"alg": "RS256"}
		claims := f.claims(nil)
		tok := sign(t, hdr, claims, rsaKey2) // one signature, many kids: the header is all that changes
		parts := strings.SplitN(tok, ".", 2)
		for range n {
			var kid [8]byte
			_, _ = rand.Read(kid[:])
			h := b64([]byte(`{"alg":"RS256","kid":"` + hex.EncodeToString(kid[:]) + `"}`))
			work <- h + "." + parts[1]
		}
		close(work)
		wg.Wait()
	}
	storm(5000)
	f.clock.Advance(31 * time.Second)
	storm(5000)
	if n := f.jwks.fetches.Load() - base; n > 2 {
		t.Fatalf("%d JWKS fetches for 10,000 random kids over 2 intervals, want <= 2", n)
	}
	if r := check(t, f.srv, checkReq("jwt", "idp", "", bearer(good))); !r.allowed {
		t.Fatalf("legit token after storm: %+v", r)
	}
}

func TestJWKSDownKeepsLastGoodKeys(t *testing.T) {
	f := newFixture(t)
	if r := check(t, f.srv, checkReq("jwt", "idp", "", bearer(rs256(t, f.claims(nil))))); !r.allowed {
		t.Fatalf("%+v", r)
	}
	f.jwks.setDown(true)
	f.clock.Advance(10 * time.Minute) // TTL expired: the (background) refresh fails
	before := f.jwks.fetches.Load()
	for i := range 3 {
		tok := rs256(t, f.claims(func(c map[string]any) { c["jti"] = string(rune('a' + i)) })) // uncached tokens
		if r := check(t, f.srv, checkReq("jwt", "idp", "", bearer(tok))); !r.allowed {
			t.Fatalf("with JWKS down: %+v", r)
		}
	}
	// The refresh runs in the background: wait for its attempt, then the
	// rate limit guarantees it stays the only one in this interval.
	deadline := time.Now().Add(10 * time.Second)
	for f.jwks.fetches.Load() == before && time.Now().Before(deadline) {
		tm := time.NewTimer(time.Millisecond)
		<-tm.C
	}
	for i := range 3 {
		tok := rs256(t, f.claims(func(c map[string]any) { c["jti"] = string(rune('x' + i)) }))
		if r := check(t, f.srv, checkReq("jwt", "idp", "", bearer(tok))); !r.allowed {
			t.Fatalf("with JWKS down: %+v", r)
		}
	}
	if n := f.jwks.fetches.Load() - before; n != 1 {
		t.Fatalf("%d fetch attempts while down, want 1 (rate-limited)", n)
	}
}

func TestNoKeysEverDenies(t *testing.T) {
	f := newFixture(t)
	f.jwks.setDown(true)
	r := check(t, f.srv, checkReq("jwt", "idp", "", bearer(rs256(t, f.claims(nil)))))
	if r.allowed || r.code != authz.ReasonJWKSUnavailable || r.status != 503 {
		t.Fatalf("%+v", r)
	}
}

func TestAPIKeys(t *testing.T) {
	f := newFixture(t)
	for _, h := range []map[string]string{{"x-api-key": apiSecret}, {"authorization": "ApiKey " + apiSecret}, {"authorization": "apikey " + apiSecret}} {
		r := check(t, f.srv, checkReq("apikey", "", "echo:read", h))
		if !r.allowed || r.set["x-portico-consumer"] != "acme" || r.set["x-portico-tenant"] != "acme-corp" ||
			r.set["x-portico-tier"] != "pro" || r.set["x-portico-scopes"] != "echo:read" {
			t.Fatalf("%v: %+v", h, r)
		}
	}
	for _, h := range []map[string]string{nil, {"x-api-key": "pk_test_wrong"}, {"authorization": "Bearer " + apiSecret}, {"x-api-key": apiSecret + "x"}} {
		r := check(t, f.srv, checkReq("apikey", "", "", h))
		if r.allowed || r.status != 401 || strings.Contains(r.body, apiSecret) {
			t.Fatalf("%v: %+v", h, r)
		}
	}
	// Expired.
	f.keys[0].ExpiresAt = timestamppb.New(f.clock.Now().Add(time.Minute))
	f.push(t)
	f.clock.Advance(time.Minute)
	if r := check(t, f.srv, checkReq("apikey", "", "", map[string]string{"x-api-key": apiSecret})); r.allowed || r.code != authz.ReasonExpiredAPIKey {
		t.Fatalf("expired: %+v", r)
	}
	// Revoked: the next push no longer carries it.
	f.keys[0].ExpiresAt = nil
	f.push(t)
	if r := check(t, f.srv, checkReq("apikey", "", "", map[string]string{"x-api-key": apiSecret})); !r.allowed {
		t.Fatalf("renewed: %+v", r)
	}
	f.keys = nil
	f.push(t)
	if r := check(t, f.srv, checkReq("apikey", "", "", map[string]string{"x-api-key": apiSecret})); r.allowed || r.code != authz.ReasonInvalidAPIKey {
		t.Fatalf("revoked: %+v", r)
	}
}

func TestModesAndInternalErrors(t *testing.T) {
	s := authz.New(authz.Config{})
	if r := check(t, s, checkReq("apikey", "", "", map[string]string{"x-api-key": apiSecret})); r.allowed || r.status != 503 {
		t.Fatalf("no policy: %+v", r)
	}
	f := newFixture(t)
	r := check(t, f.srv, checkReq("none", "", "", map[string]string{"x-portico-consumer": "spoofed"}))
	if !r.allowed || len(r.set) != 0 || len(r.removed) != 4 {
		t.Fatalf("mode none: %+v", r)
	}
	for _, req := range []struct{ mode, prov string }{{"", ""}, {"magic", ""}, {"jwt", "nope"}} {
		if r := check(t, f.srv, checkReq(req.mode, req.prov, "", bearer(rs256(t, f.claims(nil))))); r.allowed || r.status != 500 {
			t.Fatalf("%v: %+v", req, r)
		}
	}
}
