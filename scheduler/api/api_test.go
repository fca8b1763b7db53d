package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/scheduler/api"
	"github.com/portico-io/portico/scheduler/api/apitest"
	"github.com/portico-io/portico/scheduler/jobspec"
	"github.com/portico-io/portico/scheduler/secret"
	"github.com/portico-io/portico/scheduler/store"
)

type fixture struct {
	h      http.Handler // sends the admin token unless a request has its own
	api    *api.API
	st     *store.Store
	db     *pgxpool.Pool
	tokens *apitest.Tokens
}

func newFixture(t *testing.T, allowlist string) *fixture {
	t.Helper()
	url := testdeps.Postgres(t)
	st, err := store.Open(context.Background(), store.Config{DatabaseURL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	g, err := jobspec.NewGuard(allowlist, nil)
	if err != nil {
		t.Fatal(err)
	}
	auth, tokens := apitest.InTable(t, st.Tokens(), "acme", "globex")
	a, err := api.New(api.Config{Store: st, Tokens: st.Tokens(), Guard: g, Auth: auth, AllowedHosts: apitest.Hosts})
	if err != nil {
		t.Fatal(err)
	}
	db, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return &fixture{h: apitest.AsDefault(a, tokens.Admin), api: a, st: st, db: db, tokens: tokens}
}

func call(t testing.TB, h http.Handler, method, path, body string, hdr ...string) (*httptest.ResponseRecorder, map[string]any) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var out map[string]any
	_ = json.Unmarshal(rec.Body.Bytes(), &out)
	return rec, out
}

const cronJob = `{"tenant":"acme","name":"nightly","schedule":{"type":"CRON","expression":"30 2 * * *","timeZone":"Asia/Kolkata"},
	"target":{"type":"HTTP","http":{"url":"http://127.0.0.1:18900/report"},"payload":{"date":"{{scheduledDate}}"}}}`

func TestCreateIsIdempotent(t *testing.T) {
	f := newFixture(t, "127.0.0.0/8")
	rec, first := call(t, f.h, "POST", "/v1/jobs", cronJob, "Idempotency-Key", "k1")
	if rec.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	if first["status"] != "ACTIVE" || first["version"].(float64) != 1 || first["nextRunAt"] == nil {
		t.Fatalf("server fields: %v", first)
	}
	// The first run is 02:30 Kolkata = 21:00 UTC the day before.
	next, _ := time.Parse(time.RFC3339, first["nextRunAt"].(string))
	if next.Hour() != 21 || next.Minute() != 0 || next.Location() != time.UTC {
		t.Errorf("nextRunAt %v", first["nextRunAt"])
	}
	rec, again := call(t, f.h, "POST", "/v1/jobs", cronJob, "Idempotency-Key", "k1")
	if rec.Code != http.StatusOK || again["jobId"] != first["jobId"] {
		t.Fatalf("retried create: %d %v, want 200 with jobId %v", rec.Code, again, first["jobId"])
	}
	rec, out := call(t, f.h, "POST", "/v1/jobs", strings.Replace(cronJob, "nightly", "other", 1), "Idempotency-Key", "k1")
	if rec.Code != http.StatusUnprocessableEntity || out["error"].(map[string]any)["code"] != api.CodeIdempotencyKeyReused {
		t.Fatalf("same key, different body: %d %v", rec.Code, out)
	}
	if rec, _ := call(t, f.h, "POST", "/v1/jobs", cronJob); rec.Code != http.StatusPreconditionRequired {
		t.Fatalf("no Idempotency-Key: %d", rec.Code)
	}
	var jobs, runs int
	_ = f.db.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM scheduler.schedule_details),
		(SELECT count(*) FROM scheduler.scheduled_execution)`).Scan(&jobs, &runs)
	if jobs != 1 || runs != 1 {
		t.Fatalf("%d jobs, %d runs stored; want 1 and 1", jobs, runs)
	}
}

func TestPatchNeedsIfMatch(t *testing.T) {
	f := newFixture(t, "127.0.0.0/8")
	_, job := call(t, f.h, "POST", "/v1/jobs", cronJob, "Idempotency-Key", "k")
	path := "/v1/jobs/" + job["jobId"].(string)
	patch := `{"schedule":{"expression":"0 3 * * *"}}`
	if rec, _ := call(t, f.h, "PATCH", path, patch); rec.Code != http.StatusPreconditionRequired {
		t.Fatalf("no If-Match: %d", rec.Code)
	}
	if rec, _ := call(t, f.h, "PATCH", path, patch, "If-Match", `"7"`); rec.Code != http.StatusPreconditionFailed {
		t.Fatalf("stale If-Match: %d", rec.Code)
	}
	rec, out := call(t, f.h, "PATCH", path, patch, "If-Match", `"1"`)
	if rec.Code != http.StatusOK || out["version"].(float64) != 2 || rec.Header().Get("ETag") != `"2"` {
		t.Fatalf("patch: %d %v", rec.Code, out)
	}
	if s := out["schedule"].(map[string]any); s["expression"] != "0 3 * * *" || s["timeZone"] != "Asia/Kolkata" {
		t.Fatalf("merged schedule: %v", s)
	}
	if rec, _ := call(t, f.h, "PATCH", path, patch, "If-Match", `"1"`); rec.Code != http.StatusPreconditionFailed {
		t.Fatalf("replayed If-Match: %d", rec.Code)
	}
	// Pause, resume, trigger, delete and the list.
	for _, c := range []struct {
		method, path string
		hdr          []string
		want         int
	}{
		{"POST", path + ":pause", nil, 200},
		{"POST", path + ":trigger", nil, 409},
		{"POST", path + ":resume", nil, 200},
		{"POST", path + ":trigger", nil, 202},
		{"POST", path + ":explode", nil, 404},
		{"GET", "/v1/jobs?tenant=acme", nil, 200},
		{"DELETE", path, nil, 428},
		{"DELETE", path, []string{"If-Match", `"4"`}, 204},
		{"GET", "/v1/jobs/999999", nil, 404},
	} {
		if rec, out := call(t, f.h, c.method, c.path, "", c.hdr...); rec.Code != c.want {
			t.Errorf("%s %s: %d %v, want %d", c.method, c.path, rec.Code, out, c.want)
		}
	}
	if _, out := call(t, f.h, "GET", "/v1/jobs?tenant=acme", ""); len(out["items"].([]any)) != 0 {
		t.Errorf("deleted job still listed: %v", out)
	}
}

func TestListPaginates(t *testing.T) {
	f := newFixture(t, "127.0.0.0/8")
	for _, k := range []string{"a", "b", "c"} {
		if rec, _ := call(t, f.h, "POST", "/v1/jobs", strings.Replace(cronJob, "nightly", k, 1), "Idempotency-Key", k); rec.Code != 201 {
			t.Fatal(rec.Body)
		}
	}
	var names []string
	cursor := ""
	for range 5 {
		_, out := call(t, f.h, "GET", "/v1/jobs?tenant=acme&limit=2&cursor="+cursor, "")
		for _, it := range out["items"].([]any) {
			names = append(names, it.(map[string]any)["name"].(string))
		}
		c, _ := out["nextCursor"].(string)
		if c == "" {
			break
		}
		cursor = c
	}
	if strings.Join(names, ",") != "a,b,c" {
		t.Fatalf("pages gave %v", names)
	}
}

func TestInvalidSpecs422NothingStored(t *testing.T) {
	f := newFixture(t, "") // public addresses only
	big := strings.Repeat("x", jobspec.MaxPayloadBytes+1)
	cases := []struct{ name, body, field string }{
		{"bad cron", strings.Replace(cronJob, "30 2 * * *", "61 2 * * *", 1), "schedule.expression"},
		{"bad zone", strings.Replace(cronJob, "Asia/Kolkata", "Mars/Olympus_Mons", 1), "schedule.timeZone"},
		{"private target", strings.Replace(cronJob, "127.0.0.1:18900", "10.0.0.1", 1), "target.http.url"},
		{"metadata target", strings.Replace(cronJob, "127.0.0.1:18900", "169.254.169.254", 1), "target.http.url"},
		{"name resolving to loopback", strings.Replace(cronJob, "127.0.0.1:18900", "localhost:8080", 1), "target.http.url"},
		{"loopback literal", cronJob, "target.http.url"},
		{"payload too large", `{"tenant":"acme","schedule":{"type":"ONE_OFF","at":"2030-01-01T00:00:00Z"},
			"target":{"type":"HTTP","http":{"url":"http://93.184.215.14/","body":"` + big + `"}}}`, "target.payload"},
		{"unknown field", `{"tenant":"acme","bogus":1}`, "bogus"},
		{"wrong type", `{"tenant":"acme","schedule":{"type":"ONE_OFF","at":"2030-01-01T00:00:00Z"},"execution":{"timeoutSeconds":"5"}}`, "execution.timeoutSeconds"},
		{"bad every", `{"tenant":"acme","schedule":{"type":"FIXED_RATE","every":"5m","anchor":"2026-01-01T00:00:00Z"},
			"target":{"type":"HTTP","http":{"url":"http://93.184.215.14/"}}}`, "schedule.every"},
		{"no tenant", `{"schedule":{"type":"ONE_OFF","at":"2030-01-01T00:00:00Z"}}`, "tenant"},
	}
	for _, c := range cases {
		rec, out := call(t, f.h, "POST", "/v1/jobs", c.body, "Idempotency-Key", c.name)
		e, _ := out["error"].(map[string]any)
		if rec.Code != http.StatusUnprocessableEntity || e["field"] != c.field {
			t.Errorf("%s: %d %v, want 422 on %s", c.name, rec.Code, out, c.field)
		}
	}
	var n int
	_ = f.db.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM scheduler.schedule_details) +
		(SELECT count(*) FROM scheduler.scheduled_execution)`).Scan(&n)
	if n != 0 {
		t.Fatalf("%d rows stored by invalid requests", n)
	}
}

