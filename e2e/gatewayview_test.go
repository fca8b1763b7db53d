package e2e_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	mutationv3 "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	headermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	localratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/local_ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/portico-io/portico/controlplane/compile"
)

// gatewayView is what an Envoy gateway runs with at one config version, as
// fetched over ADS: the ingress route configuration, the listener's
// pre-auth limit and ratelimit filters (one per stage), and where the
// extauthz and ratelimit clusters point.
//
// It is not a proxy: it only reads the compiled resources and derives from
// them the gRPC requests Envoy's ext_authz and ratelimit filters would make
// for a given HTTP request. Anything in the resources this reading does not
// understand fails the test, so a change in what the compiler emits is
// noticed here instead of being silently misread.
type gatewayView struct {
	routes *routev3.RouteConfiguration
	// domain is the ratelimit filters' domain (every stage's is the same).
	domain string
	// rateLimit is the ratelimit filter of each stage: a route's rate
	// limits are read only by the filter of the stage they carry.
	rateLimit map[uint32]rateLimitFilter
	// preAuth is the per-client-address local rate limit that runs before
	// ext_authz; nil when the listener has none.
	preAuth *preAuthLimit
	// strip is the listener's header_mutation: request headers removed
	// before any other filter runs.
	strip []*mutationv3.HeaderMutation
	// xRateLimitHeaders: the ratelimit filter adds its own x-ratelimit-*
	// headers (DRAFT_VERSION_03) computed from the descriptor statuses.
	xRateLimitHeaders bool
	extauthzAddr      string
	ratelimitAddr     string
}

// rateLimitFilter is one instance of Envoy's ratelimit filter.
type rateLimitFilter struct {
	name    string
	timeout time.Duration
	// failureModeDeny: when ratelimitsvc cannot be reached or does not
	// answer within timeout, Envoy answers statusOnError (500 unless the
	// filter sets status_on_error) instead of letting the request through.
	failureModeDeny bool
	statusOnError   int
}

// preAuthLimit is a token bucket per client address (the trusted remote
// address), checked before ext_authz.
type preAuthLimit struct {
	requestsPerSecond, burst uint32
}

