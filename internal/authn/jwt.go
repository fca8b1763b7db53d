package authn

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/portico-io/portico/extauthz/jwks"
	"github.com/portico-io/portico/extauthz/policy"
	"github.com/portico-io/portico/extauthz/token"
)

// Defaults and bounds for JWTConfig.
const (
	DefaultLeeway     = 30 * time.Second
	MaxLeeway         = 5 * time.Minute
	DefaultRolesClaim = "groups"
	DefaultNameClaim  = "name"
)

// KeySource yields the keys that may verify a token with a given kid.
// *jwks.Source (extauthz's cached, rate-limited JWKS fetcher) implements it.
type KeySource interface {
	Keys(ctx context.Context, kid string) ([]jwks.Key, error)
}

var _ KeySource = (*jwks.Source)(nil)

// JWTConfig accepts bearer JWTs from the operator's identity provider.
// Signature, algorithm and registered-claim checks are extauthz's
// (extauthz/token): HMAC and "none" are not implemented at all, so neither
// alg confusion nor unsigned tokens can get through whatever is configured.
type JWTConfig struct {
	// Issuer must equal the token's iss. Required.
	Issuer string
	// Audiences: the token's aud must name at least one. Required, so a
	// token the IdP minted for another application is refused.
	Audiences []string
	// Algorithms pinned for this IdP, a subset of policy.Algorithms. Required.
	Algorithms []string
	// Keys is the IdP's key set, normally a *jwks.Source. Required.
	Keys KeySource
	// Leeway absorbs clock skew on exp, nbf and iat (default DefaultLeeway,
	// at most MaxLeeway).
	Leeway time.Duration
	// RolesClaim names the top-level claim (a string or an array of strings)
	// whose values RoleMapping turns into roles (default "groups").
	RolesClaim string
	// RoleMapping maps a RolesClaim value to role names, e.g.
	// "portico-admins" → ["admin"]. Values not in it grant nothing, so a
	// token from the IdP authenticates but may do nothing until mapped.
	RoleMapping map[string][]string
	// TenantClaim, when set, names a string claim that becomes the
	// principal's Tenant. A token without that claim has no tenant (its
	// roles alone decide); a non-string value is refused.
	TenantClaim string
	// KeyspacesClaim, when set, names a claim (a string or an array of
	// strings) whose values become the principal's Keyspaces: the token is
	// then confined to those kvnode keyspaces and holds only kv.*
	// permissions there. A token without that claim is not confined (its
	// roles alone decide, as with TenantClaim). A claim of another type, an
	// empty one, or one naming an invalid keyspace (CheckKeyspace) refuses
	// the token: it must never read as "no restriction".
	KeyspacesClaim string
	// NameClaim names the claim used as the principal's Name (default
	// "name"); the subject stands in when it is absent.
	NameClaim string
}

func (c *JWTConfig) validate() error {
	switch {
	case c.Issuer == "":
		return fmt.Errorf("%w: jwt: Issuer is required", ErrConfig)
	case len(c.Audiences) == 0 || slices.Contains(c.Audiences, ""):
		return fmt.Errorf("%w: jwt: at least one non-empty audience is required", ErrConfig)
	case len(c.Algorithms) == 0:
		return fmt.Errorf("%w: jwt: Algorithms must be pinned", ErrConfig)
	case c.Keys == nil:
		return fmt.Errorf("%w: jwt: Keys is required", ErrConfig)
	case c.Leeway < 0 || c.Leeway > MaxLeeway:
		return fmt.Errorf("%w: jwt: Leeway %s out of [0, %s]", ErrConfig, c.Leeway, MaxLeeway)
	}
	for _, alg := range c.Algorithms {
		if !slices.Contains(policy.Algorithms, alg) {
			return fmt.Errorf("%w: jwt: algorithm %q is not supported (want one of %s)", ErrConfig, alg, strings.Join(policy.Algorithms, ", "))
		}
	}
	if c.Leeway == 0 {
		c.Leeway = DefaultLeeway
	}
	if c.RolesClaim == "" {
		c.RolesClaim = DefaultRolesClaim
	}
	if c.NameClaim == "" {
		c.NameClaim = DefaultNameClaim
	}
	return nil
}

