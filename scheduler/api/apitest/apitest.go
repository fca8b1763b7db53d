// Package apitest gives tests of the scheduler API real credentials: an
// authenticator over API tokens (in memory, or in the store's real token
// table), one token per role without a tenant (the admin's acts for a
// tenant only by naming it) and one per role bound to each tenant.
package apitest

import (
	"context"
	"net/http"
	"testing"

	"github.com/portico-io/portico/internal/authn"
	"github.com/portico-io/portico/internal/authz"
	"github.com/portico-io/portico/internal/pgtokens"
)

// Hosts are the Host headers the tests' requests carry (httptest's default
// name and loopback).
var Hosts = []string{"example.com", "127.0.0.1", "localhost"}

// Tokens are the tests' credentials.
type Tokens struct {
	Admin   string
	unbound map[authz.Role]string
	bound   map[string]map[authz.Role]string // tenant → role → token
}

// mint issues the tokens and hands each to add.
func mint(tenants []string, add func(issued authn.IssuedToken, name, tenant string, role authz.Role)) *Tokens {
	tk := &Tokens{unbound: map[authz.Role]string{}, bound: map[string]map[authz.Role]string{}}
	issue := func(name, tenant string, role authz.Role) string {
		issued := authn.NewToken()
		add(issued, name, tenant, role)
		return issued.Plaintext
	}
	for _, role := range authz.Roles() {
		tk.unbound[role] = issue(string(role), "", role)
	}
	tk.Admin = tk.unbound[authz.Admin]
	for _, tenant := range tenants {
		tk.bound[tenant] = map[authz.Role]string{}
		for _, role := range authz.Roles() {
			tk.bound[tenant][role] = issue(tenant+"-"+string(role), tenant, role)
		}
	}
	return tk
}

// New returns an authenticator over tokens held in memory.
func New(t testing.TB, tenants ...string) (*authn.Authenticator, *Tokens) {
	t.Helper()
	var stored []authn.StoredToken
	tk := mint(tenants, func(issued authn.IssuedToken, name, tenant string, role authz.Role) {
		stored = append(stored, authn.StoredToken{ID: issued.ID, Hash: issued.Hash, Name: name, Roles: []string{string(role)}, Tenant: tenant})
	})
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

// InTable stores the tokens in table (the store's real token table) and
// returns an authenticator over it, so tokens minted through the API work
// too.
func InTable(t testing.TB, table *pgtokens.Table, tenants ...string) (*authn.Authenticator, *Tokens) {
	t.Helper()
	tk := mint(tenants, func(issued authn.IssuedToken, name, tenant string, role authz.Role) {
		if _, err := table.Create(context.Background(), pgtokens.Token{ID: issued.ID, Name: name, Roles: []string{string(role)},
			Tenant: tenant, CreatedBy: "apitest"}, issued.Hash); err != nil {
			t.Fatal(err)
		}
	})
	a, err := authn.New(authn.Config{Tokens: table})
	if err != nil {
		t.Fatal(err)
	}
	return a, tk
}

// Unbound is the token of role bound to no tenant.
func (tk *Tokens) Unbound(role authz.Role) string { return tk.unbound[role] }

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
