package compile

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	cache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"

	"github.com/portico-io/portico/controlplane/spec"
)

// reinsert copies every map of cfg inserting keys in reverse order; Go map
// iteration is random anyway, this makes the intent explicit.
func reinsert(cfg *spec.Config) *spec.Config {
	out := spec.NewConfig(cfg.Version)
	rev := func(keys []string) []string { slices.Reverse(keys); return keys }
	for _, k := range rev(spec.SortedKeys(cfg.Clusters)) {
		out.Clusters[k] = cfg.Clusters[k]
	}
	for _, k := range rev(spec.SortedKeys(cfg.Routes)) {
		out.Routes[k] = cfg.Routes[k]
	}
	for _, k := range rev(spec.SortedKeys(cfg.JWTProviders)) {
		out.JWTProviders[k] = cfg.JWTProviders[k]
	}
	for _, k := range rev(cfg.Consumers.Names()) {
		out.Consumers.Set(k, cfg.Consumers.Lookup(k))
	}
	for _, k := range rev(cfg.APIKeys.Names()) {
		out.APIKeys.Set(k, cfg.APIKeys.Lookup(k))
	}
	for _, k := range rev(cfg.Revocations.Names()) {
		out.Revocations.Set(k, cfg.Revocations.Lookup(k))
	}
	for _, k := range rev(spec.SortedKeys(cfg.RateLimitRules)) {
		out.RateLimitRules[k] = cfg.RateLimitRules[k]
	}
	for _, k := range rev(spec.SortedKeys(cfg.Secrets)) {
		out.Secrets[k] = cfg.Secrets[k]
	}
	for _, k := range rev(spec.SortedKeys(cfg.Listeners)) {
		out.Listeners[k] = cfg.Listeners[k]
	}
	for _, k := range rev(spec.SortedKeys(cfg.RedisProxies)) {
		out.RedisProxies[k] = cfg.RedisProxies[k]
	}
	return out
}

// snapshotBytes is every resource's deterministic encoding, in type and
// name order.
func snapshotBytes(t testing.TB, s *Snapshot) []byte {
	t.Helper()
	var buf bytes.Buffer
	for _, typeURL := range TypeURLs {
		for _, r := range s.Resources(typeURL) {
			b, err := cache.MarshalResource(r)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&buf, "%s/%s/%d:", typeURL, cache.GetResourceName(r), len(b))
			buf.Write(b)
		}
	}
	return buf.Bytes()
}

func TestDeterministic(t *testing.T) {
	for _, path := range goldenCases(t) {
		t.Run(caseName(path), func(t *testing.T) {
			cfg, opts := loadCase(t, path)
			var first []byte
			for i := range 5 {
				in := cfg
				if i%2 == 1 {
					in = reinsert(cfg)
				}
				snap, err := Compile(in, opts)
				if err != nil {
					t.Fatal(err)
				}
				b := snapshotBytes(t, snap)
				if first == nil {
					first = b
					continue
				}
				if !bytes.Equal(first, b) {
					t.Fatalf("compile %d produced different bytes", i)
				}
			}
		})
	}
}