func fetchGatewayView(t *testing.T, xdsAddr, nodeID string, v int64) *gatewayView {
	t.Helper()
	res := gatewayFetch(t, xdsAddr, nodeID, v, map[string][]string{
		resource.ListenerType: nil,
		resource.ClusterType:  nil,
		resource.RouteType:    {compile.RouteConfigName},
	})
	g := &gatewayView{}
	rc, ok := res[resource.RouteType][compile.RouteConfigName].(*routev3.RouteConfiguration)
	if !ok {
		t.Fatalf("no route configuration %s at version %d", compile.RouteConfigName, v)
	}
	g.routes = rc

	l, ok := res[resource.ListenerType][compile.ListenerName].(*listenerv3.Listener)
	if !ok || len(l.GetFilterChains()) == 0 || len(l.GetFilterChains()[0].GetFilters()) == 0 {
		t.Fatalf("no listener %s with a filter chain at version %d", compile.ListenerName, v)
	}
	hcm := &hcmv3.HttpConnectionManager{}
	if err := l.GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
		t.Fatalf("%s: %v", compile.ListenerName, err)
	}
	if got := hcm.GetRds().GetRouteConfigName(); got != compile.RouteConfigName {
		t.Fatalf("%s routes with %q, want %s", compile.ListenerName, got, compile.RouteConfigName)
	}
	// Envoy runs HTTP filters in order; this view assumes the pre-auth
	// limit (when present) runs first and header_mutation before the
	// others, that ext_authz runs before the ratelimit filters (so the
	// identity headers it adds are what the rate-limit actions read), and
	// that none is disabled by default.
	var order []string
	g.rateLimit = map[uint32]rateLimitFilter{}
	for _, f := range hcm.GetHttpFilters() {
		switch f.GetName() {
		case compile.FilterPreAuthRateLimit:
			if len(order) > 0 || f.GetDisabled() {
				t.Fatalf("pre-auth limit disabled (%v) or after %v", f.GetDisabled(), order)
			}
			g.preAuth = readPreAuth(t, f.GetTypedConfig())
		case compile.FilterHeaderMutation:
			hm := &headermutationv3.HeaderMutation{}
			if err := f.GetTypedConfig().UnmarshalTo(hm); err != nil {
				t.Fatal(err)
			}
			if slices.ContainsFunc(order, func(n string) bool { return n != compile.FilterPreAuthRateLimit }) || f.GetDisabled() {
				t.Fatalf("header_mutation disabled (%v) or after %v", f.GetDisabled(), order)
			}
			g.strip = hm.GetMutations().GetRequestMutations()
		case compile.FilterExtAuthz:
			ea := &extauthzv3.ExtAuthz{}
			if err := f.GetTypedConfig().UnmarshalTo(ea); err != nil {
				t.Fatal(err)
			}
			if c := ea.GetGrpcService().GetEnvoyGrpc().GetClusterName(); c != compile.ExtAuthzCluster || f.GetDisabled() || ea.GetFailureModeAllow() {
				t.Fatalf("ext_authz filter: cluster %q, disabled %v, failure_mode_allow %v", c, f.GetDisabled(), ea.GetFailureModeAllow())
			}
		case compile.FilterRateLimit, compile.FilterRateLimitFailClosed:
			rl := &ratelimitv3.RateLimit{}
			if err := f.GetTypedConfig().UnmarshalTo(rl); err != nil {
				t.Fatal(err)
			}
			if c := rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName(); c != compile.RateLimitCluster || f.GetDisabled() {
				t.Fatalf("ratelimit filter %s: cluster %q, disabled %v", f.GetName(), c, f.GetDisabled())
			}
			if _, dup := g.rateLimit[rl.GetStage()]; dup || (g.domain != "" && rl.GetDomain() != g.domain) {
				t.Fatalf("ratelimit filter %s: stage %d taken twice, or domain %q beside %q", f.GetName(), rl.GetStage(), rl.GetDomain(), g.domain)
			}
			if rl.GetRequestType() != "" || rl.GetFailureModeDenyPercent() != nil || rl.GetFilterEnabled() != nil || rl.GetFilterEnforced() != nil ||
				len(rl.GetRateLimits()) > 0 || rl.GetRateLimitedStatus() != nil || rl.GetRateLimitedAsResourceExhausted() {
				t.Fatalf("ratelimit filter %s uses what this view does not read: %v", f.GetName(), rl)
			}
			x := rateLimitFilter{name: f.GetName(), timeout: 20 * time.Millisecond, failureModeDeny: rl.GetFailureModeDeny(), statusOnError: http.StatusInternalServerError}
			if rl.GetTimeout() != nil {
				x.timeout = rl.GetTimeout().AsDuration()
			}
			if rl.GetStatusOnError() != nil {
				x.statusOnError = int(rl.GetStatusOnError().GetCode())
			}
			g.rateLimit[rl.GetStage()] = x
			g.domain = rl.GetDomain()
			g.xRateLimitHeaders = g.xRateLimitHeaders || rl.GetEnableXRatelimitHeaders() == ratelimitv3.RateLimit_DRAFT_VERSION_03
		default:
			continue
		}
		order = append(order, f.GetName())
	}
	if len(order) > 0 && order[0] == compile.FilterPreAuthRateLimit {
		order = order[1:]
	}
	if len(order) < 3 || !slices.Equal(order[:3], []string{compile.FilterHeaderMutation, compile.FilterExtAuthz, compile.FilterRateLimit}) ||
		(len(order) > 3 && !slices.Equal(order[3:], []string{compile.FilterRateLimitFailClosed})) {
		t.Fatalf("HTTP filters %v, want [pre-auth limit,] header_mutation, ext_authz, ratelimit[, ratelimit fail-closed]", order)
	}

	for name, addr := range map[string]*string{compile.ExtAuthzCluster: &g.extauthzAddr, compile.RateLimitCluster: &g.ratelimitAddr} {
		c, ok := res[resource.ClusterType][name].(*clusterv3.Cluster)
		if !ok {
			t.Fatalf("no cluster %s at version %d", name, v)
		}
		eps := c.GetLoadAssignment().GetEndpoints()
		if len(eps) != 1 || len(eps[0].GetLbEndpoints()) != 1 {
			t.Fatalf("cluster %s: want one inline endpoint, got %v", name, c.GetLoadAssignment())
		}
		sa := eps[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
		*addr = net.JoinHostPort(sa.GetAddress(), fmt.Sprint(sa.GetPortValue()))
	}
	return g
}

