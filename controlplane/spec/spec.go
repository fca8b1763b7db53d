// Package spec holds the declarative resources an operator manages through
// the admin API (clusters, routes, JWT providers, consumers, API keys,
// revocations, rate-limit rules, listeners, TLS secrets, redis proxies) and their
// validation.
//
// Resources are plain values with JSON tags; they are what the store persists
// (as JSON) per config version and what the compiler turns into xDS
// snapshots. A Config is the complete set of resources at one version.
package spec

import (
	"sort"
	"time"
)

// Kind names a resource collection; it is also the admin API path segment
// (/admin/v1/<kind>/{name}).
type Kind string

// The resource kinds, in the order the admin API documents them.
const (
	KindCluster       Kind = "clusters"
	KindRoute         Kind = "routes"
	KindJWTProvider   Kind = "jwt-providers"
	KindConsumer      Kind = "consumers"
	KindAPIKey        Kind = "apikeys"
	KindRevocation    Kind = "revocations"
	KindRateLimitRule Kind = "ratelimit-rules"
	KindSecret        Kind = "secrets"
	KindListener      Kind = "listeners"
	KindRedisProxy    Kind = "redis-proxies"
)

// Kinds lists every kind; the order is the order of compilation, of
// diffs and of the admin API's documentation (kindTable's).
var Kinds = func() []Kind {
	out := make([]Kind, len(kindTable))
	for i, d := range kindTable {
		out[i] = d.Kind
	}
	return out
}()

// Valid reports whether k is a known kind.
func (k Kind) Valid() bool { return k.Info() != nil }

// Endpoint is one upstream address.
type Endpoint struct {
	Address string `json:"address"`
	Port    uint32 `json:"port"`
	// Weight is the load-balancing weight (default 1).
	Weight uint32 `json:"weight,omitempty"`
	// Zone is the locality zone; endpoints are grouped by it in EDS.
	Zone string `json:"zone,omitempty"`
}

// LB policies accepted for Cluster.LBPolicy.
const (
	LBRoundRobin   = "ROUND_ROBIN"
	LBLeastRequest = "LEAST_REQUEST"
	LBRingHash     = "RING_HASH"
	LBMaglev       = "MAGLEV"
)

// CircuitBreakers are Envoy's per-cluster concurrency caps (default priority).
type CircuitBreakers struct {
	MaxConnections     uint32       `json:"maxConnections,omitempty"`
	MaxPendingRequests uint32       `json:"maxPendingRequests,omitempty"`
	MaxRequests        uint32       `json:"maxRequests,omitempty"`
	MaxRetries         uint32       `json:"maxRetries,omitempty"`
	RetryBudget        *RetryBudget `json:"retryBudget,omitempty"`
}

// RetryBudget caps active retries as a percentage of active requests.
type RetryBudget struct {
	BudgetPercent       float64 `json:"budgetPercent"`
	MinRetryConcurrency uint32  `json:"minRetryConcurrency,omitempty"`
}

// OutlierDetection ejects misbehaving endpoints. A cluster without one gets
// the control plane's default (consecutive 5xx and gateway errors); Disabled
// turns detection off.
type OutlierDetection struct {
	Disabled                 bool     `json:"disabled,omitempty"`
	Consecutive5xx           uint32   `json:"consecutive5xx,omitempty"`
	ConsecutiveGatewayErrors uint32   `json:"consecutiveGatewayErrors,omitempty"`
	Interval                 Duration `json:"interval,omitempty"`
	BaseEjectionTime         Duration `json:"baseEjectionTime,omitempty"`
	MaxEjectionPercent       uint32   `json:"maxEjectionPercent,omitempty"`
	// FailurePercentage ejects an endpoint whose share of failed requests
	// in an interval passes Threshold — the detector proxyless gRPC clients
	// implement too (they ignore consecutive errors).
	FailurePercentage *FailurePercentage `json:"failurePercentage,omitempty"`
}

