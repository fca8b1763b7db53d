package spec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/portico-io/portico/internal/idp"
	"github.com/portico-io/portico/internal/secretdir"
)

// Resource is any managed resource value.
type Resource interface {
	ResourceName() string
	// Validate checks the resource on its own (no references to others).
	Validate() error
}

var (
	_ Resource = (*Cluster)(nil)
	_ Resource = (*Route)(nil)
	_ Resource = (*JWTProvider)(nil)
	_ Resource = (*Consumer)(nil)
	_ Resource = (*APIKey)(nil)
	_ Resource = (*Revocation)(nil)
	_ Resource = (*RateLimitRule)(nil)
	_ Resource = (*Secret)(nil)
	_ Resource = (*Listener)(nil)
)

func (c *Cluster) ResourceName() string       { return c.Name }
func (r *Route) ResourceName() string         { return r.Name }
func (p *JWTProvider) ResourceName() string   { return p.Name }
func (c *Consumer) ResourceName() string      { return c.Name }
func (k *APIKey) ResourceName() string        { return k.Name }
func (r *Revocation) ResourceName() string    { return r.Name }
func (r *RateLimitRule) ResourceName() string { return r.Name }
func (s *Secret) ResourceName() string        { return s.Name }
func (l *Listener) ResourceName() string      { return l.Name }

// New returns an empty resource of kind k.
func New(k Kind) (Resource, error) {
	d := k.Info()
	if d == nil {
		return nil, fieldErr("kind", CodeInvalid, "unknown resource kind %q", k)
	}
	return d.New(), nil
}

// Decode parses body strictly (unknown fields and trailing data are errors)
// into a resource of kind k and validates it on its own.
func Decode(k Kind, body []byte) (Resource, error) {
	r, err := New(k)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(r); err != nil {
		return nil, decodeError(err)
	}
	if dec.More() {
		return nil, fieldErr("", CodeInvalid, "trailing data after JSON object")
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return r, nil
}

func decodeError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Type == durationType {
			return fieldErr(te.Field, CodeInvalid, "must be a duration string like \"250ms\", \"1.5s\" or \"5m\"")
		}
		return fieldErr(te.Field, CodeInvalid, "must be %s", te.Type)
	}
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return fieldErr(strings.Trim(f, `"`), CodeInvalid, "unknown field")
	}
	return fieldErr("", CodeInvalid, "malformed JSON: %s", strings.TrimPrefix(msg, "json: "))
}

