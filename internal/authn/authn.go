// Package authn decides who is calling one of Portico's HTTP APIs (the admin
// API, the scheduler API, kvnode's HTTP APIs) from what the caller can
// prove, never from what it says about itself.
//
// Three credentials are accepted, in this order:
//
//  1. "Authorization: Bearer ptk_<id>_<secret>": an API token, looked up by
//     id in a TokenStore and compared by SHA-256 hash in constant time.
//     Expired and revoked tokens are refused on the next request: lookups
//     are never cached.
//  2. "Authorization: Bearer <JWT>": a token from the operator's identity
//     provider, verified with extauthz's JWKS cache and JWT checks (pinned
//     algorithms, issuer, audience, exp/nbf with leeway), its groups mapped
//     to roles by configuration.
//  3. A client certificate the TLS stack verified, carrying a Portico
//     workload identity (internal/identity); its SPIFFE role is mapped to
//     roles by a table.
//
// An Authorization header that is present but bad is refused; the
// authenticator never falls back to the certificate. Cookies and other
// ambient credentials are never consulted.
//
// BootstrapToken creates (once, 0600) or reads the bootstrap admin token
// file; StaticTokens serves it to components without a token table.
//
// What a Principal may do is internal/authz's business; this package only
// establishes it. An Authenticator is safe for concurrent use.
package authn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/portico-io/portico/internal/identity"
)

// Kind is how a principal authenticated.
type Kind string

// Kinds of principal.
const (
	KindToken Kind = "token" // a Portico API token
	KindJWT   Kind = "jwt"   // a JWT from the operator's identity provider
	KindCert  Kind = "cert"  // a verified mTLS client certificate
)

// Principal is an authenticated caller. The audit author of a change is its
// Kind, ID and Name.
type Principal struct {
	Kind Kind
	// ID is the token id, the JWT subject, or the certificate's SPIFFE ID.
	ID string
	// Name is a human label: the token's name, the JWT's name claim (or
	// subject), the certificate identity's name.
	Name string
	// Roles are internal/authz role names. Unknown names grant nothing.
	Roles []string
	// Tenant, when set, confines the principal to one scheduler tenant: the
	// scheduler takes the tenant from here, never from the request, and
	// internal/authz grants a tenant-bound principal only tenant-scoped
	// permissions. Empty means the principal is not a tenant's.
	Tenant string
	// Keyspaces, when set, confines the principal to these kvnode keyspaces
	// (and internal/authz to kv permissions). Empty means no keyspace
	// restriction: like an etcd role without key ranges, the principal's
	// roles alone decide. A token meant for one keyspace must name it.
	Keyspaces []string
}

// String is the principal's stable audit identity, "<kind>:<id>".
func (p Principal) String() string { return string(p.Kind) + ":" + p.ID }

// Author is how p is recorded as the author of a change (audit entries, a
// token's creator or revoker): "<kind>:<id> (<name>)", or "<kind>:<id>"
// when the name is empty or the id itself; "" for the zero Principal.
func (p Principal) Author() string {
	switch {
	case p.IsZero():
		return ""
	case p.Name != "" && p.Name != p.ID:
		return p.String() + " (" + p.Name + ")"
	}
	return p.String()
}

// IsZero reports whether p is the zero Principal (nobody).
func (p Principal) IsZero() bool { return p.Kind == "" && p.ID == "" }

// AllowsKeyspace reports whether p may touch keyspace ks (see Keyspaces).
func (p Principal) AllowsKeyspace(ks string) bool {
	return len(p.Keyspaces) == 0 || slices.Contains(p.Keyspaces, ks)
}

type principalKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the principal internal/authz's middleware put in ctx.
func FromContext(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok && !p.IsZero()
}

// CertConfig maps verified client certificates to principals.
type CertConfig struct {
	// TrustDomain certificates must belong to (default
	// identity.DefaultTrustDomain); others are ErrBadCertificate.
	TrustDomain string
	// Roles maps a workload role to authz role names (nil:
	// DefaultCertRoles()). A role not in the table authenticates with no
	// roles, so it may do nothing: platform workloads get API access only
	// when a component maps them explicitly.
	Roles map[identity.Role][]string
	// Keyspaces confines certificates of a workload role to these kvnode
	// keyspaces (Principal.Keyspaces), e.g. cachenode → ["cache"]. A role
	// without an entry is not confined. An entry with an empty list is a
	// configuration error: it would read as "no restriction".
	Keyspaces map[identity.Role][]string
}

