package admin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/portico-io/portico/internal/authz"
)

const applyBatch = `{"items":[
	{"kind":"clusters","resource":{"name":"echo","endpoints":[{"address":"127.0.0.1","port":18900}]}},
	{"kind":"routes","resource":{"name":"echo","match":{"pathPrefix":"/echo"},"cluster":"echo"}},
	{"kind":"consumers","resource":{"name":"acme","tenant":"acme","tier":"pro"}},
	{"kind":"ratelimit-rules","resource":{"name":"per-consumer","domain":"portico","descriptors":[{"key":"consumer"}],"limit":5,"window":"1s","burst":5}}
]}`

// apply POSTs a batch and returns its decoded answer (nil for an error)
// and the recorded response.
func (e *env) apply(body string, dry bool, h http.Header) (*ApplyResponse, *httptest.ResponseRecorder) {
	e.t.Helper()
	path := Prefix + ApplyPath
	if dry {
		path += "?dryRun=true"
	} else if h == nil {
		h = newKeyHeader()
	}
	w := e.do("POST", path, body, h)
	if w.Code >= 300 {
		return nil, w
	}
	var out ApplyResponse
	if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
		e.t.Fatalf("apply: %v: %s", err, w.Body)
	}
	return &out, w
}

// A dry run answers the diff and changes nothing; the apply then makes
// exactly one version holding every kind of the batch; the same batch again
// makes none ("unchanged"), and a changed batch with prune makes one
// version with the update and the deletion.
func TestApplyDryRunThenOneVersionThenUnchanged(t *testing.T) {
	e := newEnv(t)
	plan, resp := e.apply(applyBatch, true, nil)
	if plan == nil || resp.Code != http.StatusOK || plan.Result != ApplyPlanned || len(plan.Changes) != 4 || plan.Version != 0 {
		t.Fatalf("dry run: %d %+v", resp.Code, plan)
	}
	if e.head() != 0 {
		t.Fatalf("dry run made version %d", e.head())
	}
	for _, c := range plan.Changes {
		if c.Action != "create" || c.After == nil || c.Before != nil {
			t.Fatalf("planned change %+v", c)
		}
	}

	got, resp := e.apply(applyBatch, false, nil)
	if got == nil || resp.Code != http.StatusCreated || got.Result != ApplyApplied || got.Version != 1 || len(got.Changes) != 4 {
		t.Fatalf("apply: %d %+v", resp.Code, got)
	}
	if resp.Header().Get(HeaderConfigVersion) != "1" {
		t.Fatalf("version header %q", resp.Header().Get(HeaderConfigVersion))
	}

	again, resp := e.apply(applyBatch, false, nil)
	if again == nil || resp.Code != http.StatusOK || again.Result != ApplyUnchanged || again.Unchanged != 4 || e.head() != 1 {
		t.Fatalf("second apply: %d %+v head %d", resp.Code, again, e.head())
	}

	changed := `{"prune":["routes","clusters"],"items":[
		{"kind":"clusters","resource":{"name":"echo","endpoints":[{"address":"127.0.0.1","port":18901}]}}]}`
	// The route still needs the cluster? No: it is pruned in the same batch.
	got, resp = e.apply(changed, false, nil)
	if got == nil || resp.Code != http.StatusCreated || got.Version != 2 || len(got.Changes) != 2 {
		t.Fatalf("apply with prune: %d %+v", resp.Code, got)
	}
	actions := map[string]string{}
	for _, c := range got.Changes {
		actions[string(c.Kind)+"/"+c.Name] = c.Action
	}
	if actions["clusters/echo"] != "update" || actions["routes/echo"] != "delete" {
		t.Fatalf("changes %v", actions)
	}
	e.expect(e.do("GET", Prefix+"/consumers/acme", "", nil), http.StatusOK) // not pruned: not named
}

