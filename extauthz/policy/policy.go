// Package policy is extauthz's view of the auth resources the control plane
// serves over xDS: JWT providers, API-key hashes and revoked jtis, validated
// and indexed into one immutable Policy value.
//
// A Policy is never modified after Build returns it; a new config produces a
// new Policy that callers swap in atomically, so readers need no lock.
// BuildFrom makes the next policy from the previous one, sharing the API-key
// shards whose bytes did not change, so an update costs what it changed.
package policy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/portico-io/portico/internal/idp"
	"github.com/portico-io/portico/internal/secretdir"
	"github.com/portico-io/portico/internal/xdscontract"
	authv1 "github.com/portico-io/portico/proto/portico/auth/v1"
)

// Type URLs of the resources a Policy is built from.
var (
	JwtProviderType    = xdscontract.JwtProviderType
	ApiKeyShardType    = xdscontract.ApiKeyShardType
	RevocationListType = xdscontract.RevocationListType
)

// Types lists the resource types a Policy is built from. Read-only.
var Types = []string{JwtProviderType, ApiKeyShardType, RevocationListType}

// Defaults for provider fields left unset.
const (
	DefaultClockSkew    = 30 * time.Second
	DefaultJWKSCacheTTL = 5 * time.Minute
)

// Algorithms extauthz verifies. HMAC and "none" are deliberately absent: a
// provider publishes public keys, and a shared secret cannot be one.
var Algorithms = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// Provider is one trusted issuer.
type Provider struct {
	Name   string
	Issuer string
	// Audiences is empty only when AllowAnyAudience is set.
	Audiences        []string
	AllowAnyAudience bool
	// Exactly one of JWKSURI and InlineKeys is set; URLs are https, or http
	// to a loopback host when the provider allowed it.
	JWKSURI      string
	InlineKeys   *jose.JSONWebKeySet
	Algorithms   []string
	ClockSkew    time.Duration
	JWKSCacheTTL time.Duration
	// Introspection is nil for a provider without an introspection
	// endpoint.
	Introspection *Introspection
}

// Introspection is how a provider's opaque tokens are checked (RFC 7662).
// Comparable: equal values can share one client (its cache and bucket).
type Introspection struct {
	URI string
	// ClientID and SecretRef (a file name in the secrets directory)
	// authenticate extauthz with client_secret_basic.
	ClientID  string
	SecretRef string
	// RequestsPerSecond and Burst size the token bucket in front of the
	// endpoint (defaults applied: idp.DefaultRequestsPerSecond, and a
	// burst of one second's worth).
	RequestsPerSecond uint32
	Burst             uint32
}

// AllowsAlg reports whether alg is one of the provider's pinned algorithms.
func (p *Provider) AllowsAlg(alg string) bool { return slices.Contains(p.Algorithms, alg) }

// SameKeySource reports whether p and q would fetch the same keys the same
// way, so a JWKS cache built for one can serve the other.
func (p *Provider) SameKeySource(q *Provider) bool {
	return p.JWKSURI == q.JWKSURI && p.JWKSCacheTTL == q.JWKSCacheTTL && p.InlineKeys == nil && q.InlineKeys == nil
}

// APIKey is one consumer credential, known by the SHA-256 of its secret.
type APIKey struct {
	ID       string
	Hash     [sha256.Size]byte
	Consumer string
	Tenant   string
	Tier     string
	Scopes   []string
	// ExpiresAt is zero for keys that do not expire.
	ExpiresAt time.Time
}

// Resources are the raw resources of each type with the version they came
// with: the input of Build and what is persisted to disk.
type Resources map[string]TypeResources

// TypeResources is the state of the world of one type.
type TypeResources struct {
	Version   string       `json:"version"`
	Resources []*anypb.Any `json:"-"`
}

// With returns a copy of r with typeURL replaced.
func (r Resources) With(typeURL string, tr TypeResources) Resources {
	out := make(Resources, len(r)+1)
	for k, v := range r {
		out[k] = v
	}
	out[typeURL] = tr
	return out
}

// NumShards is how many ApiKeyShards the API keys are spread over: one
// per value of the first byte of a key's hash, named ShardName(byte).
const NumShards = 256

// ShardName is the name of the ApiKeyShard holding the keys whose SHA-256
// starts with b, as the control plane names it ("apikeys-00".."apikeys-ff").
func ShardName(b byte) string { return fmt.Sprintf("apikeys-%02x", b) }

