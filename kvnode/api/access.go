package api

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/portico-io/portico/internal/authn"
	"github.com/portico-io/portico/internal/authz"
)

// Access control. Every route is registered on an authz.Router with the
// permission it needs (routeTable.handle), so a route without one makes
// New fail:
//   - data reads and watches (GET /v1/kv/…, batchGet, GET /v1/cp/…): kv.read;
//   - writes, transactions and leases: kv.write;
//   - the ring and the admin reads (GET /v1/ring, GET /admin/v1/…):
//     cluster.read;
//   - membership, repair and decommission (POST/DELETE /admin/v1/…):
//     cluster.admin;
//   - API tokens (/admin/v1/tokens, tokens.go): security.read to list and
//     read them, security.write to mint and revoke them (a caller grants
//     only roles whose permissions it holds: authz.CheckGrant).
//
// The keyspace holding the tokens (apitoken.Keyspace) is refused to every
// data route whoever asks, admins included (reservedKeyspace).
//
// A principal confined to keyspaces (authn.Principal.Keyspaces: a token
// minted for one keyspace, a cachenode certificate) may touch only those:
// the data handlers check every keyspace a request names (the key's, each
// key of a batch, each compare and op of a transaction, a watch's) and
// answer 403 in the API's error shape before anything is read or written.
// Like etcd, revoking a lease needs an unconfined credential: it deletes
// the lease's keys, whatever their keyspace.

// DefaultAllowedHosts are the names the API answers by unless configured:
// the loopback names.
var DefaultAllowedHosts = []string{"localhost", "127.0.0.1", "::1"}

// routeTable registers routes on the Router, each behind its permission;
// with InsecureNoAuth it also registers them on an open mux, which is what
// is then served.
type routeTable struct {
	router *authz.Router
	open   *http.ServeMux
}

func (rt *routeTable) handle(pattern string, perm authz.Permission, h http.HandlerFunc) {
	rt.router.HandleFunc(pattern, perm, h)
	if rt.open != nil {
		rt.open.HandleFunc(pattern, h)
	}
}

// anonymous is the caller of a node running with InsecureNoAuth.
var anonymous = authn.Principal{Kind: "insecure", ID: "anonymous", Name: "anonymous (--insecure-no-auth)", Roles: []string{string(authz.Admin)}}

// withAnonymous serves h to everyone as an unconfined admin.
func withAnonymous(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(authn.WithPrincipal(r.Context(), anonymous)))
	})
}

// refuseAll is the Router's authenticator when nothing is checked (the
// Router is then only built to prove every route has a permission).
type refuseAll struct{}

func (refuseAll) Authenticate(*http.Request) (authn.Principal, error) {
	return authn.Principal{}, errors.New("authn: disabled")
}

// writeAuthError renders the Router's refusals (401, 403, 421, 503) in the
// API's error shape, the code being authz.Result's.
func writeAuthError(w http.ResponseWriter, _ *http.Request, status int, err error) {
	writeError(w, status, authz.Result(err), err.Error(), "")
}

// allowKeyspace refuses, with 403, a caller confined to other keyspaces
// than ks; field names where ks came from.
func allowKeyspace(r *http.Request, field, ks string) error {
	p, _ := authn.FromContext(r.Context())
	if p.AllowsKeyspace(ks) {
		return nil
	}
	return &BadRequest{http.StatusForbidden, authz.ResultForbidden, field,
		fmt.Sprintf("%s is confined to keyspace(s) %s and may not touch keyspace %q", p, strings.Join(p.Keyspaces, ", "), ks)}
}

// confined reports whether the caller is confined to keyspaces.
func confined(r *http.Request) bool {
	p, _ := authn.FromContext(r.Context())
	return len(p.Keyspaces) > 0
}