func TestSnapshotVersionAndEqual(t *testing.T) {
	cfg, opts := loadCase(t, "testdata/in/minimal_echo.yaml")
	a, err := Compile(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Compile(reinsert(cfg), opts)
	if err != nil {
		t.Fatal(err)
	}
	if !Equal(a, b) {
		t.Fatal("equal configs compiled to unequal snapshots")
	}
	next := cfg.Clone()
	next.Version = 2
	c, err := Compile(next, opts)
	if err != nil {
		t.Fatal(err)
	}
	if Equal(a, c) || c.Version() != "2" || c.GetVersion(ListenerType) != "2" {
		t.Fatalf("version 2 snapshot: version %q", c.Version())
	}
	// Same content at another version: same per-resource hashes (delta xDS
	// sends nothing), different version (SotW sends everything once).
	for _, typeURL := range TypeURLs {
		if fmt.Sprint(a.GetVersionMap(typeURL)) != fmt.Sprint(c.GetVersionMap(typeURL)) {
			t.Fatalf("%s: resource hashes changed with the version only", typeURL)
		}
	}
}

func TestCompileRejects(t *testing.T) {
	cfg, _ := loadCase(t, "testdata/in/minimal_echo.yaml")
	if _, err := Compile(nil, Options{}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("nil config: %v", err)
	}
	bad := cfg.Clone()
	bad.Routes["dangling"] = &spec.Route{Name: "dangling", Match: spec.RouteMatch{PathPrefix: "/x"}, Cluster: "missing"}
	if _, err := Compile(bad, Options{}); !errors.Is(err, ErrInvalidConfig) || !errors.Is(err, spec.ErrInvalid) {
		t.Fatalf("dangling cluster: %v", err)
	}
	for _, o := range []Options{
		{ExtAuthzAddress: "no-port"},
		{RateLimitAddress: "host:0"},
		{ListenerPort: 70000},
		{ListenerAddress: "localhost"},
		{MaxRequestHeadersKB: 9000},
	} {
		if _, err := Compile(cfg, o); !errors.Is(err, ErrOptions) {
			t.Fatalf("%+v: %v", o, err)
		}
	}
}

// TestRandomConfigs compiles many random valid configs: every one must
// compile, validate and be deterministic.
func TestRandomConfigs(t *testing.T) {
	n := 200
	if testing.Short() {
		n = 20
	}
	compiled := 0
	for seed := range uint64(n) {
		cfg := randomConfig(rand.New(rand.NewPCG(seed, 42)))
		if err := cfg.Validate(); err != nil {
			continue // the generator may make conflicting routes
		}
		compiled++
		opts := Options{DefaultMaxRequestBytes: uint32(seed%2) * 4096}
		a, err := Compile(cfg, opts)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		checkSnapshot(t, a, cfg.Version)
		b, err := Compile(reinsert(cfg), opts)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(snapshotBytes(t, a), snapshotBytes(t, b)) {
			t.Fatalf("seed %d: not deterministic", seed)
		}
	}
	if compiled < n/4 {
		t.Fatalf("only %d of %d random configs were valid", compiled, n)
	}
	t.Logf("%d random configs compiled", compiled)
}

func randomConfig(r *rand.Rand) *spec.Config {
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	cfg := spec.NewConfig(r.Int64N(1 << 40))
	nc := 1 + r.IntN(4)
	var clusters []string
	for i := range nc {
		c := &spec.Cluster{
			Name:     fmt.Sprintf("c%d", i),
			LBPolicy: pick("", spec.LBRoundRobin, spec.LBLeastRequest, spec.LBRingHash, spec.LBMaglev),
			HTTP2:    r.IntN(2) == 0,
		}
		for j := range 1 + r.IntN(4) {
			addr := fmt.Sprintf("10.0.%d.%d", i, j+1)
			if r.IntN(8) == 0 {
				addr = fmt.Sprintf("svc%d.example.internal", j)
			}
			c.Endpoints = append(c.Endpoints, spec.Endpoint{Address: addr, Port: uint32(8000 + j), Weight: uint32(r.IntN(4)), Zone: pick("", "a", "b")})
		}
		if r.IntN(2) == 0 {
			c.CircuitBreakers = &spec.CircuitBreakers{MaxRequests: uint32(r.IntN(100)), RetryBudget: &spec.RetryBudget{BudgetPercent: 10}}
		}
		if r.IntN(2) == 0 {
			c.OutlierDetection = &spec.OutlierDetection{Consecutive5xx: 5, ConsecutiveGatewayErrors: uint32(r.IntN(3)), Interval: spec.Duration(time.Second)}
		}
		if r.IntN(2) == 0 {
			c.HealthCheck = &spec.HealthCheck{Path: "/healthz"}
		}
		if r.IntN(4) == 0 {
			c.TLS = &spec.UpstreamTLS{SNI: pick("", "up.example.com")}
		}
		cfg.Clusters[c.Name] = c
		clusters = append(clusters, c.Name)
	}
	cfg.JWTProviders["idp"] = &spec.JWTProvider{Name: "idp", Issuer: "https://idp", JWKSURI: "https://idp/jwks", Algorithms: []string{"RS256"}}
	for i := range r.IntN(12) {
		rt := &spec.Route{Name: fmt.Sprintf("r%d", i), Cluster: clusters[r.IntN(len(clusters))]}
		switch r.IntN(3) {
		case 0:
			rt.Match.PathPrefix = pick("/", "/a", "/a/b", "/b")
		case 1:
			rt.Match.Path = pick("/x", "/a/b/c")
		default:
			rt.Match.PathRegex = pick("/v[0-9]+/.*", "/r/[a-z]+")
		}
		if r.IntN(3) == 0 {
			rt.Match.Hosts = []string{pick("a.example.com", "*.example.com", "b.example.com")}
		}
		if r.IntN(3) == 0 {
			rt.Match.Methods = []string{pick("GET", "POST", "PUT")}
		}
		if r.IntN(3) == 0 {
			rt.Match.Headers = []spec.HeaderMatch{{Name: "x-h", Exact: pick("1", "2")}}
		}
		if r.IntN(3) == 0 {
			rt.Retries = &spec.RetryPolicy{RetryOn: []string{"5xx"}, NumRetries: uint32(r.IntN(3)), AllowNonIdempotent: r.IntN(2) == 0}
		}
		if r.IntN(3) == 0 && len(clusters) > 1 {
			rt.Canary = &spec.HeaderCanary{Header: "x-canary", Value: "1", Cluster: clusters[0]}
		}
		if r.IntN(3) == 0 {
			rt.Cluster = ""
			rt.WeightedClusters = []spec.WeightedCluster{{Cluster: clusters[0], Weight: 1}}
			if len(clusters) > 1 {
				rt.WeightedClusters = append(rt.WeightedClusters, spec.WeightedCluster{Cluster: clusters[1], Weight: uint32(r.IntN(5))})
			}
		}
		switch r.IntN(3) {
		case 0:
			rt.Auth = &spec.RouteAuth{Mode: spec.AuthJWT, Provider: "idp", RequiredScopes: []string{"b", "a"}}
		case 1:
			rt.Auth = &spec.RouteAuth{Mode: spec.AuthAPIKey}
		}
		if r.IntN(2) == 0 {
			rt.RateLimits = []spec.RouteRateLimit{{Descriptors: []spec.RateLimitDescriptorEntry{{Key: "consumer", FromHeader: "x-portico-consumer"}, {Key: "remote_address", RemoteAddress: true}}}}
		}
		rt.WebSocket = r.IntN(4) == 0
		if r.IntN(4) == 0 {
			rt.MaxRequestBytes = 1024
		}
		cfg.Routes[rt.Name] = rt
	}
	cfg.Consumers.Set("acme", &spec.Consumer{Name: "acme", Tenant: "acme"})
	for i := range r.IntN(20) {
		sum := fmt.Sprintf("%064x", r.Uint64())
		cfg.APIKeys.Set(fmt.Sprintf("k%d", i), &spec.APIKey{Name: fmt.Sprintf("k%d", i), Consumer: "acme", SHA256: sum})
	}
	for i := range r.IntN(5) {
		cfg.RateLimitRules[fmt.Sprintf("rule%d", i)] = &spec.RateLimitRule{
			Name: fmt.Sprintf("rule%d", i), Domain: pick("portico", "other"),
			Descriptors: []spec.RuleDescriptor{{Key: "consumer"}, {Key: pick("a", "b")}},
			Limit:       uint32(1 + r.IntN(100)), Window: spec.Duration(time.Duration(1+r.IntN(2)) * time.Minute),
			Priority: int32(i),
		}
	}
	return cfg
}

// FuzzCompile drives the random config generator from fuzzed seeds: any
// config that passes spec validation must compile to a valid, consistent,
// deterministic snapshot.
func FuzzCompile(f *testing.F) {
	for i := range uint64(8) {
		f.Add(i, i*7919)
	}
	f.Fuzz(func(t *testing.T, a, b uint64) {
		cfg := randomConfig(rand.New(rand.NewPCG(a, b)))
		if cfg.Validate() != nil {
			return
		}
		snap, err := Compile(cfg, Options{DefaultMaxRequestBytes: uint32(a % 3)})
		if err != nil {
			t.Fatal(err)
		}
		checkSnapshot(t, snap, cfg.Version)
		again, err := Compile(reinsert(cfg), Options{DefaultMaxRequestBytes: uint32(a % 3)})
		if err != nil {
			t.Fatal(err)
		}
		if !Equal(snap, again) {
			t.Fatal("not deterministic")
		}
	})
}