// Policy is an immutable, indexed auth policy.
type Policy struct {
	// Versions holds the xDS version of each type the policy was built from.
	Versions  map[string]string
	Providers map[string]*Provider
	// Revoked maps a revoked jti to the token's own expiry. An entry
	// matters until that expiry plus Grace.
	Revoked map[string]time.Time
	// Grace is the largest provider clock skew: a token is accepted up to
	// exp+skew, so its revocation must be kept that long too.
	Grace time.Duration
	// Raw is what the policy was built from (shared; MUST NOT be modified).
	Raw Resources

	// shards index the API keys by the first byte of their hash; nil where
	// no shard was received. A shard is immutable once built and shared
	// by every later policy that received the same bytes for it.
	shards [NumShards]*keyShard
}

// keyShard is one decoded ApiKeyShard.
type keyShard struct {
	// src is the resource the shard was decoded from, kept to recognize
	// the same bytes in the next update (and held in Raw).
	src  *anypb.Any
	keys map[[sha256.Size]byte]*APIKey
}

// Key returns the API key whose secret has the SHA-256 sum, if any.
func (p *Policy) Key(sum [sha256.Size]byte) (*APIKey, bool) {
	s := p.shards[sum[0]]
	if s == nil {
		return nil, false
	}
	k, ok := s.keys[sum]
	return k, ok
}

// NumKeys returns how many API keys p holds.
func (p *Policy) NumKeys() int {
	n := 0
	for _, s := range p.shards {
		if s != nil {
			n += len(s.keys)
		}
	}
	return n
}

// Complete reports whether every type has been received at least once.
func (p *Policy) Complete() bool {
	for _, t := range Types {
		if _, ok := p.Versions[t]; !ok {
			return false
		}
	}
	return true
}

// Version returns the numeric xDS version of typeURL, or -1.
func (p *Policy) Version(typeURL string) float64 {
	v, err := strconv.ParseFloat(p.Versions[typeURL], 64)
	if err != nil {
		return -1
	}
	return v
}

// IsRevoked reports whether jti is revoked at now.
func (p *Policy) IsRevoked(jti string, now time.Time) bool {
	if jti == "" {
		return false
	}
	exp, ok := p.Revoked[jti]
	return ok && !now.After(exp.Add(p.Grace))
}

// Prune returns a policy without the revocations that expired before now,
// or p itself when none did. Expired revocations name tokens that no longer
// verify anyway, so dropping them changes no decision and bounds memory.
func (p *Policy) Prune(now time.Time) *Policy {
	n := 0
	for _, exp := range p.Revoked {
		if now.After(exp.Add(p.Grace)) {
			n++
		}
	}
	if n == 0 {
		return p
	}
	q := *p
	q.Revoked = make(map[string]time.Time, len(p.Revoked)-n)
	for jti, exp := range p.Revoked {
		if !now.After(exp.Add(p.Grace)) {
			q.Revoked[jti] = exp
		}
	}
	return &q
}

// Build validates res and indexes it. Missing types count as empty. A
// *ValidationError names the first resource that failed. Revocations that
// no longer matter at now are left out.
func Build(res Resources, now time.Time) (*Policy, error) { return BuildFrom(nil, res, now) }

// BuildFrom is Build for the update that follows prev (nil: none), at a
// cost proportional to what changed: an ApiKeyShard whose bytes equal
// those prev decoded for that shard is neither decoded nor validated
// again, and the new policy shares prev's index of it. Comparing the bytes
// (free when the resource is the very one prev holds, as over delta xDS)
// is all an unchanged shard costs. JWT providers and revocations, small,
// are built anew. prev is not modified and stays valid.
//
// The result decides exactly as Build(res, now) would. Its Raw holds
// res's resources, except that a reused shard's is prev's copy of the same
// bytes, so that equal bytes received again are not kept twice.
func BuildFrom(prev *Policy, res Resources, now time.Time) (*Policy, error) {
	p := &Policy{
		Versions:  map[string]string{},
		Providers: map[string]*Provider{},
		Revoked:   map[string]time.Time{},
		Raw:       res,
	}
	reused := 0
	for t, tr := range res {
		if !slices.Contains(Types, t) {
			return nil, &ValidationError{Type: t, Err: ErrUnknownType}
		}
		p.Versions[t] = tr.Version
		for i, a := range tr.Resources {
			if a.GetTypeUrl() != t {
				return nil, &ValidationError{Type: t, Index: i, Err: fmt.Errorf("%w: resource has type %q", ErrInvalid, a.GetTypeUrl())}
			}
			var err error
			var name string
			switch t {
			case JwtProviderType:
				name, err = p.addProvider(a)
			case ApiKeyShardType:
				var hit bool
				name, hit, err = p.addShard(a, prev)
				if hit {
					reused++
				}
			case RevocationListType:
				name, err = p.addRevocations(a)
			}
			if err != nil {
				return nil, &ValidationError{Type: t, Index: i, Name: name, Err: err}
			}
		}
	}
	if reused > 0 {
		// Hold each reused shard's bytes once: prev's copy, not res's.
		tr := res[ApiKeyShardType]
		own := make([]*anypb.Any, 0, len(tr.Resources))
		for _, s := range p.shards {
			if s != nil {
				own = append(own, s.src)
			}
		}
		p.Raw = res.With(ApiKeyShardType, TypeResources{Version: tr.Version, Resources: own})
	}
	p.Grace = DefaultClockSkew
	for _, prov := range p.Providers {
		p.Grace = max(p.Grace, prov.ClockSkew)
	}
	return p.Prune(now), nil
}