func (a *Authenticator) verifyJWT(ctx context.Context, raw string) (Principal, error) {
	c := a.cfg.JWT
	if c == nil {
		return Principal{}, fmt.Errorf("%w: JWTs are not accepted here", ErrInvalidToken)
	}
	tok, err := token.Parse(raw)
	if err != nil {
		return Principal{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	// Before any key lookup, so a bogus alg cannot trigger JWKS fetches.
	if err := tok.CheckAlg(c.Algorithms); err != nil {
		return Principal{}, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	keys, err := c.Keys.Keys(ctx, tok.Header.Kid)
	switch {
	case errors.Is(err, jwks.ErrUnknownKID):
		return Principal{}, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	case err != nil:
		return Principal{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	verified := false
	for _, k := range keys {
		if tok.VerifySignature(k.Key, k.Alg) == nil {
			verified = true
			break
		}
	}
	if !verified {
		return Principal{}, fmt.Errorf("%w: %w", ErrInvalidToken, token.ErrSignature)
	}
	err = tok.ValidateClaims(token.Expectations{Issuer: c.Issuer, Audiences: c.Audiences, Skew: c.Leeway, Now: a.cfg.TimeNow()})
	switch {
	case errors.Is(err, token.ErrExpired):
		return Principal{}, fmt.Errorf("%w: %w", ErrExpired, err)
	case err != nil:
		return Principal{}, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	if tok.Claims.Subject == "" {
		return Principal{}, fmt.Errorf("%w: no sub claim", ErrInvalidToken)
	}
	claims, err := rawClaims(raw)
	if err != nil {
		return Principal{}, err
	}
	p := Principal{Kind: KindJWT, ID: tok.Claims.Subject, Name: tok.Claims.Subject}
	if name, ok := stringClaim(claims[c.NameClaim]); ok && name != "" {
		p.Name = name
	}
	for _, v := range stringsClaim(claims[c.RolesClaim]) {
		for _, role := range c.RoleMapping[v] {
			if !slices.Contains(p.Roles, role) {
				p.Roles = append(p.Roles, role)
			}
		}
	}
	slices.Sort(p.Roles)
	if c.TenantClaim != "" {
		if v, present := claims[c.TenantClaim]; present {
			t, ok := stringClaim(v)
			if !ok {
				return Principal{}, fmt.Errorf("%w: claim %q is not a string", ErrInvalidToken, c.TenantClaim)
			}
			p.Tenant = t
		}
	}
	if c.KeyspacesClaim != "" {
		if v, present := claims[c.KeyspacesClaim]; present {
			if p.Keyspaces, err = keyspacesClaim(c.KeyspacesClaim, v); err != nil {
				return Principal{}, err
			}
		}
	}
	return p, nil
}

// keyspacesClaim reads the keyspaces claim: a string or a non-empty array of
// strings, each a valid keyspace name; duplicates are dropped.
func keyspacesClaim(name string, v json.RawMessage) ([]string, error) {
	var ks []string
	if s, ok := stringClaim(v); ok {
		ks = []string{s}
	} else if json.Unmarshal(v, &ks) != nil {
		return nil, fmt.Errorf("%w: claim %q is not a string or an array of strings", ErrInvalidToken, name)
	}
	if len(ks) == 0 {
		return nil, fmt.Errorf("%w: claim %q names no keyspace", ErrInvalidToken, name)
	}
	out := make([]string, 0, len(ks))
	for _, k := range ks {
		if err := CheckKeyspace(k); err != nil {
			return nil, fmt.Errorf("%w: claim %q: %w", ErrInvalidToken, name, err)
		}
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out, nil
}

// rawClaims decodes the payload of a token token.Parse has accepted (so the
// shape is known good) into its top-level claims.
func rawClaims(raw string) (map[string]json.RawMessage, error) {
	parts := strings.SplitN(raw, ".", 3)
	b, err := base64.RawURLEncoding.Strict().DecodeString(parts[1])
	if err != nil {
		return nil, fmt.Errorf("%w: payload encoding", ErrMalformed)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%w: claims JSON", ErrMalformed)
	}
	return m, nil
}

func stringClaim(v json.RawMessage) (string, bool) {
	var s string
	if len(v) == 0 || json.Unmarshal(v, &s) != nil {
		return "", false
	}
	return s, true
}

// stringsClaim reads a string or an array of strings; anything else (or a
// non-string element) yields nothing, which grants no role.
func stringsClaim(v json.RawMessage) []string {
	if s, ok := stringClaim(v); ok {
		return []string{s}
	}
	var ss []string
	if len(v) == 0 || json.Unmarshal(v, &ss) != nil {
		return nil
	}
	return ss
}
