package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/portico-io/portico/internal/authn"
	"github.com/portico-io/portico/internal/authz"
	"github.com/portico-io/portico/internal/pgtokens"
)

// TestTenantTokens: an admin mints a token for a tenant through /v1/tokens;
// the secret is shown once; the token acts for that tenant only and cannot
// manage tokens; revocation is in force on the next request; an expired
// token is refused; nobody mints more than it holds.
func TestTenantTokens(t *testing.T) {
	f := newFixture(t, "127.0.0.0/8")
	const job = `{"name":"nightly","schedule":{"type":"CRON","expression":"30 2 * * *"},"target":{"type":"HTTP","http":{"url":"http://127.0.0.1:18900/r"}}}`

	rec, created := call(t, f.h, "POST", "/v1/tokens", `{"name":"acme-ci","tenant":"acme","roles":["editor"]}`)
	if rec.Code != http.StatusCreated || created["tenant"] != "acme" || rec.Header().Get("Location") != "/v1/tokens/"+created["id"].(string) {
		t.Fatalf("mint: %d %s", rec.Code, rec.Body)
	}
	secret, _ := created["token"].(string)
	if !authn.IsAPIToken(secret) || created["createdBy"] == "" {
		t.Fatalf("creation answer: %v", created)
	}
	id := created["id"].(string)
	for _, path := range []string{"/v1/tokens/" + id, "/v1/tokens?tenant=acme", "/v1/tokens"} {
		rec, _ := call(t, f.h, "GET", path, "")
		if rec.Code != http.StatusOK || strings.Contains(rec.Body.String(), secret) || strings.Contains(rec.Body.String(), `"token"`) {
			t.Fatalf("GET %s shows the secret or failed: %d %s", path, rec.Code, rec.Body)
		}
	}
	if _, list := call(t, f.h, "GET", "/v1/tokens?tenant=acme", ""); len(list["items"].([]any)) != 1+len(authz.Roles()) {
		t.Fatalf("acme's tokens: %v", list)
	}

	// The minted token acts for acme, whatever the body says.
	bearer := []string{"Authorization", "Bearer " + secret}
	rec, j := call(t, f.h, "POST", "/v1/jobs", job, append(bearer, "Idempotency-Key", "k1")...)
	if rec.Code != http.StatusCreated || j["tenant"] != "acme" {
		t.Fatalf("acme's token creates a job: %d %s", rec.Code, rec.Body)
	}
	if rec, _ := call(t, f.h, "GET", "/v1/jobs?tenant=globex", "", bearer...); rec.Code != http.StatusForbidden {
		t.Fatalf("acme's token lists globex: %d", rec.Code)
	}
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/tokens", ""},
		{"POST", "/v1/tokens", `{"name":"x","tenant":"acme","roles":["viewer"]}`},
		{"DELETE", "/v1/tokens/" + id, ""},
	} {
		if rec, _ := call(t, f.h, c.method, c.path, c.body, bearer...); rec.Code != http.StatusForbidden {
			t.Fatalf("a tenant token %s %s: %d, want 403", c.method, c.path, rec.Code)
		}
	}

	// Revocation: the very next request is refused.
	if rec, out := call(t, f.h, "DELETE", "/v1/tokens/"+id, ""); rec.Code != http.StatusOK || out["revokedAt"] == nil {
		t.Fatalf("revoke: %d %s", rec.Code, rec.Body)
	}
	if rec, _ := call(t, f.h, "GET", "/v1/jobs", "", bearer...); rec.Code != http.StatusUnauthorized {
		t.Fatalf("revoked token: %d, want 401", rec.Code)
	}
	if rec, _ := call(t, f.h, "DELETE", "/v1/tokens/ptk-nope", ""); rec.Code != http.StatusNotFound {
		t.Fatalf("revoke of a missing token: %d", rec.Code)
	}

	// An expired token is refused.
	old := authn.NewToken()
	past := time.Now().Add(-time.Minute)
	if _, err := f.st.Tokens().Create(context.Background(), pgtokens.Token{ID: old.ID, Name: "old", Roles: []string{"editor"},
		Tenant: "acme", CreatedBy: "test", ExpiresAt: &past}, old.Hash); err != nil {
		t.Fatal(err)
	}
	if rec, _ := call(t, f.h, "GET", "/v1/jobs", "", "Authorization", "Bearer "+old.Plaintext); rec.Code != http.StatusUnauthorized {
		t.Fatalf("expired token: %d, want 401", rec.Code)
	}

	// Bad requests change nothing; no escalation.
	for _, c := range []struct {
		body, as string
		want     int
	}{
		{`{"name":"x","roles":["viewer"]}`, f.tokens.Admin, http.StatusBadRequest},                         // admin names no tenant
		{`{"name":"x","tenant":"acme","roles":["admin"]}`, f.tokens.Admin, http.StatusUnprocessableEntity}, // not a tenant role
		{`{"name":"","tenant":"acme","roles":["viewer"]}`, f.tokens.Admin, http.StatusUnprocessableEntity},
		{`{"name":"x","tenant":"acme","roles":["viewer"],"expiresAt":"2001-01-01T00:00:00Z"}`, f.tokens.Admin, http.StatusUnprocessableEntity},
		{`{"name":"x","tenant":"acme","roles":["viewer"],"expiresAt":"0001-01-01T00:00:00Z"}`, f.tokens.Admin, http.StatusUnprocessableEntity}, // not "never"
		{`{"name":"x","tenant":"acme","roles":["viewer"],"admin":true}`, f.tokens.Admin, http.StatusBadRequest},
		// A security admin holds security.* but not tenant.any, nor jobs.write.
		{`{"name":"x","tenant":"acme","roles":["editor"]}`, f.tokens.Unbound(authz.SecurityAdmin), http.StatusForbidden},
	} {
		if rec, _ := call(t, f.h, "POST", "/v1/tokens", c.body, "Authorization", "Bearer "+c.as); rec.Code != c.want {
			t.Errorf("POST /v1/tokens %s: %d %s, want %d", c.body, rec.Code, rec.Body, c.want)
		}
	}
	if _, list := call(t, f.h, "GET", "/v1/tokens?tenant=acme", ""); len(list["items"].([]any)) != 2+len(authz.Roles()) {
		t.Fatalf("refused requests stored tokens: %v", list)
	}
}