func (p *Policy) addProvider(a *anypb.Any) (string, error) {
	var m authv1.JwtProvider
	if err := proto.Unmarshal(a.GetValue(), &m); err != nil {
		return "", fmt.Errorf("%w: decode: %v", ErrInvalid, err)
	}
	name := m.GetName()
	switch {
	case name == "":
		return name, fmt.Errorf("%w: name is empty", ErrInvalid)
	case p.Providers[name] != nil:
		return name, fmt.Errorf("%w: duplicate provider", ErrInvalid)
	case m.GetIssuer() == "":
		return name, fmt.Errorf("%w: issuer is empty", ErrInvalid)
	case (m.GetJwksUri() == "") == (m.GetInlineJwks() == ""):
		return name, fmt.Errorf("%w: exactly one of jwks_uri and inline_jwks must be set", ErrInvalid)
	case m.GetAllowAnyAudience() && len(m.GetAudiences()) > 0:
		return name, fmt.Errorf("%w: allow_any_audience and audiences are exclusive", ErrInvalid)
	case !m.GetAllowAnyAudience() && len(m.GetAudiences()) == 0:
		return name, fmt.Errorf("%w: no audiences (allow_any_audience must be set to accept any)", ErrInvalid)
	case slices.Contains(m.GetAudiences(), ""):
		return name, fmt.Errorf("%w: audiences holds an empty string", ErrInvalid)
	case len(m.GetAlgorithms()) == 0:
		return name, fmt.Errorf("%w: no algorithms", ErrInvalid)
	}
	if u := m.GetJwksUri(); u != "" {
		if err := idp.CheckURL(u, m.GetAllowInsecureLoopback()); err != nil {
			return name, fmt.Errorf("%w: jwks_uri: %w", ErrInvalid, err)
		}
	}
	for _, alg := range m.GetAlgorithms() {
		if !slices.Contains(Algorithms, alg) {
			return name, fmt.Errorf("%w: algorithm %q is not supported (want one of %s)", ErrInvalid, alg, strings.Join(Algorithms, ", "))
		}
	}
	in, err := introspection(&m)
	if err != nil {
		return name, err
	}
	prov := &Provider{
		Name:             name,
		Issuer:           m.GetIssuer(),
		Audiences:        slices.Clone(m.GetAudiences()),
		AllowAnyAudience: m.GetAllowAnyAudience(),
		JWKSURI:          m.GetJwksUri(),
		Algorithms:       slices.Clone(m.GetAlgorithms()),
		ClockSkew:        DefaultClockSkew,
		JWKSCacheTTL:     DefaultJWKSCacheTTL,
		Introspection:    in,
	}
	if d := m.GetClockSkew(); d != nil {
		if err := d.CheckValid(); err != nil || d.AsDuration() < 0 {
			return name, fmt.Errorf("%w: clock_skew is invalid", ErrInvalid)
		}
		prov.ClockSkew = d.AsDuration()
	}
	if d := m.GetJwksCacheTtl(); d != nil && d.AsDuration() != 0 {
		if err := d.CheckValid(); err != nil || d.AsDuration() < 0 {
			return name, fmt.Errorf("%w: jwks_cache_ttl is invalid", ErrInvalid)
		}
		prov.JWKSCacheTTL = d.AsDuration()
	}
	if s := m.GetInlineJwks(); s != "" {
		set, err := ParseJWKS([]byte(s))
		if err != nil {
			return name, fmt.Errorf("inline_jwks: %w", err)
		}
		prov.InlineKeys = set
	}
	p.Providers[name] = prov
	return name, nil
}

