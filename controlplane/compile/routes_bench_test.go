package compile

import (
	"fmt"
	"testing"
	"time"

	"github.com/portico-io/portico/controlplane/spec"
)

// benchRoutes is the route count of BenchmarkCompileRoutes (the "config
// plane at scale" issue's 10,000).
var benchRoutes = 10_000

// scaleRoutes is the config of controlplane's BenchmarkPropagationAtScale:
// one JWT provider, routes/10 clusters of two endpoints, and routes ten to
// an exact host, each with its own path prefix; a quarter with JWT auth, a
// quarter with API-key auth, a fifth rate-limited, a fifth GET/HEAD only.
func scaleRoutes(routes int) *spec.Config {
	cfg := spec.NewConfig(1)
	clusters := max(routes/10, 1)
	cfg.JWTProviders["idp"] = &spec.JWTProvider{Name: "idp", Issuer: "https://idp.bench.test", Audiences: []string{"portico"},
		JWKSURI: "http://127.0.0.1:18950/jwks.json", AllowInsecureLoopback: true, Algorithms: []string{"RS256"}}
	for i := range clusters {
		c := &spec.Cluster{Name: fmt.Sprintf("svc-%04d", i), Endpoints: []spec.Endpoint{
			{Address: fmt.Sprintf("10.%d.%d.1", i/250, i%250), Port: 8080},
			{Address: fmt.Sprintf("10.%d.%d.2", i/250, i%250), Port: 8080},
		}, HTTP2: i%5 == 0}
		if i%7 == 0 {
			c.CircuitBreakers = &spec.CircuitBreakers{MaxConnections: 512, MaxRequests: 1024}
		}
		cfg.Clusters[c.Name] = c
	}
	for i := range routes {
		r := &spec.Route{
			Name: fmt.Sprintf("r-%05d", i),
			Match: spec.RouteMatch{Hosts: []string{fmt.Sprintf("api-%04d.bench.example.com", i/10)},
				PathPrefix: fmt.Sprintf("/v1/resource-%d", i%10)},
			Cluster: fmt.Sprintf("svc-%04d", (i/10+i%3)%clusters),
		}
		if i%5 == 4 {
			r.Match.Methods = []string{"GET", "HEAD"}
		}
		switch i % 4 {
		case 1:
			r.Auth = &spec.RouteAuth{Mode: spec.AuthJWT, Provider: "idp", RequiredScopes: []string{"read"}}
		case 2:
			r.Auth = &spec.RouteAuth{Mode: spec.AuthAPIKey}
		}
		switch i % 10 {
		case 3:
			r.RateLimits = []spec.RouteRateLimit{{Descriptors: []spec.RateLimitDescriptorEntry{{Key: "remote_address", RemoteAddress: true}}}}
		case 7:
			r.RateLimits = []spec.RouteRateLimit{{Descriptors: []spec.RateLimitDescriptorEntry{{Key: "tenant", FromHeader: "x-tenant"}}}}
		}
		if i%3 == 0 {
			r.Timeout = spec.Duration(15 * time.Second)
		}
		cfg.Routes[r.Name] = r
	}
	return cfg
}

// BenchmarkCompileRoutes compiles benchRoutes routes (scaleRoutes) from
// nothing: a control plane's first compile.
func BenchmarkCompileRoutes(b *testing.B) {
	cfg := scaleRoutes(benchRoutes)
	for b.Loop() {
		if _, err := Compile(cfg, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCompileRouteChange is what every one-route change costs the
// control plane before it can publish, at benchRoutes routes: a Compiler
// that compiled the version before rebuilds one virtual host.
func BenchmarkCompileRouteChange(b *testing.B) {
	cfg := scaleRoutes(benchRoutes)
	c := NewCompiler(Options{})
	if _, err := c.Compile(cfg); err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		cfg = cfg.Clone()
		cfg.Version++
		name := fmt.Sprintf("r-%05d", (i*997)%benchRoutes)
		r := *cfg.Routes[name]
		r.Timeout = spec.Duration(time.Duration(10+i%50) * time.Second)
		cfg.Routes[name] = &r
		i++
		if _, err := c.Compile(cfg); err != nil {
			b.Fatal(err)
		}
	}
}