// httpRequest is a request as it reaches Envoy's HTTP filters: header names
// lowercased, pseudo-headers included.
type httpRequest struct {
	headers map[string]string
	remote  string // the trusted client address
}

func newRequest(method, rawURL string, hdr ...string) *httpRequest {
	u, err := url.Parse(rawURL)
	if err != nil {
		panic(err)
	}
	h := map[string]string{":method": method, ":authority": u.Host, ":path": u.RequestURI(), ":scheme": u.Scheme,
		"user-agent": "e2e/1", "x-forwarded-proto": u.Scheme, "x-request-id": "e2e-1"}
	for i := 0; i+1 < len(hdr); i += 2 {
		h[strings.ToLower(hdr[i])] = hdr[i+1]
	}
	return &httpRequest{headers: h, remote: "127.0.0.1"}
}

// enter applies the listener's header_mutation to r, as Envoy does to a
// request before ext_authz and ratelimit see it.
func (g *gatewayView) enter(t *testing.T, r *httpRequest) {
	t.Helper()
	for _, m := range g.strip {
		switch a := m.GetAction().(type) {
		case *mutationv3.HeaderMutation_Remove:
			delete(r.headers, strings.ToLower(a.Remove))
		case *mutationv3.HeaderMutation_RemoveOnMatch_:
			for k := range r.headers {
				if !strings.HasPrefix(k, ":") && stringMatches(t, a.RemoveOnMatch.GetKeyMatcher(), k) {
					delete(r.headers, k)
				}
			}
		default:
			t.Fatalf("header mutation %T not understood", a)
		}
	}
}

// route returns the route Envoy would select for r, or nil (a 404).
func (g *gatewayView) route(t *testing.T, r *httpRequest) *routev3.Route {
	t.Helper()
	rt, _ := g.match(t, r)
	return rt
}

// match is route, with the virtual host it was found in.
func (g *gatewayView) match(t *testing.T, r *httpRequest) (*routev3.Route, *routev3.VirtualHost) {
	t.Helper()
	host := strings.ToLower(r.headers[":authority"])
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	vh := selectVirtualHost(g.routes.GetVirtualHosts(), host)
	if vh == nil {
		return nil, nil
	}
	for _, rt := range vh.GetRoutes() {
		if routeMatches(t, rt.GetMatch(), r.headers) {
			return rt, vh
		}
	}
	return nil, nil
}

// selectVirtualHost picks by Envoy's precedence: exact domain, then the
// longest "*.suffix" wildcard, then "*".
func selectVirtualHost(vhs []*routev3.VirtualHost, host string) *routev3.VirtualHost {
	var best *routev3.VirtualHost
	bestRank, bestLen := 3, -1
	for _, vh := range vhs {
		for _, d := range vh.GetDomains() {
			rank, n := 3, 0
			switch {
			case d == host:
				rank = 0
			case strings.HasPrefix(d, "*.") && strings.HasSuffix(host, d[1:]):
				rank, n = 1, len(d)
			case d == "*":
				rank = 2
			}
			if rank < bestRank || (rank == bestRank && n > bestLen) {
				best, bestRank, bestLen = vh, rank, n
			}
		}
	}
	if bestRank == 3 {
		return nil
	}
	return best
}

