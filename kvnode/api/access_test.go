package api

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/tlstest"
)

// Every route declares its access, every /admin/ route is an admin route,
// and on a node with an admin policy each admin route answers 403, in the
// API's error shape, to a caller without a verified certificate and to one
// whose role the policy does not allow, before its handler runs (the
// engines here are nil).
func TestRoutesDeclareAccess(t *testing.T) {
	p := tlstest.New(t)
	policy := &identity.Policy{Roles: []identity.Role{identity.KVNode, identity.Operator}}
	cfg := Config{CP: followerCP{}, CPKeyspaces: []string{"locks"}, AdminPolicy: policy}
	h := Handler(cfg)
	verified := func(role identity.Role) *tls.ConnectionState {
		files := p.Files(t, role, "c")
		pair, err := tls.LoadX509KeyPair(files.CertFile, files.KeyFile)
		if err != nil {
			t.Fatal(err)
		}
		return &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{pair.Leaf}}}
	}
	callers := map[string]*tls.ConnectionState{
		"plaintext":             nil,
		"no client certificate": {},
		"role cachenode":        verified(identity.CacheNode),
	}

	admin := 0
	for _, r := range Routes(cfg) {
		method, path, _ := strings.Cut(r.Pattern, " ")
		if path == "" {
			method, path = http.MethodGet, r.Pattern
		}
		if strings.HasPrefix(path, "/admin/") != (r.Access == AccessAdmin) {
			t.Errorf("%s is %s", r.Pattern, r.Access)
		}
		if r.Access != AccessAdmin {
			continue
		}
		admin++
		path = strings.NewReplacer("{id}", "x").Replace(path)
		for name, cs := range callers {
			req := httptest.NewRequest(method, path, strings.NewReader("{}"))
			req.TLS = cs
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			var e struct{ Error ErrBody }
			if err := json.Unmarshal(w.Body.Bytes(), &e); w.Code != http.StatusForbidden || err != nil || e.Error.Code != "forbidden" {
				t.Errorf("%s from %s: %d %s, want 403 forbidden", r.Pattern, name, w.Code, w.Body)
			}
		}
	}
	if admin < 8 {
		t.Fatalf("%d admin routes, want the ring's 5 and the consensus tier's 3", admin)
	}
}
