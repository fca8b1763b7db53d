// Package authz implements Envoy's ext_authz v3 Authorization service for
// Portico: per route (context extensions mode/provider/scopes, as the
// control plane compiles them) it verifies a JWT or an API key against the
// current policy, checks scopes, and tells Envoy which identity headers to
// set.
//
// The policy and the providers' key sources are one immutable value behind
// an atomic pointer, so Check takes no lock except the token-cache shard.
// Every failure path denies: there is no fail-open.
package authz

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"

	"github.com/portico-io/portico/extauthz/introspect"
	"github.com/portico-io/portico/extauthz/jwks"
	"github.com/portico-io/portico/extauthz/policy"
	"github.com/portico-io/portico/extauthz/token"
	"github.com/portico-io/portico/internal/secretdir"
	"github.com/portico-io/portico/internal/xdscontract"
)

// Context extension keys (controlplane/compile) and modes.
const (
	CtxRoute    = xdscontract.CtxRoute
	CtxMode     = xdscontract.CtxMode
	CtxProvider = xdscontract.CtxProvider
	CtxScopes   = xdscontract.CtxScopes

	ModeNone   = "none"
	ModeJWT    = "jwt"
	ModeAPIKey = "apikey"
)

// Identity headers set on allowed requests; client-supplied copies are
// always overwritten or removed.
const (
	HeaderConsumer = "x-portico-consumer"
	HeaderTenant   = "x-portico-tenant"
	HeaderTier     = "x-portico-tier"
	HeaderScopes   = "x-portico-scopes"
)

var identityHeaders = []string{HeaderConsumer, HeaderTenant, HeaderTier, HeaderScopes}

// DefaultTokenCacheSize bounds the verified-token cache.
const DefaultTokenCacheSize = 100_000

// Config configures a Server. Zero values take the defaults.
type Config struct {
	TokenCacheSize int
	// MinJWKSRefreshInterval is the least time between two fetches of one
	// provider's JWKS (default jwks.DefaultMinRefreshInterval).
	MinJWKSRefreshInterval time.Duration
	// HTTPClient fetches JWKS (default: no redirects).
	HTTPClient *http.Client
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	// TimeNow is the clock (default time.Now).
	TimeNow func() time.Time
	// SecretsDir holds the secrets providers reference by name (their
	// introspection client secrets), one file each (package secretdir).
	// Empty: no secret can be read, and opaque tokens are denied.
	SecretsDir string
}

// Server is the Authorization service. Create it with New and feed it with
// SetPolicy; until the first policy every Check denies.
type Server struct {
	authv3.UnimplementedAuthorizationServer

	cfg     Config
	m       *metrics
	state   atomic.Pointer[state]
	epoch   atomic.Uint64 // bumped when cached verifications may be stale
	cache   *tokenCache
	applyMu sync.Mutex // serializes SetPolicy/Prune (writers only)
}

var _ authv3.AuthorizationServer = (*Server)(nil)

// state is immutable once stored.
type state struct {
	policy  *policy.Policy
	sources map[string]*jwks.Source
	// introspectors holds a client per provider with an introspection URI.
	introspectors map[string]*introspect.Client
}

