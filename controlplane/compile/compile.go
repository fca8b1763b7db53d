// Package compile turns one config version (*spec.Config) into an immutable
// xDS snapshot: the Envoy resources (LDS, RDS, CDS, EDS, SDS), the standard
// envoyproxy/ratelimit RateLimitConfig, and Portico's own auth and rate-limit
// resources for extauthz and ratelimitsvc.
//
// Compilation is a pure function of its input: maps are walked in sorted key
// order and every emitted list is sorted, so every control-plane replica
// compiling the same version produces the same bytes (with deterministic
// proto marshalling). Nothing reads the wall clock.
//
// Rules followed so that proxyless gRPC clients (grpc-go v1.85 xDS) accept the
// resources they subscribe to (they ask for listeners named after a host, the
// route configuration and the clusters/endpoints the routes name, never for
// ingress_http or the extauthz/ratelimit clusters):
//   - API listeners have xff_num_trusted_hops 0 (grpc-go NACKs anything else)
//     and every HTTP filter except the router is is_optional, so the unknown
//     header_mutation, ext_authz, ratelimit and buffer filters are skipped;
//   - every typed_per_filter_config entry is wrapped in
//     envoy.config.route.v3.FilterConfig{is_optional: true};
//   - retry policies carry num_retries only when it is at least 1;
//   - EDS localities always carry a Locality and a non-zero
//     load_balancing_weight (grpc-go drops zero-weight localities), endpoint
//     weights are never 0;
//   - clusters use type EDS with an ADS config source.
//
// grpc-go still NACKs clusters it cannot express: MAGLEV load balancing,
// upstream TLS (it requires certificate-provider instances) and clusters whose
// endpoints are hostnames (compiled as STRICT_DNS for Envoy). A gRPC client
// resolves every cluster named by the routes of its host's virtual host,
// which includes routes without hosts (they are merged into every virtual
// host); such routes must target clusters without those options. gRPC calls
// are POSTs, so gRPC routes only get retries with allowNonIdempotent.
//
// Redis proxies compile to a listener and a cluster named redis_<name> (the
// redis_proxy network filter; a cluster of the custom type
// envoy.clusters.redis). They are for Envoy gateways only: proxyless gRPC
// clients never ask for them, and would NACK both.
//
// Serving: a go-control-plane SnapshotCache must run with ads=false. In ADS
// mode it answers a request only when it names every resource of the type,
// and gRPC clients ask for their own listener and clusters only. Envoy
// gateways subscribe to all listeners and receive the API listeners too;
// Envoy accepts API listeners only from its bootstrap and skips these.
package compile

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/portico-io/portico/controlplane/spec"
)

// Default option values; a zero Options field means "use the default".
const (
	DefaultListenerAddress     = "0.0.0.0"
	DefaultListenerPort        = 10000
	DefaultExtAuthzAddress     = "127.0.0.1:18100"
	DefaultRateLimitAddress    = "127.0.0.1:18200"
	DefaultRateLimitDomain     = "portico"
	DefaultMaxRequestHeadersKB = 60
	DefaultUpstreamCAFile      = "/etc/ssl/certs/ca-certificates.crt"
	DefaultConnectTimeout      = time.Second
	// DefaultTracingSamplePercent of requests are traced when tracing is on.
	DefaultTracingSamplePercent = 1.0
	// DefaultPreAuthRequestsPerSecond is the per-client-address limit
	// ingress_http (and every listener without its own) applies before
	// authentication, with a burst of as many: generous for one client,
	// even behind a NAT, yet a flood from one address stops at the gateway.
	DefaultPreAuthRequestsPerSecond = 100
)

// Resilience defaults for every cluster and route that does not set its
// own (see seeds/003: bounded retries, ejection of bad endpoints, caps).
const (
	// DefaultRetryBudgetPercent caps active retries at this share of the
	// cluster's active requests, so retries cannot amplify an overload.
	DefaultRetryBudgetPercent  = 20
	DefaultMinRetryConcurrency = 3
	// Outlier detection: eject an endpoint after this many consecutive
	// 5xx (or gateway errors), for BaseEjectionTime × ejections, at most
	// MaxEjectionPercent of the cluster at once.
	DefaultConsecutive5xx     = 5
	DefaultOutlierInterval    = 10 * time.Second
	DefaultBaseEjectionTime   = 30 * time.Second
	DefaultMaxEjectionPercent = 50
	// ... and after more than DefaultFailurePercentage of its requests
	// failed in an interval with at least DefaultFailurePercentageVolume.
	DefaultFailurePercentage       = 85
	DefaultFailurePercentageVolume = 20
	// DefaultRetryOn is what routes without a retry policy retry, on
	// idempotent methods only: failures where the upstream most likely
	// did no work.
	DefaultRetryOn = "connect-failure,refused-stream,reset"
	DefaultRetries = 1
	// Connect timeout and circuit breakers of the extauthz, ratelimit and
	// tracing service clusters.
	ServiceConnectTimeout     = 250 * time.Millisecond
	ServiceMaxConnections     = 64
	ServiceMaxPendingRequests = 256
	ServiceMaxRequests        = 1024
)

