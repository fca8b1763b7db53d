// Package bootstrap parses Portico gateway bootstraps strictly and checks
// them against the contract the control plane and the chart rely on. It is
// shared by the tests of envoy/bootstrap.yaml and of the Helm chart's
// rendered twin, so both are held to the same rules.
package bootstrap

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	downstreamv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/resource_monitors/downstream_connections/v3"
	fixedheapv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/resource_monitors/fixed_heap/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"

	"github.com/portico-io/portico/controlplane/compile"
	"github.com/portico-io/portico/internal/xdscontract"

	// Extension types a gateway bootstrap references through Any; protojson
	// resolves them from the global registry.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
)

// Names fixed by the contract with the control plane (ARCHITECTURE.md and
// controlplane/compile): the ADS cluster, the clusters the control plane
// delivers over CDS (a static cluster of the same name would shadow them:
// Envoy never lets CDS replace a static cluster), and its listener.
const (
	NodeCluster      = xdscontract.NodeClusterGateway
	GroupKey         = xdscontract.GroupMetadataKey
	XDSCluster       = "xds_cluster"
	ExtAuthzCluster  = compile.ExtAuthzCluster
	RateLimitCluster = compile.RateLimitCluster
	IngressListener  = compile.ListenerName
	AdminAddress     = "127.0.0.1"
	AdminPort        = 9901
	PrometheusPath   = "/stats/prometheus"
	ReadyPath        = "/ready"

	monitorHeap        = "envoy.resource_monitors.fixed_heap"
	monitorConnections = "envoy.resource_monitors.global_downstream_max_connections"
)

// cdsClusters are the fixed-name clusters the control plane compiles.
var cdsClusters = []string{ExtAuthzCluster, RateLimitCluster, compile.TracingCluster}

// Parse decodes a YAML bootstrap strictly — unknown fields and unknown Any
// types are errors — and runs the proto validation rules (ValidateAll).
func Parse(doc []byte) (*bootstrapv3.Bootstrap, error) {
	js, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: yaml: %w", err)
	}
	var b bootstrapv3.Bootstrap
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(js, &b); err != nil {
		return nil, fmt.Errorf("bootstrap: strict parse: %w", err)
	}
	if err := b.ValidateAll(); err != nil {
		return nil, fmt.Errorf("bootstrap: validate: %w", err)
	}
	return &b, nil
}

// Limits are the overload settings found in a bootstrap.
type Limits struct {
	MaxHeapBytes         uint64
	MaxDownstreamConns   int64
	HeapTriggeredActions []string
	// StatsAddr and StatsPort are where the listener exposing the admin's
	// /stats/prometheus and /ready listens.
	StatsAddr string
	StatsPort uint32
}

// CheckGateway returns every way b breaks the gateway contract (nil when it
// holds) and the limits it found, for callers that compare them with their
// own settings (container memory, ports).
func CheckGateway(b *bootstrapv3.Bootstrap) (Limits, error) {
	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	var lim Limits

	if b.GetNode().GetCluster() != NodeCluster || b.GetNode().GetId() == "" {
		fail("node = %v, want cluster %q and an id", b.GetNode(), NodeCluster)
	}
	if g := b.GetNode().GetMetadata().GetFields()[GroupKey].GetStringValue(); g == "" {
		fail("node metadata %s is missing", GroupKey)
	}

	dr := b.GetDynamicResources()
	if dr.GetLdsConfig().GetAds() == nil || dr.GetCdsConfig().GetAds() == nil {
		fail("LDS and CDS must come over ADS")
	}
	svc := dr.GetAdsConfig().GetGrpcServices()
	if len(svc) != 1 || svc[0].GetEnvoyGrpc().GetClusterName() != XDSCluster {
		fail("ads grpc services = %v, want one envoy_grpc to %s", svc, XDSCluster)
	} else if bo := svc[0].GetEnvoyGrpc().GetRetryPolicy().GetRetryBackOff(); bo.GetBaseInterval() == nil || bo.GetMaxInterval() == nil {
		// Envoy jitters the exponential back-off; without explicit bounds a
		// fleet reconnects on the defaults, which we want to own.
		fail("ADS reconnect back-off (envoy_grpc.retry_policy.retry_back_off) must set base and max interval")
	}

	if a := b.GetAdmin().GetAddress().GetSocketAddress(); a.GetAddress() != AdminAddress || a.GetPortValue() != AdminPort {
		fail("admin = %v, want %s:%d (loopback only)", a, AdminAddress, AdminPort)
	}

	clusters := map[string]*clusterv3.Cluster{}
	for _, c := range b.GetStaticResources().GetClusters() {
		clusters[c.GetName()] = c
		if slices.Contains(cdsClusters, c.GetName()) {
			fail("static cluster %q: the control plane delivers it over CDS, and Envoy ignores CDS updates of a static cluster", c.GetName())
		}
	}
	if xds := clusters[XDSCluster]; xds == nil {
		fail("no static cluster %s", XDSCluster)
	} else {
		if _, ok := xds.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]; !ok {
			fail("%s must speak HTTP/2 (gRPC)", XDSCluster)
		}
		if len(xds.GetCircuitBreakers().GetThresholds()) == 0 {
			fail("%s needs its own circuit breakers", XDSCluster)
		}
		ct := xds.GetConnectTimeout().AsDuration()
		if ct <= 0 || ct.Seconds() > 1 {
			fail("%s connect_timeout = %v, want a tight one (≤ 1s)", XDSCluster, ct)
		}
	}

	lim.StatsAddr, lim.StatsPort = checkStatsListener(b, clusters, fail)
	checkOverload(b, &lim, fail)
	return lim, errors.Join(errs...)
}

