package controlplane_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/portico-io/portico/controlplane"
	"github.com/portico-io/portico/extauthz/jwks"
	"github.com/portico-io/portico/internal/authn"
	"github.com/portico-io/portico/internal/testdeps"
)

// Operators of an IdP reach the admin API with its JWTs: the groups claim
// maps to roles, the audit author is the subject, and a token for another
// audience is refused.
func TestAdminAPIWithOperatorJWT(t *testing.T) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := jwks.New(jwks.Config{Inline: &jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: pub, KeyID: "k1", Algorithm: "EdDSA", Use: "sig"}}}})
	if err != nil {
		t.Fatal(err)
	}
	cp := startWith(t, controlplane.Config{AdminAddr: "127.0.0.1:0", XDSAddr: "127.0.0.1:0", DatabaseURL: testdeps.Postgres(t),
		OperatorJWT: &authn.JWTConfig{Issuer: "https://idp.test", Audiences: []string{"portico-admin"}, Algorithms: []string{"EdDSA"},
			Keys: keys, RoleMapping: map[string][]string{"platform-admins": {"admin"}, "sre": {"viewer"}}}})
	jwt := func(sub, aud string, groups ...string) string {
		enc := func(v any) string { b, _ := json.Marshal(v); return base64.RawURLEncoding.EncodeToString(b) }
		in := enc(map[string]any{"alg": "EdDSA", "kid": "k1", "typ": "JWT"}) + "." + enc(map[string]any{
			"iss": "https://idp.test", "aud": aud, "sub": sub, "exp": time.Now().Add(time.Hour).Unix(), "groups": groups})
		return in + "." + base64.RawURLEncoding.EncodeToString(ed25519.Sign(priv, []byte(in)))
	}
	do := func(method, path, tok, body string) int {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+cp.addrs.Admin+"/admin/v1/"+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Idempotency-Key", method+path+tok[len(tok)-8:])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	cluster := `{"name":"echo","endpoints":[{"address":"127.0.0.1","port":18900}]}`
	if code := do("POST", "clusters", jwt("ada", "portico-admin", "sre"), cluster); code != http.StatusForbidden {
		t.Fatalf("viewer JWT wrote config: %d", code)
	}
	if code := do("POST", "clusters", jwt("ada", "other-app", "platform-admins"), cluster); code != http.StatusUnauthorized {
		t.Fatalf("JWT for another audience: %d", code)
	}
	if code := do("POST", "clusters", jwt("grace", "portico-admin", "platform-admins"), cluster); code != http.StatusCreated {
		t.Fatalf("admin JWT: %d", code)
	}
	if code := do("GET", "clusters/echo", jwt("ada", "portico-admin", "sre"), ""); code != http.StatusOK {
		t.Fatalf("viewer JWT read: %d", code)
	}
	var audit struct {
		Items []struct{ Author string } `json:"items"`
	}
	if code, _ := call(t, http.MethodGet, "http://"+cp.addrs.Admin+"/admin/v1/audit", nil, nil, &audit); code != 200 || len(audit.Items) != 1 || audit.Items[0].Author != "jwt:grace" {
		t.Fatalf("audit: %d %+v", code, audit)
	}
}
