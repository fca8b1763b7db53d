package compile

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	bufferv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/buffer/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/portico-io/portico/controlplane/spec"
	"github.com/portico-io/portico/internal/xdscontract"
)

// Context extension keys handed to extauthz with every check request.
const (
	CtxRoute    = xdscontract.CtxRoute
	CtxMode     = xdscontract.CtxMode
	CtxProvider = xdscontract.CtxProvider
	CtxScopes   = xdscontract.CtxScopes
)

// idempotentMethods are retried by default (RFC 9110 §9.2.2, minus TRACE
// which nobody routes).
var idempotentMethods = []string{"DELETE", "GET", "HEAD", "OPTIONS", "PUT"}

const defaultRetryOn = "5xx"

// host tiers: within equal path specificity a route naming the exact host
// beats one naming a covering wildcard, which beats a route for any host.
const (
	tierExact = iota
	tierSuffix
	tierAny
)

type vhRoute struct {
	r    *spec.Route
	tier int
}

// virtualHost is one domain's virtual host: its routes in match order.
type virtualHost struct {
	domain string
	routes []vhRoute
}

// virtualHosts returns the virtual hosts in domain order. Envoy rejects a
// domain listed in two virtual hosts, so there is one virtual host per
// distinct domain (not per host set); it holds the routes naming that
// domain plus the routes whose hosts cover it (a "*.suffix" pattern or no
// hosts at all), because a request only ever sees the one virtual host
// Envoy selects.
//
// Routes are indexed by the hosts they name, so each domain looks only at
// the routes that can cover it: at 10,000 routes on 1,000 hosts, comparing
// every route with every domain was most of a compile.
func (c *compiler) virtualHosts() []virtualHost {
	names := spec.SortedKeys(c.cfg.Routes)
	hosts := make([][]string, len(names))
	// byHost lists, per host string a route names (a domain, "*" or
	// "*.suffix"), the indexes in names of the routes naming it, ascending.
	byHost := map[string][]int{}
	for i, name := range names {
		hosts[i] = hostsOf(c.cfg.Routes[name])
		for _, h := range hosts[i] {
			if l := byHost[h]; len(l) == 0 || l[len(l)-1] != i {
				byHost[h] = append(l, i)
			}
		}
	}
	var out []virtualHost
	var candidates []int
	for _, d := range spec.SortedKeys(byHost) {
		// The routes that can cover d: naming it, naming "*", or naming
		// "*.s" for a suffix s of d after one of its dots (see covers).
		candidates = append(append(candidates[:0], byHost[d]...), byHost["*"]...)
		if base := strings.TrimPrefix(d, "*."); d != "*" {
			for i := range len(base) {
				if base[i] == '.' {
					candidates = append(candidates, byHost["*."+base[i+1:]]...)
				}
			}
		}
		slices.Sort(candidates)
		candidates = slices.Compact(candidates)
		// In name order before sorting, as the order of equal routes.
		var members []vhRoute
		for _, i := range candidates {
			if t, ok := covers(hosts[i], d); ok {
				members = append(members, vhRoute{c.cfg.Routes[names[i]], t})
			}
		}
		sortRoutes(members)
		out = append(out, virtualHost{d, members})
	}
	return out
}

// hostsOf returns r's lowercased hosts, ["*"] when it has none.
func hostsOf(r *spec.Route) []string {
	if len(r.Match.Hosts) == 0 {
		return []string{"*"}
	}
	out := make([]string, 0, len(r.Match.Hosts))
	for _, h := range r.Match.Hosts {
		out = append(out, strings.ToLower(h))
	}
	return out
}

// covers reports whether a route with hosts serves requests routed to the
// virtual host of domain d, and with which tier.
func covers(hosts []string, d string) (int, bool) {
	best, ok := 0, false
	take := func(t int) {
		if !ok || t < best {
			best, ok = t, true
		}
	}
	base := strings.TrimPrefix(d, "*.")
	for _, h := range hosts {
		switch {
		case h == d:
			take(tierExact)
		case h == "*":
			take(tierAny)
		case strings.HasPrefix(h, "*.") && d != "*" && strings.HasSuffix(base, "."+h[2:]):
			take(tierSuffix)
		}
	}
	if ok && best == tierExact && d == "*" {
		best = tierAny
	}
	return best, ok
}

