package scheduler_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/portico-io/portico/internal/eventually"
	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/scheduler"
	"github.com/portico-io/portico/scheduler/store"
)

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// writeSecret replaces dir/name the way the kubelet updates a Secret
// volume: a new file renamed over the old one.
func writeSecret(t *testing.T, dir, name, value string) {
	t.Helper()
	tmp := filepath.Join(dir, ".tmp-"+name)
	if err := os.WriteFile(tmp, []byte(value), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

// TestSecretRefEndToEnd runs every role in one scheduler.Run with a
// secrets directory and a captured debug log: bad references are 422
// naming the field (a missing secret naming the secret and directory);
// the target receives prefix + value, and a rotated value on the next
// run without a restart; a secret removed after create fails the run as
// DEAD on its first attempt naming it; and neither value ever shows in
// the API's responses, any database row or the log — even when the
// target echoes the header back in an error body.
func TestSecretRefEndToEnd(t *testing.T) {
	const v1, v2 = "tok-ONE-8f3a9c", "tok-TWO-51be07"
	dbURL := testdeps.Postgres(t)
	dir := t.TempDir()
	writeSecret(t, dir, "billing-token", v1+"\n")
	writeSecret(t, dir, "short-lived", "whatever")
	logs := &syncBuffer{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tokenFile, token := adminToken(t)
	bindings := filepath.Join(t.TempDir(), "bindings.yaml")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- scheduler.Run(ctx, scheduler.Config{DatabaseURL: dbURL, Listener: lis, Roles: scheduler.AllRoles, InsecurePlaintext: true,
			AdminTokenFile:  tokenFile,
			TargetAllowlist: "127.0.0.0/8", SecretsDir: dir, SecretBindings: bindings, Tick: 50 * time.Millisecond, WorkerPoll: 20 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	base := "http://" + lis.Addr().String()
	eventually.True(t, 10*time.Second, "ready", func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	e := &env{api: &httptest.Server{URL: base}, token: token()}

	auth := make(chan string, 64)
	tg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/echo" { // a target that echoes credentials in its error body
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte("rejected credentials: " + r.Header.Get("X-Api-Key")))
			return
		}
		select {
		case auth <- r.Header.Get("Authorization"):
		default:
		}
	}))
	t.Cleanup(tg.Close)
	// Written after start: the file is read when it changes.
	if err := os.WriteFile(bindings, []byte(`bindings:
  - {secret: billing-token, tenants: [acme], destinations: ["`+tg.URL+`"]}
  - {secret: short-lived, tenants: [acme], destinations: ["`+tg.URL+`"]}
  - {secret: no-such-secret, tenants: [acme], destinations: ["`+tg.URL+`"]}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	spec := func(url, ref string) string {
		return `{"tenant":"acme","schedule":{"type":"FIXED_RATE","every":"PT1S","anchor":"2020-01-01T00:00:00Z"},
			"target":{"type":"HTTP","http":{"url":"` + url + `","secretRef":` + ref + `}},
			"execution":{"timeoutSeconds":5,"retry":{"maxAttempts":3,"initialBackoffMs":1,"maxBackoffMs":1}}}`
	}
	for ref, field := range map[string]string{
		`{"name":"../etc/passwd"}`:                            "target.http.secretRef.name",
		`{"name":""}`:                                         "target.http.secretRef.name",
		`{"name":"billing-token","header":"Bad Hdr"}`:         "target.http.secretRef.header",
		`{"name":"billing-token","header":"Idempotency-Key"}`: "target.http.secretRef.header",
		`{"name":"billing-token","prefix":"a\r\nX: y"}`:       "target.http.secretRef.prefix",
		`{"name":"no-such-secret"}`:                           "target.http.secretRef.name",
	} {
		code, out := e.do(t, "POST", "/v1/jobs", spec(tg.URL, ref), map[string]string{"Idempotency-Key": ref})
		errBody, _ := out["error"].(map[string]any)
		if code != http.StatusUnprocessableEntity || errBody["field"] != field {
			t.Fatalf("secretRef %s: %d %v, want 422 on %s", ref, code, out, field)
		}
		if msg, _ := errBody["message"].(string); strings.Contains(ref, "no-such") && (!strings.Contains(msg, `"no-such-secret"`) || !strings.Contains(msg, dir)) {
			t.Fatalf("missing secret message %q must name the secret and the directory", msg)
		}
	}

	// acme's secret: another tenant cannot name it, and acme cannot send it
	// anywhere but its destinations; neither request stores anything.
	otherTenant := strings.Replace(spec(tg.URL, `{"name":"billing-token"}`), `"tenant":"acme"`, `"tenant":"globex"`, 1)
	for body, field := range map[string]string{
		otherTenant: "target.http.secretRef.name",
		spec("http://127.0.0.2:9/x", `{"name":"billing-token"}`): "target.http.url",
	} {
		code, out := e.do(t, "POST", "/v1/jobs", body, map[string]string{"Idempotency-Key": field})
		errBody, _ := out["error"].(map[string]any)
		if code != http.StatusUnprocessableEntity || errBody["field"] != field {
			t.Fatalf("unbound use: %d %v, want 422 on %s", code, out, field)
		}
	}
	if _, list := e.do(t, "GET", "/v1/jobs?tenant=globex", "", nil); len(list["items"].([]any)) != 0 {
		t.Fatalf("a refused create stored a job: %v", list)
	}

	id := e.createJob(t, spec(tg.URL, `{"name":"billing-token","prefix":"Bearer "}`))
	want := "Bearer " + v1
	for got := range auth {
		if got != want {
			t.Fatalf("Authorization = %q, want %q", got, want)
		}
		break
	}
	writeSecret(t, dir, "billing-token", v2)
	deadline := time.After(15 * time.Second)
	for rotated := false; !rotated; {
		select {
		case got := <-auth:
			rotated = got == "Bearer "+v2
			if !rotated && got != want {
				t.Fatalf("Authorization = %q", got)
			}
		case <-deadline:
			t.Fatal("the rotated secret never reached the target")
		}
	}
	code, out := e.do(t, "PATCH", "/v1/jobs/"+id, `{"target":{"http":{"secretRef":{"name":"no-such-secret"}}}}`,
		map[string]string{"If-Match": `"1"`})
	if errBody, _ := out["error"].(map[string]any); code != http.StatusUnprocessableEntity || errBody["field"] != "target.http.secretRef.name" {
		t.Fatalf("PATCH to a missing secret: %d %v", code, out)
	}
	if _, j := e.do(t, "GET", "/v1/jobs/"+id, "", nil); j["version"] != 1.0 {
		t.Fatalf("a refused PATCH changed the job: %v", j)
	}
	code, _ = e.do(t, "POST", "/v1/jobs/"+id+":pause", "", nil)
	if code != http.StatusOK {
		t.Fatalf("pause: %d", code)
	}

	echo := e.createJob(t, oneOffRef(tg.URL+"/echo", `{"name":"billing-token","header":"X-Api-Key"}`))
	gone := e.createJob(t, oneOffRef(tg.URL, `{"name":"short-lived"}`))
	if err := os.Remove(filepath.Join(dir, "short-lived")); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 15*time.Second, "both one-off runs DEAD", func() bool {
		a, b := e.runs(t, echo), e.runs(t, gone)
		return len(a) == 1 && len(b) == 1 && a[0]["status"] == store.StatusDead && b[0]["status"] == store.StatusDead
	})
	if r := e.runs(t, gone)[0]; r["attempt"] != 1.0 || !strings.Contains(r["lastError"].(string), `SECRET_UNAVAILABLE: target.http.secretRef "short-lived"`) {
		t.Fatalf("missing secret at run time: %v", r)
	}
	if r := e.runs(t, echo)[0]; !strings.Contains(r["lastError"].(string), "rejected credentials: [REDACTED]") {
		t.Fatalf("echoed secret not redacted: %v", r)
	}

	// The value is nowhere but in the directory.
	var api strings.Builder
	for _, path := range []string{"/v1/jobs/" + id, "/v1/jobs/" + echo, "/v1/jobs/" + id + "/runs", "/v1/jobs/" + echo + "/runs", "/v1/dlq?tenant=acme", "/v1/jobs?tenant=acme"} {
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		req.Header.Set("Authorization", "Bearer "+e.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", path, resp.StatusCode)
		}
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		resp.Body.Close()
		api.WriteString(b.String())
	}
	if !strings.Contains(api.String(), `"secretRef":{"name":"billing-token","header":"Authorization","prefix":"Bearer "}`) {
		t.Errorf("GET does not show the reference: %s", api.String())
	}
	db, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var rows string
	if err := db.QueryRow(context.Background(), `SELECT
		(SELECT string_agg(d::text, ' ') FROM scheduler.schedule_details d) ||
		(SELECT string_agg(e::text, ' ') FROM scheduler.scheduled_execution e) ||
		coalesce((SELECT string_agg(o::text, ' ') FROM scheduler.notification_outbox o), '')`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rows, "billing-token") || !strings.Contains(logs.String(), "run dead-lettered") {
		t.Fatal("the probes see nothing: the checks below would prove nothing")
	}
	for _, v := range []string{v1, v2} {
		for what, text := range map[string]string{"API responses": api.String(), "database rows": rows, "logs": logs.String()} {
			if strings.Contains(text, v) {
				t.Errorf("secret value %q found in the %s", v, what)
			}
		}
	}
}

func oneOffRef(url, ref string) string {
	return `{"tenant":"acme","schedule":{"type":"ONE_OFF","at":"2020-01-01T00:00:00Z"},
		"target":{"type":"HTTP","http":{"url":"` + url + `","secretRef":` + ref + `}},
		"execution":{"timeoutSeconds":5,"retry":{"maxAttempts":3,"initialBackoffMs":1,"maxBackoffMs":1}}}`
}
