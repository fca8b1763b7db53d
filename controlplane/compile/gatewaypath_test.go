package compile

import (
	"slices"
	"testing"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	localratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/local_ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/portico-io/portico/controlplane/spec"
)

// gatewayPathConfig: a login route whose descriptor reaches a CLOSED rule,
// an echo route reaching only an OPEN one, a route without rate limits,
// and an extra listener.
func gatewayPathConfig() *spec.Config {
	cfg := spec.NewConfig(7)
	cfg.Clusters["api"] = &spec.Cluster{Name: "api", Endpoints: []spec.Endpoint{{Address: "10.0.0.1", Port: 8080}}}
	route := func(name, prefix string, rls ...spec.RouteRateLimit) {
		cfg.Routes[name] = &spec.Route{Name: name, Match: spec.RouteMatch{PathPrefix: prefix}, Cluster: "api",
			Auth: &spec.RouteAuth{Mode: spec.AuthNone}, RateLimits: rls}
	}
	route("login", "/login", spec.RouteRateLimit{Descriptors: []spec.RateLimitDescriptorEntry{{Key: "route", Value: "login"}, {Key: "remote_address", RemoteAddress: true}}})
	route("echo", "/echo", spec.RouteRateLimit{Descriptors: []spec.RateLimitDescriptorEntry{{Key: "consumer", FromHeader: "x-portico-consumer"}}})
	route("plain", "/plain")
	cfg.Routes["echo"].Timeout = spec.Duration(10 * time.Second) // split in two by its per-try timeout
	rule := func(name, failMode string, ds ...spec.RuleDescriptor) {
		cfg.RateLimitRules[name] = &spec.RateLimitRule{Name: name, Domain: DefaultRateLimitDomain, Descriptors: ds,
			Limit: 5, Window: spec.Duration(time.Minute), FailMode: failMode}
	}
	rule("login-per-ip", spec.FailClosed, spec.RuleDescriptor{Key: "route", Value: "login"}, spec.RuleDescriptor{Key: "remote_address"})
	rule("per-consumer", spec.FailOpen, spec.RuleDescriptor{Key: "consumer"})
	cfg.Listeners["edge"] = &spec.Listener{Name: "edge", Port: 8443, PreAuthLimit: &spec.PreAuthLimit{RequestsPerSecond: 5, Burst: 10}}
	cfg.Listeners["internal"] = &spec.Listener{Name: "internal", Port: 8081, PreAuthLimit: &spec.PreAuthLimit{Disabled: true}}
	return cfg
}