// sortRoutes orders routes so the most specific match comes first (Envoy
// takes the first match): exact paths, then regexes, then prefixes longest
// first; then more header/method constraints first; then host tier; then
// name. spec.Config.Validate guarantees no two routes tie on everything but
// the name, so the order is total.
func sortRoutes(rs []vhRoute) {
	sort.SliceStable(rs, func(i, j int) bool {
		a, b := rs[i], rs[j]
		if ka, kb := pathRank(a.r), pathRank(b.r); ka != kb {
			return ka < kb
		}
		if la, lb := len(a.r.Match.PathPrefix), len(b.r.Match.PathPrefix); la != lb {
			return la > lb
		}
		if ca, cb := constraints(a.r), constraints(b.r); ca != cb {
			return ca > cb
		}
		if a.tier != b.tier {
			return a.tier < b.tier
		}
		return a.r.Name < b.r.Name
	})
}

func pathRank(r *spec.Route) int {
	switch {
	case r.Match.Path != "":
		return 0
	case r.Match.PathRegex != "":
		return 1
	}
	return 2
}

func constraints(r *spec.Route) int {
	n := len(r.Match.Headers)
	if len(r.Match.Methods) > 0 {
		n++
	}
	return n
}

// variant is one Envoy route compiled from a spec route.
type variant struct {
	suffix  string
	methods []string // nil: any method
	canary  bool
	retry   bool
	// retryMethods, when set, limits the retry policy to these methods
	// (retriable_request_headers on :method); nil: every method it matches.
	retryMethods []string
}

// grpcRetryOn are the retry conditions grpc-go's xDS client acts on; it
// ignores retriable_request_headers, so a route retrying on one of them
// keeps the method split (gRPC calls are POSTs and must not be retried).
var grpcRetryOn = []string{"cancelled", "deadline-exceeded", "internal", "resource-exhausted", "unavailable"}

// variants splits a spec route into the Envoy routes it needs, in match
// order. A header canary is a copy with the extra header matcher placed
// before the main route. Retries: Envoy would retry any method, so unless
// AllowNonIdempotent is set only the idempotent methods may be retried.
// One route does that with retriable_request_headers when nothing else
// tells the two apart; otherwise (a per-try timeout, which Envoy applies
// to the first try too, or a retry condition grpc-go honours) the retry
// policy goes on a copy restricted to the idempotent methods, placed
// before a copy without retries that catches the remaining methods. When
// the route lists methods, they are partitioned exactly instead (no copy
// matches a method twice).
//
// The single route matters at scale: the copies were nearly half of a
// large route configuration, and every gateway receives all of it on any
// change.
func variants(r *spec.Route) []variant {
	type split struct {
		suffix  string
		methods []string
		retry   bool
		only    []string
	}
	var splits []split
	p := effectiveRetries(r)
	idem, other := idempotentMethods, []string(nil)
	if len(r.Match.Methods) > 0 {
		idem = nil
		for _, m := range r.Match.Methods {
			if slices.Contains(idempotentMethods, m) {
				idem = append(idem, m)
			} else {
				other = append(other, m)
			}
		}
	}
	switch {
	case p == nil || p.AllowNonIdempotent:
		splits = []split{{"", r.Match.Methods, p != nil, nil}}
	case len(r.Match.Methods) > 0 && len(other) == 0:
		splits = []split{{"", idem, true, nil}}
	case len(r.Match.Methods) > 0 && len(idem) == 0:
		splits = []split{{"", other, false, nil}}
	case oneRetryRoute(r, p):
		splits = []split{{"", r.Match.Methods, true, idem}}
	case len(r.Match.Methods) == 0:
		splits = []split{{"/retry", idempotentMethods, true, nil}, {"", nil, false, nil}}
	default:
		splits = []split{{"/retry", idem, true, nil}, {"", other, false, nil}}
	}
	var out []variant
	if r.Canary != nil {
		for _, s := range splits {
			out = append(out, variant{"/canary" + s.suffix, s.methods, true, s.retry, s.only})
		}
	}
	for _, s := range splits {
		out = append(out, variant{s.suffix, s.methods, false, s.retry, s.only})
	}
	return out
}