// nameRE bounds resource names: they appear in xDS resource names, Redis keys
// and URLs, so they are restricted to a safe alphabet.
var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]{0,126}[a-z0-9])?$`)

func checkName(name string) error {
	if name == "" {
		return fieldErr("name", CodeRequired, "is required")
	}
	if !nameRE.MatchString(name) {
		return fieldErr("name", CodeInvalid, "must be 1-128 lowercase letters, digits, '.', '_' or '-', starting and ending with a letter or digit")
	}
	return nil
}

// reserved names are compiled by the control plane itself.
var reservedClusters = []string{"envoy_admin", "extauthz", "opentelemetry_collector", "ratelimit", "xds_cluster"}

func (c *Cluster) Validate() error {
	if err := checkName(c.Name); err != nil {
		return err
	}
	if slices.Contains(reservedClusters, c.Name) {
		return fieldErr("name", CodeInvalid, "%q is reserved for Portico's own services", c.Name)
	}
	if len(c.Endpoints) == 0 {
		return fieldErr("endpoints", CodeRequired, "at least one endpoint is required")
	}
	seen := map[string]bool{}
	for i, e := range c.Endpoints {
		f := fmt.Sprintf("endpoints[%d]", i)
		if e.Address == "" {
			return fieldErr(f+".address", CodeRequired, "is required")
		}
		if _, err := netip.ParseAddr(e.Address); err != nil && !validHostname(e.Address) {
			return fieldErr(f+".address", CodeInvalid, "must be an IP address or a hostname")
		}
		if e.Port == 0 || e.Port > 65535 {
			return fieldErr(f+".port", CodeInvalid, "must be 1-65535")
		}
		if e.Weight > 128 {
			return fieldErr(f+".weight", CodeInvalid, "must be 0-128")
		}
		key := net.JoinHostPort(e.Address, fmt.Sprint(e.Port))
		if seen[key] {
			return fieldErr(f, CodeConflict, "duplicate endpoint %s", key)
		}
		seen[key] = true
	}
	if c.ConnectTimeout < 0 {
		return fieldErr("connectTimeout", CodeInvalid, "must not be negative")
	}
	switch c.LBPolicy {
	case "", LBRoundRobin, LBLeastRequest, LBRingHash, LBMaglev:
	default:
		return fieldErr("lbPolicy", CodeInvalid, "must be one of ROUND_ROBIN, LEAST_REQUEST, RING_HASH, MAGLEV")
	}
	if cb := c.CircuitBreakers; cb != nil && cb.RetryBudget != nil {
		if p := cb.RetryBudget.BudgetPercent; p <= 0 || p > 100 {
			return fieldErr("circuitBreakers.retryBudget.budgetPercent", CodeInvalid, "must be in (0, 100]")
		}
	}
	if od := c.OutlierDetection; od != nil {
		if od.Disabled && (od.FailurePercentage != nil || *od != (OutlierDetection{Disabled: true})) {
			return fieldErr("outlierDetection.disabled", CodeInvalid, "takes no other outlierDetection fields")
		}
		if fp := od.FailurePercentage; fp != nil && (fp.Threshold == 0 || fp.Threshold > 100) {
			return fieldErr("outlierDetection.failurePercentage.threshold", CodeInvalid, "must be 1-100")
		}
		if od.MaxEjectionPercent > 100 {
			return fieldErr("outlierDetection.maxEjectionPercent", CodeInvalid, "must be 0-100")
		}
		if od.Interval < 0 || od.BaseEjectionTime < 0 {
			return fieldErr("outlierDetection", CodeInvalid, "durations must not be negative")
		}
	}
	if t := c.TLS; t != nil {
		if t.CASecret != "" && checkName(t.CASecret) != nil {
			return fieldErr("tls.caSecret", CodeInvalid, "must be a secret name")
		}
		if t.ClientCertificate != "" && checkName(t.ClientCertificate) != nil {
			return fieldErr("tls.clientCertificate", CodeInvalid, "must be a secret name")
		}
		if t.SNI != "" && !validHostname(t.SNI) {
			return fieldErr("tls.sni", CodeInvalid, "must be a hostname")
		}
	}
	if hc := c.HealthCheck; hc != nil {
		if !strings.HasPrefix(hc.Path, "/") {
			return fieldErr("healthCheck.path", CodeInvalid, "must start with /")
		}
		if hc.Interval < 0 || hc.Timeout < 0 {
			return fieldErr("healthCheck", CodeInvalid, "durations must not be negative")
		}
	}
	return nil
}

func validHostname(h string) bool {
	if len(h) > 253 || h == "" {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
				return false
			}
		}
	}
	return true
}

// headerNameRE is RFC 9110's token, lowercased (Envoy lowercases header names).
var headerNameRE = regexp.MustCompile(`^[a-z0-9!#$%&'*+.^_` + "`" + `|~-]+$`)

var httpMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"}

// validRegex checks a pattern against RE2, the syntax Envoy's safe_regex uses.
func validRegex(field, pattern string) error {
	if pattern == "" {
		return fieldErr(field, CodeRequired, "is required")
	}
	if _, err := regexp.Compile(pattern); err != nil {
		return fieldErr(field, CodeInvalid, "bad regex: %v", err)
	}
	return nil
}

func (r *Route) Validate() error {
	if err := checkName(r.Name); err != nil {
		return err
	}
	m := r.Match
	n := 0
	for _, s := range []string{m.PathPrefix, m.Path, m.PathRegex} {
		if s != "" {
			n++
		}
	}
	if n != 1 {
		return fieldErr("match", CodeInvalid, "exactly one of pathPrefix, path, pathRegex is required")
	}
	if m.PathPrefix != "" && !strings.HasPrefix(m.PathPrefix, "/") {
		return fieldErr("match.pathPrefix", CodeInvalid, "must start with /")
	}
	if m.Path != "" && !strings.HasPrefix(m.Path, "/") {
		return fieldErr("match.path", CodeInvalid, "must start with /")
	}
	if m.PathRegex != "" {
		if err := validRegex("match.pathRegex", m.PathRegex); err != nil {
			return err
		}
	}
	for i, h := range m.Hosts {
		hh := strings.TrimPrefix(h, "*.")
		if host, _, err := net.SplitHostPort(hh); err == nil {
			hh = host
		}
		if h != "*" && !validHostname(hh) {
			return fieldErr(fmt.Sprintf("match.hosts[%d]", i), CodeInvalid, "must be a hostname, *.suffix or *")
		}
	}
	for i, meth := range m.Methods {
		if !slices.Contains(httpMethods, meth) {
			return fieldErr(fmt.Sprintf("match.methods[%d]", i), CodeInvalid, "must be an uppercase HTTP method")
		}
	}
	for i, h := range m.Headers {
		f := fmt.Sprintf("match.headers[%d]", i)
		if !headerNameRE.MatchString(h.Name) {
			return fieldErr(f+".name", CodeInvalid, "must be a lowercase header name")
		}
		k := 0
		for _, set := range []bool{h.Exact != "", h.Prefix != "", h.Regex != "", h.Present} {
			if set {
				k++
			}
		}
		if k != 1 {
			return fieldErr(f, CodeInvalid, "exactly one of exact, prefix, regex, present is required")
		}
		if h.Regex != "" {
			if err := validRegex(f+".regex", h.Regex); err != nil {
				return err
			}
		}
	}
	switch {
	case r.Cluster != "" && len(r.WeightedClusters) > 0:
		return fieldErr("cluster", CodeInvalid, "cluster and weightedClusters are exclusive")
	case r.Cluster == "" && len(r.WeightedClusters) == 0:
		return fieldErr("cluster", CodeRequired, "cluster or weightedClusters is required")
	}
	var total uint32
	seen := map[string]bool{}
	for i, w := range r.WeightedClusters {
		f := fmt.Sprintf("weightedClusters[%d]", i)
		if w.Cluster == "" {
			return fieldErr(f+".cluster", CodeRequired, "is required")
		}
		if seen[w.Cluster] {
			return fieldErr(f+".cluster", CodeConflict, "cluster %q listed twice", w.Cluster)
		}
		seen[w.Cluster] = true
		total += w.Weight
	}
	if len(r.WeightedClusters) > 0 && total == 0 {
		return fieldErr("weightedClusters", CodeInvalid, "weights must add up to more than 0")
	}
	if c := r.Canary; c != nil {
		if !headerNameRE.MatchString(c.Header) || c.Value == "" || c.Cluster == "" {
			return fieldErr("canary", CodeInvalid, "header (lowercase), value and cluster are required")
		}
	}
	if r.Timeout < 0 {
		return fieldErr("timeout", CodeInvalid, "must not be negative")
	}
	if p := r.Retries; p != nil {
		if p.Disabled && (len(p.RetryOn) > 0 || p.NumRetries > 0 || p.PerTryTimeout != 0 || p.AllowNonIdempotent) {
			return fieldErr("retries.disabled", CodeInvalid, "takes no other retries fields")
		}
		if p.NumRetries > 10 {
			return fieldErr("retries.numRetries", CodeInvalid, "must be 0-10")
		}
		if p.PerTryTimeout < 0 {
			return fieldErr("retries.perTryTimeout", CodeInvalid, "must not be negative")
		}
		for i, on := range p.RetryOn {
			if !slices.Contains(retryOnValues, on) {
				return fieldErr(fmt.Sprintf("retries.retryOn[%d]", i), CodeInvalid, "unknown retry condition %q", on)
			}
		}
	}
	if a := r.Auth; a != nil {
		switch a.Mode {
		case AuthNone:
			if a.Provider != "" || len(a.RequiredScopes) > 0 {
				return fieldErr("auth", CodeInvalid, "mode none takes no provider or scopes")
			}
		case AuthJWT:
			if a.Provider == "" {
				return fieldErr("auth.provider", CodeRequired, "is required for mode jwt")
			}
		case AuthAPIKey:
			if a.Provider != "" {
				return fieldErr("auth.provider", CodeInvalid, "mode apikey takes no provider")
			}
		default:
			return fieldErr("auth.mode", CodeInvalid, "must be none, jwt or apikey")
		}
		for i, s := range a.RequiredScopes {
			if s == "" || strings.ContainsAny(s, " ,") {
				return fieldErr(fmt.Sprintf("auth.requiredScopes[%d]", i), CodeInvalid, "must be a non-empty scope without spaces or commas")
			}
		}
	}
	for i, rl := range r.RateLimits {
		f := fmt.Sprintf("rateLimits[%d]", i)
		if len(rl.Descriptors) == 0 {
			return fieldErr(f+".descriptors", CodeRequired, "at least one entry is required")
		}
		for j, d := range rl.Descriptors {
			g := fmt.Sprintf("%s.descriptors[%d]", f, j)
			if d.Key == "" {
				return fieldErr(g+".key", CodeRequired, "is required")
			}
			k := 0
			for _, set := range []bool{d.FromHeader != "", d.Value != "", d.RemoteAddress} {
				if set {
					k++
				}
			}
			if k != 1 {
				return fieldErr(g, CodeInvalid, "exactly one of fromHeader, value, remoteAddress is required")
			}
			if d.RemoteAddress && d.Key != "remote_address" {
				return fieldErr(g+".key", CodeInvalid, "must be remote_address when remoteAddress is set (Envoy fixes that key)")
			}
			if d.FromHeader != "" && !headerNameRE.MatchString(d.FromHeader) {
				return fieldErr(g+".fromHeader", CodeInvalid, "must be a lowercase header name")
			}
		}
	}
	if h := r.RequestHeaders; h != nil {
		for i, s := range h.Set {
			if !headerNameRE.MatchString(s.Name) {
				return fieldErr(fmt.Sprintf("requestHeaders.set[%d].name", i), CodeInvalid, "must be a lowercase header name")
			}
			if strings.HasPrefix(s.Name, "x-portico-") || s.Name == "host" || strings.HasPrefix(s.Name, ":") {
				return fieldErr(fmt.Sprintf("requestHeaders.set[%d].name", i), CodeInvalid, "x-portico-*, host and pseudo-headers are set by Portico only")
			}
		}
		for i, s := range h.Remove {
			if !headerNameRE.MatchString(s) {
				return fieldErr(fmt.Sprintf("requestHeaders.remove[%d]", i), CodeInvalid, "must be a lowercase header name")
			}
		}
	}
	return nil
}

// retryOnValues are Envoy's x-envoy-retry-on conditions Portico accepts.
var retryOnValues = []string{"5xx", "gateway-error", "reset", "connect-failure", "retriable-4xx",
	"refused-stream", "retriable-status-codes", "retriable-headers", "unavailable", "cancelled",
	"deadline-exceeded", "resource-exhausted", "internal"}

var jwtAlgorithms = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

func (p *JWTProvider) Validate() error {
	if err := checkName(p.Name); err != nil {
		return err
	}
	if p.Issuer == "" {
		return fieldErr("issuer", CodeRequired, "is required")
	}
	switch {
	case p.AllowAnyAudience && len(p.Audiences) > 0:
		return fieldErr("allowAnyAudience", CodeInvalid, "and audiences are exclusive")
	case !p.AllowAnyAudience && len(p.Audiences) == 0:
		return fieldErr("audiences", CodeRequired, "at least one audience is required (allowAnyAudience: true accepts tokens meant for any service)")
	}
	for i, a := range p.Audiences {
		if a == "" {
			return fieldErr(fmt.Sprintf("audiences[%d]", i), CodeInvalid, "must not be empty")
		}
	}
	if (p.JWKSURI == "") == (p.InlineJWKS == "") {
		return fieldErr("jwksUri", CodeInvalid, "exactly one of jwksUri and inlineJwks is required")
	}
	if p.JWKSURI != "" {
		if err := idp.CheckURL(p.JWKSURI, p.AllowInsecureLoopback); err != nil {
			return fieldErr("jwksUri", CodeInvalid, "%s", idpMessage(err))
		}
	}
	if p.InlineJWKS != "" {
		var set struct {
			Keys []json.RawMessage `json:"keys"`
		}
		if err := json.Unmarshal([]byte(p.InlineJWKS), &set); err != nil || len(set.Keys) == 0 {
			return fieldErr("inlineJwks", CodeInvalid, "must be a JWK set with at least one key")
		}
	}
	if err := p.validateIntrospection(); err != nil {
		return err
	}
	if len(p.Algorithms) == 0 {
		return fieldErr("algorithms", CodeRequired, "at least one algorithm is required")
	}
	for i, a := range p.Algorithms {
		if !slices.Contains(jwtAlgorithms, a) {
			return fieldErr(fmt.Sprintf("algorithms[%d]", i), CodeInvalid, "must be one of %s (none and HMAC algorithms are never accepted)", strings.Join(jwtAlgorithms, ", "))
		}
	}
	if p.ClockSkew < 0 || p.ClockSkew.D() > 10*time.Minute {
		return fieldErr("clockSkew", CodeInvalid, "must be 0-10m")
	}
	if p.JWKSCacheTTL < 0 {
		return fieldErr("jwksCacheTtl", CodeInvalid, "must not be negative")
	}
	return nil
}

// validateIntrospection: an introspecting provider authenticates to its
// IdP (RFC 7662 §2.1) with a client id and a secret by reference; the
// client fields mean nothing without introspectionUri.
func (p *JWTProvider) validateIntrospection() error {
	if p.IntrospectionURI == "" {
		switch {
		case p.IntrospectionClientID != "":
			return fieldErr("introspectionClientId", CodeInvalid, "needs introspectionUri")
		case p.IntrospectionClientSecretRef != nil:
			return fieldErr("introspectionClientSecretRef", CodeInvalid, "needs introspectionUri")
		case p.IntrospectionRateLimit != nil:
			return fieldErr("introspectionRateLimit", CodeInvalid, "needs introspectionUri")
		}
		return nil
	}
	if err := idp.CheckURL(p.IntrospectionURI, p.AllowInsecureLoopback); err != nil {
		return fieldErr("introspectionUri", CodeInvalid, "%s", idpMessage(err))
	}
	if p.IntrospectionClientID == "" {
		return fieldErr("introspectionClientId", CodeRequired, "is required with introspectionUri (extauthz authenticates with client_secret_basic)")
	}
	if !idp.ValidClientID(p.IntrospectionClientID) {
		return fieldErr("introspectionClientId", CodeInvalid, "must be 1-256 characters without control characters")
	}
	ref := p.IntrospectionClientSecretRef
	if ref == nil {
		return fieldErr("introspectionClientSecretRef", CodeRequired, "is required with introspectionUri: {\"name\": <file in extauthz's secrets directory>}")
	}
	if ref.Name == "" {
		return fieldErr("introspectionClientSecretRef.name", CodeRequired, "is required")
	}
	if !secretdir.ValidName(ref.Name) {
		return fieldErr("introspectionClientSecretRef.name", CodeInvalid, "must be a Secret key: 1-253 of [-._a-zA-Z0-9], not . or ..*")
	}
	if rl := p.IntrospectionRateLimit; rl != nil {
		if rl.RequestsPerSecond > idp.MaxRequestsPerSecond {
			return fieldErr("introspectionRateLimit.requestsPerSecond", CodeInvalid, "must be at most %d", idp.MaxRequestsPerSecond)
		}
		if rl.Burst > idp.MaxBurst {
			return fieldErr("introspectionRateLimit.burst", CodeInvalid, "must be at most %d", idp.MaxBurst)
		}
	}
	return nil
}

// idpMessage is an idp.CheckURL error without its sentinel's prefix.
func idpMessage(err error) string {
	msg := err.Error()
	for _, e := range []error{idp.ErrInvalid, idp.ErrInsecure} {
		msg = strings.TrimPrefix(msg, e.Error()+": ")
	}
	return msg
}

func (c *Consumer) Validate() error {
	if err := checkName(c.Name); err != nil {
		return err
	}
	if c.Tenant == "" {
		return fieldErr("tenant", CodeRequired, "is required")
	}
	if !nameRE.MatchString(c.Tenant) {
		return fieldErr("tenant", CodeInvalid, "must match the resource name alphabet")
	}
	if c.Tier != "" && !nameRE.MatchString(c.Tier) {
		return fieldErr("tier", CodeInvalid, "must match the resource name alphabet")
	}
	return nil
}

var sha256HexRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

func (k *APIKey) Validate() error {
	if err := checkName(k.Name); err != nil {
		return err
	}
	if k.Consumer == "" {
		return fieldErr("consumer", CodeRequired, "is required")
	}
	if !sha256HexRE.MatchString(k.SHA256) {
		return fieldErr("sha256", CodeInvalid, "must be 64 lowercase hex digits")
	}
	return nil
}

func (r *Revocation) Validate() error {
	if r.Name == "" {
		return fieldErr("jti", CodeRequired, "is required")
	}
	if len(r.Name) > 256 || strings.ContainsAny(r.Name, "/?#\x00") {
		return fieldErr("jti", CodeInvalid, "must be at most 256 characters without / ? #")
	}
	if r.ExpiresAt.IsZero() {
		return fieldErr("expiresAt", CodeRequired, "is required (the token's exp)")
	}
	return nil
}

func (r *RateLimitRule) Validate() error {
	if err := checkName(r.Name); err != nil {
		return err
	}
	if r.Domain == "" {
		return fieldErr("domain", CodeRequired, "is required")
	}
	if len(r.Descriptors) == 0 {
		return fieldErr("descriptors", CodeRequired, "at least one descriptor is required")
	}
	for i, d := range r.Descriptors {
		if d.Key == "" {
			return fieldErr(fmt.Sprintf("descriptors[%d].key", i), CodeRequired, "is required")
		}
	}
	if r.Limit == 0 {
		return fieldErr("limit", CodeInvalid, "must be greater than 0")
	}
	if r.Window.D() < time.Second || r.Window.D()%time.Second != 0 {
		return fieldErr("window", CodeInvalid, "must be a whole number of seconds, at least 1s")
	}
	switch r.Algorithm {
	case "", AlgorithmTokenBucket, AlgorithmFixedWindow:
	case AlgorithmSlidingWindow:
		// A sliding window counter has no burst; ratelimitsvc would NACK the
		// whole version, so refuse it here.
		if r.Burst > 0 {
			return fieldErr("burst", CodeInvalid, "applies to TOKEN_BUCKET only; SLIDING_WINDOW counts at most limit per trailing window")
		}
	default:
		return fieldErr("algorithm", CodeInvalid, "must be TOKEN_BUCKET, SLIDING_WINDOW or FIXED_WINDOW")
	}
	switch r.Mode {
	case "", ModeEnforce, ModeShadow:
	default:
		return fieldErr("mode", CodeInvalid, "must be ENFORCE or SHADOW")
	}
	switch r.FailMode {
	case "", FailOpen, FailClosed:
	default:
		return fieldErr("failMode", CodeInvalid, "must be OPEN or CLOSED")
	}
	if r.Tenant != "" && !nameRE.MatchString(r.Tenant) {
		return fieldErr("tenant", CodeInvalid, "must match the resource name alphabet")
	}
	return nil
}

// Validate checks references and conflicts across the whole config: routes
// name existing clusters and providers, keys name existing consumers, no two
// routes match the same requests, no two rules overlap at one priority.
// A change is accepted only if the config after it validates.
func (c *Config) Validate() error { return c.ValidateFrom(nil) }

// ValidateFrom is Validate for a config made from base, a config that
// validated, by changing some entries: the checks over the collections
// that number in the millions (API keys naming their consumers) then look
// at what differs from base only, which for a version cloned from base
// costs the Table shards it changed. A nil base validates everything.
// The result is the same as Validate's.
func (c *Config) ValidateFrom(base *Config) error {
	type matchKey struct {
		hosts, path, methods, headers string
	}
	matches := map[matchKey]string{}
	for _, name := range SortedKeys(c.Routes) {
		r := c.Routes[name]
		f := "routes/" + name
		if err := c.refError(KindRoute.Info(), name, r); err != nil {
			return err
		}
		hosts := slices.Clone(r.Match.Hosts)
		if len(hosts) == 0 {
			hosts = []string{"*"}
		}
		methods := slices.Clone(r.Match.Methods)
		slices.Sort(methods)
		hdr, _ := json.Marshal(r.Match.Headers)
		path := "prefix:" + r.Match.PathPrefix
		if r.Match.Path != "" {
			path = "exact:" + r.Match.Path
		} else if r.Match.PathRegex != "" {
			path = "regex:" + r.Match.PathRegex
		}
		for _, h := range hosts {
			k := matchKey{strings.ToLower(h), path, strings.Join(methods, ","), string(hdr)}
			if other, dup := matches[k]; dup {
				return fieldErr(f+": match", CodeConflict, "matches the same requests as route %q", other)
			}
			matches[k] = name
		}
	}
	if err := c.checkRefs(KindAPIKey.Info(), base); err != nil {
		return err
	}
	type ruleKey struct {
		domain, desc, tenant string
		prio                 int32
	}
	rules := map[ruleKey]string{}
	for _, name := range SortedKeys(c.RateLimitRules) {
		r := c.RateLimitRules[name]
		d, _ := json.Marshal(r.Descriptors)
		k := ruleKey{r.Domain, string(d), r.Tenant, r.Priority}
		if other, dup := rules[k]; dup {
			return fieldErr("ratelimit-rules/"+name+": descriptors", CodeConflict, "same domain, descriptors, tenant and priority as rule %q", other)
		}
		rules[k] = name
	}
	if err := c.validateTLS(); err != nil {
		return err
	}
	if err := c.validateRedisProxies(); err != nil {
		return err
	}
	// Every kind's references. The checks above have already looked at
	// those of routes, API keys, clusters, listeners and redis proxies, in
	// the order their errors have always been reported (each beside the
	// kind's other cross-resource rules), so for them this finds nothing;
	// it is here so that a kind added to kindTable has its references
	// checked without a line in this function.
	for _, d := range kindTable {
		if err := c.checkRefs(d, base); err != nil {
			return err
		}
	}
	return nil
}

// refs are a route's references: its clusters (every one reported on the
// field "cluster", as they always have been) and its JWT provider.
func (r *Route) refs() []Ref {
	var out []Ref
	if r.Cluster != "" {
		out = append(out, Ref{Field: "cluster", Kind: KindCluster, Name: r.Cluster})
	}
	for _, w := range r.WeightedClusters {
		out = append(out, Ref{Field: "cluster", Kind: KindCluster, Name: w.Cluster})
	}
	if r.Canary != nil {
		out = append(out, Ref{Field: "cluster", Kind: KindCluster, Name: r.Canary.Cluster})
	}
	if r.Auth != nil && r.Auth.Mode == AuthJWT {
		out = append(out, Ref{Field: "auth.provider", Kind: KindJWTProvider, Name: r.Auth.Provider})
	}
	return out
}

// refs are an API key's reference: its consumer.
func (k *APIKey) refs() []Ref {
	return []Ref{{Field: "consumer", Kind: KindConsumer, Name: k.Consumer}}
}
