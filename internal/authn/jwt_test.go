package authn_test

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/portico-io/portico/extauthz/jwks"
	"github.com/portico-io/portico/internal/authn"
)

type idp struct {
	pub  ed25519.PublicKey
	priv ed25519.PrivateKey
	keys *jwks.Source
}

func newIDP(t *testing.T) *idp {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	src, err := jwks.New(jwks.Config{Inline: &jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: pub, KeyID: "k1", Algorithm: "EdDSA", Use: "sig"}}}})
	if err != nil {
		t.Fatal(err)
	}
	return &idp{pub: pub, priv: priv, keys: src}
}

func b64json(v any) string {
	b, _ := json.Marshal(v)
	return base64.RawURLEncoding.EncodeToString(b)
}

func (i *idp) sign(header, claims map[string]any) string {
	in := b64json(header) + "." + b64json(claims)
	return in + "." + base64.RawURLEncoding.EncodeToString(ed25519.Sign(i.priv, []byte(in)))
}

func TestJWT(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	p := newIDP(t)
	a, err := authn.New(authn.Config{
		JWT: &authn.JWTConfig{
			Issuer: "https://idp.example", Audiences: []string{"portico"}, Algorithms: []string{"EdDSA"}, Keys: p.keys,
			RoleMapping: map[string][]string{"portico-admins": {"admin"}, "sec": {"security-admin", "viewer"}, "ops": {"viewer"}},
			TenantClaim: "org",
		},
		TimeNow: func() time.Time { return now },
	})
	if err != nil {
		t.Fatal(err)
	}
	hdr := map[string]any{"alg": "EdDSA", "kid": "k1", "typ": "JWT"}
	claims := func(mod func(map[string]any)) map[string]any {
		c := map[string]any{"iss": "https://idp.example", "aud": "portico", "sub": "u-123", "name": "Ada", "exp": now.Add(time.Hour).Unix(), "groups": []string{"ops", "sec", "unmapped"}}
		if mod != nil {
			mod(c)
		}
		return c
	}

	got, err := a.Authenticate(requestWith(p.sign(hdr, claims(nil))))
	if err != nil {
		t.Fatal(err)
	}
	if got.Kind != authn.KindJWT || got.ID != "u-123" || got.Name != "Ada" || strings.Join(got.Roles, ",") != "security-admin,viewer" || got.Tenant != "" {
		t.Fatalf("principal %+v", got)
	}
	got, err = a.Authenticate(requestWith(p.sign(hdr, claims(func(c map[string]any) {
		c["groups"] = "portico-admins"
		c["org"] = "acme"
		delete(c, "name")
	}))))
	if err != nil || strings.Join(got.Roles, ",") != "admin" || got.Tenant != "acme" || got.Name != "u-123" {
		t.Fatalf("string groups claim: %+v %v", got, err)
	}
	got, err = a.Authenticate(requestWith(p.sign(hdr, claims(func(c map[string]any) { c["exp"] = now.Add(-authn.DefaultLeeway).Unix() }))))
	if err != nil {
		t.Fatalf("expired within leeway refused: %v", err)
	}
	got, err = a.Authenticate(requestWith(p.sign(hdr, claims(func(c map[string]any) { c["groups"] = map[string]any{"x": 1} }))))
	if err != nil || len(got.Roles) != 0 {
		t.Fatalf("odd groups claim: want no roles, got %+v %v", got, err)
	}

	unsigned := b64json(map[string]any{"alg": "none"}) + "." + b64json(claims(nil)) + "."
	hsIn := b64json(map[string]any{"alg": "HS256", "kid": "k1"}) + "." + b64json(claims(nil))
	mac := hmac.New(sha256.New, p.pub) // HMAC keyed with the public key: alg confusion
	mac.Write([]byte(hsIn))
	hs := hsIn + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
	good := p.sign(hdr, claims(nil))
	tampered := good[:strings.LastIndexByte(good, '.')] + "." + base64.RawURLEncoding.EncodeToString(make([]byte, 64))
	for _, tc := range []struct {
		name string
		tok  string
		err  error
	}{
		{"alg none", unsigned, authn.ErrInvalidToken},
		{"alg none signed", b64json(map[string]any{"alg": "none"}) + "." + b64json(claims(nil)) + ".AA", authn.ErrInvalidToken},
		{"HS256 with the public key", hs, authn.ErrInvalidToken},
		{"RS256 not pinned", p.sign(map[string]any{"alg": "RS256", "kid": "k1"}, claims(nil)), authn.ErrInvalidToken},
		{"bad signature", tampered, authn.ErrInvalidToken},
		{"unknown kid", p.sign(map[string]any{"alg": "EdDSA", "kid": "k2"}, claims(nil)), authn.ErrInvalidToken},
		{"wrong audience", p.sign(hdr, claims(func(c map[string]any) { c["aud"] = "other-app" })), authn.ErrInvalidToken},
		{"no audience", p.sign(hdr, claims(func(c map[string]any) { delete(c, "aud") })), authn.ErrInvalidToken},
		{"wrong issuer", p.sign(hdr, claims(func(c map[string]any) { c["iss"] = "https://evil.example" })), authn.ErrInvalidToken},
		{"expired", p.sign(hdr, claims(func(c map[string]any) { c["exp"] = now.Add(-authn.DefaultLeeway - time.Second).Unix() })), authn.ErrExpired},
		{"no exp", p.sign(hdr, claims(func(c map[string]any) { delete(c, "exp") })), authn.ErrExpired},
		{"nbf in the future", p.sign(hdr, claims(func(c map[string]any) { c["nbf"] = now.Add(time.Hour).Unix() })), authn.ErrInvalidToken},
		{"no sub", p.sign(hdr, claims(func(c map[string]any) { delete(c, "sub") })), authn.ErrInvalidToken},
		{"tenant not a string", p.sign(hdr, claims(func(c map[string]any) { c["org"] = []string{"a", "b"} })), authn.ErrInvalidToken},
		{"not a JWT", "abc", authn.ErrMalformed},
		{"crit header", p.sign(map[string]any{"alg": "EdDSA", "kid": "k1", "crit": []string{"exp"}}, claims(nil)), authn.ErrMalformed},
	} {
		if _, err := a.Authenticate(requestWith(tc.tok)); !errors.Is(err, tc.err) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.err)
		}
	}
}