// oneRetryRoute reports whether r's retries restricted to the idempotent
// methods fit on one Envoy route: no per-try timeout (explicit, or the
// share of the route timeout retryPolicy gives each try) and no retry
// condition grpc-go acts on.
func oneRetryRoute(r *spec.Route, p *spec.RetryPolicy) bool {
	if p.PerTryTimeout > 0 || r.Timeout > 0 {
		return false
	}
	for _, on := range p.RetryOn {
		if slices.Contains(grpcRetryOn, on) {
			return false
		}
	}
	return true
}

// routes compiles r; buffer is c.needsBuffer(), computed once per compile.
func (c *compiler) routes(r *spec.Route, buffer bool) ([]*routev3.Route, error) {
	perFilter, err := c.perFilterConfig(r, buffer)
	if err != nil {
		return nil, err
	}
	stage := c.rateLimitStage(r)
	var out []*routev3.Route
	for _, v := range variants(r) {
		m, err := routeMatch(r, v)
		if err != nil {
			return nil, err
		}
		out = append(out, &routev3.Route{
			Name:                   r.Name + v.suffix,
			Match:                  m,
			Action:                 &routev3.Route_Route{Route: routeAction(r, v, stage)},
			RequestHeadersToAdd:    headersToAdd(r),
			RequestHeadersToRemove: headersToRemove(r),
			TypedPerFilterConfig:   perFilter,
		})
	}
	return out, nil
}

func routeMatch(r *spec.Route, v variant) (*routev3.RouteMatch, error) {
	m := &routev3.RouteMatch{}
	switch {
	case r.Match.Path != "":
		m.PathSpecifier = &routev3.RouteMatch_Path{Path: r.Match.Path}
	case r.Match.PathRegex != "":
		m.PathSpecifier = &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: r.Match.PathRegex}}
	case r.Match.PathPrefix != "":
		m.PathSpecifier = &routev3.RouteMatch_Prefix{Prefix: r.Match.PathPrefix}
	default:
		return nil, fmt.Errorf("%w: routes/%s: no path matcher", ErrInvalidConfig, r.Name)
	}
	if mm := methodMatcher(v.methods); mm != nil {
		m.Headers = append(m.Headers, mm)
	}
	for _, h := range r.Match.Headers {
		hm := &routev3.HeaderMatcher{Name: h.Name, InvertMatch: h.Invert}
		switch {
		case h.Present:
			hm.HeaderMatchSpecifier = &routev3.HeaderMatcher_PresentMatch{PresentMatch: true}
		case h.Exact != "":
			hm.HeaderMatchSpecifier = stringMatch(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: h.Exact}})
		case h.Prefix != "":
			hm.HeaderMatchSpecifier = stringMatch(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: h.Prefix}})
		case h.Regex != "":
			hm.HeaderMatchSpecifier = stringMatch(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{
				SafeRegex: &matcherv3.RegexMatcher{Regex: h.Regex},
			}})
		default:
			return nil, fmt.Errorf("%w: routes/%s: header %q without matcher", ErrInvalidConfig, r.Name, h.Name)
		}
		m.Headers = append(m.Headers, hm)
	}
	if v.canary {
		m.Headers = append(m.Headers, &routev3.HeaderMatcher{
			Name: r.Canary.Header,
			HeaderMatchSpecifier: stringMatch(&matcherv3.StringMatcher{
				MatchPattern: &matcherv3.StringMatcher_Exact{Exact: r.Canary.Value},
			}),
		})
	}
	return m, nil
}

func stringMatch(sm *matcherv3.StringMatcher) *routev3.HeaderMatcher_StringMatch {
	return &routev3.HeaderMatcher_StringMatch{StringMatch: sm}
}

