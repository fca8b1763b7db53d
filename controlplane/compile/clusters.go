package compile

import (
	"cmp"
	"fmt"
	"net/netip"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/portico-io/portico/controlplane/spec"
)

// Health-check defaults for fields the spec leaves at zero.
const (
	defaultHCInterval   = 10 * time.Second
	defaultHCTimeout    = time.Second
	defaultHCHealthy    = 2
	defaultHCUnhealthy  = 3
	httpProtocolOptions = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
	tlsTransportSocket  = "envoy.transport_sockets.tls"
)

var lbPolicies = map[string]clusterv3.Cluster_LbPolicy{
	"":                  clusterv3.Cluster_ROUND_ROBIN,
	spec.LBRoundRobin:   clusterv3.Cluster_ROUND_ROBIN,
	spec.LBLeastRequest: clusterv3.Cluster_LEAST_REQUEST,
	spec.LBRingHash:     clusterv3.Cluster_RING_HASH,
	spec.LBMaglev:       clusterv3.Cluster_MAGLEV,
}

func adsConfigSource() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ResourceApiVersion:    corev3.ApiVersion_V3,
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
	}
}

// clusters compiles CDS and EDS. A cluster whose endpoints are all IP
// addresses is an EDS cluster (endpoint changes do not touch CDS or RDS); one
// with a hostname endpoint is STRICT_DNS with an inline load assignment,
// because Envoy does not resolve names delivered by EDS.
func (c *compiler) clusters() (clusters, endpoints []Resource, err error) {
	for _, name := range spec.SortedKeys(c.cfg.Clusters) {
		sc := c.cfg.Clusters[name]
		cl, err := c.cluster(sc)
		if err != nil {
			return nil, nil, err
		}
		cla := loadAssignment(sc)
		if allIPs(sc.Endpoints) {
			cl.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS}
			cl.EdsClusterConfig = &clusterv3.Cluster_EdsClusterConfig{EdsConfig: adsConfigSource()}
			endpoints = append(endpoints, cla)
		} else {
			cl.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STRICT_DNS}
			cl.LoadAssignment = cla
		}
		clusters = append(clusters, cl)
	}
	services := []struct{ name, addr, role string }{
		{ExtAuthzCluster, c.opts.ExtAuthzAddress, "extauthz"},
		{RateLimitCluster, c.opts.RateLimitAddress, "ratelimit"},
	}
	if c.opts.TracingCollector != "" {
		services = append(services, struct{ name, addr, role string }{TracingCluster, c.opts.TracingCollector, ""})
	}
	for _, svc := range services { // spec validation reserves these names
		cl, err := serviceCluster(svc.name, svc.addr)
		if err != nil {
			return nil, nil, err
		}
		if g := c.opts.GatewayIdentity; g != nil && svc.role != "" {
			if cl.TransportSocket, err = g.transportSocket(svc.role); err != nil {
				return nil, nil, err
			}
		}
		clusters = append(clusters, cl)
	}
	redis, err := c.redisClusters()
	if err != nil {
		return nil, nil, err
	}
	clusters = append(clusters, redis...)
	// Service and redis clusters sort among the others by name, like every list.
	sortByName(clusters)
	return clusters, endpoints, nil
}

func allIPs(eps []spec.Endpoint) bool {
	for _, e := range eps {
		if _, err := netip.ParseAddr(e.Address); err != nil {
			return false
		}
	}
	return true
}

