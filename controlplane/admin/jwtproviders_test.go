package admin

import (
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/portico-io/portico/controlplane/spec"
)

// TestJWTProviderHygieneRefused: the admin API refuses providers with an
// insecure endpoint, without audiences or with introspection but no client
// secret reference: 422 naming the field, and nothing is stored. The
// explicit opt-ins are accepted and kept.
func TestJWTProviderHygieneRefused(t *testing.T) {
	e := newEnv(t)
	head := e.head()
	cases := []struct{ name, body, code, field string }{
		{"http jwks on loopback", `{"name":"a","issuer":"https://idp.test","audiences":["portico"],
			"jwksUri":"http://127.0.0.1:18950/jwks.json","algorithms":["RS256"]}`, spec.CodeInvalid, "jwksUri"},
		{"http jwks on a public host", `{"name":"b","issuer":"https://idp.test","audiences":["portico"],
			"jwksUri":"http://idp.test/jwks.json","allowInsecureLoopback":true,"algorithms":["RS256"]}`, spec.CodeInvalid, "jwksUri"},
		{"no audiences", `{"name":"c","issuer":"https://idp.test",
			"jwksUri":"https://idp.test/jwks.json","algorithms":["RS256"]}`, spec.CodeRequired, "audiences"},
		{"empty audiences", `{"name":"d","issuer":"https://idp.test","audiences":[],
			"jwksUri":"https://idp.test/jwks.json","algorithms":["RS256"]}`, spec.CodeRequired, "audiences"},
		{"http introspection", `{"name":"e","issuer":"https://idp.test","audiences":["portico"],
			"jwksUri":"https://idp.test/jwks.json","algorithms":["RS256"],"introspectionUri":"http://idp.test/introspect",
			"introspectionClientId":"portico","introspectionClientSecretRef":{"name":"idp"}}`, spec.CodeInvalid, "introspectionUri"},
		{"introspection without a secret", `{"name":"f","issuer":"https://idp.test","audiences":["portico"],
			"jwksUri":"https://idp.test/jwks.json","algorithms":["RS256"],"introspectionUri":"https://idp.test/introspect",
			"introspectionClientId":"portico"}`, spec.CodeRequired, "introspectionClientSecretRef"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e.t = t
			e.expectError(e.do("POST", Prefix+"/jwt-providers", tc.body, newKeyHeader()), http.StatusUnprocessableEntity, tc.code, tc.field)
			if h := e.head(); h != head {
				t.Fatalf("head moved to %d", h)
			}
		})
	}
	e.t = t
	if items, _ := e.expect(e.do("GET", Prefix+"/jwt-providers", "", nil), http.StatusOK)["items"].([]any); len(items) != 0 {
		t.Fatalf("refused providers were stored: %v", items)
	}
	e.create("jwt-providers", `{"name":"dev","issuer":"https://idp.test","allowAnyAudience":true,
		"jwksUri":"http://127.0.0.1:18950/jwks.json","allowInsecureLoopback":true,"algorithms":["RS256"]}`)
	body := e.expect(e.do("GET", Prefix+"/jwt-providers/dev", "", nil), http.StatusOK)
	if body["allowInsecureLoopback"] != true || body["allowAnyAudience"] != true {
		t.Fatalf("opt-ins not kept: %v", body)
	}
}

// TestLoopbackIdPsOnADevelopmentMachine: a control plane started with
// --idp-allow-loopback-http (make run) accepts ARCHITECTURE.md's example
// provider as written, JWKS over plain http on 127.0.0.1, and stores it
// marked allowInsecureLoopback; a provider that says false keeps false
// (and is refused), and a non-loopback http endpoint is still refused.
func TestLoopbackIdPsOnADevelopmentMachine(t *testing.T) {
	e := newEnv(t)
	e.h = newHandler(t, Config{Store: e.store, Nodes: e.nodes, Registry: prometheus.NewRegistry(), LoopbackIdPs: true})
	e.create("jwt-providers", `{"name":"idp","issuer":"https://idp.test","audiences":["portico"],
		"jwksUri":"http://127.0.0.1:18950/jwks.json","algorithms":["RS256","ES256"]}`)
	if body := e.expect(e.do("GET", Prefix+"/jwt-providers/idp", "", nil), http.StatusOK); body["allowInsecureLoopback"] != true {
		t.Fatalf("the stored provider does not say it allows loopback http: %v", body)
	}
	tag := e.do("GET", Prefix+"/jwt-providers/idp", "", nil).Header().Get("ETag")
	e.expect(e.do("PATCH", Prefix+"/jwt-providers/idp", `{"jwksUri":"http://localhost:18950/jwks.json"}`, hdr("If-Match", tag)), http.StatusOK)
	head := e.head()
	e.expectError(e.do("POST", Prefix+"/jwt-providers", `{"name":"no","issuer":"https://idp.test","audiences":["portico"],
		"jwksUri":"http://127.0.0.1:18950/jwks.json","allowInsecureLoopback":false,"algorithms":["RS256"]}`, newKeyHeader()),
		http.StatusUnprocessableEntity, spec.CodeInvalid, "jwksUri")
	e.expectError(e.do("POST", Prefix+"/jwt-providers", `{"name":"remote","issuer":"https://idp.test","audiences":["portico"],
		"jwksUri":"http://idp.test/jwks.json","algorithms":["RS256"]}`, newKeyHeader()),
		http.StatusUnprocessableEntity, spec.CodeInvalid, "jwksUri")
	if h := e.head(); h != head {
		t.Fatalf("refused providers moved the head to %d", h)
	}
}