// FailurePercentage configures failure-percentage outlier ejection.
type FailurePercentage struct {
	// Threshold is the failed share (percent) that ejects.
	Threshold uint32 `json:"threshold"`
	// MinimumHosts is how many endpoints the cluster needs for the
	// detector to run (default 2); RequestVolume how many requests an
	// endpoint needs in the interval to be judged (default 20).
	MinimumHosts  uint32 `json:"minimumHosts,omitempty"`
	RequestVolume uint32 `json:"requestVolume,omitempty"`
}

// HealthCheck is an active HTTP health check.
type HealthCheck struct {
	Path               string   `json:"path"`
	Interval           Duration `json:"interval,omitempty"`
	Timeout            Duration `json:"timeout,omitempty"`
	HealthyThreshold   uint32   `json:"healthyThreshold,omitempty"`
	UnhealthyThreshold uint32   `json:"unhealthyThreshold,omitempty"`
}

// UpstreamTLS turns on TLS to the cluster's endpoints.
type UpstreamTLS struct {
	SNI string `json:"sni,omitempty"`
	// CASecret names a secret of type ca the upstream's certificate is
	// verified against; empty means the gateway's system CA bundle.
	CASecret string `json:"caSecret,omitempty"`
	// ClientCertificate names a secret of type tls presented to the
	// upstream (mutual TLS).
	ClientCertificate string `json:"clientCertificate,omitempty"`
}

// Cluster is an upstream service.
type Cluster struct {
	Name             string            `json:"name"`
	Endpoints        []Endpoint        `json:"endpoints"`
	ConnectTimeout   Duration          `json:"connectTimeout,omitempty"`
	LBPolicy         string            `json:"lbPolicy,omitempty"`
	CircuitBreakers  *CircuitBreakers  `json:"circuitBreakers,omitempty"`
	OutlierDetection *OutlierDetection `json:"outlierDetection,omitempty"`
	HealthCheck      *HealthCheck      `json:"healthCheck,omitempty"`
	HTTP2            bool              `json:"http2,omitempty"`
	TLS              *UpstreamTLS      `json:"tls,omitempty"`
	// Overload switches on overload protection for every route to this
	// cluster (a route's own Overload wins).
	Overload *Overload `json:"overload,omitempty"`
}

// Overload selects Envoy's overload protection filters for a route: the
// adaptive_concurrency filter (a concurrency limit that follows the
// upstream's measured latency) and the admission_control filter
// (client-side adaptive throttling: reject locally in proportion to the
// recent upstream failure rate).
type Overload struct {
	AdaptiveConcurrency bool `json:"adaptiveConcurrency,omitempty"`
	AdmissionControl    bool `json:"admissionControl,omitempty"`
}

// HeaderMatch matches one request header. Exactly one of Exact, Prefix,
// Regex or Present is set.
type HeaderMatch struct {
	Name    string `json:"name"`
	Exact   string `json:"exact,omitempty"`
	Prefix  string `json:"prefix,omitempty"`
	Regex   string `json:"regex,omitempty"`
	Present bool   `json:"present,omitempty"`
	Invert  bool   `json:"invert,omitempty"`
}

// RouteMatch selects requests. Exactly one of PathPrefix, Path, PathRegex is set.
type RouteMatch struct {
	// Hosts are the virtual host domains; empty means any host ("*").
	Hosts      []string      `json:"hosts,omitempty"`
	PathPrefix string        `json:"pathPrefix,omitempty"`
	Path       string        `json:"path,omitempty"`
	PathRegex  string        `json:"pathRegex,omitempty"`
	Methods    []string      `json:"methods,omitempty"`
	Headers    []HeaderMatch `json:"headers,omitempty"`
}

// WeightedCluster is one target of a percentage split.
type WeightedCluster struct {
	Cluster string `json:"cluster"`
	Weight  uint32 `json:"weight"`
}

// HeaderCanary sends requests carrying Header: Value to Cluster.
type HeaderCanary struct {
	Header  string `json:"header"`
	Value   string `json:"value"`
	Cluster string `json:"cluster"`
}