func compileOK(t *testing.T, cfg *spec.Config, opts Options) *Snapshot {
	t.Helper()
	snap, err := Compile(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func listenerHCM(t *testing.T, snap *Snapshot, name string) *hcmv3.HttpConnectionManager {
	t.Helper()
	l, ok := snap.GetResources(ListenerType)[name].(*listenerv3.Listener)
	if !ok {
		t.Fatalf("no listener %s", name)
	}
	h := &hcmv3.HttpConnectionManager{}
	if err := l.GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(h); err != nil {
		t.Fatal(err)
	}
	return h
}

func filterNames(h *hcmv3.HttpConnectionManager) []string {
	var out []string
	for _, f := range h.GetHttpFilters() {
		out = append(out, f.GetName())
	}
	return out
}

// TestFailClosedRoutesUseDenyingStage: routes whose descriptors can reach
// an ENFORCE rule with failMode CLOSED send them to a second ratelimit
// filter (stage 1, failure_mode_deny, 503 on error); other routes keep
// stage 0, whose filter lets requests through when ratelimitsvc is down.
func TestFailClosedRoutesUseDenyingStage(t *testing.T) {
	snap := compileOK(t, gatewayPathConfig(), Options{})
	h := listenerHCM(t, snap, ListenerName)
	var open, closed *ratelimitv3.RateLimit
	for _, f := range h.GetHttpFilters() {
		rl := &ratelimitv3.RateLimit{}
		if !f.GetTypedConfig().MessageIs(rl) {
			continue
		}
		if err := f.GetTypedConfig().UnmarshalTo(rl); err != nil {
			t.Fatal(err)
		}
		if f.GetDisabled() {
			t.Fatalf("ratelimit filter %s disabled", f.GetName())
		}
		switch f.GetName() {
		case FilterRateLimit:
			open = rl
		case FilterRateLimitFailClosed:
			closed = rl
		default:
			t.Fatalf("unexpected ratelimit filter %s", f.GetName())
		}
	}
	if open == nil || closed == nil {
		t.Fatalf("filters %v: want %s and %s", filterNames(h), FilterRateLimit, FilterRateLimitFailClosed)
	}
	if open.GetStage() != RateLimitStageOpen || open.GetFailureModeDeny() {
		t.Fatalf("open filter: stage %d failure_mode_deny %v", open.GetStage(), open.GetFailureModeDeny())
	}
	if closed.GetStage() != RateLimitStageClosed || !closed.GetFailureModeDeny() ||
		closed.GetStatusOnError().GetCode() != typev3.StatusCode_ServiceUnavailable || closed.GetDomain() != open.GetDomain() ||
		closed.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName() != RateLimitCluster {
		t.Fatalf("fail-closed filter: %v", closed)
	}
	if RateLimitStageOpen == RateLimitStageClosed {
		t.Fatal("both filters on one stage")
	}

	rc := snap.GetResources(RouteType)[RouteConfigName].(*routev3.RouteConfiguration)
	stages := map[string][]uint32{}
	for _, vh := range rc.GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			for _, rl := range r.GetRoute().GetRateLimits() {
				stages[r.GetName()] = append(stages[r.GetName()], rl.GetStage().GetValue())
			}
		}
	}
	// Every variant of a route (echo has a timeout, so an idempotent-retry
	// copy) agrees.
	for name, want := range map[string][]uint32{
		"login": {RateLimitStageClosed},
		"echo":  {RateLimitStageOpen}, "echo/retry": {RateLimitStageOpen},
		"plain": nil,
	} {
		if got := stages[name]; !slices.Equal(got, want) {
			t.Errorf("route %s: stages %v, want %v", name, got, want)
		}
	}

	// Without any CLOSED rule the second filter stays out of the chain.
	cfg := gatewayPathConfig()
	delete(cfg.RateLimitRules, "login-per-ip")
	h = listenerHCM(t, compileOK(t, cfg, Options{}), ListenerName)
	if slices.Contains(filterNames(h), FilterRateLimitFailClosed) {
		t.Fatalf("no CLOSED rule, yet filters %v", filterNames(h))
	}
}