// checkStatsListener finds the static listener that exposes the loopback
// admin's /stats/prometheus and /ready, and returns where it listens.
func checkStatsListener(b *bootstrapv3.Bootstrap, clusters map[string]*clusterv3.Cluster, fail func(string, ...any)) (string, uint32) {
	for _, l := range b.GetStaticResources().GetListeners() {
		if l.GetName() == IngressListener {
			fail("static listener %q: the control plane owns it", IngressListener)
			continue
		}
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				var hcm hcmv3.HttpConnectionManager
				if f.GetTypedConfig() == nil || f.GetTypedConfig().UnmarshalTo(&hcm) != nil {
					continue
				}
				routes := map[string]string{}
				for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
					for _, r := range vh.GetRoutes() {
						routes[matchPath(r.GetMatch())] = r.GetRoute().GetCluster()
					}
				}
				prom, ready := routes[PrometheusPath], routes[ReadyPath]
				if prom == "" {
					continue
				}
				if !pointsAtAdmin(clusters[prom]) {
					fail("listener %s: %s goes to cluster %q, not to the admin on %s:%d", l.GetName(), PrometheusPath, prom, AdminAddress, AdminPort)
				}
				if ready == "" || !pointsAtAdmin(clusters[ready]) {
					fail("listener %s: %s must go to the admin (kubelet probes cannot reach loopback)", l.GetName(), ReadyPath)
				}
				sa := l.GetAddress().GetSocketAddress()
				return sa.GetAddress(), sa.GetPortValue()
			}
		}
	}
	fail("no static listener exposes %s (Prometheus) from the loopback admin", PrometheusPath)
	return "", 0
}

func matchPath(m *routev3.RouteMatch) string {
	if p := m.GetPath(); p != "" {
		return p
	}
	return m.GetPrefix()
}

func pointsAtAdmin(c *clusterv3.Cluster) bool {
	for _, le := range c.GetLoadAssignment().GetEndpoints() {
		for _, e := range le.GetLbEndpoints() {
			sa := e.GetEndpoint().GetAddress().GetSocketAddress()
			if sa.GetAddress() == AdminAddress && sa.GetPortValue() == AdminPort {
				return true
			}
		}
	}
	return false
}