func routeMatches(t *testing.T, m *routev3.RouteMatch, h map[string]string) bool {
	t.Helper()
	if len(m.GetQueryParameters()) > 0 || m.GetRuntimeFraction() != nil || m.GetGrpc() != nil || m.GetTlsContext() != nil ||
		len(m.GetDynamicMetadata()) > 0 || (m.GetCaseSensitive() != nil && !m.GetCaseSensitive().GetValue()) {
		t.Fatalf("route match uses what this view does not read: %v", m)
	}
	path, _, _ := strings.Cut(h[":path"], "?")
	switch ps := m.GetPathSpecifier().(type) {
	case *routev3.RouteMatch_Prefix:
		if !strings.HasPrefix(path, ps.Prefix) {
			return false
		}
	case *routev3.RouteMatch_Path:
		if path != ps.Path {
			return false
		}
	case *routev3.RouteMatch_SafeRegex:
		if !fullMatch(t, ps.SafeRegex.GetRegex(), path) {
			return false
		}
	default:
		t.Fatalf("route path matcher %T not understood", ps)
	}
	for _, hm := range m.GetHeaders() {
		if !headerMatches(t, hm, h) {
			return false
		}
	}
	return true
}

// headerMatches follows Envoy's HeaderUtility::matchHeaders, including how
// an absent header meets invert_match.
func headerMatches(t *testing.T, hm *routev3.HeaderMatcher, h map[string]string) bool {
	t.Helper()
	v, present := h[hm.GetName()]
	if !present {
		if hm.GetInvertMatch() {
			return hm.GetPresentMatch()
		}
		_, isPresent := hm.GetHeaderMatchSpecifier().(*routev3.HeaderMatcher_PresentMatch)
		return isPresent && !hm.GetPresentMatch()
	}
	var ok bool
	switch s := hm.GetHeaderMatchSpecifier().(type) {
	case *routev3.HeaderMatcher_PresentMatch:
		ok = s.PresentMatch
	case *routev3.HeaderMatcher_StringMatch:
		ok = stringMatches(t, s.StringMatch, v)
	default:
		t.Fatalf("header matcher %T not understood", s)
	}
	return ok != hm.GetInvertMatch()
}

func stringMatches(t *testing.T, sm *matcherv3.StringMatcher, v string) bool {
	t.Helper()
	if sm.GetIgnoreCase() {
		t.Fatalf("ignore_case string matchers are not read by this view: %v", sm)
	}
	switch p := sm.GetMatchPattern().(type) {
	case *matcherv3.StringMatcher_Exact:
		return v == p.Exact
	case *matcherv3.StringMatcher_Prefix:
		return strings.HasPrefix(v, p.Prefix)
	case *matcherv3.StringMatcher_Suffix:
		return strings.HasSuffix(v, p.Suffix)
	case *matcherv3.StringMatcher_Contains:
		return strings.Contains(v, p.Contains)
	case *matcherv3.StringMatcher_SafeRegex:
		return fullMatch(t, p.SafeRegex.GetRegex(), v)
	}
	t.Fatalf("string matcher %T not understood", sm.GetMatchPattern())
	return false
}

// fullMatch is RE2 matching of the whole value, as Envoy's safe_regex does.
func fullMatch(t *testing.T, re, v string) bool {
	t.Helper()
	rx, err := regexp.Compile(`^(?:` + re + `)$`)
	if err != nil {
		t.Fatalf("regex %q: %v", re, err)
	}
	return rx.MatchString(v)
}