// TestRouteReachesClosedRule: which route descriptors can meet which
// rules, following ratelimitsvc's matching (entries in order, a limit only
// at the node the last entry reaches, header entries skipped when the
// header is absent). It over-approximates where the value is only known at
// request time: failing closed on a route that would have met an OPEN rule
// costs availability during an outage, failing open on a CLOSED one costs
// the protection.
func TestRouteReachesClosedRule(t *testing.T) {
	hdr := func(k string) spec.RateLimitDescriptorEntry {
		return spec.RateLimitDescriptorEntry{Key: k, FromHeader: "x-" + k}
	}
	val := func(k, v string) spec.RateLimitDescriptorEntry {
		return spec.RateLimitDescriptorEntry{Key: k, Value: v}
	}
	ip := spec.RateLimitDescriptorEntry{Key: "remote_address", RemoteAddress: true}
	rd := func(k, v string) spec.RuleDescriptor { return spec.RuleDescriptor{Key: k, Value: v} }
	cases := []struct {
		name  string
		route []spec.RateLimitDescriptorEntry
		rule  []spec.RuleDescriptor
		want  bool
	}{
		{"same key, any value", []spec.RateLimitDescriptorEntry{hdr("consumer")}, []spec.RuleDescriptor{rd("consumer", "")}, true},
		{"header value unknown", []spec.RateLimitDescriptorEntry{hdr("consumer")}, []spec.RuleDescriptor{rd("consumer", "alice")}, true},
		{"constant equal", []spec.RateLimitDescriptorEntry{val("route", "login")}, []spec.RuleDescriptor{rd("route", "login")}, true},
		{"constant differs", []spec.RateLimitDescriptorEntry{val("route", "echo")}, []spec.RuleDescriptor{rd("route", "login")}, false},
		{"constant under a prefix wildcard", []spec.RateLimitDescriptorEntry{val("route", "login-otp")}, []spec.RuleDescriptor{rd("route", "login*")}, true},
		{"constant outside a prefix wildcard", []spec.RateLimitDescriptorEntry{val("route", "echo")}, []spec.RuleDescriptor{rd("route", "login*")}, false},
		{"address under a CIDR", []spec.RateLimitDescriptorEntry{ip}, []spec.RuleDescriptor{rd("remote_address", "10.0.0.0/8")}, true},
		{"other key", []spec.RateLimitDescriptorEntry{hdr("consumer")}, []spec.RuleDescriptor{rd("tenant", "")}, false},
		{"rule deeper than the route", []spec.RateLimitDescriptorEntry{val("route", "login")}, []spec.RuleDescriptor{rd("route", "login"), rd("remote_address", "")}, false},
		{"route deeper than the rule", []spec.RateLimitDescriptorEntry{val("route", "login"), ip}, []spec.RuleDescriptor{rd("route", "login")}, false},
		{"order matters", []spec.RateLimitDescriptorEntry{ip, val("route", "login")}, []spec.RuleDescriptor{rd("route", "login"), rd("remote_address", "")}, false},
		{"absent header skipped", []spec.RateLimitDescriptorEntry{hdr("consumer"), val("route", "login")}, []spec.RuleDescriptor{rd("route", "login")}, true},
		{"constant never skipped", []spec.RateLimitDescriptorEntry{val("tier", "free"), hdr("consumer")}, []spec.RuleDescriptor{rd("consumer", "")}, false},
		{"address never skipped", []spec.RateLimitDescriptorEntry{ip, hdr("consumer")}, []spec.RuleDescriptor{rd("consumer", "")}, false},
		{"everything present", []spec.RateLimitDescriptorEntry{val("tier", "free"), hdr("consumer")}, []spec.RuleDescriptor{rd("tier", "free"), rd("consumer", "")}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := reaches(tc.route, tc.rule); got != tc.want {
				t.Fatalf("reaches = %v, want %v", got, tc.want)
			}
		})
	}

	// Which rules count: ENFORCE (the default) with failMode CLOSED, in
	// the gateway's domain.
	base := gatewayPathConfig()
	for _, tc := range []struct {
		name   string
		change func(r *spec.RateLimitRule)
		closed bool
	}{
		{"closed", func(*spec.RateLimitRule) {}, true},
		{"enforce spelled out", func(r *spec.RateLimitRule) { r.Mode = spec.ModeEnforce }, true},
		{"tenant-specific still counts", func(r *spec.RateLimitRule) { r.Tenant = "acme" }, true},
		{"shadow", func(r *spec.RateLimitRule) { r.Mode = spec.ModeShadow }, false},
		{"open", func(r *spec.RateLimitRule) { r.FailMode = spec.FailOpen }, false},
		{"default fail mode", func(r *spec.RateLimitRule) { r.FailMode = "" }, false},
		{"other domain", func(r *spec.RateLimitRule) { r.Domain = "internal" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base.Clone()
			r := *cfg.RateLimitRules["login-per-ip"]
			tc.change(&r)
			cfg.RateLimitRules["login-per-ip"] = &r
			c := &compiler{cfg: cfg, opts: Options{}.withDefaults()}
			if got := c.failClosed(cfg.Routes["login"]); got != tc.closed {
				t.Fatalf("failClosed(login) = %v, want %v", got, tc.closed)
			}
			if c.failClosed(cfg.Routes["echo"]) || c.failClosed(cfg.Routes["plain"]) {
				t.Fatal("echo or plain fail closed")
			}
		})
	}
}

