package authz_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/portico-io/portico/internal/authn"
	"github.com/portico-io/portico/internal/authz"
	"github.com/portico-io/portico/internal/authz/authztest"
)

type fixture struct {
	h       http.Handler
	router  *authz.Router
	tokens  *authztest.Tokens
	metrics *prometheus.Registry
	log     *bytes.Buffer
	seen    *authn.Principal
}

func newFixture(t *testing.T, auth authz.Authenticator) *fixture {
	t.Helper()
	f := &fixture{tokens: authztest.NewTokens(), metrics: prometheus.NewRegistry(), log: &bytes.Buffer{}, seen: &authn.Principal{}}
	if auth == nil {
		a, err := authn.New(authn.Config{Tokens: f.tokens})
		if err != nil {
			t.Fatal(err)
		}
		auth = a
	}
	m, err := authz.NewMetrics(f.metrics, "test")
	if err != nil {
		t.Fatal(err)
	}
	f.router, err = authz.New(authz.Config{
		Authenticator:  auth,
		AllowedHosts:   []string{"localhost", "127.0.0.1", "::1", "admin.portico.svc", "*.example.com"},
		TrustedOrigins: []string{"https://console.example.com"},
		Metrics:        m,
		Logger:         slog.New(slog.NewTextHandler(f.log, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	echo := func(w http.ResponseWriter, r *http.Request) {
		p, ok := authn.FromContext(r.Context())
		if !ok {
			t.Error("handler ran without a principal")
		}
		*f.seen = p
		fmt.Fprintf(w, "ok %s", r.PathValue("name"))
	}
	f.router.HandleFunc("GET /v1/things", authz.ConfigRead, echo)
	f.router.HandleFunc("GET /v1/things/{name}", authz.ConfigRead, echo)
	f.router.HandleFunc("POST /v1/things", authz.ConfigWrite, echo)
	f.router.HandleFunc("DELETE /v1/things/{name}", authz.ConfigWrite, echo)
	f.router.HandleFunc("POST /v1/rollback", authz.RolloutWrite, echo)
	f.router.HandleFunc("/v1/tokens/", authz.SecurityWrite, echo)
	if f.h, err = f.router.Handler(); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) do(method, target string, mod func(*http.Request)) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, nil)
	r.Host = "localhost:18080"
	if mod != nil {
		mod(r)
	}
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, r)
	return rec
}

func as(f *fixture, role authz.Role) func(*http.Request) {
	return func(r *http.Request) { f.tokens.For(role)(r) }
}

func TestMiddleware(t *testing.T) {
	f := newFixture(t, nil)
	admin := as(f, authz.Admin)
	both := func(a, b func(*http.Request)) func(*http.Request) {
		return func(r *http.Request) { a(r); b(r) }
	}
	host := func(h string) func(*http.Request) { return func(r *http.Request) { r.Host = h } }
	header := func(k, v string) func(*http.Request) { return func(r *http.Request) { r.Header.Set(k, v) } }

	for _, tc := range []struct {
		name      string
		method    string
		target    string
		mod       func(*http.Request)
		status    int
		challenge string
		code      string
	}{
		{"ok", "GET", "/v1/things/a", admin, 200, "", ""},
		{"host with port", "GET", "/v1/things", both(admin, host("127.0.0.1:9")), 200, "", ""},
		{"IPv6 host", "GET", "/v1/things", both(admin, host("[::1]:18080")), 200, "", ""},
		{"host case and trailing dot", "GET", "/v1/things", both(admin, host("Admin.Portico.SVC.")), 200, "", ""},
		{"wildcard host", "GET", "/v1/things", both(admin, host("a.b.example.com")), 200, "", ""},
		{"bad host", "GET", "/v1/things", both(admin, host("evil.test")), 421, "", authz.ResultBadHost},
		{"rebinding to wildcard apex", "GET", "/v1/things", both(admin, host("example.com")), 421, "", authz.ResultBadHost},
		{"suffix trick", "GET", "/v1/things", both(admin, host("evilexample.com")), 421, "", authz.ResultBadHost},
		{"empty host", "GET", "/v1/things", both(admin, host("")), 421, "", authz.ResultBadHost},
		{"bad host before auth", "GET", "/v1/things", host("evil.test"), 421, "", authz.ResultBadHost},
		{"no credentials", "GET", "/v1/things", nil, 401, "Bearer", authz.ResultUnauthenticated},
		{"no credentials, unknown path", "GET", "/nope", nil, 401, "Bearer", authz.ResultUnauthenticated},
		{"malformed header", "GET", "/v1/things", header("Authorization", "Basic YWRtaW46YWRtaW4="), 401, `Bearer error="invalid_request"`, authz.ResultUnauthenticated},
		{"unknown token", "GET", "/v1/things", authztest.Bearer(authn.NewToken().Plaintext), 401, `Bearer error="invalid_token"`, authz.ResultUnauthenticated},
		{"cookie only", "POST", "/v1/things", header("Cookie", "session=admin"), 401, "Bearer", authz.ResultUnauthenticated},
		{"viewer writes", "POST", "/v1/things", as(f, authz.Viewer), 403, "", authz.ResultForbidden},
		{"editor rolls back", "POST", "/v1/rollback", as(f, authz.Editor), 403, "", authz.ResultForbidden},
		{"editor mints tokens", "PUT", "/v1/tokens/x", as(f, authz.Editor), 403, "", authz.ResultForbidden},
		{"security-admin mints tokens", "PUT", "/v1/tokens/x", as(f, authz.SecurityAdmin), 200, "", ""},
		{"editor deletes", "DELETE", "/v1/things/a", as(f, authz.Editor), 200, "", ""},
		{"cross-site POST", "POST", "/v1/things", both(admin, header("Sec-Fetch-Site", "cross-site")), 403, "", authz.ResultCrossOrigin},
		{"foreign Origin POST", "POST", "/v1/things", both(admin, header("Origin", "https://evil.test")), 403, "", authz.ResultCrossOrigin},
		{"trusted Origin POST", "POST", "/v1/things", both(admin, header("Origin", "https://console.example.com")), 200, "", ""},
		{"cross-site GET is a read", "GET", "/v1/things", both(admin, header("Sec-Fetch-Site", "cross-site")), 200, "", ""},
		{"authenticated, unknown path", "GET", "/nope", admin, 404, "", ""},
		{"authenticated, wrong method", "PATCH", "/v1/things", admin, 405, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := f.do(tc.method, tc.target, tc.mod)
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d (%s)", rec.Code, tc.status, rec.Body)
			}
			if got := rec.Header().Get("WWW-Authenticate"); got != tc.challenge {
				t.Errorf("WWW-Authenticate %q, want %q", got, tc.challenge)
			}
			if tc.code != "" {
				var body struct {
					Error struct{ Code, Message string }
				}
				if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.Error.Code != tc.code {
					t.Errorf("body %s, want code %q", rec.Body, tc.code)
				}
			}
		})
	}
	if !strings.Contains(f.do("GET", "/v1/things/abc", admin).Body.String(), "ok abc") {
		t.Fatal("path value not set")
	}
	if f.seen.Name != "authztest-admin" || f.seen.Kind != authn.KindToken {
		t.Fatalf("handler saw %+v", *f.seen)
	}
	// No secret reaches the log.
	for _, role := range authz.Roles() {
		tok := f.tokens.Token(role)
		if strings.Contains(f.log.String(), tok[21:]) {
			t.Fatalf("log carries %s's secret", role)
		}
	}
	if !strings.Contains(f.log.String(), "result=forbidden") || !strings.Contains(f.log.String(), `route="POST /v1/rollback"`) {
		t.Fatalf("refusal log lines missing:\n%s", f.log)
	}
}