// checkRequest is the CheckRequest Envoy's ext_authz filter sends for r on
// route rt of virtual host vh, or nil when ext_authz is disabled there.
// Envoy takes the most specific per-filter config: the route's, else the
// virtual host's.
func checkRequest(t *testing.T, rt *routev3.Route, vh *routev3.VirtualHost, r *httpRequest) *authv3.CheckRequest {
	t.Helper()
	a, ok := rt.GetTypedPerFilterConfig()[compile.FilterExtAuthz]
	if !ok {
		a, ok = vh.GetTypedPerFilterConfig()[compile.FilterExtAuthz]
	}
	if !ok {
		t.Fatalf("route %s has no ext_authz per-filter config, nor has its virtual host (the filter would run without context extensions)", rt.GetName())
	}
	per := &extauthzv3.ExtAuthzPerRoute{}
	if disabled := unwrapPerFilter(t, a, per); disabled || per.GetDisabled() {
		return nil
	}
	ext := per.GetCheckSettings().GetContextExtensions()
	if len(ext) == 0 {
		t.Fatalf("route %s: ext_authz enabled without context extensions", rt.GetName())
	}
	hdr := make(map[string]string, len(r.headers))
	for k, v := range r.headers {
		hdr[k] = v
	}
	path := r.headers[":path"]
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
			SocketAddress: &corev3.SocketAddress{Address: r.remote, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 40000}}}}},
		Destination: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
			SocketAddress: &corev3.SocketAddress{Address: "127.0.0.1", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: compile.DefaultListenerPort}}}}},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Id: r.headers["x-request-id"], Method: r.headers[":method"], Headers: hdr, Path: path,
			Host: r.headers[":authority"], Scheme: r.headers[":scheme"], Protocol: "HTTP/1.1",
		}},
		ContextExtensions: ext,
	}}
}

// unwrapPerFilter decodes a typed_per_filter_config entry, which may be
// wrapped in envoy.config.route.v3.FilterConfig. It reports true, decoding
// nothing, when that wrapper disables the filter for the route (Envoy then
// skips the filter and ignores any config).
func unwrapPerFilter(t *testing.T, a *anypb.Any, into proto.Message) (disabled bool) {
	t.Helper()
	fc := &routev3.FilterConfig{}
	if a.MessageIs(fc) {
		if err := a.UnmarshalTo(fc); err != nil {
			t.Fatal(err)
		}
		if fc.GetDisabled() {
			return true
		}
		a = fc.GetConfig()
	}
	if err := a.UnmarshalTo(into); err != nil {
		t.Fatalf("per-filter config %s: %v", a.GetTypeUrl(), err)
	}
	return false
}

// applyAllowed changes r the way Envoy does on an OK check: the response's
// headers are set (or appended) and its headers_to_remove removed. What
// the upstream then receives is r.headers.
func applyAllowed(t *testing.T, r *httpRequest, ok *authv3.OkHttpResponse) {
	t.Helper()
	for _, h := range ok.GetHeaders() {
		k := strings.ToLower(h.GetHeader().GetKey())
		switch h.GetAppendAction() {
		case corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD:
			r.headers[k] = h.GetHeader().GetValue()
		case corev3.HeaderValueOption_ADD_IF_ABSENT:
			if _, ok := r.headers[k]; !ok {
				r.headers[k] = h.GetHeader().GetValue()
			}
		default:
			t.Fatalf("ext_authz header %s with append action %v: this view does not merge values", k, h.GetAppendAction())
		}
	}
	for _, k := range ok.GetHeadersToRemove() {
		delete(r.headers, strings.ToLower(k))
	}
}

// rateLimitFilterOf is the ratelimit filter that reads route rt's rate
// limits: the one whose stage they carry. A route whose rate limits span
// stages, or carry a stage no filter has (Envoy would silently never send
// them), fails the test.
func (g *gatewayView) rateLimitFilterOf(t *testing.T, rt *routev3.Route) rateLimitFilter {
	t.Helper()
	rls := rt.GetRoute().GetRateLimits()
	if len(rls) == 0 {
		t.Fatalf("route %s has no rate limits", rt.GetName())
	}
	stage := rls[0].GetStage().GetValue()
	for _, rl := range rls {
		if rl.GetStage().GetValue() != stage {
			t.Fatalf("route %s: rate limits on stages %d and %d (two ShouldRateLimit calls)", rt.GetName(), stage, rl.GetStage().GetValue())
		}
	}
	f, ok := g.rateLimit[stage]
	if !ok {
		t.Fatalf("route %s: rate limits on stage %d, which no ratelimit filter reads", rt.GetName(), stage)
	}
	return f
}

