package compile

import (
	"fmt"
	"math"
	"strings"
	"time"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	mutationv3 "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	ratelimitconfv3 "github.com/envoyproxy/go-control-plane/envoy/config/ratelimit/v3"
	tracev3 "github.com/envoyproxy/go-control-plane/envoy/config/trace/v3"
	streamv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	adaptiveconcurrencyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/adaptive_concurrency/v3"
	admissioncontrolv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/admission_control/v3"
	bufferv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/buffer/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	headermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/portico-io/portico/controlplane/spec"
)

// HTTP filter names; per-route configs are keyed by them.
const (
	FilterHeaderMutation = "envoy.filters.http.header_mutation"
	// FilterPreAuthRateLimit is the per-client-address local_ratelimit
	// filter, first in the chain (preauth.go).
	FilterPreAuthRateLimit = "envoy.filters.http.local_ratelimit"
	FilterExtAuthz         = "envoy.filters.http.ext_authz"
	// FilterRateLimit and FilterRateLimitFailClosed are the two instances
	// of Envoy's ratelimit filter, on stages RateLimitStageOpen and
	// RateLimitStageClosed (failclosed.go). Envoy picks the implementation
	// by the typed_config's type, so the second may have a name of its own.
	FilterRateLimit           = "envoy.filters.http.ratelimit"
	FilterRateLimitFailClosed = "envoy.filters.http.ratelimit.fail_closed"
	FilterBuffer              = "envoy.filters.http.buffer"
	// FilterAdmissionControl and FilterAdaptiveConcurrency are in the chain
	// only when a route turns them on, disabled by default.
	FilterAdmissionControl    = "envoy.filters.http.admission_control"
	FilterAdaptiveConcurrency = "envoy.filters.http.adaptive_concurrency"
	FilterRouter              = "envoy.filters.http.router"

	hcmFilterName    = "envoy.filters.network.http_connection_manager"
	stdoutLogger     = "envoy.access_loggers.stdout"
	extAuthzTimeout  = 200 * time.Millisecond
	rateLimitTimeout = 20 * time.Millisecond
	// rateLimitClosedTimeout is longer: past it a fail-closed route refuses
	// the request (a failed login or payment) instead of letting it through
	// unchecked, so a short hiccup should not count as an outage.
	rateLimitClosedTimeout = 50 * time.Millisecond
)

// PorticoHeaderPrefix marks headers only Portico (extauthz) may set; the
// gateway strips client-supplied ones before any filter runs.
const PorticoHeaderPrefix = "x-portico-"

// strippedHeaders are removed from every request on entry: forwarding
// headers (upstreams would otherwise trust a host/port/prefix the client
// made up), and Envoy's retry and timeout control headers, so a client
// cannot ask Envoy for more retries or longer timeouts than the route
// allows. Envoy's own sanitizing of these applies only to requests it deems
// external, and behind a load balancer on a private network every client
// looks internal.
var strippedHeaders = []string{
	"x-envoy-hedge-on-per-try-timeout",
	"x-envoy-max-retries",
	"x-envoy-retriable-header-names",
	"x-envoy-retriable-status-codes",
	"x-envoy-retry-grpc-on",
	"x-envoy-retry-on",
	"x-envoy-upstream-rq-per-try-timeout-ms",
	"x-envoy-upstream-rq-timeout-alt-response",
	"x-envoy-upstream-rq-timeout-ms",
	"x-forwarded-host",
	"x-forwarded-port",
	"x-forwarded-prefix",
}

func anyOf(m proto.Message) (*anypb.Any, error) {
	// anypb.New marshals non-deterministically (map order), which would
	// make equal configs produce different bytes.
	a := &anypb.Any{}
	if err := anypb.MarshalFrom(a, m, proto.MarshalOptions{Deterministic: true}); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOutput, err)
	}
	return a, nil
}