// TestPreAuthLimitRunsBeforeExtAuthz: a per-client-IP local rate limit is
// the first HTTP filter, ahead of ext_authz (so a flood of bad credentials
// never reaches extauthz or the IdP) and of the network-bound ratelimit
// filters; its buckets are keyed on the trusted client address. The
// built-in listener takes the control plane's setting (a default when
// unset), a listener its own, and a listener can turn it off.
func TestPreAuthLimitRunsBeforeExtAuthz(t *testing.T) {
	snap := compileOK(t, gatewayPathConfig(), Options{})
	for _, tc := range []struct {
		listener   string
		rps, burst uint32 // 0: no pre-auth filter
	}{
		{ListenerName, DefaultPreAuthRequestsPerSecond, DefaultPreAuthRequestsPerSecond},
		{"edge", 5, 10},
		{"internal", 0, 0},
	} {
		t.Run(tc.listener, func(t *testing.T) {
			h := listenerHCM(t, snap, tc.listener)
			names := filterNames(h)
			ea := slices.Index(names, FilterExtAuthz)
			pre := slices.Index(names, FilterPreAuthRateLimit)
			if tc.rps == 0 {
				if pre >= 0 {
					t.Fatalf("filters %v: pre-auth limit on a listener that turned it off", names)
				}
				return
			}
			if pre != 0 || ea < 0 {
				t.Fatalf("filters %v: want %s first, before %s", names, FilterPreAuthRateLimit, FilterExtAuthz)
			}
			f := h.GetHttpFilters()[pre]
			lrl := &localratelimitv3.LocalRateLimit{}
			if err := f.GetTypedConfig().UnmarshalTo(lrl); err != nil {
				t.Fatal(err)
			}
			checkPreAuth(t, f.GetDisabled(), lrl, tc.rps, tc.burst)
		})
	}

	// The control plane's own setting for ingress_http, and turning it off.
	h := listenerHCM(t, compileOK(t, gatewayPathConfig(), Options{PreAuthLimit: spec.PreAuthLimit{RequestsPerSecond: 7}}), ListenerName)
	lrl := &localratelimitv3.LocalRateLimit{}
	if err := h.GetHttpFilters()[0].GetTypedConfig().UnmarshalTo(lrl); err != nil {
		t.Fatal(err)
	}
	checkPreAuth(t, false, lrl, 7, 7)
	h = listenerHCM(t, compileOK(t, gatewayPathConfig(), Options{PreAuthLimit: spec.PreAuthLimit{Disabled: true}}), ListenerName)
	if slices.Contains(filterNames(h), FilterPreAuthRateLimit) {
		t.Fatalf("disabled, yet filters %v", filterNames(h))
	}
	// A listener without its own setting inherits the control plane's.
	cfg := gatewayPathConfig()
	cfg.Listeners["edge"] = &spec.Listener{Name: "edge", Port: 8443}
	h = listenerHCM(t, compileOK(t, cfg, Options{PreAuthLimit: spec.PreAuthLimit{RequestsPerSecond: 9, Burst: 30}}), "edge")
	if err := h.GetHttpFilters()[0].GetTypedConfig().UnmarshalTo(lrl); err != nil {
		t.Fatal(err)
	}
	checkPreAuth(t, false, lrl, 9, 30)

	if _, err := Compile(gatewayPathConfig(), Options{PreAuthLimit: spec.PreAuthLimit{RequestsPerSecond: 10, Burst: 5}}); err == nil {
		t.Fatal("a burst below the rate compiled")
	}
}

func checkPreAuth(t *testing.T, disabled bool, l *localratelimitv3.LocalRateLimit, rps, burst uint32) {
	t.Helper()
	full := func(p interface {
		GetDefaultValue() *typev3.FractionalPercent
	}) bool {
		d := p.GetDefaultValue()
		return d.GetNumerator() == 100 && d.GetDenominator() == typev3.FractionalPercent_HUNDRED
	}
	if disabled || !full(l.GetFilterEnabled()) || !full(l.GetFilterEnforced()) {
		t.Fatalf("pre-auth limit not enabled and enforced for every request: disabled %v, %v", disabled, l)
	}
	// Descriptors come from the filter's own remote_address action, so
	// routes' rate_limits (read by the ratelimit filters) play no part.
	rls := l.GetRateLimits()
	if len(rls) != 1 || len(rls[0].GetActions()) != 1 || rls[0].GetActions()[0].GetRemoteAddress() == nil {
		t.Fatalf("rate_limits %v: want one remote_address action", rls)
	}
	ds := l.GetDescriptors()
	if len(ds) != 1 || len(ds[0].GetEntries()) != 1 || ds[0].GetEntries()[0].GetKey() != "remote_address" || ds[0].GetEntries()[0].GetValue() != "" {
		t.Fatalf("descriptors %v: want one wildcard remote_address entry (a bucket per client address)", ds)
	}
	tb := ds[0].GetTokenBucket()
	if tb.GetMaxTokens() != burst || tb.GetTokensPerFill().GetValue() != rps || tb.GetFillInterval().AsDuration() != time.Second {
		t.Fatalf("per-address bucket %v, want %d per second, burst %d", tb, rps, burst)
	}
	if l.GetAlwaysConsumeDefaultTokenBucket() == nil || l.GetAlwaysConsumeDefaultTokenBucket().GetValue() {
		t.Fatal("the default (whole-gateway) bucket must not be consumed by requests that matched an address bucket")
	}
	if l.GetMaxDynamicDescriptors().GetValue() < 1000 {
		t.Fatalf("max_dynamic_descriptors %d: too few addresses tracked", l.GetMaxDynamicDescriptors().GetValue())
	}
}
