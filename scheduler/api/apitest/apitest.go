// Package apitest gives tests of the scheduler API real credentials: an
// authenticator over API tokens held in memory, one admin token (no
// tenant: it acts for a tenant only by naming it) and editor and viewer
// tokens bound to tenants.
package apitest

import (
	"net/http"
	"testing"

	"github.com/portico-io/portico/internal/authn"
	"github.com/portico-io/portico/internal/authz"
)

// Hosts are the Host headers the tests' requests carry (httptest's default
// name and loopback).
var Hosts = []string{"example.com", "127.0.0.1", "localhost"}

// Tokens are the tests' credentials.
type Tokens struct {
	Admin string
	bound map[string]map[authz.Role]string // tenant → role → token
}

// New returns an authenticator knowing an admin token and, for each
// tenant, a token of every role bound to it.
func New(t testing.TB, tenants ...string) (*authn.Authenticator, *Tokens) {
	t.Helper()
	tk := &Tokens{bound: map[string]map[authz.Role]string{}}
	var stored []authn.StoredToken
	add := func(name, tenant string, role authz.Role) string {
		issued := authn.NewToken()
		stored = append(stored, authn.StoredToken{ID: issued.ID, Hash: issued.Hash, Name: name, Roles: []string{string(role)}, Tenant: tenant})
		return issued.Plaintext
	}
	tk.Admin = add("admin", "", authz.Admin)
	for _, tenant := range tenants {
		tk.bound[tenant] = map[authz.Role]string{}
		for _, role := range authz.Roles() {
			tk.bound[tenant][role] = add(tenant+"-"+string(role), tenant, role)
		}
	}
	store, err := authn.NewStaticTokens(stored...)
	if err != nil {
		t.Fatal(err)
	}
	a, err := authn.New(authn.Config{Tokens: store})
	if err != nil {
		t.Fatal(err)
	}
	return a, tk
}

// Bound is the token of role bound to tenant.
func (tk *Tokens) Bound(tenant string, role authz.Role) string { return tk.bound[tenant][role] }

// AsDefault serves h with token as the credential of every request that
// brings none; a request with "Authorization: none" is sent without one.
func AsDefault(h http.Handler, token string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("Authorization") {
		case "":
			r.Header.Set("Authorization", "Bearer "+token)
		case "none":
			r.Header.Del("Authorization")
		}
		h.ServeHTTP(w, r)
	})
}