// RetryPolicy configures Envoy retries for a route. By default only
// idempotent methods are retried.
type RetryPolicy struct {
	// Disabled turns off the default retries (connection failures on
	// idempotent methods) for this route.
	Disabled           bool     `json:"disabled,omitempty"`
	RetryOn            []string `json:"retryOn,omitempty"`
	NumRetries         uint32   `json:"numRetries,omitempty"`
	PerTryTimeout      Duration `json:"perTryTimeout,omitempty"`
	AllowNonIdempotent bool     `json:"allowNonIdempotent,omitempty"`
}

// Auth modes for RouteAuth.Mode.
const (
	AuthNone   = "none"
	AuthJWT    = "jwt"
	AuthAPIKey = "apikey"
)

// RouteAuth is the route's authentication requirement, handed to extauthz
// as ext_authz context extensions.
type RouteAuth struct {
	Mode           string   `json:"mode"`
	Provider       string   `json:"provider,omitempty"`
	RequiredScopes []string `json:"requiredScopes,omitempty"`
}

// RateLimitDescriptorEntry is one entry of a descriptor Envoy sends to the
// rate-limit service. Exactly one source is set: FromHeader (request header
// value), Value (a constant), RemoteAddress (the trusted client address) or
// GenericKey (constant value under Key).
type RateLimitDescriptorEntry struct {
	Key           string `json:"key"`
	FromHeader    string `json:"fromHeader,omitempty"`
	Value         string `json:"value,omitempty"`
	RemoteAddress bool   `json:"remoteAddress,omitempty"`
}

// RouteRateLimit is one descriptor (a list of entries) sent per request.
type RouteRateLimit struct {
	Descriptors []RateLimitDescriptorEntry `json:"descriptors"`
}

// HeaderValue is a header name and value.
type HeaderValue struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// HeaderRules rewrites request headers before the upstream sees them.
type HeaderRules struct {
	Set    []HeaderValue `json:"set,omitempty"`
	Remove []string      `json:"remove,omitempty"`
}

// Route maps matching requests to a cluster on the ingress listener.
type Route struct {
	Name             string            `json:"name"`
	Match            RouteMatch        `json:"match"`
	Cluster          string            `json:"cluster,omitempty"`
	WeightedClusters []WeightedCluster `json:"weightedClusters,omitempty"`
	Canary           *HeaderCanary     `json:"canary,omitempty"`
	Timeout          Duration          `json:"timeout,omitempty"`
	Retries          *RetryPolicy      `json:"retries,omitempty"`
	Auth             *RouteAuth        `json:"auth,omitempty"`
	RateLimits       []RouteRateLimit  `json:"rateLimits,omitempty"`
	RequestHeaders   *HeaderRules      `json:"requestHeaders,omitempty"`
	WebSocket        bool              `json:"websocket,omitempty"`
	// MaxRequestBytes caps the request body for this route (0 = listener default).
	MaxRequestBytes uint32 `json:"maxRequestBytes,omitempty"`
	// Overload overrides the clusters' overload protection for this route.
	Overload *Overload `json:"overload,omitempty"`
}

// JWTProvider is a trusted token issuer.
type JWTProvider struct {
	Name   string `json:"name"`
	Issuer string `json:"issuer"`
	// Audiences are the aud values accepted; at least one is required
	// unless AllowAnyAudience says, explicitly, that any will do.
	Audiences        []string `json:"audiences,omitempty"`
	AllowAnyAudience bool     `json:"allowAnyAudience,omitempty"`
	JWKSURI          string   `json:"jwksUri,omitempty"`
	InlineJWKS       string   `json:"inlineJwks,omitempty"`
	Algorithms       []string `json:"algorithms"`
	ClockSkew        Duration `json:"clockSkew,omitempty"`
	JWKSCacheTTL     Duration `json:"jwksCacheTtl,omitempty"`
	// IntrospectionURI is the RFC 7662 endpoint for opaque tokens;
	// extauthz authenticates to it with client_secret_basic as
	// IntrospectionClientID, the secret read from the file
	// IntrospectionClientSecretRef names in extauthz's secrets directory.
	IntrospectionURI             string                  `json:"introspectionUri,omitempty"`
	IntrospectionClientID        string                  `json:"introspectionClientId,omitempty"`
	IntrospectionClientSecretRef *SecretRef              `json:"introspectionClientSecretRef,omitempty"`
	IntrospectionRateLimit       *IntrospectionRateLimit `json:"introspectionRateLimit,omitempty"`
	// AllowInsecureLoopback accepts plain http JWKSURI and IntrospectionURI
	// on a loopback host (development IdPs); they are https otherwise.
	AllowInsecureLoopback bool `json:"allowInsecureLoopback,omitempty"`
}