func (c *compiler) cluster(sc *spec.Cluster) (*clusterv3.Cluster, error) {
	lb, ok := lbPolicies[sc.LBPolicy]
	if !ok {
		return nil, fmt.Errorf("%w: clusters/%s: lbPolicy %q", ErrInvalidConfig, sc.Name, sc.LBPolicy)
	}
	timeout := sc.ConnectTimeout.D()
	if timeout == 0 {
		timeout = DefaultConnectTimeout
	}
	cl := &clusterv3.Cluster{
		Name:           sc.Name,
		ConnectTimeout: durationpb.New(timeout),
		LbPolicy:       lb,
	}
	cl.CircuitBreakers = circuitBreakers(sc.CircuitBreakers)
	cl.OutlierDetection = outlierDetection(sc.OutlierDetection)
	if hc := sc.HealthCheck; hc != nil {
		cl.HealthChecks = []*corev3.HealthCheck{healthCheck(hc, sc.HTTP2)}
	}
	if sc.HTTP2 {
		opts, err := http2Options()
		if err != nil {
			return nil, err
		}
		cl.TypedExtensionProtocolOptions = opts
	}
	if sc.TLS != nil {
		ts, err := c.upstreamTLS(sc)
		if err != nil {
			return nil, err
		}
		cl.TransportSocket = ts
	}
	return cl, nil
}

// circuitBreakers caps concurrency towards the cluster. Unset fields keep
// Envoy's defaults (1024); retries are capped by a budget of
// DefaultRetryBudgetPercent of active requests unless the cluster sets its
// own budget or a static maxRetries.
func circuitBreakers(cb *spec.CircuitBreakers) *clusterv3.CircuitBreakers {
	if cb == nil {
		cb = &spec.CircuitBreakers{}
	}
	t := &clusterv3.CircuitBreakers_Thresholds{
		Priority:           corev3.RoutingPriority_DEFAULT,
		MaxConnections:     u32(cb.MaxConnections),
		MaxPendingRequests: u32(cb.MaxPendingRequests),
		MaxRequests:        u32(cb.MaxRequests),
		MaxRetries:         u32(cb.MaxRetries),
	}
	rb := cb.RetryBudget
	if rb == nil && cb.MaxRetries == 0 {
		rb = &spec.RetryBudget{BudgetPercent: DefaultRetryBudgetPercent, MinRetryConcurrency: DefaultMinRetryConcurrency}
	}
	if rb != nil {
		t.RetryBudget = &clusterv3.CircuitBreakers_Thresholds_RetryBudget{
			BudgetPercent:       &typev3.Percent{Value: rb.BudgetPercent},
			MinRetryConcurrency: u32(rb.MinRetryConcurrency),
		}
	}
	return &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{t}}
}

// outlierDetection is the cluster's own detection, or the default one
// (consecutive 5xx and gateway errors) when it sets none; nil when disabled.
func outlierDetection(od *spec.OutlierDetection) *clusterv3.OutlierDetection {
	switch {
	case od == nil:
		od = &spec.OutlierDetection{
			Consecutive5xx:           DefaultConsecutive5xx,
			ConsecutiveGatewayErrors: DefaultConsecutive5xx,
			Interval:                 spec.Duration(DefaultOutlierInterval),
			BaseEjectionTime:         spec.Duration(DefaultBaseEjectionTime),
			MaxEjectionPercent:       DefaultMaxEjectionPercent,
			FailurePercentage:        &spec.FailurePercentage{Threshold: DefaultFailurePercentage},
		}
	case od.Disabled:
		return nil
	}
	o := &clusterv3.OutlierDetection{
		Consecutive_5Xx:    u32(od.Consecutive5xx),
		Interval:           dur(od.Interval.D()),
		BaseEjectionTime:   dur(od.BaseEjectionTime.D()),
		MaxEjectionPercent: u32(od.MaxEjectionPercent),
	}
	if od.ConsecutiveGatewayErrors > 0 {
		// Envoy detects gateway errors but enforces 0% of ejections by
		// default; asking for the detector means asking for ejection.
		o.ConsecutiveGatewayFailure = u32(od.ConsecutiveGatewayErrors)
		o.EnforcingConsecutiveGatewayFailure = wrapperspb.UInt32(100)
	}
	if fp := od.FailurePercentage; fp != nil {
		// The one detector proxyless gRPC clients share with Envoy
		// (grpc-go ignores consecutive errors); by default it works from
		// two endpoints up.
		o.FailurePercentageThreshold = wrapperspb.UInt32(fp.Threshold)
		o.EnforcingFailurePercentage = wrapperspb.UInt32(100)
		o.FailurePercentageMinimumHosts = wrapperspb.UInt32(cmp.Or(fp.MinimumHosts, 2))
		o.FailurePercentageRequestVolume = wrapperspb.UInt32(cmp.Or(fp.RequestVolume, DefaultFailurePercentageVolume))
	}
	return o
}