// methodMatcher matches :method against methods (sorted, deduplicated).
func methodMatcher(methods []string) *routev3.HeaderMatcher {
	if len(methods) == 0 {
		return nil
	}
	ms := slices.Clone(methods)
	slices.Sort(ms)
	ms = slices.Compact(ms)
	var sm *matcherv3.StringMatcher
	if len(ms) == 1 {
		sm = &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: ms[0]}}
	} else {
		sm = &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{
			SafeRegex: &matcherv3.RegexMatcher{Regex: "^(" + strings.Join(ms, "|") + ")$"},
		}}
	}
	return &routev3.HeaderMatcher{Name: ":method", HeaderMatchSpecifier: stringMatch(sm)}
}

// routeAction compiles the action of variant v of r; its rate limits go to
// rateLimitStage (failclosed.go).
func routeAction(r *spec.Route, v variant, rateLimitStage uint32) *routev3.RouteAction {
	a := &routev3.RouteAction{}
	switch {
	case v.canary:
		a.ClusterSpecifier = &routev3.RouteAction_Cluster{Cluster: r.Canary.Cluster}
	case len(r.WeightedClusters) > 0:
		wcs := slices.Clone(r.WeightedClusters)
		slices.SortFunc(wcs, func(x, y spec.WeightedCluster) int { return strings.Compare(x.Cluster, y.Cluster) })
		w := &routev3.WeightedCluster{}
		for _, wc := range wcs {
			w.Clusters = append(w.Clusters, &routev3.WeightedCluster_ClusterWeight{
				Name:   wc.Cluster,
				Weight: wrapperspb.UInt32(wc.Weight),
			})
		}
		a.ClusterSpecifier = &routev3.RouteAction_WeightedClusters{WeightedClusters: w}
	default:
		a.ClusterSpecifier = &routev3.RouteAction_Cluster{Cluster: r.Cluster}
	}
	switch {
	case r.Timeout > 0:
		a.Timeout = durationpb.New(r.Timeout.D())
	case r.WebSocket:
		// The route timeout covers the whole response, which for an
		// upgraded stream never ends: Envoy's 15s default would cut every
		// websocket. 0 disables it; idle timeouts still apply.
		a.Timeout = durationpb.New(0)
	}
	if v.retry {
		a.RetryPolicy = retryPolicy(effectiveRetries(r), r.Timeout.D())
		if mm := methodMatcher(v.retryMethods); mm != nil {
			a.RetryPolicy.RetriableRequestHeaders = []*routev3.HeaderMatcher{mm}
		}
	}
	if r.WebSocket {
		a.UpgradeConfigs = []*routev3.RouteAction_UpgradeConfig{{
			UpgradeType: "websocket",
			Enabled:     wrapperspb.Bool(true),
		}}
	}
	for _, rl := range r.RateLimits {
		out := &routev3.RateLimit{}
		if rateLimitStage != RateLimitStageOpen {
			out.Stage = wrapperspb.UInt32(rateLimitStage)
		}
		for _, d := range rl.Descriptors {
			out.Actions = append(out.Actions, rateLimitAction(d))
		}
		a.RateLimits = append(a.RateLimits, out)
	}
	return a
}

func rateLimitAction(d spec.RateLimitDescriptorEntry) *routev3.RateLimit_Action {
	switch {
	case d.FromHeader != "":
		return &routev3.RateLimit_Action{ActionSpecifier: &routev3.RateLimit_Action_RequestHeaders_{
			RequestHeaders: &routev3.RateLimit_Action_RequestHeaders{
				HeaderName:    d.FromHeader,
				DescriptorKey: d.Key,
				SkipIfAbsent:  true,
			},
		}}
	case d.RemoteAddress:
		return &routev3.RateLimit_Action{ActionSpecifier: &routev3.RateLimit_Action_RemoteAddress_{
			RemoteAddress: &routev3.RateLimit_Action_RemoteAddress{},
		}}
	default:
		return &routev3.RateLimit_Action{ActionSpecifier: &routev3.RateLimit_Action_GenericKey_{
			GenericKey: &routev3.RateLimit_Action_GenericKey{DescriptorKey: d.Key, DescriptorValue: d.Value},
		}}
	}
}

