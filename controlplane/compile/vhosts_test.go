package compile

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/portico-io/portico/controlplane/spec"
)

// The incremental compile of the route configuration equals a full one
// after every kind of change, its assembled encoding equals a marshal of
// the whole message, and it rebuilds only the virtual hosts a change
// touches.
func TestCompilerReusesUnchangedVirtualHosts(t *testing.T) {
	cfg := scaleRoutes(200) // 20 hosts api-00xx.bench.example.com
	cfg.Routes["wild"] = &spec.Route{Name: "wild", Match: spec.RouteMatch{Hosts: []string{"*.other.example.com"}, PathPrefix: "/w"}, Cluster: "svc-0001"}
	cfg.Routes["other"] = &spec.Route{Name: "other", Match: spec.RouteMatch{Hosts: []string{"a.other.example.com"}, PathPrefix: "/o"}, Cluster: "svc-0001"}
	opts := Options{}
	var state *compileState
	step := func(name string, cfg *spec.Config, wantRebuilt int) {
		t.Helper()
		got, sc := incrementalStep(t, name, &state, cfg, opts)
		rc := got.GetResources(RouteType)[RouteConfigName].(*routev3.RouteConfiguration)
		h, _, err := checkAndEncode(RouteType, RouteConfigName, rc)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if h != got.GetVersionMap(RouteType)[RouteConfigName] {
			t.Fatalf("%s: the assembled encoding differs from a marshal of the route configuration", name)
		}
		if sc.vhostsRebuilt != wantRebuilt {
			t.Fatalf("%s: rebuilt %d virtual hosts, want %d", name, sc.vhostsRebuilt, wantRebuilt)
		}
	}
	change := func(f func(c *spec.Config)) *spec.Config {
		c := cfg.Clone()
		c.Version++
		f(c)
		cfg = c
		return c
	}
	route := func(c *spec.Config, name string, f func(r *spec.Route)) {
		r := *c.Routes[name]
		f(&r)
		c.Routes[name] = &r
	}

	step("first", cfg, 22) // 20 hosts, *.other and a.other
	step("nothing changed", change(func(*spec.Config) {}), 0)
	step("one route's timeout", change(func(c *spec.Config) {
		route(c, "r-00042", func(r *spec.Route) { r.Timeout = spec.Duration(3 * time.Second) })
	}), 1)
	step("a route added on a new host", change(func(c *spec.Config) {
		c.Routes["new"] = &spec.Route{Name: "new", Match: spec.RouteMatch{Hosts: []string{"new.example.com"}, PathPrefix: "/"}, Cluster: "svc-0002"}
	}), 1)
	step("a route deleted", change(func(c *spec.Config) { delete(c.Routes, "r-00007") }), 1)
	step("a wildcard route: the hosts it covers", change(func(c *spec.Config) {
		route(c, "wild", func(r *spec.Route) { r.Match.PathPrefix = "/wild" })
	}), 2)
	step("a cluster's endpoints: nothing", change(func(c *spec.Config) {
		cl := *c.Clusters["svc-0003"]
		cl.Endpoints = []spec.Endpoint{{Address: "10.9.9.9", Port: 80}}
		c.Clusters["svc-0003"] = &cl
	}), 0)
	step("a cluster's overload: everything", change(func(c *spec.Config) {
		cl := *c.Clusters["svc-0003"]
		cl.Overload = &spec.Overload{AdmissionControl: true}
		c.Clusters["svc-0003"] = &cl
	}), 23)
	step("a rate-limit rule: everything", change(func(c *spec.Config) {
		c.RateLimitRules["r"] = &spec.RateLimitRule{Name: "r", Domain: DefaultRateLimitDomain, Limit: 5,
			Window: spec.Duration(time.Minute), FailMode: spec.FailClosed,
			Descriptors: []spec.RuleDescriptor{{Key: "remote_address"}}}
	}), 23)
	step("a catch-all route: every virtual host", change(func(c *spec.Config) {
		c.Routes["any"] = &spec.Route{Name: "any", Match: spec.RouteMatch{PathPrefix: "/health"}, Cluster: "svc-0001"}
	}), 24) // and "*" itself
	for i := range 3 {
		name := fmt.Sprintf("r-%05d", 100+i*10)
		step("route "+name, change(func(c *spec.Config) {
			route(c, name, func(r *spec.Route) { r.Match.Methods = []string{"GET"} })
		}), 1)
	}
}

// The gateway view's secrets follow the listeners and clusters through
// incremental compiles, which look SDS references up by resource hash
// (sdsMemo): a listener switching certificates drops the old secret from
// the view and adds the new one, as a full compile does.
func TestCompilerGatewaySecretsFollowReferences(t *testing.T) {
	cfg, opts := loadCase(t, "testdata/in/https_mtls.yaml")
	c := NewCompiler(opts)
	check := func(name string, cfg *spec.Config, want ...string) {
		t.Helper()
		got, err := c.Compile(cfg)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		full, err := Compile(cfg, opts)
		if err != nil {
			t.Fatal(err)
		}
		have := slices.Sorted(maps.Keys(got.View(ViewGateway).GetVersionMap(SecretType)))
		if !slices.Equal(have, want) || !slices.Equal(have, slices.Sorted(maps.Keys(full.View(ViewGateway).GetVersionMap(SecretType)))) {
			t.Fatalf("%s: gateway view secrets %v, want %v", name, have, want)
		}
	}
	check("first", cfg, "client-ca", "gateway-cert")
	check("again", cfg, "client-ca", "gateway-cert")
	swapped := cfg.Clone()
	swapped.Version++
	l := *swapped.Listeners["https"]
	tls := *l.TLS
	tls.Certificates = []string{"staged-cert"}
	l.TLS = &tls
	swapped.Listeners["https"] = &l
	check("certificate swapped", swapped, "client-ca", "staged-cert")
	check("back", cfg, "client-ca", "gateway-cert")
}