// listeners compiles ingress_http, the operator's listeners, and one API
// listener per distinct non-wildcard route host, for proxyless gRPC clients
// dialing xds:///<host>.
func (c *compiler) listeners() ([]Resource, error) {
	hcm, err := c.hcm(false, c.opts.MaxRequestHeadersKB, c.opts.DefaultMaxRequestBytes, c.preAuthLimit(nil))
	if err != nil {
		return nil, err
	}
	hcmAny, err := anyOf(hcm)
	if err != nil {
		return nil, err
	}
	out := []Resource{&listenerv3.Listener{
		Name:    ListenerName,
		Address: socketAddress(c.opts.ListenerAddress, c.opts.ListenerPort),
		FilterChains: []*listenerv3.FilterChain{{
			Filters: []*listenerv3.Filter{{
				Name:       hcmFilterName,
				ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: hcmAny},
			}},
		}},
	}}
	user, err := c.userListeners()
	if err != nil {
		return nil, err
	}
	out = append(out, user...)
	redis, err := c.redisListeners()
	if err != nil {
		return nil, err
	}
	out = append(out, redis...)
	hosts := c.apiListenerHosts()
	if len(hosts) > 0 {
		// Proxyless gRPC clients run no local rate limit.
		api, err := c.hcm(true, c.opts.MaxRequestHeadersKB, c.opts.DefaultMaxRequestBytes, spec.PreAuthLimit{Disabled: true})
		if err != nil {
			return nil, err
		}
		apiAny, err := anyOf(api)
		if err != nil {
			return nil, err
		}
		for _, h := range hosts {
			if _, user := c.cfg.Listeners[h]; h == ListenerName || user {
				return nil, fmt.Errorf("%w: host %q collides with the listener name", ErrInvalidConfig, h)
			}
			out = append(out, &listenerv3.Listener{
				Name:        h,
				ApiListener: &listenerv3.ApiListener{ApiListener: apiAny},
			})
		}
	}
	sortByName(out)
	return out, nil
}

// apiListenerHosts are the distinct, lowercased route hosts without a
// wildcard, sorted.
func (c *compiler) apiListenerHosts() []string {
	set := map[string]bool{}
	for _, r := range c.cfg.Routes {
		for _, h := range r.Match.Hosts {
			if !strings.Contains(h, "*") {
				set[strings.ToLower(h)] = true
			}
		}
	}
	return spec.SortedKeys(set)
}

// needsBuffer reports whether any body limit exists; without one the buffer
// filter stays out of the chain (it would hold streaming bodies for nothing).
func (c *compiler) needsBuffer() bool {
	if c.opts.DefaultMaxRequestBytes > 0 {
		return true
	}
	for _, r := range c.cfg.Routes {
		if r.MaxRequestBytes > 0 {
			return true
		}
	}
	for _, l := range c.cfg.Listeners {
		if l.MaxRequestBytes > 0 {
			return true
		}
	}
	return false
}

