package policy_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/anypb"

	"github.com/portico-io/portico/extauthz/policy"
	authv1 "github.com/portico-io/portico/proto/portico/auth/v1"
)

// TestBuildRefusesProviderHygiene: extauthz refuses (NACKs) what the
// control plane's validation refuses, in case a provider reaches it some
// other way (an older control plane, a persisted policy, a bug): plain http
// endpoints except on loopback with allow_insecure_loopback, providers
// without audiences unless allow_any_audience, and introspection without
// client credentials.
func TestBuildRefusesProviderHygiene(t *testing.T) {
	base := func() *authv1.JwtProvider {
		return &authv1.JwtProvider{Name: "idp", Issuer: "https://idp", Audiences: []string{"portico"},
			JwksUri: "https://idp.test/jwks.json", Algorithms: []string{"RS256"}}
	}
	introspecting := func(p *authv1.JwtProvider) {
		p.IntrospectionUri = "https://idp.test/introspect"
		p.IntrospectionClientId = "portico"
		p.IntrospectionClientSecretRef = "idp-introspection"
	}
	cases := []struct {
		name string
		mod  func(p *authv1.JwtProvider)
		// want is "" for accepted, else a word the error must contain.
		want string
	}{
		{"https", func(*authv1.JwtProvider) {}, ""},
		{"http jwks on a public host", func(p *authv1.JwtProvider) { p.JwksUri = "http://idp.test/jwks.json" }, "jwks_uri"},
		{"http jwks on a public host, loopback allowed", func(p *authv1.JwtProvider) {
			p.JwksUri, p.AllowInsecureLoopback = "http://idp.test/jwks.json", true
		}, "jwks_uri"},
		{"http jwks on loopback", func(p *authv1.JwtProvider) { p.JwksUri = "http://127.0.0.1:18950/jwks.json" }, "jwks_uri"},
		{"http jwks on loopback, allowed", func(p *authv1.JwtProvider) {
			p.JwksUri, p.AllowInsecureLoopback = "http://127.0.0.1:18950/jwks.json", true
		}, ""},
		{"http jwks on ::1, allowed", func(p *authv1.JwtProvider) { p.JwksUri, p.AllowInsecureLoopback = "http://[::1]:1/jwks", true }, ""},
		{"http jwks on localhost, allowed", func(p *authv1.JwtProvider) { p.JwksUri, p.AllowInsecureLoopback = "http://localhost/jwks", true }, ""},
		{"jwks with credentials", func(p *authv1.JwtProvider) { p.JwksUri = "https://u:p@idp.test/jwks" }, "jwks_uri"},
		{"no audiences", func(p *authv1.JwtProvider) { p.Audiences = nil }, "audiences"},
		{"empty audience", func(p *authv1.JwtProvider) { p.Audiences = []string{""} }, "audiences"},
		{"any audience", func(p *authv1.JwtProvider) { p.Audiences, p.AllowAnyAudience = nil, true }, ""},
		{"any audience and audiences", func(p *authv1.JwtProvider) { p.AllowAnyAudience = true }, "allow_any_audience"},
		{"introspection", introspecting, ""},
		{"http introspection on a public host", func(p *authv1.JwtProvider) {
			introspecting(p)
			p.IntrospectionUri, p.AllowInsecureLoopback = "http://idp.test/introspect", true
		}, "introspection_uri"},
		{"http introspection on loopback", func(p *authv1.JwtProvider) {
			introspecting(p)
			p.IntrospectionUri = "http://127.0.0.1:9/introspect"
		}, "introspection_uri"},
		{"http introspection on loopback, allowed", func(p *authv1.JwtProvider) {
			introspecting(p)
			p.IntrospectionUri, p.AllowInsecureLoopback = "http://127.0.0.1:9/introspect", true
		}, ""},
		{"introspection without a client id", func(p *authv1.JwtProvider) {
			introspecting(p)
			p.IntrospectionClientId = ""
		}, "introspection_client_id"},
		{"introspection without a secret", func(p *authv1.JwtProvider) {
			introspecting(p)
			p.IntrospectionClientSecretRef = ""
		}, "introspection_client_secret_ref"},
		{"secret ref outside the directory", func(p *authv1.JwtProvider) {
			introspecting(p)
			p.IntrospectionClientSecretRef = "../../etc/shadow"
		}, "introspection_client_secret_ref"},
		{"client credentials without introspection", func(p *authv1.JwtProvider) { p.IntrospectionClientId = "portico" }, "introspection_client_id"},
		{"rate limit", func(p *authv1.JwtProvider) {
			introspecting(p)
			p.IntrospectionRequestsPerSecond, p.IntrospectionBurst = 5, 10
		}, ""},
		{"rate limit without introspection", func(p *authv1.JwtProvider) { p.IntrospectionRequestsPerSecond = 5 }, "introspection_requests_per_second"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := base()
			tc.mod(p)
			_, err := policy.Build(policy.Resources{policy.JwtProviderType: {Version: "3", Resources: []*anypb.Any{anyOf(t, p)}}}, time.Now())
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var ve *policy.ValidationError
			if !errors.As(err, &ve) || !errors.Is(err, policy.ErrInvalid) {
				t.Fatalf("err %v, want a ValidationError wrapping ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `"idp"`) {
				t.Fatalf("error %q does not name the provider and %s", err, tc.want)
			}
		})
	}
}
