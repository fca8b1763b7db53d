package authn

import (
	"flag"
	"fmt"
	"strings"

	"github.com/portico-io/portico/extauthz/jwks"
	"github.com/portico-io/portico/internal/envflag"
)

// Flags are the flags of an API that authenticates people: the bootstrap
// admin token file, the host names it answers, and the operators' IdP.
type Flags struct {
	TokenFile, Hosts                                                    *string
	Issuer, Audiences, JWKSURL, Algorithms, Claim, RoleMap, TenantClaim *string
	KeyspacesClaim                                                      *string
}

// RegisterFlags defines --admin-token-file, --admin-hosts and --oidc-* (env
// PORTICO_ADMIN_TOKEN_FILE, PORTICO_ADMIN_HOSTS, PORTICO_OIDC_*) on fs.
func RegisterFlags(fs *flag.FlagSet) *Flags {
	return &Flags{
		TokenFile:   envflag.String(fs, "admin-token-file", "PORTICO_ADMIN_TOKEN_FILE", "", "bootstrap admin token file: made (0600) and printed once on the first start, accepted from then on"),
		Hosts:       envflag.String(fs, "admin-hosts", "PORTICO_ADMIN_HOSTS", "localhost,127.0.0.1,::1", "comma-separated host names clients reach the API by (others get 421)"),
		Issuer:      envflag.String(fs, "oidc-issuer", "PORTICO_OIDC_ISSUER", "", "operators' IdP: the iss of the JWTs accepted (empty: no JWTs)"),
		Audiences:   envflag.String(fs, "oidc-audiences", "PORTICO_OIDC_AUDIENCES", "portico-admin", "comma-separated audiences; a JWT must name one"),
		JWKSURL:     envflag.String(fs, "oidc-jwks-url", "PORTICO_OIDC_JWKS_URL", "", "the IdP's JWKS URL"),
		Algorithms:  envflag.String(fs, "oidc-algorithms", "PORTICO_OIDC_ALGORITHMS", "RS256,ES256", "comma-separated signature algorithms accepted (pinned)"),
		Claim:       envflag.String(fs, "oidc-roles-claim", "PORTICO_OIDC_ROLES_CLAIM", "groups", "the claim whose values map to roles"),
		RoleMap:     envflag.String(fs, "oidc-role-map", "PORTICO_OIDC_ROLE_MAP", "", "comma-separated claim value=role pairs, e.g. platform-admins=admin,sre=viewer"),
		TenantClaim: envflag.String(fs, "oidc-tenant-claim", "PORTICO_OIDC_TENANT_CLAIM", "", "a string claim naming the tenant a JWT is bound to (scheduler tenancy); empty: none"),
		KeyspacesClaim: envflag.String(fs, "oidc-keyspaces-claim", "PORTICO_OIDC_KEYSPACES_CLAIM", "",
			"a claim (string or array of strings) naming the kvnode keyspaces a JWT is confined to (it then holds only kv.* there); an invalid name refuses the token; empty: none"),
	}
}

// HostList is --admin-hosts as a list.
func (f *Flags) HostList() []string { return SplitList(*f.Hosts) }

// JWT is the IdP configuration the --oidc-* flags describe; nil without
// --oidc-issuer. The JWKS is fetched and cached by extauthz's key source.
// validRole checks a role name of --oidc-role-map (authz.CheckRoles; passed
// in because authz imports this package).
func (f *Flags) JWT(validRole func(string) error) (*JWTConfig, error) {
	if *f.Issuer == "" {
		return nil, nil
	}
	if *f.JWKSURL == "" {
		return nil, fmt.Errorf("%w: --oidc-jwks-url is required with --oidc-issuer", ErrConfig)
	}
	keys, err := jwks.New(jwks.Config{URI: *f.JWKSURL})
	if err != nil {
		return nil, err
	}
	mapping := map[string][]string{}
	for _, pair := range SplitList(*f.RoleMap) {
		value, role, ok := strings.Cut(pair, "=")
		if !ok || value == "" {
			return nil, fmt.Errorf("%w: --oidc-role-map: %q is not value=role", ErrConfig, pair)
		}
		if err := validRole(role); err != nil {
			return nil, fmt.Errorf("%w: --oidc-role-map: %w", ErrConfig, err)
		}
		mapping[value] = append(mapping[value], role)
	}
	return &JWTConfig{Issuer: *f.Issuer, Audiences: SplitList(*f.Audiences), Algorithms: SplitList(*f.Algorithms), Keys: keys,
		RolesClaim: *f.Claim, RoleMapping: mapping, TenantClaim: *f.TenantClaim, KeyspacesClaim: *f.KeyspacesClaim}, nil
}

// SplitList splits a comma-separated flag value, dropping empty items.
func SplitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}
