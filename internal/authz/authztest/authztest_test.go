package authztest_test

import (
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/portico-io/portico/internal/authn"
	"github.com/portico-io/portico/internal/authz"
	"github.com/portico-io/portico/internal/authz/authztest"
)

func newRouter(t *testing.T, tokens *authztest.Tokens) *authz.Router {
	t.Helper()
	a, err := authn.New(authn.Config{Tokens: tokens})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := authz.New(authz.Config{Authenticator: a, AllowedHosts: []string{authztest.Host}})
	if err != nil {
		t.Fatal(err)
	}
	ok := func(w http.ResponseWriter, r *http.Request) {
		if _, ok := authn.FromContext(r.Context()); !ok {
			t.Error("no principal")
		}
		// Handlers may answer anything but 401/403 to permitted roles.
		if r.PathValue("id") == "x1" {
			w.WriteHeader(http.StatusNotFound)
		}
	}
	rt.HandleFunc("GET /v1/jobs", authz.JobsRead, ok)
	rt.HandleFunc("GET /v1/jobs/{id}", authz.JobsRead, ok)
	rt.HandleFunc("POST /v1/jobs", authz.JobsWrite, ok)
	rt.HandleFunc("DELETE /v1/jobs/{id}", authz.JobsWrite, ok)
	rt.HandleFunc("PUT /v1/kv/{key...}", authz.KVWrite, ok)
	rt.HandleFunc("POST /admin/v1/join", authz.ClusterAdmin, ok)
	rt.HandleFunc("/admin/v1/tokens/{$}", authz.SecurityWrite, ok)
	return rt
}

func TestWalk(t *testing.T) {
	tokens := authztest.NewTokens()
	rt := newRouter(t, tokens)
	h, err := rt.Handler()
	if err != nil {
		t.Fatal(err)
	}
	authztest.Walk(t, h, rt.Routes(), tokens.For)
}

// recorder is a testing.TB that collects failures instead of failing.
type recorder struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
func (r *recorder) Fatalf(format string, args ...any) { r.Errorf(format, args...); runtime.Goexit() }
func (r *recorder) Fatal(args ...any)                 { r.Errorf("%s", fmt.Sprint(args...)); runtime.Goexit() }

func walk(t *testing.T, h http.Handler, routes []authz.Route, creds func(authz.Role) authztest.Credentials) []string {
	rec := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		authztest.Walk(rec, h, routes, creds)
	}()
	<-done
	return rec.errs
}

// Walk catches a route served outside the Router, a route listed with a
// weaker permission than it has, and missing credentials.
func TestWalkCatches(t *testing.T) {
	tokens := authztest.NewTokens()
	rt := newRouter(t, tokens)
	guarded, err := rt.Handler()
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/", guarded)
	mux.HandleFunc("POST /debug/reset", func(http.ResponseWriter, *http.Request) {}) // open!
	routes := append(rt.Routes(), authz.Route{Pattern: "POST /debug/reset", Permission: authz.ClusterAdmin})
	errs := walk(t, mux, routes, tokens.For)
	if len(errs) == 0 || !strings.Contains(errs[0], "POST /debug/reset without credentials: status 200, want 401") {
		t.Fatalf("open route not caught: %q", errs)
	}

	lying := []authz.Route{{Pattern: "POST /admin/v1/join", Permission: authz.ConfigRead}}
	errs = walk(t, guarded, lying, tokens.For)
	if len(errs) == 0 || !strings.Contains(errs[0], "as viewer (holds config.read): status 403") {
		t.Fatalf("wrong permission not caught: %q", errs)
	}

	if errs := walk(t, guarded, nil, tokens.For); len(errs) != 1 {
		t.Fatalf("empty route list: %q", errs)
	}
	none := func(authz.Role) authztest.Credentials { return nil }
	if errs := walk(t, guarded, rt.Routes(), none); len(errs) != 1 || !strings.Contains(errs[0], "no credentials for role") {
		t.Fatalf("missing credentials: %q", errs)
	}
}