// hcm builds the HTTP connection manager. For API listeners (proxyless
// gRPC) every filter but the router is optional and XFF hops are 0, the only
// values grpc-go accepts; Envoy knows all these filters so is_optional does
// not change its behaviour on ingress_http, where they stay mandatory.
//
// headersKB and bodyBytes are the listener's header cap and default body
// limit (0 bodyBytes: only routes with their own limit have one); preAuth
// its per-client-address limit before authentication.
//
// Order: the pre-auth limit first (it costs no network call, and a flood
// stops before any other filter works for it), header_mutation (client
// copies of Portico's headers go before anything reads them), ext_authz,
// then the ratelimit filters (their descriptors read the identity headers
// ext_authz sets), the overload and buffer filters, the router.
func (c *compiler) hcm(api bool, headersKB, bodyBytes uint32, preAuth spec.PreAuthLimit) (*hcmv3.HttpConnectionManager, error) {
	type filter struct {
		name     string
		cfg      proto.Message
		disabled bool
	}
	var filters []filter
	if rps, burst, on := preAuth.Effective(); on {
		filters = append(filters, filter{FilterPreAuthRateLimit, preAuthFilter(rps, burst), false})
	}
	filters = append(filters, []filter{
		{FilterHeaderMutation, headerMutation(), false},
		{FilterExtAuthz, &extauthzv3.ExtAuthz{
			Services: &extauthzv3.ExtAuthz_GrpcService{GrpcService: &corev3.GrpcService{
				TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: ExtAuthzCluster}},
				Timeout:         durationpb.New(extAuthzTimeout),
			}},
			TransportApiVersion:    corev3.ApiVersion_V3,
			FailureModeAllow:       false,
			IncludePeerCertificate: false,
		}, false},
		{FilterRateLimit, c.rateLimitFilter(false), false},
	}...)
	if c.usesFailClosed() {
		filters = append(filters, filter{FilterRateLimitFailClosed, c.rateLimitFilter(true), false})
	}
	ov := c.usesOverload()
	if ov.AdmissionControl {
		filters = append(filters, filter{FilterAdmissionControl, admissionControl(), true})
	}
	if ov.AdaptiveConcurrency {
		filters = append(filters, filter{FilterAdaptiveConcurrency, adaptiveConcurrency(), true})
	}
	if c.needsBuffer() {
		// With no listener-wide limit the filter is disabled by default and
		// only routes with their own limit turn it on (per-route config).
		limit, disabled := bodyBytes, false
		if limit == 0 {
			limit, disabled = math.MaxUint32, true
		}
		filters = append(filters, filter{FilterBuffer, &bufferv3.Buffer{MaxRequestBytes: wrapperspb.UInt32(limit)}, disabled})
	}
	filters = append(filters, filter{FilterRouter, &routerv3.Router{}, false})

	var httpFilters []*hcmv3.HttpFilter
	for _, f := range filters {
		a, err := anyOf(f.cfg)
		if err != nil {
			return nil, err
		}
		httpFilters = append(httpFilters, &hcmv3.HttpFilter{
			Name:       f.name,
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: a},
			IsOptional: api && f.name != FilterRouter,
			Disabled:   f.disabled,
		})
	}
	logCfg, err := anyOf(&streamv3.StdoutAccessLog{})
	if err != nil {
		return nil, err
	}
	h := &hcmv3.HttpConnectionManager{
		CodecType:  hcmv3.HttpConnectionManager_AUTO,
		StatPrefix: ListenerName,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource:    adsConfigSource(),
			RouteConfigName: RouteConfigName,
		}},
		HttpFilters: httpFilters,
		AccessLog: []*accesslogv3.AccessLog{{
			Name:       stdoutLogger,
			ConfigType: &accesslogv3.AccessLog_TypedConfig{TypedConfig: logCfg},
		}},
		UseRemoteAddress:    wrapperspb.Bool(true),
		XffNumTrustedHops:   c.opts.XFFNumTrustedHops,
		GenerateRequestId:   wrapperspb.Bool(true),
		MaxRequestHeadersKb: wrapperspb.UInt32(headersKB),
		// Route matching (and so the auth requirement) must see the same
		// path the upstream does: no "/public/../admin" tricks.
		NormalizePath:                wrapperspb.Bool(true),
		MergeSlashes:                 true,
		PathWithEscapedSlashesAction: hcmv3.HttpConnectionManager_UNESCAPE_AND_REDIRECT,
		// Upgrades must be declared here to exist at all; routes with
		// websocket: true turn it on.
		UpgradeConfigs: []*hcmv3.HttpConnectionManager_UpgradeConfig{{
			UpgradeType: "websocket",
			Enabled:     wrapperspb.Bool(false),
		}},
	}
	if c.opts.TracingCollector != "" && !api {
		t, err := tracing(c.opts.TracingSamplePercent)
		if err != nil {
			return nil, err
		}
		h.Tracing = t
	}
	if api {
		h.XffNumTrustedHops = 0
	}
	return h, nil
}

// rateLimitFilter is the ratelimit filter of the open stage, or with
// closed of the fail-closed one (see RateLimitStageOpen).
func (c *compiler) rateLimitFilter(closed bool) *ratelimitv3.RateLimit {
	rl := &ratelimitv3.RateLimit{
		Domain:          c.opts.RateLimitDomain,
		Stage:           RateLimitStageOpen,
		Timeout:         durationpb.New(rateLimitTimeout),
		FailureModeDeny: false,
		RateLimitService: &ratelimitconfv3.RateLimitServiceConfig{
			GrpcService: &corev3.GrpcService{
				TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: RateLimitCluster}},
			},
			TransportApiVersion: corev3.ApiVersion_V3,
		},
		// No EnableXRatelimitHeaders: ratelimitsvc returns X-RateLimit-*
		// (and Retry-After) for the most restrictive rule itself; Envoy's
		// own draft-03 set would give clients every header twice.
	}
	if closed {
		rl.Stage = RateLimitStageClosed
		rl.Timeout = durationpb.New(rateLimitClosedTimeout)
		rl.FailureModeDeny = true
		// 503, not Envoy's default 500: the limiter is unavailable, the
		// request was not processed and may be retried; and not 429,
		// which would tell the client it went over its limit.
		rl.StatusOnError = &typev3.HttpStatus{Code: typev3.StatusCode_ServiceUnavailable}
		rl.StatPrefix = "fail_closed"
	}
	return rl
}