// effectiveRetries is the route's retry policy: its own, the default one
// (DefaultRetryOn, DefaultRetries) when it has none, or nil when disabled.
func effectiveRetries(r *spec.Route) *spec.RetryPolicy {
	switch {
	case r.Retries == nil:
		return &spec.RetryPolicy{RetryOn: strings.Split(DefaultRetryOn, ","), NumRetries: DefaultRetries}
	case r.Retries.Disabled:
		return nil
	}
	return r.Retries
}

// retryPolicy sets num_retries only when positive: grpc-go NACKs 0. Without
// a per-try timeout, a route with a timeout gives each try an equal share
// of it, so a hung first try cannot use up the time its retries need.
// Envoy caps the retries themselves with the cluster's retry budget.
func retryPolicy(p *spec.RetryPolicy, routeTimeout time.Duration) *routev3.RetryPolicy {
	on := slices.Clone(p.RetryOn)
	slices.Sort(on)
	on = slices.Compact(on)
	retryOn := strings.Join(on, ",")
	if retryOn == "" {
		retryOn = defaultRetryOn
	}
	rp := &routev3.RetryPolicy{RetryOn: retryOn}
	if p.NumRetries > 0 {
		rp.NumRetries = wrapperspb.UInt32(p.NumRetries)
	}
	switch {
	case p.PerTryTimeout > 0:
		rp.PerTryTimeout = durationpb.New(p.PerTryTimeout.D())
	case routeTimeout > 0:
		tries := int64(max(p.NumRetries, 1)) + 1 // Envoy's default is one retry
		rp.PerTryTimeout = durationpb.New(routeTimeout / time.Duration(tries))
	}
	return rp
}

func headersToAdd(r *spec.Route) []*corev3.HeaderValueOption {
	if r.RequestHeaders == nil {
		return nil
	}
	var out []*corev3.HeaderValueOption
	for _, h := range r.RequestHeaders.Set {
		out = append(out, &corev3.HeaderValueOption{
			Header:       &corev3.HeaderValue{Key: h.Name, Value: h.Value},
			AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
		})
	}
	return out
}

func headersToRemove(r *spec.Route) []string {
	if r.RequestHeaders == nil {
		return nil
	}
	return slices.Clone(r.RequestHeaders.Remove)
}

