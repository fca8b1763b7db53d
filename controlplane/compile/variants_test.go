package compile

import (
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	"google.golang.org/protobuf/proto"

	"github.com/portico-io/portico/controlplane/spec"
)

// TestRetryVariants pins which methods each compiled route matches and
// which of them it may retry: idempotent methods only (unless
// allowNonIdempotent), on one route when nothing else differs, split in two
// when a per-try timeout or a grpc-go retry condition would otherwise reach
// the non-idempotent methods.
func TestRetryVariants(t *testing.T) {
	type want struct {
		name, methods, retried string // methods and retried: a :method regex or exact value, "" any, "-" none
	}
	for _, tc := range []struct {
		desc string
		r    spec.Route
		want []want
	}{
		{"default retries, any method: one route retrying the idempotent ones",
			spec.Route{}, []want{{"r", "", "^(DELETE|GET|HEAD|OPTIONS|PUT)$"}}},
		{"a route timeout gives each try a share: the copy keeps it off POST",
			spec.Route{Timeout: spec.Duration(9 * time.Second)},
			[]want{{"r/retry", "^(DELETE|GET|HEAD|OPTIONS|PUT)$", ""}, {"r", "", "-"}}},
		{"an explicit per-try timeout splits too",
			spec.Route{Retries: &spec.RetryPolicy{RetryOn: []string{"5xx"}, PerTryTimeout: spec.Duration(time.Second)}},
			[]want{{"r/retry", "^(DELETE|GET|HEAD|OPTIONS|PUT)$", ""}, {"r", "", "-"}}},
		{"grpc-go ignores retriable_request_headers: a gRPC condition splits",
			spec.Route{Retries: &spec.RetryPolicy{RetryOn: []string{"unavailable"}}},
			[]want{{"r/retry", "^(DELETE|GET|HEAD|OPTIONS|PUT)$", ""}, {"r", "", "-"}}},
		{"listed methods, mixed: one route, the idempotent subset retried",
			spec.Route{Match: spec.RouteMatch{Methods: []string{"POST", "GET"}}},
			[]want{{"r", "^(GET|POST)$", "GET"}}},
		{"listed methods, mixed, with a timeout: partitioned exactly",
			spec.Route{Match: spec.RouteMatch{Methods: []string{"POST", "GET"}}, Timeout: spec.Duration(time.Second)},
			[]want{{"r/retry", "GET", ""}, {"r", "POST", "-"}}},
		{"only idempotent methods listed: retried as matched",
			spec.Route{Match: spec.RouteMatch{Methods: []string{"GET", "HEAD"}}},
			[]want{{"r", "^(GET|HEAD)$", ""}}},
		{"only non-idempotent methods listed: never retried",
			spec.Route{Match: spec.RouteMatch{Methods: []string{"POST"}}},
			[]want{{"r", "POST", "-"}}},
		{"allowNonIdempotent: every method retried",
			spec.Route{Retries: &spec.RetryPolicy{RetryOn: []string{"5xx"}, AllowNonIdempotent: true}},
			[]want{{"r", "", ""}}},
		{"retries disabled",
			spec.Route{Retries: &spec.RetryPolicy{Disabled: true}}, []want{{"r", "", "-"}}},
		{"a canary copies each variant",
			spec.Route{Canary: &spec.HeaderCanary{Header: "x-canary", Value: "1", Cluster: "c2"}},
			[]want{{"r/canary", "", "^(DELETE|GET|HEAD|OPTIONS|PUT)$"}, {"r", "", "^(DELETE|GET|HEAD|OPTIONS|PUT)$"}}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			r := tc.r
			r.Name, r.Cluster = "r", "c"
			r.Match.PathPrefix = "/"
			c := &compiler{cfg: spec.NewConfig(1)}
			routes, err := c.routes(&r, false)
			if err != nil {
				t.Fatal(err)
			}
			var got []want
			for _, er := range routes {
				if err := er.ValidateAll(); err != nil {
					t.Fatalf("route %s: %v", er.GetName(), err)
				}
				w := want{name: er.GetName(), methods: methodsOf(er.GetMatch().GetHeaders()), retried: "-"}
				if rp := er.GetRoute().GetRetryPolicy(); rp != nil {
					w.retried = methodsOf(rp.GetRetriableRequestHeaders())
				}
				got = append(got, w)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// methodsOf returns the :method matcher among hs ("" when there is none).
func methodsOf(hs []*routev3.HeaderMatcher) string {
	for _, h := range hs {
		if h.GetName() == ":method" {
			sm := h.GetStringMatch()
			return sm.GetExact() + sm.GetSafeRegex().GetRegex()
		}
	}
	return ""
}

// TestRetryVariantsShrinkScaleRoutes measures what the single retry route
// saves on the scale benchmark's routes: fewer Envoy routes, fewer bytes.
func TestRetryVariantsShrinkScaleRoutes(t *testing.T) {
	snap, err := NewCompiler(Options{}).Compile(scaleRoutes(1000))
	if err != nil {
		t.Fatal(err)
	}
	rc := snap.GetResources(RouteType)[RouteConfigName].(*routev3.RouteConfiguration)
	n, copies := 0, 0
	for _, vh := range rc.GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			n++
			if strings.HasSuffix(r.GetName(), "/retry") {
				copies++
			}
		}
	}
	// 1,000 spec routes on 100 hosts: only those with a timeout (a third)
	// and any-method matching (four fifths) keep a copy.
	if n > 1300 || copies > 300 {
		t.Fatalf("%d Envoy routes (%d retry copies) for 1000 spec routes", n, copies)
	}
	t.Logf("%d Envoy routes, %d retry copies, %d bytes", n, copies, proto.Size(rc))
}

// TestExtAuthzResolvesPerRoute checks, as Envoy resolves per-filter config
// (the route's entry, else its virtual host's), that every compiled route
// of a route with auth runs ext_authz with its context extensions, and
// every route without auth has it disabled: over the golden cases, random
// configs and the scale config.
func TestExtAuthzResolvesPerRoute(t *testing.T) {
	type tc struct {
		cfg  *spec.Config
		opts Options
	}
	var cases []tc
	files, err := filepath.Glob("testdata/in/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no cases: %v", err)
	}
	for _, f := range files {
		cfg, opts := loadCase(t, f)
		cases = append(cases, tc{cfg, opts})
	}
	for seed := range uint64(50) {
		if cfg := randomConfig(rand.New(rand.NewPCG(seed, 42))); cfg.Validate() == nil {
			cases = append(cases, tc{cfg, Options{}})
		}
	}
	cases = append(cases, tc{scaleRoutes(300), Options{}})
	for i, c := range cases {
		cfg := c.cfg
		snap, err := Compile(cfg, c.opts)
		if err != nil {
			t.Fatalf("config %d: %v", i, err)
		}
		rc := snap.GetResources(RouteType)[RouteConfigName].(*routev3.RouteConfiguration)
		for _, vh := range rc.GetVirtualHosts() {
			for _, er := range vh.GetRoutes() {
				name, _, _ := strings.Cut(er.GetName(), "/")
				r := cfg.Routes[name]
				a, ok := er.GetTypedPerFilterConfig()[FilterExtAuthz]
				if !ok {
					a, ok = vh.GetTypedPerFilterConfig()[FilterExtAuthz]
				}
				if !ok {
					t.Fatalf("config %d route %s: no ext_authz config on the route or its virtual host", i, er.GetName())
				}
				fc := &routev3.FilterConfig{}
				if err := a.UnmarshalTo(fc); err != nil {
					t.Fatal(err)
				}
				hasAuth := r.Auth != nil && r.Auth.Mode != "" && r.Auth.Mode != spec.AuthNone
				if fc.GetDisabled() == hasAuth {
					t.Fatalf("config %d route %s: auth %v, ext_authz disabled %v", i, er.GetName(), r.Auth, fc.GetDisabled())
				}
				if !hasAuth {
					continue
				}
				per := &extauthzv3.ExtAuthzPerRoute{}
				if err := fc.GetConfig().UnmarshalTo(per); err != nil {
					t.Fatal(err)
				}
				if ext := per.GetCheckSettings().GetContextExtensions(); ext[CtxMode] != r.Auth.Mode || ext[CtxRoute] != r.Name {
					t.Fatalf("config %d route %s: context extensions %v", i, er.GetName(), ext)
				}
			}
		}
	}
}