// introspection validates a provider's introspection settings: none at
// all, or an endpoint with client credentials (the secret by reference).
func introspection(m *authv1.JwtProvider) (*Introspection, error) {
	if m.GetIntrospectionUri() == "" {
		switch {
		case m.GetIntrospectionClientId() != "":
			return nil, fmt.Errorf("%w: introspection_client_id without introspection_uri", ErrInvalid)
		case m.GetIntrospectionClientSecretRef() != "":
			return nil, fmt.Errorf("%w: introspection_client_secret_ref without introspection_uri", ErrInvalid)
		case m.GetIntrospectionRequestsPerSecond() != 0 || m.GetIntrospectionBurst() != 0:
			return nil, fmt.Errorf("%w: introspection_requests_per_second or introspection_burst without introspection_uri", ErrInvalid)
		}
		return nil, nil
	}
	if err := idp.CheckURL(m.GetIntrospectionUri(), m.GetAllowInsecureLoopback()); err != nil {
		return nil, fmt.Errorf("%w: introspection_uri: %w", ErrInvalid, err)
	}
	if !idp.ValidClientID(m.GetIntrospectionClientId()) {
		return nil, fmt.Errorf("%w: introspection_client_id must be 1-256 characters without control characters", ErrInvalid)
	}
	if !secretdir.ValidName(m.GetIntrospectionClientSecretRef()) {
		return nil, fmt.Errorf("%w: introspection_client_secret_ref must name a file in the secrets directory ([-._a-zA-Z0-9], not . or ..*)", ErrInvalid)
	}
	in := &Introspection{URI: m.GetIntrospectionUri(), ClientID: m.GetIntrospectionClientId(), SecretRef: m.GetIntrospectionClientSecretRef(),
		RequestsPerSecond: m.GetIntrospectionRequestsPerSecond(), Burst: m.GetIntrospectionBurst()}
	switch {
	case in.RequestsPerSecond > idp.MaxRequestsPerSecond:
		return nil, fmt.Errorf("%w: introspection_requests_per_second must be at most %d", ErrInvalid, idp.MaxRequestsPerSecond)
	case in.Burst > idp.MaxBurst:
		return nil, fmt.Errorf("%w: introspection_burst must be at most %d", ErrInvalid, idp.MaxBurst)
	}
	if in.RequestsPerSecond == 0 {
		in.RequestsPerSecond = idp.DefaultRequestsPerSecond
	}
	if in.Burst == 0 {
		in.Burst = in.RequestsPerSecond
	}
	return in, nil
}

// ParseJWKS parses a JWK set and checks that every key is a public key
// extauthz can verify with. A set with no usable key is an error.
func ParseJWKS(b []byte) (*jose.JSONWebKeySet, error) {
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadJWKS, err)
	}
	if len(set.Keys) == 0 {
		return nil, fmt.Errorf("%w: no keys", ErrBadJWKS)
	}
	for i, k := range set.Keys {
		if !k.Valid() || !k.IsPublic() {
			return nil, fmt.Errorf("%w: key %d (kid %q) is not a valid public key", ErrBadJWKS, i, k.KeyID)
		}
	}
	return &set, nil
}