// rateLimitRequest is the RateLimitRequest Envoy's ratelimit filter sends
// for r on route rt (after ext_authz), or nil when no descriptor applies.
func (g *gatewayView) rateLimitRequest(t *testing.T, rt *routev3.Route, r *httpRequest) *rlsv3.RateLimitRequest {
	t.Helper()
	action := rt.GetRoute()
	if action == nil {
		t.Fatalf("route %s is not a route action", rt.GetName())
	}
	if action.GetIncludeVhRateLimits() != nil && action.GetIncludeVhRateLimits().GetValue() {
		t.Fatalf("route %s includes virtual-host rate limits; this view does not read them", rt.GetName())
	}
	if len(action.GetRateLimits()) > 0 {
		g.rateLimitFilterOf(t, rt)
	}
	req := &rlsv3.RateLimitRequest{Domain: g.domain}
	for _, rl := range action.GetRateLimits() {
		if rl.GetDisableKey() != "" || rl.GetLimit() != nil || rl.GetHitsAddend() != nil || rl.GetApplyOnStreamDone() {
			t.Fatalf("route %s: rate limit %v uses what this view does not read", rt.GetName(), rl)
		}
		if d := descriptor(t, rt, rl.GetActions(), r); d != nil {
			req.Descriptors = append(req.Descriptors, d)
		}
	}
	if len(req.Descriptors) == 0 {
		return nil
	}
	return req
}