func healthCheck(hc *spec.HealthCheck, http2 bool) *corev3.HealthCheck {
	interval, timeout := hc.Interval.D(), hc.Timeout.D()
	if interval == 0 {
		interval = defaultHCInterval
	}
	if timeout == 0 {
		timeout = defaultHCTimeout
	}
	healthy, unhealthy := hc.HealthyThreshold, hc.UnhealthyThreshold
	if healthy == 0 {
		healthy = defaultHCHealthy
	}
	if unhealthy == 0 {
		unhealthy = defaultHCUnhealthy
	}
	h := &corev3.HealthCheck_HttpHealthCheck{Path: hc.Path}
	if http2 {
		h.CodecClientType = typev3.CodecClientType_HTTP2
	}
	return &corev3.HealthCheck{
		Timeout:            durationpb.New(timeout),
		Interval:           durationpb.New(interval),
		HealthyThreshold:   wrapperspb.UInt32(healthy),
		UnhealthyThreshold: wrapperspb.UInt32(unhealthy),
		HealthChecker:      &corev3.HealthCheck_HttpHealthCheck_{HttpHealthCheck: h},
	}
}

func http2Options() (map[string]*anypb.Any, error) {
	a, err := anyOf(&upstreamhttpv3.HttpProtocolOptions{
		UpstreamProtocolOptions: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_{
			ExplicitHttpConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig{
				ProtocolConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{
					Http2ProtocolOptions: &corev3.Http2ProtocolOptions{},
				},
			},
		},
	})
	if err != nil {
		return nil, err
	}
	return map[string]*anypb.Any{httpProtocolOptions: a}, nil
}

// upstreamTLS verifies the upstream against the cluster's CA secret (by
// SDS) or the gateway's CA bundle and, when an SNI is given, requires the
// certificate to carry it as a DNS SAN: TLS without verification would only
// look secure. A client certificate secret makes it mutual TLS.
func (c *compiler) upstreamTLS(sc *spec.Cluster) (*corev3.TransportSocket, error) {
	vc := &tlsv3.CertificateValidationContext{}
	if sni := sc.TLS.SNI; sni != "" {
		vc.MatchTypedSubjectAltNames = []*tlsv3.SubjectAltNameMatcher{{
			SanType: tlsv3.SubjectAltNameMatcher_DNS,
			Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: sni}},
		}}
	}
	common := &tlsv3.CommonTlsContext{}
	if ca := sc.TLS.CASecret; ca != "" {
		// The SDS secret carries the trusted CAs; the SAN check stays
		// with the cluster, merged in by Envoy.
		common.ValidationContextType = &tlsv3.CommonTlsContext_CombinedValidationContext{
			CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
				DefaultValidationContext:         vc,
				ValidationContextSdsSecretConfig: sdsConfig(ca),
			},
		}
	} else {
		vc.TrustedCa = fileSource(c.opts.UpstreamCAFile)
		common.ValidationContextType = &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: vc}
	}
	if cert := sc.TLS.ClientCertificate; cert != "" {
		common.TlsCertificateSdsSecretConfigs = []*tlsv3.SdsSecretConfig{sdsConfig(cert)}
	}
	if sc.HTTP2 {
		common.AlpnProtocols = []string{"h2"}
	}
	a, err := anyOf(&tlsv3.UpstreamTlsContext{Sni: sc.TLS.SNI, CommonTlsContext: common})
	if err != nil {
		return nil, err
	}
	return &corev3.TransportSocket{
		Name:       tlsTransportSocket,
		ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: a},
	}, nil
}

