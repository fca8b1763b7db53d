package admin

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/portico-io/portico/controlplane/rollout"
	"github.com/portico-io/portico/controlplane/store"
	"github.com/portico-io/portico/internal/authn"
	"github.com/portico-io/portico/internal/authz"
	"github.com/portico-io/portico/internal/authz/authztest"
)

// Every route of the admin API refuses a caller without credentials (401)
// and a role without the route's permission (403), and serves the roles
// that hold it: a route added later cannot ship open.
func TestEveryRouteIsGuarded(t *testing.T) {
	e := newEnv(t)
	// With rollouts too: their routes exist only with a controller. The
	// walk is about who gets in, so what the controller answers does not
	// matter.
	e.h = newHandler(t, Config{Store: e.store, Nodes: e.nodes, Rollouts: noRollouts{}})
	routes := e.h.Routes()
	if len(routes) < 64 {
		t.Fatalf("only %d routes registered", len(routes))
	}
	authztest.Walk(t, e.h, routes, func(r authz.Role) authztest.Credentials { return authztest.Bearer(e.tokens[r]) })
}

// A token is shown once, works until it is revoked (refused on the next
// request), is refused once expired, cannot grant more than its creator
// holds, and its use is recorded.
func TestAPITokenLifecycle(t *testing.T) {
	e := newEnv(t)
	bearer := func(tok string) http.Header { return hdr("Authorization", "Bearer "+tok) }

	created := e.expect(e.do("POST", Prefix+"/tokens", `{"name":"ci","roles":["editor"]}`, nil), http.StatusCreated)
	tok, _ := created["token"].(string)
	id, _ := created["id"].(string)
	if !authn.IsAPIToken(tok) || created["createdBy"] == "" || created["name"] != "ci" {
		t.Fatalf("created: %v", created)
	}
	got := e.expect(e.do("GET", Prefix+"/tokens/"+id, "", nil), http.StatusOK)
	if _, shown := got["token"]; shown || strings.Contains(e.do("GET", Prefix+"/tokens", "", nil).Body.String(), tok) {
		t.Fatal("the token was shown again")
	}

	// The editor token changes config, and may not read or mint tokens.
	h := bearer(tok)
	h.Set(HeaderIdempotencyKey, "tok-1")
	e.expect(e.do("POST", Prefix+"/clusters", echoCluster, h), http.StatusCreated)
	e.expectError(e.do("GET", Prefix+"/tokens", "", bearer(tok)), http.StatusForbidden, authz.ResultForbidden, "")
	if st, err := e.store.GetToken(context.Background(), id); err != nil || st.LastUsedAt == nil {
		t.Fatalf("last use not recorded: %v %v", st.LastUsedAt, err)
	}

	// A security-admin cannot mint an admin (or an editor) token.
	w := e.do("POST", Prefix+"/tokens", `{"name":"escalate","roles":["admin"]}`, bearer(e.tokens[authz.SecurityAdmin]))
	e.expectError(w, http.StatusForbidden, authz.ResultForbidden, "roles")
	e.expect(e.do("POST", Prefix+"/tokens", `{"name":"auditor","roles":["viewer"]}`, bearer(e.tokens[authz.SecurityAdmin])), http.StatusCreated)

	for _, bad := range []struct{ body, field string }{
		{`{"roles":["viewer"]}`, "name"},
		{`{"name":"x","roles":[]}`, "roles"},
		{`{"name":"x","roles":["root"]}`, "roles"},
		{`{"name":"x","roles":["viewer"],"expiresAt":"2001-01-01T00:00:00Z"}`, "expiresAt"},
	} {
		e.expectError(e.do("POST", Prefix+"/tokens", bad.body, nil), http.StatusUnprocessableEntity, "invalid", bad.field)
	}
	e.expectError(e.do("POST", Prefix+"/tokens", `{"name":"x","roles":["viewer"],"admin":true}`, nil), http.StatusBadRequest, CodeMalformedJSON, "")

	// Revoked: refused on the very next request.
	e.expect(e.do("DELETE", Prefix+"/tokens/"+id, "", nil), http.StatusOK)
	if w := e.do("GET", Prefix+"/clusters", "", bearer(tok)); w.Code != http.StatusUnauthorized {
		t.Fatalf("revoked token: %d %s", w.Code, w.Body)
	}
	e.expectError(e.do("DELETE", Prefix+"/tokens/nope", "", nil), http.StatusNotFound, CodeNotFound, "")

	// Expired: refused.
	issued := authn.NewToken()
	past := time.Now().Add(-time.Minute)
	if _, err := e.store.CreateToken(context.Background(), store.Token{ID: issued.ID, Name: "old", Roles: []string{"admin"}, CreatedBy: "test", ExpiresAt: &past}, issued.Hash); err != nil {
		t.Fatal(err)
	}
	if w := e.do("GET", Prefix+"/clusters", "", bearer(issued.Plaintext)); w.Code != http.StatusUnauthorized {
		t.Fatalf("expired token: %d %s", w.Code, w.Body)
	}
	// No credentials, or a malformed header: 401 with a Bearer challenge.
	for _, a := range []string{"none", "Bearer", "Basic YWRtaW46YWRtaW4=", "Bearer " + tok + "x"} {
		w := e.do("GET", Prefix+"/clusters", "", hdr("Authorization", a))
		if w.Code != http.StatusUnauthorized || !strings.HasPrefix(w.Header().Get("WWW-Authenticate"), "Bearer") {
			t.Fatalf("Authorization %q: %d %v", a, w.Code, w.Header())
		}
	}
}

// noRollouts is a rollout controller that has none.
type noRollouts struct{}

func (noRollouts) StartOnce(context.Context, string, string, rollout.Spec) (rollout.Rollout, bool, error) {
	return rollout.Rollout{}, false, rollout.ErrNotFound
}
func (noRollouts) Get(context.Context, int64) (rollout.Rollout, error) {
	return rollout.Rollout{}, rollout.ErrNotFound
}
func (noRollouts) List(context.Context, int) ([]rollout.Rollout, error) { return nil, nil }
func (noRollouts) Abort(context.Context, int64) (rollout.Rollout, error) {
	return rollout.Rollout{}, rollout.ErrNotFound
}
