package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/portico-io/portico/internal/authz"
	"github.com/portico-io/portico/internal/authz/authztest"
)

// Every route refuses a caller without credentials (401) and a role without
// the route's permission (403), and serves the roles that hold it.
func TestEveryRouteIsGuarded(t *testing.T) {
	f := newFixture(t, "127.0.0.0/8")
	var jobs, tokens []authz.Route
	for _, rt := range f.api.Routes() {
		if strings.Contains(rt.Pattern, "/v1/tokens") {
			tokens = append(tokens, rt)
		} else {
			jobs = append(jobs, rt)
		}
	}
	if len(jobs) != 10 || len(tokens) != 4 {
		t.Fatalf("%d job routes, %d token routes", len(jobs), len(tokens))
	}
	// Job routes as a tenant's roles; token routes as roles without a
	// tenant (a tenant-bound credential never holds security.*, which
	// TestTenantTokens shows).
	authztest.Walk(t, f.api, jobs, func(r authz.Role) authztest.Credentials {
		return authztest.Bearer(f.tokens.Bound("acme", r))
	})
	authztest.Walk(t, f.api, tokens, func(r authz.Role) authztest.Credentials {
		return authztest.Bearer(f.tokens.Unbound(r))
	})
}

// The tenant comes from the credential: a tenant's token sees, changes,
// triggers and deletes only its own jobs and runs (another tenant's are
// 404, as if they did not exist), cannot name another tenant, and its
// Idempotency-Keys are its own. An admin acts for a tenant only by naming
// it.
func TestTenantIsolation(t *testing.T) {
	f := newFixture(t, "127.0.0.0/8")
	as := func(tenant string, role authz.Role) []string {
		return []string{"Authorization", "Bearer " + f.tokens.Bound(tenant, role)}
	}
	acme, globex := as("acme", authz.Editor), as("globex", authz.Editor)
	const job = `{"name":"nightly","schedule":{"type":"CRON","expression":"30 2 * * *"},"target":{"type":"HTTP","http":{"url":"http://127.0.0.1:18900/r"}}}`

	rec, created := call(t, f.h, "POST", "/v1/jobs", job, append(acme, "Idempotency-Key", "k1")...)
	if rec.Code != http.StatusCreated || created["tenant"] != "acme" {
		t.Fatalf("acme creates: %d %s", rec.Code, rec.Body)
	}
	id := created["jobId"].(string)
	// Another tenant: the same key makes its own job, not a replay.
	rec, other := call(t, f.h, "POST", "/v1/jobs", job, append(globex, "Idempotency-Key", "k1")...)
	if rec.Code != http.StatusCreated || other["tenant"] != "globex" || other["jobId"] == id {
		t.Fatalf("globex with acme's key: %d %s", rec.Code, rec.Body)
	}
	if rec, _ := call(t, f.h, "POST", "/v1/jobs", `{"tenant":"acme",`+job[1:], append(globex, "Idempotency-Key", "k2")...); rec.Code != http.StatusForbidden {
		t.Fatalf("globex naming acme: %d %s", rec.Code, rec.Body)
	}

	_, trig := call(t, f.h, "POST", "/v1/jobs/"+id+":trigger", "", acme...)
	runID, _ := trig["runId"].(string)
	if runID == "" {
		t.Fatalf("trigger: %v", trig)
	}
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/jobs/" + id, ""},
		{"PATCH", "/v1/jobs/" + id, `{"name":"mine"}`},
		{"DELETE", "/v1/jobs/" + id, ""},
		{"POST", "/v1/jobs/" + id + ":pause", ""},
		{"POST", "/v1/jobs/" + id + ":trigger", ""},
		{"GET", "/v1/jobs/" + id + "/runs", ""},
		{"GET", "/v1/runs/" + runID, ""},
		{"POST", "/v1/runs/" + runID + ":cancel", ""},
	} {
		if rec, _ := call(t, f.h, c.method, c.path, c.body, append(globex, "If-Match", `"1"`)...); rec.Code != http.StatusNotFound {
			t.Errorf("globex %s %s: %d %s", c.method, c.path, rec.Code, rec.Body)
		}
	}
	if rec, _ := call(t, f.h, "GET", "/v1/jobs?tenant=acme", "", globex...); rec.Code != http.StatusForbidden {
		t.Errorf("globex lists acme: %d", rec.Code)
	}
	if rec, _ := call(t, f.h, "GET", "/v1/dlq?tenant=acme", "", globex...); rec.Code != http.StatusForbidden {
		t.Errorf("globex reads acme's DLQ: %d", rec.Code)
	}
	if _, list := call(t, f.h, "GET", "/v1/jobs", "", globex...); len(list["items"].([]any)) != 1 {
		t.Errorf("globex's own list: %v", list)
	}
	if rec, _ := call(t, f.h, "GET", "/v1/jobs/"+id, "", acme...); rec.Code != http.StatusOK {
		t.Errorf("acme reads its job: %d", rec.Code)
	}
	// A patch naming the tenant in another case does not move the job.
	rec, patched := call(t, f.h, "PATCH", "/v1/jobs/"+id, `{"Tenant":"globex","TENANT":"globex"}`, append(acme, "If-Match", `"1"`)...)
	if rec.Code == http.StatusOK && patched["tenant"] != "acme" {
		t.Errorf("a case-folded tenant key moved the job: %s", rec.Body)
	}
	if rec, _ := call(t, f.h, "PATCH", "/v1/jobs/"+id, `{"name":"x"}`, append(as("acme", authz.Viewer), "If-Match", `"1"`)...); rec.Code != http.StatusForbidden {
		t.Errorf("acme's viewer patches: %d", rec.Code)
	}

	// The admin names the tenant it acts for.
	if rec, _ := call(t, f.h, "GET", "/v1/jobs", ""); rec.Code != http.StatusBadRequest {
		t.Errorf("admin listing without a tenant: %d", rec.Code)
	}
	if _, list := call(t, f.h, "GET", "/v1/jobs?tenant=acme", ""); len(list["items"].([]any)) != 1 {
		t.Errorf("admin lists acme: %v", list)
	}
	if rec, _ := call(t, f.h, "GET", "/v1/jobs/"+id, ""); rec.Code != http.StatusOK {
		t.Errorf("admin reads acme's job: %d", rec.Code)
	}
	if rec, _ := call(t, f.h, "GET", "/v1/jobs/"+id, "", "Authorization", "none"); rec.Code != http.StatusUnauthorized {
		t.Errorf("no credentials: %d", rec.Code)
	}
}
