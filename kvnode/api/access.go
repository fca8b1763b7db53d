package api

import (
	"fmt"
	"net/http"

	"github.com/portico-io/portico/internal/identity"
)

// Access is what a route asks of its caller. Every route is registered
// with one (routeTable.handle), and Routes lists them, so a test can prove
// no route was left unguarded.
type Access int

const (
	// AccessOpen routes are served to any caller the port admits: on a TLS
	// node, any TLS client, with or without a certificate (cachenodes read
	// and write their topology under /v1/cp/ this way). The data API stays
	// open until token authentication comes with a later issue.
	AccessOpen Access = iota
	// AccessAdmin routes (everything under /admin/v1/) change or expose the
	// cluster's membership and repair: on a node with Config.AdminPolicy,
	// they need a verified client certificate whose identity it allows.
	AccessAdmin
)

func (a Access) String() string {
	if a == AccessAdmin {
		return "admin"
	}
	return "open"
}

// Route is one registered route and the access it needs.
type Route struct {
	Pattern string
	Access  Access
}

// routeTable registers routes on a mux, each behind the check its Access
// needs.
type routeTable struct {
	mux    *http.ServeMux
	admin  *identity.Policy
	routes []Route
}

func (rt *routeTable) handle(pattern string, a Access, h http.HandlerFunc) {
	rt.routes = append(rt.routes, Route{Pattern: pattern, Access: a})
	if a == AccessAdmin && rt.admin != nil {
		h = requireIdentity(*rt.admin, h)
	}
	rt.mux.HandleFunc(pattern, h)
}

// requireIdentity serves h only to a caller whose verified client
// certificate p allows, and answers 403 otherwise. The identity comes
// from the TLS handshake alone (identity.FromRequest), never from
// anything the request says.
func requireIdentity(p identity.Policy, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, err := identity.FromRequest(r)
		if err != nil {
			writeError(w, http.StatusForbidden, "forbidden", fmt.Sprintf("%s %s needs a client certificate of role %s", r.Method, r.URL.Path, rolesOf(p)), "")
			return
		}
		if err := p.Allow(id); err != nil {
			writeError(w, http.StatusForbidden, "forbidden", err.Error(), "")
			return
		}
		h(w, r)
	}
}

func rolesOf(p identity.Policy) string {
	if len(p.Roles) == 0 {
		return "any role"
	}
	s := ""
	for i, r := range p.Roles {
		if i > 0 {
			s += " or "
		}
		s += string(r)
	}
	return s
}