// addShard indexes one ApiKeyShard, reusing prev's when the bytes are the
// same (hit). Every key of shard "apikeys-xx" must have a hash starting
// with byte xx: that is what lets Key look in one shard, and makes a hash
// unique across the policy once it is unique in its shard.
func (p *Policy) addShard(a *anypb.Any, prev *Policy) (name string, hit bool, err error) {
	v := a.GetValue()
	if prev != nil {
		// The bytes decide; the leading name only says where to look.
		if i, ok := leadingShardIndex(v); ok {
			if s := prev.shards[i]; s != nil && bytes.Equal(s.src.GetValue(), v) {
				if p.shards[i] != nil {
					return ShardName(byte(i)), false, fmt.Errorf("%w: duplicate shard", ErrInvalid)
				}
				p.shards[i] = s
				return ShardName(byte(i)), true, nil
			}
		}
	}
	var m authv1.ApiKeyShard
	if err := proto.Unmarshal(v, &m); err != nil {
		return "", false, fmt.Errorf("%w: decode: %v", ErrInvalid, err)
	}
	name = m.GetName()
	i, ok := shardIndex(name)
	if !ok {
		return name, false, fmt.Errorf("%w: shard name is not %s..%s", ErrInvalid, ShardName(0), ShardName(NumShards-1))
	}
	if p.shards[i] != nil {
		return name, false, fmt.Errorf("%w: duplicate shard", ErrInvalid)
	}
	s := &keyShard{src: a, keys: make(map[[sha256.Size]byte]*APIKey, len(m.GetKeys()))}
	for _, k := range m.GetKeys() {
		if len(k.GetSha256()) != sha256.Size {
			return name, false, fmt.Errorf("%w: key %q: sha256 has %d bytes, want %d", ErrInvalid, k.GetId(), len(k.GetSha256()), sha256.Size)
		}
		if k.GetConsumer() == "" {
			return name, false, fmt.Errorf("%w: key %q: consumer is empty", ErrInvalid, k.GetId())
		}
		if b := k.GetSha256()[0]; int(b) != i {
			return name, false, fmt.Errorf("%w: key %q: its hash starts with %02x, so it belongs in shard %s", ErrInvalid, k.GetId(), b, ShardName(b))
		}
		key := &APIKey{ID: k.GetId(), Consumer: k.GetConsumer(), Tenant: k.GetTenant(), Tier: k.GetTier(), Scopes: slices.Clone(k.GetScopes())}
		copy(key.Hash[:], k.GetSha256())
		if k.GetExpiresAt() != nil {
			key.ExpiresAt = k.GetExpiresAt().AsTime()
		}
		if s.keys[key.Hash] != nil {
			return name, false, fmt.Errorf("%w: key %q: duplicate hash", ErrInvalid, k.GetId())
		}
		s.keys[key.Hash] = key
	}
	p.shards[i] = s
	return name, false, nil
}

// shardIndex parses a shard name made by ShardName.
func shardIndex(name string) (int, bool) {
	hexDigits, ok := strings.CutPrefix(name, "apikeys-")
	if !ok || len(hexDigits) != 2 {
		return 0, false
	}
	var b [1]byte
	// Lowercase only, as ShardName writes it: one name per shard.
	if _, err := hex.Decode(b[:], []byte(hexDigits)); err != nil || strings.ToLower(hexDigits) != hexDigits {
		return 0, false
	}
	return int(b[0]), true
}

// leadingShardIndex reads the shard name from the first field of an
// encoded ApiKeyShard without decoding its keys (the encoder writes the
// name first). Only a hint: a message whose bytes equal a shard prev
// decoded is that shard, whatever it starts with.
func leadingShardIndex(v []byte) (int, bool) {
	num, typ, n := protowire.ConsumeTag(v)
	if n < 0 || num != 1 || typ != protowire.BytesType {
		return 0, false
	}
	name, m := protowire.ConsumeBytes(v[n:])
	if m < 0 {
		return 0, false
	}
	return shardIndex(string(name))
}

func (p *Policy) addRevocations(a *anypb.Any) (string, error) {
	var m authv1.RevocationList
	if err := proto.Unmarshal(a.GetValue(), &m); err != nil {
		return "", fmt.Errorf("%w: decode: %v", ErrInvalid, err)
	}
	for _, r := range m.GetRevocations() {
		if r.GetJti() == "" {
			return m.GetName(), fmt.Errorf("%w: revocation with empty jti", ErrInvalid)
		}
		if r.GetExpiresAt() == nil {
			return m.GetName(), fmt.Errorf("%w: revocation %q has no expires_at", ErrInvalid, r.GetJti())
		}
		p.Revoked[r.GetJti()] = r.GetExpiresAt().AsTime()
	}
	return m.GetName(), nil
}

// ValidationError says which resource made Build fail.
type ValidationError struct {
	Type  string
	Index int
	Name  string
	Err   error
}

func (e *ValidationError) Error() string {
	short := e.Type[strings.LastIndexByte(e.Type, '.')+1:]
	if e.Name != "" {
		return fmt.Sprintf("policy: %s %q: %v", short, e.Name, e.Err)
	}
	return fmt.Sprintf("policy: %s[%d]: %v", short, e.Index, e.Err)
}

func (e *ValidationError) Unwrap() error { return e.Err }

var _ error = (*ValidationError)(nil)