// Envoy-facing names fixed by ARCHITECTURE.md.
const (
	ListenerName      = "ingress_http"
	RouteConfigName   = "ingress_routes"
	ExtAuthzCluster   = "extauthz"
	RateLimitCluster  = "ratelimit"
	RevocationsName   = "revocations"
	TracingCluster    = "opentelemetry_collector"
	APIKeyShardPrefix = "apikeys-"
)

// Options are the per-deployment knobs of the compiled gateway configuration.
type Options struct {
	// ListenerAddress and ListenerPort are where ingress_http listens.
	ListenerAddress string
	ListenerPort    uint32
	// ExtAuthzAddress and RateLimitAddress are host:port of the extauthz and
	// ratelimitsvc gRPC services, compiled as the clusters "extauthz" and
	// "ratelimit" (STATIC for IP hosts, STRICT_DNS for names).
	ExtAuthzAddress  string
	RateLimitAddress string
	// RateLimitDomain is the domain Envoy's ratelimit filter sends.
	RateLimitDomain string
	// XFFNumTrustedHops is how many X-Forwarded-For hops in front of Envoy are
	// trusted (0: the peer address is the client). API listeners ignore it.
	XFFNumTrustedHops uint32
	// MaxRequestHeadersKB caps request headers on the listener.
	MaxRequestHeadersKB uint32
	// DefaultMaxRequestBytes caps request bodies on routes without their own
	// limit; 0 means unlimited.
	DefaultMaxRequestBytes uint32
	// UpstreamCAFile is the CA bundle Envoy verifies upstream TLS against
	// for clusters without a caSecret.
	UpstreamCAFile string
	// TracingCollector is host:port of an OpenTelemetry collector (OTLP
	// gRPC); set, the gateway traces requests (W3C traceparent) and exports
	// spans there through the cluster "opentelemetry_collector". Empty: no
	// tracing.
	TracingCollector string
	// TracingSamplePercent is the share of requests without an incoming
	// sampling decision that are traced (default DefaultTracingSamplePercent).
	TracingSamplePercent float64
	// GatewayIdentity, when set, makes Envoy call extauthz and ratelimitsvc
	// over mutual TLS with the gateways' workload certificate.
	GatewayIdentity *GatewayIdentity
	// PreAuthLimit is ingress_http's per-client-address limit before
	// authentication, and that of every listener without its own. The zero
	// value means DefaultPreAuthRequestsPerSecond; Disabled turns it off.
	PreAuthLimit spec.PreAuthLimit
	// Unseal opens the sealed private key of an inline tls secret (package
	// seal). Nil: a config whose listeners or clusters use such a secret
	// fails to compile with ErrUnseal. It must be safe for concurrent use.
	Unseal func(sealed string) ([]byte, error)
}

func (o Options) withDefaults() Options {
	if o.ListenerAddress == "" {
		o.ListenerAddress = DefaultListenerAddress
	}
	if o.ListenerPort == 0 {
		o.ListenerPort = DefaultListenerPort
	}
	if o.ExtAuthzAddress == "" {
		o.ExtAuthzAddress = DefaultExtAuthzAddress
	}
	if o.RateLimitAddress == "" {
		o.RateLimitAddress = DefaultRateLimitAddress
	}
	if o.RateLimitDomain == "" {
		o.RateLimitDomain = DefaultRateLimitDomain
	}
	if o.MaxRequestHeadersKB == 0 {
		o.MaxRequestHeadersKB = DefaultMaxRequestHeadersKB
	}
	if o.UpstreamCAFile == "" {
		o.UpstreamCAFile = DefaultUpstreamCAFile
	}
	if p := &o.PreAuthLimit; !p.Disabled && p.RequestsPerSecond == 0 {
		p.RequestsPerSecond = DefaultPreAuthRequestsPerSecond
	}
	if o.TracingCollector != "" && o.TracingSamplePercent == 0 {
		o.TracingSamplePercent = DefaultTracingSamplePercent
	}
	return o
}