// loadAssignment groups endpoints by zone (sorted; "" first), each locality
// weighted by the sum of its endpoint weights so that grpc-go, which ignores
// zero-weight localities, and Envoy's locality-weighted LB agree.
func loadAssignment(sc *spec.Cluster) *endpointv3.ClusterLoadAssignment {
	byZone := map[string][]spec.Endpoint{}
	for _, e := range sc.Endpoints {
		byZone[e.Zone] = append(byZone[e.Zone], e)
	}
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: sc.Name}
	for _, zone := range spec.SortedKeys(byZone) {
		eps := sortedEndpoints(byZone[zone])
		var total uint32
		lle := &endpointv3.LocalityLbEndpoints{Locality: &corev3.Locality{Zone: zone}}
		for _, e := range eps {
			w := e.Weight
			if w == 0 {
				w = 1
			}
			total += w
			lle.LbEndpoints = append(lle.LbEndpoints, &endpointv3.LbEndpoint{
				HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
					Address: socketAddress(e.Address, e.Port),
				}},
				LoadBalancingWeight: wrapperspb.UInt32(w),
			})
		}
		lle.LoadBalancingWeight = wrapperspb.UInt32(total)
		cla.Endpoints = append(cla.Endpoints, lle)
	}
	return cla
}

func sortedEndpoints(eps []spec.Endpoint) []spec.Endpoint {
	out := append([]spec.Endpoint(nil), eps...)
	sortFunc(out, func(a, b spec.Endpoint) bool {
		if a.Address != b.Address {
			return a.Address < b.Address
		}
		return a.Port < b.Port
	})
	return out
}

func socketAddress(host string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Protocol:      corev3.SocketAddress_TCP,
		Address:       host,
		PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
	}}}
}

// serviceCluster is the cluster of one of Portico's gRPC services
// (extauthz, ratelimitsvc): HTTP/2, addressed inline.
func serviceCluster(name, addr string) (*clusterv3.Cluster, error) {
	host, port, err := splitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrOptions, err)
	}
	typ := clusterv3.Cluster_STATIC
	if _, err := netip.ParseAddr(host); err != nil {
		typ = clusterv3.Cluster_STRICT_DNS
	}
	opts, err := http2Options()
	if err != nil {
		return nil, err
	}
	return &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: typ},
		// In-cluster services: a connection that takes longer is not coming,
		// and the filter's own timeout is small.
		ConnectTimeout: durationpb.New(ServiceConnectTimeout),
		LbPolicy:       clusterv3.Cluster_ROUND_ROBIN,
		LoadAssignment: &endpointv3.ClusterLoadAssignment{
			ClusterName: name,
			Endpoints: []*endpointv3.LocalityLbEndpoints{{
				LbEndpoints: []*endpointv3.LbEndpoint{{
					HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
						Address: socketAddress(host, port),
					}},
				}},
			}},
		},
		TypedExtensionProtocolOptions: opts,
		// Envoy's filters call these services on every request: cap what a
		// slow service can pile up (the filters' own timeouts and fail
		// modes decide the request). No outlier detection: ejecting the
		// only endpoint would turn a blip into a fail-mode outage.
		CircuitBreakers: &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{{
			Priority:           corev3.RoutingPriority_DEFAULT,
			MaxConnections:     wrapperspb.UInt32(ServiceMaxConnections),
			MaxPendingRequests: wrapperspb.UInt32(ServiceMaxPendingRequests),
			MaxRequests:        wrapperspb.UInt32(ServiceMaxRequests),
			MaxRetries:         wrapperspb.UInt32(0),
		}}},
	}, nil
}

func u32(v uint32) *wrapperspb.UInt32Value {
	if v == 0 {
		return nil
	}
	return wrapperspb.UInt32(v)
}

func dur(d time.Duration) *durationpb.Duration {
	if d == 0 {
		return nil
	}
	return durationpb.New(d)
}