// perFilterConfig wraps every per-route config in FilterConfig{is_optional}
// so grpc-go, which shares this route configuration, ignores configs for
// filters it does not implement instead of NACKing. buffer is
// c.needsBuffer() (a walk over every route: once per compile, not per route).
func (c *compiler) perFilterConfig(r *spec.Route, buffer bool) (map[string]*anypb.Any, error) {
	out := map[string]*anypb.Any{}
	add := func(name string, m proto.Message) error {
		inner, err := anyOf(m)
		if err != nil {
			return err
		}
		a, err := anyOf(&routev3.FilterConfig{Config: inner, IsOptional: true})
		if err != nil {
			return err
		}
		out[name] = a
		return nil
	}
	// A route without auth carries no ext_authz config: its virtual host
	// disables the filter (vhostPerFilterConfig).
	if pr := extAuthzPerRoute(r); pr != nil {
		if err := add(FilterExtAuthz, pr); err != nil {
			return nil, err
		}
	}
	// The overload filters are disabled in the chain; an empty FilterConfig
	// turns one on for this route.
	ov := c.overload(r)
	for _, f := range []struct {
		name string
		on   bool
	}{{FilterAdmissionControl, ov.AdmissionControl}, {FilterAdaptiveConcurrency, ov.AdaptiveConcurrency}} {
		if !f.on {
			continue
		}
		a, err := anyOf(&routev3.FilterConfig{IsOptional: true})
		if err != nil {
			return nil, err
		}
		out[f.name] = a
	}
	if buffer {
		var b *bufferv3.BufferPerRoute
		switch {
		case r.MaxRequestBytes > 0:
			b = &bufferv3.BufferPerRoute{Override: &bufferv3.BufferPerRoute_Buffer{
				Buffer: &bufferv3.Buffer{MaxRequestBytes: wrapperspb.UInt32(r.MaxRequestBytes)},
			}}
		case r.WebSocket && c.opts.DefaultMaxRequestBytes > 0:
			// An upgraded stream never ends; buffering it would hang it.
			b = &bufferv3.BufferPerRoute{Override: &bufferv3.BufferPerRoute_Disabled{Disabled: true}}
		}
		if b != nil {
			if err := add(FilterBuffer, b); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// vhostPerFilterConfig is the typed_per_filter_config of a virtual host
// holding routes. ext_authz runs on every route that does not turn it off
// (fail closed): a route with auth carries its own config (its context
// extensions), and when some route has none, the virtual host turns the
// filter off for the routes without a config of their own, with
// FilterConfig's disabled (Envoy 1.27+; the most specific entry wins, and
// a route's own entry is enabled). One entry per virtual host instead of
// one on every route without auth: at scale, a sixth of the route
// configuration's bytes.
func vhostPerFilterConfig(routes []vhRoute) (map[string]*anypb.Any, error) {
	for _, m := range routes {
		if extAuthzPerRoute(m.r) == nil {
			a, err := anyOf(&routev3.FilterConfig{Disabled: true, IsOptional: true})
			if err != nil {
				return nil, err
			}
			return map[string]*anypb.Any{FilterExtAuthz: a}, nil
		}
	}
	return nil, nil
}

// extAuthzPerRoute tells extauthz what to check through context
// extensions; nil for a route without auth (the filter is disabled there).
func extAuthzPerRoute(r *spec.Route) *extauthzv3.ExtAuthzPerRoute {
	if r.Auth == nil || r.Auth.Mode == spec.AuthNone || r.Auth.Mode == "" {
		return nil
	}
	ext := map[string]string{CtxRoute: r.Name, CtxMode: r.Auth.Mode}
	if r.Auth.Provider != "" {
		ext[CtxProvider] = r.Auth.Provider
	}
	if len(r.Auth.RequiredScopes) > 0 {
		s := slices.Clone(r.Auth.RequiredScopes)
		slices.Sort(s)
		ext[CtxScopes] = strings.Join(slices.Compact(s), ",")
	}
	return &extauthzv3.ExtAuthzPerRoute{Override: &extauthzv3.ExtAuthzPerRoute_CheckSettings{
		CheckSettings: &extauthzv3.CheckSettings{ContextExtensions: ext},
	}}
}

// overload is the route's overload protection: its own setting, else what
// any of its clusters asks for.
func (c *compiler) overload(r *spec.Route) spec.Overload {
	if r.Overload != nil {
		return *r.Overload
	}
	var ov spec.Overload
	for _, name := range routeClusters(r) {
		if cl := c.cfg.Clusters[name]; cl != nil && cl.Overload != nil {
			ov.AdaptiveConcurrency = ov.AdaptiveConcurrency || cl.Overload.AdaptiveConcurrency
			ov.AdmissionControl = ov.AdmissionControl || cl.Overload.AdmissionControl
		}
	}
	return ov
}

// routeClusters lists every cluster a route can send to.
func routeClusters(r *spec.Route) []string {
	var out []string
	if r.Cluster != "" {
		out = append(out, r.Cluster)
	}
	for _, w := range r.WeightedClusters {
		out = append(out, w.Cluster)
	}
	if r.Canary != nil {
		out = append(out, r.Canary.Cluster)
	}
	return out
}

// usesOverload reports which overload filters any route turns on; a filter
// no route uses stays out of the chain.
func (c *compiler) usesOverload() (ov spec.Overload) {
	for _, r := range c.cfg.Routes {
		o := c.overload(r)
		ov.AdaptiveConcurrency = ov.AdaptiveConcurrency || o.AdaptiveConcurrency
		ov.AdmissionControl = ov.AdmissionControl || o.AdmissionControl
	}
	return ov
}
