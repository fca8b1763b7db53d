package policy_test

import (
	"crypto/sha256"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portico-io/portico/extauthz/policy"
	authv1 "github.com/portico-io/portico/proto/portico/auth/v1"
)

func anyOf(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

const inlineJWKS = `{"keys":[{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo","kid":"ed"}]}`

func TestBuildRejects(t *testing.T) {
	now := time.Now()
	good := func() *authv1.JwtProvider {
		return &authv1.JwtProvider{Name: "idp", Issuer: "https://idp", Audiences: []string{"portico"}, InlineJwks: inlineJWKS, Algorithms: []string{"EdDSA"}}
	}
	cases := map[string]func(p *authv1.JwtProvider){
		"unparsable inline jwks": func(p *authv1.JwtProvider) { p.InlineJwks = `{"keys":[{"kty":"bogus"}]}` },
		"private key in jwks": func(p *authv1.JwtProvider) {
			p.InlineJwks = `{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}`
		},
		"HS256":         func(p *authv1.JwtProvider) { p.Algorithms = []string{"HS256"} },
		"none":          func(p *authv1.JwtProvider) { p.Algorithms = []string{"none"} },
		"no issuer":     func(p *authv1.JwtProvider) { p.Issuer = "" },
		"both key srcs": func(p *authv1.JwtProvider) { p.JwksUri = "https://idp/jwks" },
		"file jwks uri": func(p *authv1.JwtProvider) { p.InlineJwks, p.JwksUri = "", "file:///etc/passwd" },
		"no algorithms": func(p *authv1.JwtProvider) { p.Algorithms = nil },
		"no name":       func(p *authv1.JwtProvider) { p.Name = "" },
	}
	if _, err := policy.Build(policy.Resources{policy.JwtProviderType: {Version: "1", Resources: []*anypb.Any{anyOf(t, good())}}}, now); err != nil {
		t.Fatalf("good provider: %v", err)
	}
	for name, mod := range cases {
		p := good()
		mod(p)
		_, err := policy.Build(policy.Resources{policy.JwtProviderType: {Version: "2", Resources: []*anypb.Any{anyOf(t, p)}}}, now)
		var ve *policy.ValidationError
		if !errors.As(err, &ve) {
			t.Errorf("%s: err %v, want a ValidationError", name, err)
			continue
		}
		if !strings.Contains(err.Error(), "JwtProvider") {
			t.Errorf("%s: message %q does not name the resource", name, err)
		}
	}
	bad := &authv1.ApiKeyShard{Name: "apikeys-00", Keys: []*authv1.ApiKey{{Id: "k", Sha256: []byte{1, 2}, Consumer: "c"}}}
	if _, err := policy.Build(policy.Resources{policy.ApiKeyShardType: {Resources: []*anypb.Any{anyOf(t, bad)}}}, now); !errors.Is(err, policy.ErrInvalid) {
		t.Fatalf("short hash: %v", err)
	}
}

func TestStateRoundTrip(t *testing.T) {
	dir := t.TempDir()
	if _, err := policy.Load(dir); !errors.Is(err, policy.ErrNoState) {
		t.Fatalf("empty dir: %v", err)
	}
	now := time.Now()
	sum := sha256.Sum256([]byte("secret"))
	res := policy.Resources{
		policy.ApiKeyShardType: {Version: "7", Resources: []*anypb.Any{anyOf(t, &authv1.ApiKeyShard{Name: "apikeys-2b",
			Keys: []*authv1.ApiKey{{Id: "k", Sha256: sum[:], Consumer: "acme"}}})}},
		policy.RevocationListType: {Version: "7", Resources: []*anypb.Any{anyOf(t, &authv1.RevocationList{Name: "revocations",
			Revocations: []*authv1.Revocation{{Jti: "j", ExpiresAt: timestamppb.New(now.Add(time.Hour))}}})}},
		policy.JwtProviderType: {Version: "7"},
	}
	if err := policy.Save(dir, res, now); err != nil {
		t.Fatal(err)
	}
	back, err := policy.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Build(back, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Key(sum); !ok || !p.Complete() || !p.IsRevoked("j", now) || p.Version(policy.ApiKeyShardType) != 7 {
		t.Fatalf("round trip lost data: %+v", p)
	}
}