// descriptor evaluates one rate limit's actions in order, as Envoy's
// router_ratelimit does: an action that cannot produce its entry drops the
// whole descriptor (nil), except a missing header with skip_if_absent,
// which only drops its own entry.
func descriptor(t *testing.T, rt *routev3.Route, actions []*routev3.RateLimit_Action, r *httpRequest) *ratelimitcommonv3.RateLimitDescriptor {
	t.Helper()
	d := &ratelimitcommonv3.RateLimitDescriptor{}
	add := func(k, v string) {
		d.Entries = append(d.Entries, &ratelimitcommonv3.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	for _, a := range actions {
		switch s := a.GetActionSpecifier().(type) {
		case *routev3.RateLimit_Action_RequestHeaders_:
			v, ok := r.headers[strings.ToLower(s.RequestHeaders.GetHeaderName())]
			switch {
			case ok && v != "":
				add(s.RequestHeaders.GetDescriptorKey(), v)
			case s.RequestHeaders.GetSkipIfAbsent():
			default:
				return nil
			}
		case *routev3.RateLimit_Action_GenericKey_:
			k := s.GenericKey.GetDescriptorKey()
			if k == "" {
				k = "generic_key"
			}
			add(k, s.GenericKey.GetDescriptorValue())
		case *routev3.RateLimit_Action_RemoteAddress_:
			add("remote_address", r.remote)
		case *routev3.RateLimit_Action_DestinationCluster_:
			c := rt.GetRoute().GetCluster()
			if c == "" {
				t.Fatalf("route %s: destination_cluster action on a weighted route is not read by this view", rt.GetName())
			}
			add("destination_cluster", c)
		default:
			t.Fatalf("route %s: rate-limit action %T not understood", rt.GetName(), s)
		}
	}
	// Envoy sends a descriptor whose every entry was skipped as an empty
	// descriptor (router_ratelimit.cc pushes it whenever no action failed).
	return d
}

// clientRateLimitHeaders lists the names (lowercased, in order, repeats
// kept) of the headers Envoy's ratelimit filter adds to the response the
// client gets: those ratelimitsvc asked for, then — with DRAFT_VERSION_03
// and a status carrying a current limit — x-ratelimit-limit, -remaining
// and -reset, which Envoy computes itself and appends (HeaderMap copyFrom
// adds, it does not replace).
func (g *gatewayView) clientRateLimitHeaders(resp *rlsv3.RateLimitResponse) []string {
	var out []string
	for _, h := range resp.GetResponseHeadersToAdd() {
		out = append(out, strings.ToLower(h.GetKey()))
	}
	if !g.xRateLimitHeaders {
		return out
	}
	for _, st := range resp.GetStatuses() {
		if st.GetCurrentLimit() != nil {
			return append(out, "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset")
		}
	}
	return out
}

// rateLimitOutcome is what the gateway's ratelimit filter does with one
// request.
type rateLimitOutcome struct {
	filter rateLimitFilter
	req    *rlsv3.RateLimitRequest // nil: no descriptor, no call
	resp   *rlsv3.RateLimitResponse
	err    error // the call failed or was late
	// status is what Envoy answers the client instead of forwarding the
	// request; 0 when the request goes on.
	status int
}

// limit makes the ShouldRateLimit call Envoy would make for r on route rt
// through rls, with the timeout of the route's filter (or, when within is
// set, that long: a test that wants answers, not timing, on a loaded
// machine), and applies the filter's answer: OVER_LIMIT is a 429; a failed
// or late call is statusOnError under failure_mode_deny and lets the
// request through otherwise.
func (g *gatewayView) limit(t *testing.T, rls rlsv3.RateLimitServiceClient, rt *routev3.Route, r *httpRequest, within time.Duration) rateLimitOutcome {
	t.Helper()
	var o rateLimitOutcome
	if o.req = g.rateLimitRequest(t, rt, r); o.req == nil {
		return o
	}
	o.filter = g.rateLimitFilterOf(t, rt)
	if within == 0 {
		within = o.filter.timeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	o.resp, o.err = rls.ShouldRateLimit(ctx, o.req)
	switch {
	case o.err != nil && o.filter.failureModeDeny:
		o.status = o.filter.statusOnError
	case o.err != nil:
	case o.resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT:
		o.status = http.StatusTooManyRequests
	case o.resp.GetOverallCode() != rlsv3.RateLimitResponse_OK:
		// Envoy's gRPC client reads UNKNOWN as an error.
		t.Fatalf("route %s: ShouldRateLimit answered %v", rt.GetName(), o.resp.GetOverallCode())
	}
	return o
}

// readPreAuth reads the pre-auth local_ratelimit filter, failing the test
// on anything but the shape the compiler emits: enabled and enforced for
// every request, descriptors from the filter's own remote_address action,
// one wildcard remote_address descriptor (a bucket per address).
func readPreAuth(t *testing.T, a *anypb.Any) *preAuthLimit {
	t.Helper()
	l := &localratelimitv3.LocalRateLimit{}
	if err := a.UnmarshalTo(l); err != nil {
		t.Fatal(err)
	}
	full := func(p *corev3.RuntimeFractionalPercent) bool {
		return p.GetDefaultValue().GetNumerator() == 100 && p.GetDefaultValue().GetDenominator() == typev3.FractionalPercent_HUNDRED
	}
	rls, ds := l.GetRateLimits(), l.GetDescriptors()
	if !full(l.GetFilterEnabled()) || !full(l.GetFilterEnforced()) || l.GetLocalRateLimitPerDownstreamConnection() || l.GetLocalClusterRateLimit() != nil ||
		l.GetAlwaysConsumeDefaultTokenBucket() == nil || l.GetAlwaysConsumeDefaultTokenBucket().GetValue() ||
		len(rls) != 1 || len(rls[0].GetActions()) != 1 || rls[0].GetActions()[0].GetRemoteAddress() == nil ||
		len(ds) != 1 || len(ds[0].GetEntries()) != 1 || ds[0].GetEntries()[0].GetKey() != "remote_address" || ds[0].GetEntries()[0].GetValue() != "" ||
		ds[0].GetShadowMode() || ds[0].GetTokenBucket().GetFillInterval().AsDuration() != time.Second {
		t.Fatalf("pre-auth limit not understood by this view: %v", l)
	}
	tb := ds[0].GetTokenBucket()
	return &preAuthLimit{requestsPerSecond: tb.GetTokensPerFill().GetValue(), burst: tb.GetMaxTokens()}
}