// New returns a Server with no policy.
func New(cfg Config) *Server {
	if cfg.TokenCacheSize <= 0 {
		cfg.TokenCacheSize = DefaultTokenCacheSize
	}
	if cfg.MinJWKSRefreshInterval <= 0 {
		cfg.MinJWKSRefreshInterval = jwks.DefaultMinRefreshInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.TimeNow == nil {
		cfg.TimeNow = time.Now
	}
	return &Server{cfg: cfg, m: newMetrics(cfg.Registerer), cache: newTokenCache(cfg.TokenCacheSize)}
}

// Policy returns the policy in force, or nil.
func (s *Server) Policy() *policy.Policy {
	if st := s.state.Load(); st != nil {
		return st.policy
	}
	return nil
}

// SetPolicy puts p in force. Key sources of providers whose JWKS location
// did not change are kept (with their cached keys); cached token
// verifications are invalidated.
func (s *Server) SetPolicy(p *policy.Policy) {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	old := s.state.Load()
	next := &state{policy: p, sources: make(map[string]*jwks.Source, len(p.Providers)), introspectors: map[string]*introspect.Client{}}
	for name, prov := range p.Providers {
		if in := prov.Introspection; in != nil {
			if old != nil && old.introspectors[name] != nil && *old.policy.Providers[name].Introspection == *in {
				// Same endpoint, credentials and limits: keep the answers
				// cached and the bucket (a push must not refill it).
				next.introspectors[name] = old.introspectors[name]
			} else if ic, err := s.introspector(in); err == nil {
				next.introspectors[name] = ic
				// Say so now rather than at the first opaque token.
				if _, err := secretdir.Read(s.cfg.SecretsDir, in.SecretRef); err != nil {
					s.cfg.Logger.Warn("extauthz: introspection client secret unreadable; opaque tokens are denied until it is",
						"provider", name, "err", err)
				}
			} else {
				// Unreachable: policy.Build checked the settings. The
				// provider's opaque tokens are denied.
				s.cfg.Logger.Error("extauthz: provider introspection", "provider", name, "err", err)
			}
		}
		if old != nil {
			if o, ok := old.policy.Providers[name]; ok && o.SameKeySource(prov) {
				next.sources[name] = old.sources[name]
				continue
			}
		}
		src, err := jwks.New(jwks.Config{
			URI: prov.JWKSURI, Inline: prov.InlineKeys, TTL: prov.JWKSCacheTTL,
			MinRefreshInterval: s.cfg.MinJWKSRefreshInterval, Client: s.cfg.HTTPClient,
			OnFetch:  func(r string) { s.m.fetches.WithLabelValues(r).Inc() },
			OnChange: func() { s.epoch.Add(1) },
			TimeNow:  s.cfg.TimeNow,
		})
		if err != nil {
			// Unreachable: policy.Build guarantees exactly one key source.
			s.cfg.Logger.Error("extauthz: provider key source", "provider", name, "err", err)
			continue
		}
		next.sources[name] = src
	}
	s.state.Store(next)
	s.epoch.Add(1)
	for _, t := range policy.Types {
		s.m.versions.WithLabelValues(t[strings.LastIndexByte(t, '.')+1:]).Set(p.Version(t))
	}
}

// introspector returns a client for a provider's introspection settings;
// its secret is read from the secrets directory at each call.
func (s *Server) introspector(in *policy.Introspection) (*introspect.Client, error) {
	dir, ref := s.cfg.SecretsDir, in.SecretRef
	return introspect.New(introspect.Config{
		URI: in.URI, ClientID: in.ClientID,
		ClientSecret:      func() (string, error) { return secretdir.Read(dir, ref) },
		RequestsPerSecond: float64(in.RequestsPerSecond), Burst: int(in.Burst),
		HTTPClient: s.cfg.HTTPClient, TimeNow: s.cfg.TimeNow,
		OnCall: func(r string) { s.m.introspections.WithLabelValues(r).Inc() },
	})
}

// Prefetch fetches the JWKS of every provider that has none yet, so the
// first request does not pay for it. Errors are only logged.
func (s *Server) Prefetch(ctx context.Context) {
	st := s.state.Load()
	if st == nil {
		return
	}
	for name, src := range st.sources {
		if err := src.Prefetch(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("extauthz: JWKS prefetch failed", "provider", name, "err", err)
		}
	}
}

// Prune drops revocations that expired (see policy.Policy.Prune).
func (s *Server) Prune() {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	st := s.state.Load()
	if st == nil {
		return
	}
	if p := st.policy.Prune(s.cfg.TimeNow()); p != st.policy {
		s.state.Store(&state{policy: p, sources: st.sources, introspectors: st.introspectors})
	}
}

// identity is who an allowed request is.
type identity struct {
	consumer, tenant, tier string
	scopes                 []string
}

// decision is the outcome of one check.
type decision struct {
	status int // 0 = allow
	reason string
	msg    string
	// scheme of the WWW-Authenticate challenge; scope lists the missing scopes.
	scope string
	id    identity
}

func deny(status int, reason, msg string) decision {
	return decision{status: status, reason: reason, msg: msg}
}

// Check implements envoy.service.auth.v3.Authorization/Check. It never
// returns an error: every outcome, internal failures included, is an
// explicit allow or deny.
func (s *Server) Check(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	start := time.Now()
	d := s.decide(ctx, req)
	s.m.latency.Observe(time.Since(start).Seconds())
	if sp := trace.SpanFromContext(ctx); sp.IsRecording() {
		annotate(sp, req, d)
	}
	if d.status == 0 {
		s.m.checks.WithLabelValues("allow", d.reason).Inc()
		return allowResponse(d.id), nil
	}
	s.m.checks.WithLabelValues("deny", d.reason).Inc()
	// Not per rate-limited denial: a flood of random tokens would become a
	// flood of log lines (checks_total and introspections_total count them).
	if d.status >= 500 && d.reason != ReasonIntrospectionRateLimited {
		s.cfg.Logger.Warn("extauthz: denied on internal error", "route", req.GetAttributes().GetContextExtensions()[CtxRoute], "reason", d.reason, "msg", d.msg)
	}
	return denyResponse(d), nil
}

func (s *Server) decide(ctx context.Context, req *authv3.CheckRequest) decision {
	st := s.state.Load()
	if st == nil {
		return deny(http.StatusServiceUnavailable, ReasonNoPolicy, "authorization policy not loaded")
	}
	ext := req.GetAttributes().GetContextExtensions()
	hdr := headers(req.GetAttributes().GetRequest().GetHttp())
	now := s.cfg.TimeNow()
	var d decision
	switch ext[CtxMode] {
	case ModeNone:
		return decision{reason: ReasonNoAuth}
	case ModeJWT:
		d = s.checkJWT(ctx, st, ext[CtxProvider], hdr, now)
	case ModeAPIKey:
		d = checkAPIKey(st.policy, hdr, now)
	default:
		return deny(http.StatusInternalServerError, ReasonBadRoute, "route has no valid auth mode")
	}
	if d.status != 0 {
		return d
	}
	if missing := missingScopes(ext[CtxScopes], d.id.scopes); len(missing) > 0 {
		return decision{status: http.StatusForbidden, reason: ReasonInsufficientScope,
			msg: "missing required scope", scope: strings.Join(missing, " ")}
	}
	d.reason = ReasonOK
	return d
}

// headers returns the request headers by lowercase name (Envoy sends them
// lowercased in headers, or in header_map when raw header encoding is on).
func headers(h *authv3.AttributeContext_HttpRequest) func(string) string {
	if m := h.GetHeaders(); len(m) > 0 || h.GetHeaderMap() == nil {
		return func(k string) string { return m[k] }
	}
	hm := h.GetHeaderMap().GetHeaders()
	return func(k string) string {
		for _, hv := range hm {
			if strings.EqualFold(hv.GetKey(), k) {
				if hv.GetValue() != "" {
					return hv.GetValue()
				}
				return string(hv.GetRawValue())
			}
		}
		return ""
	}
}

// credential returns the value after "<scheme> " in the Authorization
// header (scheme compared case-insensitively), or "".
func credential(authz, scheme string) string {
	if len(authz) <= len(scheme)+1 || authz[len(scheme)] != ' ' || !strings.EqualFold(authz[:len(scheme)], scheme) {
		return ""
	}
	return strings.TrimSpace(authz[len(scheme)+1:])
}

func (s *Server) checkJWT(ctx context.Context, st *state, provName string, hdr func(string) string, now time.Time) decision {
	prov, src := st.policy.Providers[provName], st.sources[provName]
	if prov == nil || src == nil {
		return deny(http.StatusInternalServerError, ReasonUnknownProvider, "route names an unknown JWT provider")
	}
	raw := credential(hdr("authorization"), "Bearer")
	if raw == "" {
		return deny(http.StatusUnauthorized, ReasonMissingCredentials, "a bearer token is required")
	}
	if ic := st.introspectors[provName]; ic != nil && strings.Count(raw, ".") != 2 {
		return s.checkOpaque(ctx, st.policy, prov, ic, raw, now)
	}
	key := cacheKey(provName, raw)
	epoch := s.epoch.Load()
	if e := s.cache.get(key, now, epoch); e != nil {
		s.m.cache.WithLabelValues("hit").Inc()
		if st.policy.IsRevoked(e.jti, now) {
			return deny(http.StatusUnauthorized, ReasonRevoked, "the token has been revoked")
		}
		return decision{id: e.id}
	}
	s.m.cache.WithLabelValues("miss").Inc()
	tok, err := token.Parse(raw)
	if err != nil {
		return deny(http.StatusUnauthorized, ReasonMalformedToken, "the token is malformed")
	}
	if err := tok.CheckAlg(prov.Algorithms); err != nil {
		return deny(http.StatusUnauthorized, ReasonUnsupportedAlg, "the token's signing algorithm is not accepted")
	}
	keys, err := src.Keys(ctx, tok.Header.Kid)
	switch {
	case errors.Is(err, jwks.ErrUnknownKID):
		return deny(http.StatusUnauthorized, ReasonUnknownKID, "the token's signing key is unknown")
	case err != nil:
		return deny(http.StatusServiceUnavailable, ReasonJWKSUnavailable, "the issuer's signing keys are unavailable")
	}
	verified := false
	for _, k := range keys {
		if tok.VerifySignature(k.Key, k.Alg) == nil {
			verified = true
			break
		}
	}
	if !verified {
		return deny(http.StatusUnauthorized, ReasonBadSignature, "the token signature is invalid")
	}
	err = tok.ValidateClaims(token.Expectations{Issuer: prov.Issuer, Audiences: prov.Audiences, Skew: prov.ClockSkew, Now: now})
	switch {
	case errors.Is(err, token.ErrIssuer):
		return deny(http.StatusUnauthorized, ReasonWrongIssuer, "the token was issued by an untrusted issuer")
	case errors.Is(err, token.ErrAudience):
		return deny(http.StatusUnauthorized, ReasonWrongAudience, "the token is not meant for this audience")
	case errors.Is(err, token.ErrExpired):
		return deny(http.StatusUnauthorized, ReasonExpired, "the token has expired")
	case errors.Is(err, token.ErrNotYetValid):
		return deny(http.StatusUnauthorized, ReasonNotYetValid, "the token is not valid yet")
	case err != nil:
		return deny(http.StatusUnauthorized, ReasonMalformedToken, "the token is malformed")
	}
	c := &tok.Claims
	if st.policy.IsRevoked(c.ID, now) {
		return deny(http.StatusUnauthorized, ReasonRevoked, "the token has been revoked")
	}
	id := identity{consumer: c.Subject, tenant: c.Tenant, tier: c.Tier, scopes: c.Scopes()}
	// Cached only until exp itself (not exp+skew), under the epoch read
	// before verifying: a policy or JWKS change meanwhile makes it stale.
	s.cache.put(key, &cacheEntry{exp: c.ExpiresAt(), epoch: epoch, jti: c.ID, id: id})
	return decision{id: id}
}

// checkOpaque validates a token that is not a JWS with the provider's
// introspection endpoint (RFC 7662); no answer means deny.
func (s *Server) checkOpaque(ctx context.Context, p *policy.Policy, prov *policy.Provider, ic *introspect.Client, raw string, now time.Time) decision {
	if len(raw) > token.MaxLen {
		return deny(http.StatusUnauthorized, ReasonMalformedToken, "the token is malformed")
	}
	r, err := ic.Introspect(ctx, raw)
	switch {
	case errors.Is(err, introspect.ErrRateLimited):
		return deny(http.StatusServiceUnavailable, ReasonIntrospectionRateLimited, "the token could not be checked")
	case err != nil:
		return deny(http.StatusServiceUnavailable, ReasonIntrospectionDown, "the token could not be checked")
	}
	switch {
	case !r.Active:
		return deny(http.StatusUnauthorized, ReasonInactive, "the token is not active")
	case r.Issuer != "" && r.Issuer != prov.Issuer:
		return deny(http.StatusUnauthorized, ReasonWrongIssuer, "the token was issued by an untrusted issuer")
	// As for JWTs: a provider with audiences accepts only an answer naming
	// one of them (aud is optional in RFC 7662, and absent means not ours).
	case !prov.AllowAnyAudience && !slices.ContainsFunc(r.Audience, func(a string) bool { return slices.Contains(prov.Audiences, a) }):
		return deny(http.StatusUnauthorized, ReasonWrongAudience, "the token is not meant for this audience")
	case !r.ExpiresAt().IsZero() && now.After(r.ExpiresAt().Add(prov.ClockSkew)):
		return deny(http.StatusUnauthorized, ReasonExpired, "the token has expired")
	case p.IsRevoked(r.ID, now):
		return deny(http.StatusUnauthorized, ReasonRevoked, "the token has been revoked")
	}
	consumer := r.Subject
	if consumer == "" {
		consumer = r.ClientID
	}
	return decision{id: identity{consumer: consumer, tenant: r.Tenant, tier: r.Tier, scopes: strings.Fields(r.Scope)}}
}

func cacheKey(provider, raw string) [sha256.Size]byte {
	h := sha256.New()
	h.Write([]byte(provider))
	h.Write([]byte{0})
	h.Write([]byte(raw))
	var k [sha256.Size]byte
	h.Sum(k[:0])
	return k
}

func checkAPIKey(p *policy.Policy, hdr func(string) string, now time.Time) decision {
	secret := credential(hdr("authorization"), "ApiKey")
	if secret == "" {
		secret = strings.TrimSpace(hdr("x-api-key"))
	}
	if secret == "" {
		return deny(http.StatusUnauthorized, ReasonMissingCredentials, "an API key is required")
	}
	sum := sha256.Sum256([]byte(secret))
	k, ok := p.Key(sum)
	// The map finds the candidate; the comparison that decides is constant-time.
	if !ok || subtle.ConstantTimeCompare(k.Hash[:], sum[:]) != 1 {
		return deny(http.StatusUnauthorized, ReasonInvalidAPIKey, "the API key is not valid")
	}
	if !k.ExpiresAt.IsZero() && !now.Before(k.ExpiresAt) {
		return deny(http.StatusUnauthorized, ReasonExpiredAPIKey, "the API key has expired")
	}
	return decision{id: identity{consumer: k.Consumer, tenant: k.Tenant, tier: k.Tier, scopes: k.Scopes}}
}

// missingScopes returns the required (comma-separated) scopes not in have.
func missingScopes(required string, have []string) []string {
	var missing []string
	for _, r := range strings.Split(required, ",") {
		if r = strings.TrimSpace(r); r != "" && !slices.Contains(have, r) {
			missing = append(missing, r)
		}
	}
	return missing
}

func allowResponse(id identity) *authv3.CheckResponse {
	ok := &authv3.OkHttpResponse{}
	scopes := slices.Clone(id.scopes)
	sort.Strings(scopes)
	vals := map[string]string{HeaderConsumer: id.consumer, HeaderTenant: id.tenant, HeaderTier: id.tier, HeaderScopes: strings.Join(scopes, " ")}
	for _, h := range identityHeaders {
		// Set headers overwrite client copies; unset ones are removed.
		if v := vals[h]; v != "" {
			ok.Headers = append(ok.Headers, &corev3.HeaderValueOption{
				Header:       &corev3.HeaderValue{Key: h, Value: v},
				AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
			})
		} else {
			ok.HeadersToRemove = append(ok.HeadersToRemove, h)
		}
	}
	return &authv3.CheckResponse{
		Status:       &rpcstatus.Status{Code: int32(codes.OK)},
		HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: ok},
	}
}

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func denyResponse(d decision) *authv3.CheckResponse {
	var body errorBody
	body.Error.Code, body.Error.Message = d.reason, d.msg
	b, _ := json.Marshal(body)
	hdrs := []*corev3.HeaderValueOption{{
		Header:       &corev3.HeaderValue{Key: "content-type", Value: "application/json"},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}}
	code := codes.PermissionDenied
	switch d.status {
	case http.StatusUnauthorized:
		code = codes.Unauthenticated
		hdrs = append(hdrs, wwwAuthenticate(`Bearer error="invalid_token", error_description="`+d.msg+`"`))
	case http.StatusForbidden:
		hdrs = append(hdrs, wwwAuthenticate(`Bearer error="insufficient_scope", error_description="`+d.msg+`", scope="`+quoteSafe.Replace(d.scope)+`"`))
	case http.StatusServiceUnavailable:
		code = codes.Unavailable
	default:
		code = codes.Internal
	}
	return &authv3.CheckResponse{
		Status: &rpcstatus.Status{Code: int32(code), Message: d.reason},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(d.status)},
			Headers: hdrs,
			Body:    string(b) + "\n",
		}},
	}
}

// quoteSafe keeps route-supplied scope names from breaking out of the
// quoted-string of a challenge (RFC 6750 scope tokens never need these).
var quoteSafe = strings.NewReplacer(`"`, "", `\`, "", "\r", "", "\n", "")

func wwwAuthenticate(v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header:       &corev3.HeaderValue{Key: "www-authenticate", Value: v},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}
}