// SecretRef names a secret held outside the config: a file of that name in
// the consuming service's secrets directory (a mounted Kubernetes Secret),
// so the value is never stored, audited, served over xDS or returned.
type SecretRef struct {
	Name string `json:"name"`
}

// IntrospectionRateLimit is the token bucket bounding a provider's
// introspection calls, per extauthz replica (0 = extauthz's default).
type IntrospectionRateLimit struct {
	RequestsPerSecond uint32 `json:"requestsPerSecond,omitempty"`
	Burst             uint32 `json:"burst,omitempty"`
}

// Consumer is an API client (a tenant's application).
type Consumer struct {
	Name     string            `json:"name"`
	Tenant   string            `json:"tenant"`
	Tier     string            `json:"tier,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// APIKey is a consumer credential. The secret itself is never stored: only
// its SHA-256 (hex). Keys are their own kind so that versions carry only the
// keys that changed.
type APIKey struct {
	// Name is the key id (a random, non-secret identifier).
	Name      string     `json:"name"`
	Consumer  string     `json:"consumer"`
	SHA256    string     `json:"sha256"`
	Prefix    string     `json:"prefix,omitempty"`
	Scopes    []string   `json:"scopes,omitempty"`
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
}

// Revocation denies tokens with this jti until ExpiresAt (the token's own expiry).
type Revocation struct {
	// Name is the jti.
	Name      string    `json:"jti"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// Rate-limit rule enumerations.
const (
	AlgorithmTokenBucket   = "TOKEN_BUCKET"
	AlgorithmSlidingWindow = "SLIDING_WINDOW"
	AlgorithmFixedWindow   = "FIXED_WINDOW"
	ModeEnforce            = "ENFORCE"
	ModeShadow             = "SHADOW"
	FailOpen               = "OPEN"
	FailClosed             = "CLOSED"
)

// RuleDescriptor matches one descriptor entry; an empty Value matches any value.
type RuleDescriptor struct {
	Key   string `json:"key"`
	Value string `json:"value,omitempty"`
}

// RateLimitRule is a limit applied by ratelimitsvc to matching descriptors.
type RateLimitRule struct {
	Name        string           `json:"name"`
	Domain      string           `json:"domain"`
	Descriptors []RuleDescriptor `json:"descriptors"`
	Limit       uint32           `json:"limit"`
	Window      Duration         `json:"window"`
	Burst       uint32           `json:"burst,omitempty"`
	Algorithm   string           `json:"algorithm,omitempty"`
	Mode        string           `json:"mode,omitempty"`
	FailMode    string           `json:"failMode,omitempty"`
	HighVolume  bool             `json:"highVolume,omitempty"`
	Tenant      string           `json:"tenant,omitempty"`
	Priority    int32            `json:"priority,omitempty"`
}

// Secret types.
const (
	// SecretTLS is a certificate chain and its private key.
	SecretTLS = "tls"
	// SecretCA is a bundle of trusted CA certificates.
	SecretCA = "ca"
)

// Secret is TLS material delivered to gateways by SDS. It is either inline
// (PEM in the resource) or referenced (Files: paths on the gateway host, so
// nothing sensitive is stored).
//
// An inline private key is write-only: the admin API accepts PrivateKey,
// seals it (package seal) into SealedPrivateKey and clears PrivateKey
// before the store sees it, and never returns either field. A Secret in a
// Config therefore carries SealedPrivateKey, never PrivateKey.
type Secret struct {
	Name string `json:"name"`
	Type string `json:"type"`
	// Certificate is the PEM certificate chain, leaf first (type tls).
	Certificate string `json:"certificate,omitempty"`
	// PrivateKey is the PEM private key (type tls; input only).
	PrivateKey string `json:"privateKey,omitempty"`
	// SealedPrivateKey is PrivateKey encrypted at rest (set by the server).
	SealedPrivateKey string `json:"sealedPrivateKey,omitempty"`
	// CA is the PEM bundle of trusted certificates (type ca).
	CA    string       `json:"ca,omitempty"`
	Files *SecretFiles `json:"files,omitempty"`
}

// SecretFiles are absolute paths on the gateway host that Envoy reads.
type SecretFiles struct {
	CertificateChain string `json:"certificateChain,omitempty"`
	PrivateKey       string `json:"privateKey,omitempty"`
	TrustedCA        string `json:"trustedCa,omitempty"`
}

// TLS versions accepted for ListenerTLS.MinVersion.
const (
	TLS12 = "1.2"
	TLS13 = "1.3"
)

// ListenerTLS terminates TLS on a listener.
type ListenerTLS struct {
	// Certificates name secrets of type tls (at least one; Envoy picks by
	// SNI and key type).
	Certificates []string `json:"certificates"`
	// ClientCA names a secret of type ca client certificates are verified
	// against.
	ClientCA string `json:"clientCa,omitempty"`
	// RequireClientCert rejects clients without a valid certificate (mTLS);
	// it needs ClientCA.
	RequireClientCert bool `json:"requireClientCert,omitempty"`
	// MinVersion is "1.2" (default) or "1.3".
	MinVersion string `json:"minVersion,omitempty"`
	// ALPN is the protocols offered, default h2 and http/1.1.
	ALPN []string `json:"alpn,omitempty"`
}

// Listener is an extra gateway listener (ingress_http is built in). Every
// listener serves the same routes (ingress_routes) with the same filters.
type Listener struct {
	Name string `json:"name"`
	// Address is the IP to bind (default 0.0.0.0).
	Address string       `json:"address,omitempty"`
	Port    uint32       `json:"port"`
	TLS     *ListenerTLS `json:"tls,omitempty"`
	// MaxRequestHeadersKB caps request headers on this listener (0: the
	// control plane's default, 60).
	MaxRequestHeadersKB uint32 `json:"maxRequestHeadersKb,omitempty"`
	// MaxRequestBytes caps request bodies on this listener for routes
	// without their own maxRequestBytes (0: the control plane's default).
	MaxRequestBytes uint32 `json:"maxRequestBytes,omitempty"`
	// PreAuthLimit limits requests per client address before
	// authentication (nil: the control plane's setting for ingress_http).
	PreAuthLimit *PreAuthLimit `json:"preAuthLimit,omitempty"`
}

// Config is every live resource at one config version. Maps are keyed by
// resource name. A Config is treated as immutable once built. Each field
// is the collection of one kind, made, copied and reached through that
// kind's kindTable entry (the compiler reads the fields directly).
type Config struct {
	Version      int64
	Clusters     map[string]*Cluster
	Routes       map[string]*Route
	JWTProviders map[string]*JWTProvider
	// Consumers, APIKeys and Revocations may number in the millions:
	// they are Tables, so versions share what they did not change.
	Consumers      *Table[*Consumer]
	APIKeys        *Table[*APIKey]
	Revocations    *Table[*Revocation]
	RateLimitRules map[string]*RateLimitRule
	Secrets        map[string]*Secret
	Listeners      map[string]*Listener
	RedisProxies   map[string]*RedisProxy
}

// NewConfig returns an empty config at version v.
func NewConfig(v int64) *Config {
	c := &Config{Version: v}
	for _, d := range kindTable {
		d.coll.init(c)
	}
	return c
}

// SortedKeys returns m's keys in ascending order; compilation iterates in
// this order so that the same config always yields the same bytes.
func SortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Clone returns a copy of c whose maps can be changed without touching c.
// Resource values are shared: callers replace them, never mutate them.
// c's Tables are frozen by it (see Table.Clone).
func (c *Config) Clone() *Config {
	n := &Config{Version: c.Version}
	for _, d := range kindTable {
		d.coll.share(n, c)
		d.coll.own(n)
	}
	return n
}
