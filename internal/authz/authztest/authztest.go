// Package authztest proves that every route of an API is protected: Walk
// sends each route a request without credentials (must be 401) and one per
// role (403 exactly when the role lacks the route's permission). Import it
// from tests only.
package authztest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portico-io/portico/internal/authn"
	"github.com/portico-io/portico/internal/authz"
)

// Host is the Host of every request Walk sends (unless a pattern names
// one); the Router under test must allow it.
const Host = "localhost"

// Credentials adds one caller's credentials to a request.
type Credentials func(r *http.Request)

// Bearer returns Credentials sending "Authorization: Bearer <tok>".
func Bearer(tok string) Credentials {
	return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) }
}

// Walk checks every route of h. For each route it sends a request built
// from the pattern (wildcards filled with "x1", a "{}" JSON body for
// methods with a body; a pattern without a method is tried with GET and
// POST), and asserts:
//   - without credentials: 401 with a WWW-Authenticate: Bearer challenge;
//   - with credentialsFor(role), for every authz role: 403 if the role
//     lacks the route's permission, and neither 401 nor 403 if it holds it
//     (the handler ran; what it answered is its business).
//
// Handlers do run for permitted roles, so h must be backed by test storage.
// A handler that itself answers 403 to a permitted role fails the walk:
// give that role what the handler needs, or test that route by hand.
func Walk(t testing.TB, h http.Handler, routes []authz.Route, credentialsFor func(authz.Role) Credentials) {
	t.Helper()
	if len(routes) == 0 {
		t.Fatal("authztest: no routes to walk")
	}
	creds := map[authz.Role]Credentials{}
	for _, role := range authz.Roles() {
		c := credentialsFor(role)
		if c == nil {
			t.Fatalf("authztest: no credentials for role %s", role)
		}
		creds[role] = c
	}
	for _, rt := range routes {
		for _, method := range methods(rt.Pattern) {
			route := method + " " + rt.Pattern
			rec := serve(h, newRequest(method, rt.Pattern, nil))
			if rec.Code != http.StatusUnauthorized {
				t.Errorf("%s without credentials: status %d, want 401", route, rec.Code)
			} else if !strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%s: 401 without a WWW-Authenticate: Bearer challenge (got %q)", route, rec.Header().Get("WWW-Authenticate"))
			}
			for _, role := range authz.Roles() {
				rec := serve(h, newRequest(method, rt.Pattern, creds[role]))
				switch {
				case !role.Has(rt.Permission) && rec.Code != http.StatusForbidden:
					t.Errorf("%s as %s (lacks %s): status %d, want 403", route, role, rt.Permission, rec.Code)
				case role.Has(rt.Permission) && (rec.Code == http.StatusUnauthorized || rec.Code == http.StatusForbidden):
					t.Errorf("%s as %s (holds %s): status %d, want the handler's answer", route, role, rt.Permission, rec.Code)
				}
			}
		}
	}
}

func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

// methods returns the pattern's method, or GET and POST when it has none.
func methods(pattern string) []string {
	if m, _, ok := strings.Cut(pattern, " "); ok && !strings.Contains(m, "/") {
		return []string{m}
	}
	return []string{http.MethodGet, http.MethodPost}
}

// newRequest builds a request matching pattern ("[METHOD ][HOST]/PATH").
func newRequest(method, pattern string, c Credentials) *http.Request {
	if m, rest, ok := strings.Cut(pattern, " "); ok && !strings.Contains(m, "/") {
		pattern = strings.TrimLeft(rest, " \t")
	}
	host := Host
	if i := strings.IndexByte(pattern, '/'); i > 0 {
		host, pattern = pattern[:i], pattern[i:]
	}
	segs := strings.Split(pattern, "/")
	for i, s := range segs {
		switch {
		case s == "{$}":
			segs[i] = ""
		case strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}"):
			segs[i] = "x1"
		}
	}
	var r *http.Request
	if method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch {
		r = httptest.NewRequest(method, strings.Join(segs, "/"), strings.NewReader("{}"))
		r.Header.Set("Content-Type", "application/json")
	} else {
		r = httptest.NewRequest(method, strings.Join(segs, "/"), nil)
	}
	r.Host = host
	if c != nil {
		c(r)
	}
	return r
}

// Tokens is an in-memory authn.TokenStore holding one API token per authz
// role, for tests that walk a Router backed by a real authn.Authenticator:
//
//	tokens := authztest.NewTokens()
//	a, _ := authn.New(authn.Config{Tokens: tokens})
//	…
//	authztest.Walk(t, h, router.Routes(), tokens.For)
//
// It is safe for concurrent use.
type Tokens struct {
	mu     sync.Mutex
	byID   map[string]authn.StoredToken
	byRole map[authz.Role]string
}

var _ authn.TokenStore = (*Tokens)(nil)

// NewTokens mints one token per role.
func NewTokens() *Tokens {
	ts := &Tokens{byID: map[string]authn.StoredToken{}, byRole: map[authz.Role]string{}}
	for _, role := range authz.Roles() {
		tok := authn.NewToken()
		ts.byID[tok.ID] = authn.StoredToken{ID: tok.ID, Hash: tok.Hash, Name: "authztest-" + string(role), Roles: []string{string(role)}}
		ts.byRole[role] = tok.Plaintext
	}
	return ts
}

// Token returns the plaintext token of role.
func (ts *Tokens) Token(role authz.Role) string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.byRole[role]
}

// For returns Credentials carrying role's token.
func (ts *Tokens) For(role authz.Role) Credentials {
	tok := ts.Token(role)
	if tok == "" {
		return nil
	}
	return Bearer(tok)
}

// LookupToken implements authn.TokenStore.
func (ts *Tokens) LookupToken(_ context.Context, id string) (authn.StoredToken, error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	st, ok := ts.byID[id]
	if !ok {
		return authn.StoredToken{}, authn.ErrTokenNotFound
	}
	return st, nil
}

// TouchToken implements authn.TokenStore.
func (ts *Tokens) TouchToken(_ context.Context, id string, at time.Time) error {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if st, ok := ts.byID[id]; ok {
		st.LastUsed = at
		ts.byID[id] = st
	}
	return nil
}