func headerMutation() *headermutationv3.HeaderMutation {
	muts := []*mutationv3.HeaderMutation{{
		Action: &mutationv3.HeaderMutation_RemoveOnMatch_{RemoveOnMatch: &mutationv3.HeaderMutation_RemoveOnMatch{
			KeyMatcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: PorticoHeaderPrefix}},
		}},
	}}
	for _, h := range strippedHeaders {
		muts = append(muts, &mutationv3.HeaderMutation{Action: &mutationv3.HeaderMutation_Remove{Remove: h}})
	}
	return &headermutationv3.HeaderMutation{Mutations: &headermutationv3.Mutations{RequestMutations: muts}}
}

// admissionControl throttles on the gateway side in proportion to the
// upstream's recent failure rate over a 30s window (Envoy's defaults for
// the rest: 95% success threshold, at most 80% rejected). 4xx answers are
// the client's doing and count as successes.
func admissionControl() *admissioncontrolv3.AdmissionControl {
	return &admissioncontrolv3.AdmissionControl{
		SamplingWindow: durationpb.New(30 * time.Second),
		EvaluationCriteria: &admissioncontrolv3.AdmissionControl_SuccessCriteria_{SuccessCriteria: &admissioncontrolv3.AdmissionControl_SuccessCriteria{
			HttpCriteria: &admissioncontrolv3.AdmissionControl_SuccessCriteria_HttpCriteria{
				HttpSuccessStatus: []*typev3.Int32Range{{Start: 100, End: 500}},
			},
			GrpcCriteria: &admissioncontrolv3.AdmissionControl_SuccessCriteria_GrpcCriteria{},
		}},
	}
}

// adaptiveConcurrency limits concurrency towards a route's upstream by the
// gradient of its latency against a periodically measured minimum RTT:
// queueing shows up as latency, and the limit shrinks before the upstream
// falls over (then 503s with x-envoy-overloaded).
func adaptiveConcurrency() *adaptiveconcurrencyv3.AdaptiveConcurrency {
	return &adaptiveconcurrencyv3.AdaptiveConcurrency{
		ConcurrencyControllerConfig: &adaptiveconcurrencyv3.AdaptiveConcurrency_GradientControllerConfig{
			GradientControllerConfig: &adaptiveconcurrencyv3.GradientControllerConfig{
				SampleAggregatePercentile: &typev3.Percent{Value: 90},
				ConcurrencyLimitParams: &adaptiveconcurrencyv3.GradientControllerConfig_ConcurrencyLimitCalculationParams{
					ConcurrencyUpdateInterval: durationpb.New(100 * time.Millisecond),
					MaxConcurrencyLimit:       wrapperspb.UInt32(1000),
				},
				MinRttCalcParams: &adaptiveconcurrencyv3.GradientControllerConfig_MinimumRTTCalculationParams{
					Interval:       durationpb.New(60 * time.Second),
					RequestCount:   wrapperspb.UInt32(50),
					Jitter:         &typev3.Percent{Value: 10},
					MinConcurrency: wrapperspb.UInt32(3),
					Buffer:         &typev3.Percent{Value: 25},
				},
			},
		},
	}
}

// tracing exports spans to the OpenTelemetry collector cluster. Envoy's
// OpenTelemetry tracer propagates W3C traceparent/tracestate, so a trace
// started by a client or continued to the upstream stays one trace.
func tracing(samplePercent float64) (*hcmv3.HttpConnectionManager_Tracing, error) {
	cfg, err := anyOf(&tracev3.OpenTelemetryConfig{
		GrpcService: &corev3.GrpcService{
			TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: TracingCluster}},
			Timeout:         durationpb.New(time.Second),
		},
		ServiceName: "portico-gateway",
	})
	if err != nil {
		return nil, err
	}
	return &hcmv3.HttpConnectionManager_Tracing{
		RandomSampling: &typev3.Percent{Value: samplePercent},
		Provider: &tracev3.Tracing_Http{
			Name:       "envoy.tracers.opentelemetry",
			ConfigType: &tracev3.Tracing_Http_TypedConfig{TypedConfig: cfg},
		},
	}, nil
}