func (o Options) validate() error {
	if o.GatewayIdentity != nil {
		if err := o.GatewayIdentity.check(); err != nil {
			return err
		}
	}
	if _, err := netip.ParseAddr(o.ListenerAddress); err != nil {
		return fmt.Errorf("%w: listener address %q must be an IP address", ErrOptions, o.ListenerAddress)
	}
	if o.ListenerPort > 65535 {
		return fmt.Errorf("%w: listener port %d out of range", ErrOptions, o.ListenerPort)
	}
	if o.MaxRequestHeadersKB > 8192 {
		return fmt.Errorf("%w: maxRequestHeadersKB must be at most 8192", ErrOptions)
	}
	for _, a := range []string{o.ExtAuthzAddress, o.RateLimitAddress} {
		if _, _, err := splitHostPort(a); err != nil {
			return fmt.Errorf("%w: %v", ErrOptions, err)
		}
	}
	if o.TracingCollector != "" {
		if _, _, err := splitHostPort(o.TracingCollector); err != nil {
			return fmt.Errorf("%w: tracing collector: %v", ErrOptions, err)
		}
	}
	if err := o.PreAuthLimit.Validate(); err != nil {
		return fmt.Errorf("%w: pre-auth limit: %v", ErrOptions, err)
	}
	if o.TracingSamplePercent < 0 || o.TracingSamplePercent > 100 {
		return fmt.Errorf("%w: tracing sample percent must be 0-100", ErrOptions)
	}
	return nil
}

func splitHostPort(addr string) (string, uint32, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("address %q: %v", addr, err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 || host == "" {
		return "", 0, fmt.Errorf("address %q: want host:port", addr)
	}
	return host, uint32(p), nil
}

// Compile builds the snapshot for cfg. cfg must have passed cfg.Validate();
// Compile re-checks what it relies on and fails with ErrInvalidConfig
// otherwise. The snapshot's version is cfg.Version in decimal. Every Envoy
// resource passes ValidateAll and the snapshot is Consistent, or Compile
// returns an error wrapping ErrInvalidOutput.
func Compile(cfg *spec.Config, opts Options) (*Snapshot, error) {
	return compileConfig(cfg, opts, nil)
}

// compileConfig is Compile, reusing the ApiKeyShards of an earlier
// compile kept in shards (nil: none; see Compiler).
func compileConfig(cfg *spec.Config, opts Options, shards *reuseCache) (*Snapshot, error) {
	if cfg == nil {
		return nil, fmt.Errorf("%w: nil config", ErrInvalidConfig)
	}
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	// After a compile of the version before, only what changed since needs
	// checking (see spec.Config.ValidateFrom).
	var base *spec.Config
	if shards != nil && shards.prev != nil {
		base = shards.prev.cfg
	}
	if err := cfg.ValidateFrom(base); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if err := CheckConfig(cfg, opts); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	c := &compiler{cfg: cfg, opts: opts}
	if shards != nil {
		shards.next = &compileState{cfg: cfg}
	}

	clusters, endpoints, err := c.clusters()
	if err != nil {
		return nil, err
	}
	routes, routesWire, err := c.routeConfigurationReusing(shards)
	if err != nil {
		return nil, err
	}
	listeners, err := c.listeners()
	if err != nil {
		return nil, err
	}
	secrets, err := c.secrets()
	if err != nil {
		return nil, err
	}
	keyShards, known, err := c.apiKeyShardsReusing(shards)
	if err != nil {
		return nil, err
	}
	known[routes] = routesWire
	res := map[string][]Resource{
		ClusterType:         clusters,
		EndpointType:        endpoints,
		ListenerType:        listeners,
		RouteType:           {routes},
		SecretType:          secrets,
		JwtProviderType:     c.jwtProviders(),
		ApiKeyShardType:     keyShards,
		RevocationListType:  {c.revocations()},
		RateLimitRuleType:   c.rateLimitRules(),
		RateLimitConfigType: c.rateLimitConfigs(),
	}
	var sds *sdsMemo
	if shards != nil {
		var prev *sdsMemo
		if shards.prev != nil {
			prev = shards.prev.sds
		}
		sds = newSDSMemo(prev)
		shards.next.sds = sds
	}
	return newSnapshotKnown(strconv.FormatInt(cfg.Version, 10), res, known, sds)
}

type compiler struct {
	cfg  *spec.Config
	opts Options
}