func TestJWTConfig(t *testing.T) {
	p := newIDP(t)
	ok := func() *authn.JWTConfig {
		return &authn.JWTConfig{Issuer: "i", Audiences: []string{"a"}, Algorithms: []string{"ES256"}, Keys: p.keys}
	}
	if _, err := authn.New(authn.Config{JWT: ok()}); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*authn.JWTConfig){
		"no issuer":      func(c *authn.JWTConfig) { c.Issuer = "" },
		"no audience":    func(c *authn.JWTConfig) { c.Audiences = nil },
		"empty audience": func(c *authn.JWTConfig) { c.Audiences = []string{""} },
		"no algorithms":  func(c *authn.JWTConfig) { c.Algorithms = nil },
		"HS256":          func(c *authn.JWTConfig) { c.Algorithms = []string{"HS256"} },
		"none":           func(c *authn.JWTConfig) { c.Algorithms = []string{"none"} },
		"no keys":        func(c *authn.JWTConfig) { c.Keys = nil },
		"huge leeway":    func(c *authn.JWTConfig) { c.Leeway = time.Hour },
		"negative":       func(c *authn.JWTConfig) { c.Leeway = -time.Second },
	} {
		c := ok()
		mod(c)
		if _, err := authn.New(authn.Config{JWT: c}); !errors.Is(err, authn.ErrConfig) {
			t.Errorf("%s: err = %v, want ErrConfig", name, err)
		}
	}
}

// KeyspacesClaim confines a JWT to the keyspaces its claim names (a string
// or an array); a token without the claim is unconfined; a claim that is
// empty, of another type or names an invalid keyspace refuses the token.
func TestJWTKeyspacesClaim(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	p := newIDP(t)
	a, err := authn.New(authn.Config{
		JWT: &authn.JWTConfig{
			Issuer: "https://idp.example", Audiences: []string{"portico"}, Algorithms: []string{"EdDSA"}, Keys: p.keys,
			RoleMapping: map[string][]string{"apps": {"editor"}}, KeyspacesClaim: "kv",
		},
		TimeNow: func() time.Time { return now },
	})
	if err != nil {
		t.Fatal(err)
	}
	hdr := map[string]any{"alg": "EdDSA", "kid": "k1"}
	tok := func(kv any, present bool) string {
		c := map[string]any{"iss": "https://idp.example", "aud": "portico", "sub": "svc-1", "exp": now.Add(time.Hour).Unix(), "groups": "apps"}
		if present {
			c["kv"] = kv
		}
		return p.sign(hdr, c)
	}
	for _, tc := range []struct {
		name string
		kv   any
		want string
	}{
		{"string", "orders", "orders"},
		{"array", []string{"orders", "carts", "orders"}, "carts,orders"},
	} {
		got, err := a.Authenticate(requestWith(tok(tc.kv, true)))
		if err != nil || strings.Join(got.Keyspaces, ",") != tc.want || strings.Join(got.Roles, ",") != "editor" {
			t.Errorf("%s: %+v %v, want keyspaces %s", tc.name, got, err, tc.want)
		}
		if got.AllowsKeyspace("users") {
			t.Errorf("%s: a confined JWT allows keyspace users", tc.name)
		}
	}
	got, err := a.Authenticate(requestWith(tok(nil, false)))
	if err != nil || len(got.Keyspaces) != 0 {
		t.Fatalf("no claim: %+v %v, want an unconfined principal", got, err)
	}
	for _, tc := range []struct {
		name string
		kv   any
	}{
		{"invalid name", "a:b"},
		{"invalid name in an array", []string{"orders", "a b"}},
		{"empty string", ""},
		{"empty array", []string{}},
		{"null", nil},
		{"number", 7},
		{"array of numbers", []int{1}},
		{"object", map[string]any{"orders": true}},
	} {
		if got, err := a.Authenticate(requestWith(tok(tc.kv, true))); !errors.Is(err, authn.ErrInvalidToken) {
			t.Errorf("%s: %+v %v, want ErrInvalidToken", tc.name, got, err)
		}
	}
}