func TestMetrics(t *testing.T) {
	f := newFixture(t, nil)
	f.do("GET", "/v1/things", as(f, authz.Viewer))
	f.do("GET", "/v1/things", nil)
	f.do("POST", "/v1/things", as(f, authz.Viewer))
	f.do("GET", "/v1/things", func(r *http.Request) { r.Host = "evil.test" })
	want := map[string]float64{"bad_host": 1, "cross_origin": 0, "forbidden": 1, "ok": 1, "unauthenticated": 1, "unavailable": 0}
	mfs, err := f.metrics.Gather()
	if err != nil || len(mfs) != 1 || mfs[0].GetName() != "portico_test_auth_requests_total" {
		t.Fatalf("gathered %v, %v", mfs, err)
	}
	got := map[string]float64{}
	for _, m := range mfs[0].GetMetric() {
		if len(m.GetLabel()) != 1 || m.GetLabel()[0].GetName() != "result" {
			t.Fatalf("labels %v", m.GetLabel())
		}
		got[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("counts %v, want %v", got, want)
	}
	if _, err := authz.NewMetrics(f.metrics, "test"); err == nil {
		t.Fatal("registered twice")
	}
	if _, err := authz.NewMetrics(f.metrics, "Bad-Name"); !errors.Is(err, authz.ErrConfig) {
		t.Fatalf("bad component: %v", err)
	}
}

type authFunc func(*http.Request) (authn.Principal, error)

func (f authFunc) Authenticate(r *http.Request) (authn.Principal, error) { return f(r) }

func TestUnavailableAndErrorWriter(t *testing.T) {
	var gotStatus int
	var gotErr error
	rt, err := authz.New(authz.Config{
		Authenticator: authFunc(func(*http.Request) (authn.Principal, error) {
			return authn.Principal{}, fmt.Errorf("%w: db down", authn.ErrUnavailable)
		}),
		AllowedHosts: []string{"localhost"},
		WriteError: func(w http.ResponseWriter, _ *http.Request, status int, err error) {
			gotStatus, gotErr = status, err
			w.WriteHeader(status)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	rt.HandleFunc("GET /x", authz.ConfigRead, func(http.ResponseWriter, *http.Request) { t.Error("handler ran") })
	h, err := rt.Handler()
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/x", nil)
	r.Host = "localhost"
	r.Header.Set("Authorization", "Bearer abc")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	if rec.Code != 503 || gotStatus != 503 || !errors.Is(gotErr, authn.ErrUnavailable) || authz.Result(gotErr) != authz.ResultUnavailable {
		t.Fatalf("status %d, writer got %d %v", rec.Code, gotStatus, gotErr)
	}
	if rec.Header().Get("WWW-Authenticate") != "" {
		t.Fatal("503 with a challenge")
	}
}

// A route without a valid permission keeps the server from starting.
func TestRegistrationRefusals(t *testing.T) {
	ok := func(http.ResponseWriter, *http.Request) {}
	for name, reg := range map[string]func(*authz.Router){
		"no permission":      func(rt *authz.Router) { rt.HandleFunc("GET /a", "", ok) },
		"unknown permission": func(rt *authz.Router) { rt.HandleFunc("GET /a", "config.*", ok) },
		"nil handler":        func(rt *authz.Router) { rt.Handle("GET /a", authz.ConfigRead, nil) },
		"duplicate": func(rt *authz.Router) {
			rt.HandleFunc("GET /a", authz.ConfigRead, ok)
			rt.HandleFunc("GET /a", authz.ConfigWrite, ok)
		},
	} {
		rt, err := authz.New(authz.Config{Authenticator: authFunc(nil), AllowedHosts: []string{"localhost"}})
		if err != nil {
			t.Fatal(err)
		}
		rt.HandleFunc("GET /fine", authz.ConfigRead, ok)
		reg(rt)
		if h, err := rt.Handler(); h != nil || err == nil {
			t.Errorf("%s: Handler() = %v, %v; want an error", name, h, err)
		}
	}
	rt, _ := authz.New(authz.Config{Authenticator: authFunc(nil), AllowedHosts: []string{"localhost"}})
	rt.HandleFunc("GET /a", authz.ConfigRead, ok)
	rt.HandleFunc("POST /a", authz.ConfigWrite, ok)
	if _, err := rt.Handler(); err != nil {
		t.Fatal(err)
	}
	rt.HandleFunc("DELETE /a", authz.ConfigWrite, ok)
	if _, err := rt.Handler(); !errors.Is(err, authz.ErrConfig) {
		t.Fatalf("late registration: %v", err)
	}
	want := []authz.Route{{"GET /a", authz.ConfigRead}, {"POST /a", authz.ConfigWrite}}
	if got := rt.Routes(); len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("Routes() = %v", got)
	}
}

func TestConfig(t *testing.T) {
	a := authFunc(nil)
	for name, cfg := range map[string]authz.Config{
		"no authenticator": {AllowedHosts: []string{"localhost"}},
		"no hosts":         {Authenticator: a},
		"host with path":   {Authenticator: a, AllowedHosts: []string{"evil.test/x"}},
		"bare wildcard":    {Authenticator: a, AllowedHosts: []string{"*"}},
		"inner wildcard":   {Authenticator: a, AllowedHosts: []string{"a.*.com"}},
		"bad origin":       {Authenticator: a, AllowedHosts: []string{"localhost"}, TrustedOrigins: []string{"not a url"}},
	} {
		if _, err := authz.New(cfg); !errors.Is(err, authz.ErrConfig) {
			t.Errorf("%s: err = %v, want ErrConfig", name, err)
		}
	}
}