// fakeStore accepts every create; the fuzz target exercises decoding and
// validation only.
type fakeStore struct{ api.Store }

// noTokens is the token table of the fuzz test, which never reaches it:
// the embedded nil interface panics if it does.
type noTokens struct{ api.TokenTable }

func (fakeStore) CreateJob(_ context.Context, s *jobspec.Spec, _, _ string) (store.Job, bool, error) {
	return store.Job{ID: 1, Tenant: s.Tenant, Spec: s, Version: 1, Enabled: *s.Enabled}, true, nil
}

type noDNS struct{}

func (noDNS) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return nil, errors.New("no DNS in fuzzing")
}

func FuzzCreateJob(f *testing.F) {
	f.Add(cronJob)
	f.Add(`{"tenant":"t","schedule":{"type":"FIXED_RATE","every":"PT5M","anchor":"2026-01-01T00:00:00Z"},"target":{"type":"HTTP","http":{"url":"http://127.0.0.1/"}}}`)
	f.Add(`{"tenant":"t","schedule":{"type":"ONE_OFF","at":"2026-01-01T00:00:00Z"},"target":{"type":"HTTP","http":{"url":"http://[::1]:80/","headers":{"a":"b"}}},"execution":{"retry":{"maxAttempts":2}}}`)
	f.Add(`{"tenant":"t","schedule":{"type":"CRON","expression":"*/0 * * * *"}}`)
	f.Add(`[]`)
	f.Add(`{"schedule":null}`)
	f.Add(`{"tenant":"t","schedule":{"type":"ONE_OFF","at":"2026-01-01T00:00:00Z"},"target":{"type":"HTTP","http":{"url":"http://127.0.0.1/","secretRef":{"name":"tok","prefix":"Bearer "}}},"execution":{"maxDeferSeconds":60}}`)
	f.Add(`{"tenant":"t","schedule":{"type":"ONE_OFF","at":"2026-01-01T00:00:00Z"},"target":{"type":"HTTP","http":{"url":"http://127.0.0.1/","secretRef":{"name":"../x","header":""}}}}`)
	secrets := f.TempDir()
	if err := os.WriteFile(filepath.Join(secrets, "tok"), []byte("v"), 0o600); err != nil {
		f.Fatal(err)
	}
	bindings := filepath.Join(f.TempDir(), "bindings.yaml")
	if err := os.WriteFile(bindings, []byte("bindings: [{secret: tok, tenants: [t], destinations: ['http://127.0.0.1/']}]"), 0o600); err != nil {
		f.Fatal(err)
	}
	g, err := jobspec.NewGuard("127.0.0.0/8,::1/128", noDNS{})
	if err != nil {
		f.Fatal(err)
	}
	auth, tokens := apitest.New(f)
	api, err := api.New(api.Config{Store: fakeStore{}, Tokens: noTokens{}, Guard: g, Secrets: secret.NewDir(secrets, bindings, nil), Auth: auth, AllowedHosts: apitest.Hosts})
	if err != nil {
		f.Fatal(err)
	}
	a := apitest.AsDefault(api, tokens.Admin)
	f.Fuzz(func(t *testing.T, body string) {
		rec, out := call(t, a, "POST", "/v1/jobs", body, "Idempotency-Key", "k")
		switch {
		case rec.Code == http.StatusCreated:
		case rec.Code == http.StatusUnprocessableEntity:
			if _, ok := out["error"].(map[string]any); !ok {
				t.Fatalf("422 without the error envelope: %s", rec.Body)
			}
		default:
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body)
		}
	})
}
