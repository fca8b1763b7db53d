package admin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/portico-io/portico/controlplane/spec"
	"github.com/portico-io/portico/internal/authz"
)

// importBody builds an import of consumers × perConsumer keys whose
// secrets are "secret-<consumer>-<j>".
func importBody(t testing.TB, consumers, perConsumer int, edit func(*importRequest)) string {
	t.Helper()
	var req importRequest
	for i := range consumers {
		c := importConsumer{Name: fmt.Sprintf("mig%04d", i), Tenant: "t1", Tier: "gold"}
		for j := range perConsumer {
			sum := sha256.Sum256(fmt.Appendf(nil, "secret-%d-%d", i, j))
			c.Keys = append(c.Keys, importKey{ID: fmt.Sprintf("mig%04d-%04d", i, j), SHA256: hex.EncodeToString(sum[:]),
				Prefix: "ak_", Scopes: []string{"orders:read"}})
		}
		req.Consumers = append(req.Consumers, c)
	}
	if edit != nil {
		edit(&req)
	}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

const importPath = Prefix + "/consumers:import"

// Ten thousand keys given as hashes land in one version, with a small
// answer that never echoes a hash; the same Idempotency-Key replays it.
func TestImportKeysByHash(t *testing.T) {
	e := newEnv(t)
	before := e.head()
	body := importBody(t, 100, 100, nil)
	idem := hdr(HeaderIdempotencyKey, "import-1")
	w := e.do("POST", importPath, body, idem)
	got := e.expect(w, http.StatusCreated)
	if e.head() != before+1 || got["version"] != float64(before+1) || w.Header().Get(HeaderConfigVersion) != fmt.Sprint(before+1) {
		t.Fatalf("head %d after %d: %s", e.head(), before, w.Body)
	}
	if got["keys"].(map[string]any)["created"] != float64(10_000) || got["consumers"].(map[string]any)["created"] != float64(100) {
		t.Fatalf("answer: %s", w.Body)
	}
	if w.Body.Len() > 200 || strings.Contains(w.Body.String(), "sha256") {
		t.Fatalf("answer is not small: %s", w.Body)
	}
	cfg, err := e.store.ConfigAt(context.Background(), e.head())
	if err != nil || cfg.APIKeys.Len() != 10_000 || cfg.Consumers.Len() != 100 {
		t.Fatalf("config: %d keys, %d consumers (%v)", cfg.APIKeys.Len(), cfg.Consumers.Len(), err)
	}
	sum := sha256.Sum256([]byte("secret-7-42"))
	if k := cfg.APIKeys.Lookup("mig0007-0042"); k == nil || k.SHA256 != hex.EncodeToString(sum[:]) || k.Consumer != "mig0007" {
		t.Fatalf("key: %+v", k)
	}

	// The audit records every imported key, without its hash.
	audit := e.do("GET", Prefix+"/audit?limit=1000", "", nil)
	e.expect(audit, http.StatusOK)
	if last := hashHex("secret-99-99"); !strings.Contains(audit.Body.String(), "mig0099-0099") || strings.Contains(audit.Body.String(), last) {
		t.Fatalf("audit of the import: %.300s", audit.Body)
	}

	// The version shows its first 1000 changes and a cursor; the rest
	// come a page at a time, each change once, in write order.
	vpath := fmt.Sprintf("%s/config/versions/%d", Prefix, before+1)
	v := e.expect(e.do("GET", vpath, "", nil), http.StatusOK)
	if n := len(v["changes"].([]any)); n != 1000 || v["changesNextCursor"] == "" {
		t.Fatalf("version: %d changes, next %v", n, v["changesNextCursor"])
	}
	seen, cursor, pages := map[string]bool{}, "", 0
	for {
		page := e.expect(e.do("GET", vpath+"/changes?limit=1000&cursor="+cursor, "", nil), http.StatusOK)
		pages++
		for _, it := range page["items"].([]any) {
			c := it.(map[string]any)
			ref := fmt.Sprint(c["kind"], "/", c["name"])
			if seen[ref] || c["action"] != "create" {
				t.Fatalf("change %v: seen before or not a create", c)
			}
			seen[ref] = true
		}
		if cursor = page["nextCursor"].(string); cursor == "" {
			break
		}
	}
	if len(seen) != 10_100 || pages != 11 || !seen["apikeys/mig0099-0099"] || !seen["consumers/mig0000"] {
		t.Fatalf("paged %d changes in %d pages", len(seen), pages)
	}
	if first := e.expect(e.do("GET", vpath+"/changes", "", nil), http.StatusOK); len(first["items"].([]any)) != 100 {
		t.Fatalf("default page: %d items", len(first["items"].([]any)))
	}
	e.expectError(e.do("GET", Prefix+"/config/versions/99999/changes", "", nil), http.StatusNotFound, CodeNotFound, "")
	e.expectError(e.do("GET", vpath+"/changes?cursor=x", "", nil), http.StatusBadRequest, CodeInvalidParameter, "cursor")

	w = e.do("POST", importPath, body, idem)
	e.expect(w, http.StatusCreated)
	if w.Header().Get(HeaderReplayed) != "true" || e.head() != before+1 {
		t.Fatalf("replay: head %d, %v", e.head(), w.Header())
	}
	e.expectError(e.do("POST", importPath, importBody(t, 1, 1, nil), idem), 422, CodeIdempotencyKeyReused, "")

	// Imported keys list by consumer, a page at a time.
	list := e.expect(e.do("GET", Prefix+"/consumers/mig0003/keys?limit=60", "", nil), http.StatusOK)
	if items := list["items"].([]any); len(items) != 60 || list["nextCursor"] != "mig0003-0059" {
		t.Fatalf("page: %d items, next %v", len(items), list["nextCursor"])
	}
	list = e.expect(e.do("GET", Prefix+"/consumers/mig0003/keys?limit=60&cursor=mig0003-0059", "", nil), http.StatusOK)
	if items := list["items"].([]any); len(items) != 40 || list["nextCursor"] != "" {
		t.Fatalf("last page: %d items, next %v", len(items), list["nextCursor"])
	}

	// Existing consumers given unchanged take new keys; an id given
	// without one is derived from the hash.
	sum = sha256.Sum256([]byte("another"))
	add := fmt.Sprintf(`{"consumers":[{"name":"mig0001","tenant":"t1","tier":"gold","keys":[{"sha256":%q}]}]}`, strings.ToUpper(hex.EncodeToString(sum[:])))
	got = e.expect(e.do("POST", importPath, add, newKeyHeader()), http.StatusCreated)
	if got["consumers"].(map[string]any)["unchanged"] != float64(1) || got["keys"].(map[string]any)["created"] != float64(1) {
		t.Fatalf("add: %v", got)
	}
	if _, _, err := e.store.Get(context.Background(), spec.KindAPIKey, derivedKeyID(hex.EncodeToString(sum[:]))); err != nil {
		t.Fatal(err)
	}
}

// A bad item anywhere is 422 naming it and its field, and changes nothing.
func TestImportRejectsBadItems(t *testing.T) {
	e := newEnv(t)
	e.create("consumers", `{"name":"taken","tenant":"t1"}`)
	e.expect(e.do("POST", importPath, importBody(t, 1, 1, func(r *importRequest) { r.Consumers[0].Name = "first" }), newKeyHeader()), http.StatusCreated)
	before := e.head()
	cases := []struct {
		name, field, code string
		body              string
	}{
		{"bad hash", "consumers[2].keys[5].sha256", spec.CodeInvalid, importBody(t, 3, 8, func(r *importRequest) { r.Consumers[2].Keys[5].SHA256 = "xyz" })},
		{"duplicate id", "consumers[1].keys[0].id", spec.CodeConflict, importBody(t, 3, 8, func(r *importRequest) { r.Consumers[1].Keys[0].ID = r.Consumers[0].Keys[3].ID })},
		{"duplicate hash", "consumers[2].keys[1].sha256", spec.CodeConflict, importBody(t, 3, 8, func(r *importRequest) { r.Consumers[2].Keys[1].SHA256 = r.Consumers[0].Keys[0].SHA256 })},
		{"bad id", "consumers[0].keys[2].id", spec.CodeInvalid, importBody(t, 3, 8, func(r *importRequest) { r.Consumers[0].Keys[2].ID = "Not/Valid" })},
		{"no tenant", "consumers[1].tenant", spec.CodeRequired, importBody(t, 3, 8, func(r *importRequest) { r.Consumers[1].Tenant = "" })},
		{"existing key id", "consumers[2].keys[0].id", spec.CodeConflict, importBody(t, 3, 8, func(r *importRequest) { r.Consumers[2].Keys[0].ID = "mig0000-0000" })},
		{"existing hash", "consumers[1].keys[3].sha256", spec.CodeConflict, importBody(t, 3, 8, func(r *importRequest) {
			sum := sha256.Sum256([]byte("secret-0-0"))
			r.Consumers[1].Keys[3].SHA256 = hex.EncodeToString(sum[:])
		})},
		{"changed consumer", "consumers[1].name", spec.CodeConflict, importBody(t, 3, 8, func(r *importRequest) { r.Consumers[1].Name = "taken" })},
		{"unknown field", "consumers[1].keys[2].secret", spec.CodeInvalid, strings.Replace(importBody(t, 3, 8, nil), `"id":"mig0001-0002",`, `"id":"mig0001-0002","secret":"x",`, 1)},
		{"unknown top field", "dryRun", spec.CodeInvalid, `{"consumers":[],"dryRun":true}`},
		{"empty", "consumers", spec.CodeRequired, `{}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e.t = t
			e.expectError(e.do("POST", importPath, c.body, newKeyHeader()), 422, c.code, c.field)
			if e.head() != before {
				t.Fatalf("head moved to %d", e.head())
			}
		})
	}
	e.t = t
	cfg, err := e.store.ConfigAt(context.Background(), e.head())
	if err != nil || cfg.APIKeys.Len() != 1 || cfg.Consumers.Len() != 2 {
		t.Fatalf("config changed: %d keys, %d consumers (%v)", cfg.APIKeys.Len(), cfg.Consumers.Len(), err)
	}
	e.expectError(e.do("POST", importPath, importBody(t, 1, 1, nil), nil), 428, CodeIdempotencyKeyRequired, "")
}

// Keys are credentials: only roles holding security.write may import.
func TestImportNeedsSecurityWrite(t *testing.T) {
	e := newEnv(t)
	body := importBody(t, 1, 2, nil)
	e.expectError(e.do("POST", importPath, body, hdr("Authorization", "none", HeaderIdempotencyKey, "u1")), http.StatusUnauthorized, authz.ResultUnauthenticated, "")
	for _, role := range authz.Roles() {
		w := e.do("POST", importPath, body, hdr("Authorization", "Bearer "+e.tokens[role], HeaderIdempotencyKey, "r-"+string(role)))
		if role.Has(authz.SecurityWrite) != (w.Code == http.StatusCreated) || (!role.Has(authz.SecurityWrite) && w.Code != http.StatusForbidden) {
			t.Fatalf("%s: %d %s", role, w.Code, w.Body)
		}
		if w.Code == http.StatusCreated {
			body = importBody(t, 1, 2, func(r *importRequest) {
				r.Consumers[0].Name = "next-" + string(role)
				for i := range r.Consumers[0].Keys {
					r.Consumers[0].Keys[i].ID += "-" + string(role)
					r.Consumers[0].Keys[i].SHA256 = hashHex(string(role) + fmt.Sprint(i))
				}
			})
		}
	}
}

func hashHex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