// A bad resource anywhere in the batch is 422 naming kind, name and field,
// and nothing of the batch is stored; so is a batch whose result does not
// validate as a whole.
func TestApplyBadResourceChangesNothing(t *testing.T) {
	e := newEnv(t)
	bad := strings.Replace(applyBatch, `"port":18900`, `"port":0`, 1)
	w := e.do("POST", Prefix+ApplyPath, bad, newKeyHeader())
	e.expectError(w, http.StatusUnprocessableEntity, "invalid", "clusters/echo: endpoints[0].port")
	dangling := `{"items":[{"kind":"routes","resource":{"name":"echo","match":{"pathPrefix":"/echo"},"cluster":"nope"}}]}`
	e.expectError(e.do("POST", Prefix+ApplyPath+"?dryRun=true", dangling, nil), http.StatusUnprocessableEntity, "unknown_reference", "routes/echo: cluster")
	e.expectError(e.do("POST", Prefix+ApplyPath, `{"items":[{"kind":"apikeys","name":"x","delete":true}]}`, newKeyHeader()),
		http.StatusUnprocessableEntity, "invalid", "items[0].kind")
	e.expectError(e.do("POST", Prefix+ApplyPath, applyBatch, nil), http.StatusPreconditionRequired, CodeIdempotencyKeyRequired, "")
	if e.head() != 0 {
		t.Fatalf("a refused batch made version %d", e.head())
	}
}

// The route needs config.write; a batch touching a security kind also
// needs security.write, by item or by prune; without credentials: 401.
func TestApplyPermissions(t *testing.T) {
	e := newEnv(t)
	bearer := func(r authz.Role) http.Header {
		h := newKeyHeader()
		h.Set("Authorization", "Bearer "+e.tokens[r])
		return h
	}
	provider := `{"items":[{"kind":"jwt-providers","resource":{"name":"idp","issuer":"https://idp.test","audiences":["portico"],
		"jwksUri":"https://idp.test/jwks.json","algorithms":["RS256"]}}]}`
	e.expectError(e.do("POST", Prefix+ApplyPath, provider, bearer(authz.Editor)), http.StatusForbidden, authz.ResultForbidden, "")
	e.expectError(e.do("POST", Prefix+ApplyPath, `{"prune":["secrets"]}`, bearer(authz.Editor)), http.StatusForbidden, authz.ResultForbidden, "")
	e.expectError(e.do("POST", Prefix+ApplyPath, applyBatch, bearer(authz.Viewer)), http.StatusForbidden, authz.ResultForbidden, "")
	e.expectError(e.do("POST", Prefix+ApplyPath, applyBatch, bearer(authz.SecurityAdmin)), http.StatusForbidden, authz.ResultForbidden, "")
	if w := e.do("POST", Prefix+ApplyPath, applyBatch, hdr("Authorization", "Bearer ptk_nope")); w.Code != http.StatusUnauthorized {
		t.Fatalf("bad token: %d", w.Code)
	}
	if e.head() != 0 {
		t.Fatalf("refused batches made version %d", e.head())
	}
	e.expect(e.do("POST", Prefix+ApplyPath, applyBatch, bearer(authz.Editor)), http.StatusCreated)
	e.expect(e.do("POST", Prefix+ApplyPath, provider, bearer(authz.Admin)), http.StatusCreated)
}

// A batch may be a whole config: larger than other endpoints' body cap
// (here shrunk to 16 KiB so the test stays quick), up to MaxApplyBytes.
func TestApplyTakesALargeBatch(t *testing.T) {
	e := newEnv(t)
	e.h = newHandler(t, Config{Store: e.store, MaxBodyBytes: 16 << 10})
	var b strings.Builder
	b.WriteString(`{"items":[`)
	const n = 200
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"kind":"clusters","resource":{"name":"upstream-%03d","endpoints":[{"address":"127.0.0.1","port":%d}]}}`, i, 20000+i)
	}
	b.WriteString(`]}`)
	if b.Len() <= 16<<10 {
		t.Fatalf("batch of %d bytes is not larger than the cap", b.Len())
	}
	big := `{"name":"big","endpoints":[` + strings.Repeat(`{"address":"127.0.0.1","port":1},`, 600) + `{"address":"127.0.0.1","port":1}]}`
	e.expectError(e.do("POST", Prefix+"/clusters", big, newKeyHeader()), http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "")
	plan, resp := e.apply(b.String(), true, nil)
	if plan == nil || len(plan.Changes) != n {
		t.Fatalf("large dry run: %d", resp.Code)
	}
	if got, _ := e.apply(b.String(), false, nil); got == nil || got.Version != 1 {
		t.Fatalf("large apply: %+v", got)
	}
}