func checkOverload(b *bootstrapv3.Bootstrap, lim *Limits, fail func(string, ...any)) {
	om := b.GetOverloadManager()
	for _, m := range om.GetResourceMonitors() {
		switch m.GetName() {
		case monitorHeap:
			var c fixedheapv3.FixedHeapConfig
			if err := m.GetTypedConfig().UnmarshalTo(&c); err != nil {
				fail("%s: %v", monitorHeap, err)
			}
			lim.MaxHeapBytes = c.GetMaxHeapSizeBytes()
		case monitorConnections:
			var c downstreamv3.DownstreamConnectionsConfig
			if err := m.GetTypedConfig().UnmarshalTo(&c); err != nil {
				fail("%s: %v", monitorConnections, err)
			}
			lim.MaxDownstreamConns = c.GetMaxActiveDownstreamConnections()
		}
	}
	if lim.MaxHeapBytes == 0 {
		fail("overload manager: no %s monitor with a heap limit", monitorHeap)
	}
	if lim.MaxDownstreamConns <= 0 {
		fail("overload manager: no %s monitor with a connection limit", monitorConnections)
	}
	for _, a := range om.GetActions() {
		for _, t := range a.GetTriggers() {
			if t.GetName() == monitorHeap {
				lim.HeapTriggeredActions = append(lim.HeapTriggeredActions, a.GetName())
				break
			}
		}
	}
	if !slices.Contains(lim.HeapTriggeredActions, "envoy.overload_actions.stop_accepting_requests") {
		fail("overload manager: heap pressure must trigger stop_accepting_requests (got %v)", lim.HeapTriggeredActions)
	}
}

// XDSMutualTLS is how a bootstrap reaches the control plane over mTLS: the
// SDS secret names of its certificate and CA and where they come from.
type XDSMutualTLS struct {
	CertSecret, CASecret string
	// CertPath and CAPath are the files of path-based SDS ("" otherwise).
	CertPath, CAPath string
}

// CheckXDSMutualTLS returns how the ADS cluster authenticates, or an error
// when it does not: it must present a certificate (SDS, so a renewed one is
// picked up) and accept only a server whose URI SAN is a controlplane
// SPIFFE ID, verified against a CA bundle.
func CheckXDSMutualTLS(b *bootstrapv3.Bootstrap) (XDSMutualTLS, error) {
	var out XDSMutualTLS
	var xds *clusterv3.Cluster
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetName() == XDSCluster {
			xds = c
		}
	}
	if xds == nil {
		return out, fmt.Errorf("no static cluster %s", XDSCluster)
	}
	var tlsCtx tlsv3.UpstreamTlsContext
	ts := xds.GetTransportSocket()
	if ts == nil || ts.GetTypedConfig().UnmarshalTo(&tlsCtx) != nil {
		return out, fmt.Errorf("%s has no UpstreamTlsContext: xDS would be plaintext", XDSCluster)
	}
	common := tlsCtx.GetCommonTlsContext()
	if !slices.Contains(common.GetAlpnProtocols(), "h2") {
		return out, fmt.Errorf("%s offers ALPN %v: grpc-go servers refuse TLS without h2", XDSCluster, common.GetAlpnProtocols())
	}
	certs := common.GetTlsCertificateSdsSecretConfigs()
	if len(certs) != 1 {
		return out, fmt.Errorf("%s presents %d SDS certificates, want 1", XDSCluster, len(certs))
	}
	out.CertSecret, out.CertPath = certs[0].GetName(), certs[0].GetSdsConfig().GetPathConfigSource().GetPath()
	cvc := common.GetCombinedValidationContext()
	out.CASecret = cvc.GetValidationContextSdsSecretConfig().GetName()
	out.CAPath = cvc.GetValidationContextSdsSecretConfig().GetSdsConfig().GetPathConfigSource().GetPath()
	if out.CASecret == "" {
		return out, fmt.Errorf("%s verifies the control plane against no CA (combined_validation_context with an SDS CA)", XDSCluster)
	}
	sans := cvc.GetDefaultValidationContext().GetMatchTypedSubjectAltNames()
	if len(sans) == 0 {
		return out, fmt.Errorf("%s accepts any certificate of the CA: match the controlplane's SPIFFE ID", XDSCluster)
	}
	for _, m := range sans {
		p := m.GetMatcher().GetPrefix() + m.GetMatcher().GetExact()
		if m.GetSanType() != tlsv3.SubjectAltNameMatcher_URI || !strings.HasPrefix(p, "spiffe://") || !strings.Contains(p, "/controlplane/") {
			return out, fmt.Errorf("%s SAN matcher %v: want a URI match on spiffe://<trust-domain>/controlplane/", XDSCluster, m)
		}
	}
	return out, nil
}