// DefaultCertRoles is the default certificate table: an operator
// certificate is an admin. Operator certificates are issued by whoever holds
// the platform CA key, which already confers full control of the platform
// (it can mint any workload's identity), so this grants nothing new; every
// other workload role maps to nothing.
func DefaultCertRoles() map[identity.Role][]string {
	return map[identity.Role][]string{identity.Operator: {"admin"}}
}

// Config configures an Authenticator. Zero values take the defaults.
type Config struct {
	// Tokens verifies API tokens; nil refuses them.
	Tokens TokenStore
	// JWT verifies IdP tokens; nil refuses them.
	JWT *JWTConfig
	// Certs maps client certificates; the zero value uses the defaults.
	Certs CertConfig
	// Logger gets warnings (never secrets); default slog.Default().
	Logger *slog.Logger
	// TimeNow is the clock (default time.Now); tests inject one.
	TimeNow func() time.Time
}

// Authenticator establishes the Principal of a request.
type Authenticator struct {
	cfg     Config
	touched touches
}

// New validates cfg and returns an Authenticator.
func New(cfg Config) (*Authenticator, error) {
	if cfg.JWT != nil {
		j := *cfg.JWT
		if err := j.validate(); err != nil {
			return nil, err
		}
		cfg.JWT = &j
	}
	if cfg.Certs.TrustDomain == "" {
		cfg.Certs.TrustDomain = identity.DefaultTrustDomain
	}
	if cfg.Certs.Roles == nil {
		cfg.Certs.Roles = DefaultCertRoles()
	}
	for r := range cfg.Certs.Roles {
		if !r.Valid() {
			return nil, fmt.Errorf("%w: certs: unknown workload role %q", ErrConfig, r)
		}
	}
	for r, ks := range cfg.Certs.Keyspaces {
		if !r.Valid() {
			return nil, fmt.Errorf("%w: certs: unknown workload role %q", ErrConfig, r)
		}
		if len(ks) == 0 || slices.Contains(ks, "") {
			return nil, fmt.Errorf("%w: certs: role %q confined to no keyspace (leave it out to not confine it)", ErrConfig, r)
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.TimeNow == nil {
		cfg.TimeNow = time.Now
	}
	return &Authenticator{cfg: cfg, touched: touches{last: map[string]time.Time{}}}, nil
}

// Authenticate returns the request's principal: from its bearer token if it
// has an Authorization header, else from its verified client certificate,
// else ErrNoCredentials. Errors wrap this package's sentinels.
func (a *Authenticator) Authenticate(r *http.Request) (Principal, error) {
	raw, err := ParseBearer(r.Header)
	switch {
	case err == nil:
		if IsAPIToken(raw) {
			return a.verifyAPIToken(r.Context(), raw)
		}
		return a.verifyJWT(r.Context(), raw)
	case !errors.Is(err, ErrNoCredentials):
		return Principal{}, err
	}
	if HasClientCert(r) {
		return a.verifyCert(r)
	}
	return Principal{}, ErrNoCredentials
}

// HasClientCert reports whether the TLS stack verified a client certificate
// on r's connection.
func HasClientCert(r *http.Request) bool {
	return r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0
}

func (a *Authenticator) verifyCert(r *http.Request) (Principal, error) {
	id, err := identity.FromRequest(r)
	if err != nil {
		return Principal{}, fmt.Errorf("%w: %w", ErrBadCertificate, err)
	}
	if err := (identity.Policy{TrustDomain: a.cfg.Certs.TrustDomain}).Allow(id); err != nil {
		return Principal{}, fmt.Errorf("%w: %w", ErrBadCertificate, err)
	}
	return Principal{
		Kind:      KindCert,
		ID:        id.String(),
		Name:      id.Name,
		Roles:     clone(a.cfg.Certs.Roles[id.Role]),
		Keyspaces: clone(a.cfg.Certs.Keyspaces[id.Role]),
	}, nil
}
