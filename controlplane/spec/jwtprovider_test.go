package spec_test

import (
	"errors"
	"maps"
	"testing"

	"github.com/portico-io/portico/controlplane/spec"
)

// provider is a valid JWT provider body with mod applied (a nil value
// removes the field).
func provider(mod map[string]any) string {
	p := map[string]any{"name": "idp", "issuer": "https://idp.test", "audiences": []string{"portico"},
		"jwksUri": "https://idp.test/jwks.json", "algorithms": []string{"RS256"}}
	maps.Copy(p, mod)
	for k, v := range p {
		if v == nil {
			delete(p, k)
		}
	}
	return js(p)
}

// introspection is the fields an introspecting provider needs.
func introspection(uri string, more map[string]any) map[string]any {
	m := map[string]any{"introspectionUri": uri, "introspectionClientId": "portico",
		"introspectionClientSecretRef": map[string]any{"name": "idp-introspection"}}
	maps.Copy(m, more)
	return m
}

// TestJWTProviderHygiene: identity-provider endpoints are https (plain
// http only on loopback, and only when the provider says so), a provider
// names its audiences or explicitly accepts any, and introspection carries
// client credentials by reference.
func TestJWTProviderHygiene(t *testing.T) {
	loopback := map[string]any{"allowInsecureLoopback": true}
	with := func(ms ...map[string]any) map[string]any {
		out := map[string]any{}
		for _, m := range ms {
			maps.Copy(out, m)
		}
		return out
	}
	cases := []struct {
		name  string
		mod   map[string]any
		field string // "" = accepted
	}{
		{"https jwks", nil, ""},
		{"http jwks on a public host", map[string]any{"jwksUri": "http://idp.test/jwks.json"}, "jwksUri"},
		{"http jwks on a public host with the loopback option", with(loopback, map[string]any{"jwksUri": "http://idp.test/jwks.json"}), "jwksUri"},
		{"http jwks on loopback without the option", map[string]any{"jwksUri": "http://127.0.0.1:18950/jwks.json"}, "jwksUri"},
		{"http jwks on 127.0.0.1 with the option", with(loopback, map[string]any{"jwksUri": "http://127.0.0.1:18950/jwks.json"}), ""},
		{"http jwks on 127.9.9.9 with the option", with(loopback, map[string]any{"jwksUri": "http://127.9.9.9/jwks"}), ""},
		{"http jwks on ::1 with the option", with(loopback, map[string]any{"jwksUri": "http://[::1]:8080/jwks"}), ""},
		{"http jwks on localhost with the option", with(loopback, map[string]any{"jwksUri": "http://localhost:8080/jwks"}), ""},
		{"http jwks on a short-form loopback", with(loopback, map[string]any{"jwksUri": "http://127.1/jwks"}), "jwksUri"},
		{"http jwks on localhost.evil.test", with(loopback, map[string]any{"jwksUri": "http://localhost.evil.test/jwks"}), "jwksUri"},
		{"http jwks on 10.0.0.1", with(loopback, map[string]any{"jwksUri": "http://10.0.0.1/jwks"}), "jwksUri"},
		{"jwks with credentials", map[string]any{"jwksUri": "https://user:pw@idp.test/jwks"}, "jwksUri"},
		{"jwks not a URL", map[string]any{"jwksUri": "idp.test/jwks"}, "jwksUri"},
		{"file jwks", map[string]any{"jwksUri": "file:///etc/passwd"}, "jwksUri"},

		{"no audiences", map[string]any{"audiences": nil}, "audiences"},
		{"empty audiences", map[string]any{"audiences": []string{}}, "audiences"},
		{"empty audience string", map[string]any{"audiences": []string{""}}, "audiences[0]"},
		{"any audience, explicitly", map[string]any{"audiences": nil, "allowAnyAudience": true}, ""},
		{"any audience and audiences", map[string]any{"allowAnyAudience": true}, "allowAnyAudience"},

		{"https introspection", introspection("https://idp.test/introspect", nil), ""},
		{"http introspection on a public host", with(loopback, introspection("http://idp.test/introspect", nil)), "introspectionUri"},
		{"http introspection on loopback without the option", introspection("http://127.0.0.1:9/introspect", nil), "introspectionUri"},
		{"http introspection on loopback with the option", with(loopback, introspection("http://127.0.0.1:9/introspect", nil)), ""},
		{"introspection without a client id", introspection("https://idp.test/introspect", map[string]any{"introspectionClientId": nil}), "introspectionClientId"},
		{"introspection without a secret", introspection("https://idp.test/introspect", map[string]any{"introspectionClientSecretRef": nil}), "introspectionClientSecretRef"},
		{"secret ref without a name", introspection("https://idp.test/introspect", map[string]any{"introspectionClientSecretRef": map[string]any{}}), "introspectionClientSecretRef.name"},
		{"secret ref escaping the directory", introspection("https://idp.test/introspect", map[string]any{"introspectionClientSecretRef": map[string]any{"name": "../admin-token"}}), "introspectionClientSecretRef.name"},
		{"inline secret", introspection("https://idp.test/introspect", map[string]any{"introspectionClientSecret": "hunter2"}), "introspectionClientSecret"},
		{"client id with a control character", introspection("https://idp.test/introspect", map[string]any{"introspectionClientId": "a\nb"}), "introspectionClientId"},
		{"client credentials without introspection", map[string]any{"introspectionClientId": "portico"}, "introspectionClientId"},
		{"rate limit", introspection("https://idp.test/introspect", map[string]any{"introspectionRateLimit": map[string]any{"requestsPerSecond": 20, "burst": 40}}), ""},
		{"rate limit too high", introspection("https://idp.test/introspect", map[string]any{"introspectionRateLimit": map[string]any{"requestsPerSecond": 1_000_000}}), "introspectionRateLimit.requestsPerSecond"},
		{"burst too high", introspection("https://idp.test/introspect", map[string]any{"introspectionRateLimit": map[string]any{"burst": 1_000_000}}), "introspectionRateLimit.burst"},
		{"rate limit without introspection", map[string]any{"introspectionRateLimit": map[string]any{"requestsPerSecond": 5}}, "introspectionRateLimit"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := spec.Decode(spec.KindJWTProvider, []byte(provider(tc.mod)))
			if tc.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var fe *spec.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("err %v, want a FieldError on %s", err, tc.field)
			}
			if fe.Field != tc.field {
				t.Fatalf("error on %q (%v), want %q", fe.Field, fe, tc.field)
			}
		})
	}
}
