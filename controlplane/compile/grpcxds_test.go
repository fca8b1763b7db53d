package compile

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/xds"

	"github.com/portico-io/portico/controlplane/spec"
)

// TestProxylessGRPCAcceptsSnapshot serves a compiled snapshot through
// go-control-plane's ADS server to a real grpc-go xDS client (its own
// resource validation: LDS API listener, RDS, CDS, EDS) and routes an RPC
// with it. The config also carries everything the Envoy gateway needs
// (optional filters, FilterConfig-wrapped per-route configs, retries, rate
// limits on the fail-closed stage, buffer limits, websocket, header
// canaries, method matchers, a MAGLEV/TLS cluster grpc never asks for); any
// NACK fails the test.
func TestProxylessGRPCAcceptsSnapshot(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// Two backends; the health status tells which one answered.
	backend := func(status healthpb.HealthCheckResponse_ServingStatus) uint32 {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s := grpc.NewServer()
		h := health.NewServer()
		h.SetServingStatus("", status)
		healthpb.RegisterHealthServer(s, h)
		go func() { _ = s.Serve(lis) }()
		t.Cleanup(s.Stop)
		return uint32(lis.Addr().(*net.TCPAddr).Port)
	}
	mainPort := backend(healthpb.HealthCheckResponse_NOT_SERVING)
	checkPort := backend(healthpb.HealthCheckResponse_SERVING)

	const host = "backend.portico.test"
	cfg := spec.NewConfig(42)
	cfg.Clusters["grpc-main"] = &spec.Cluster{Name: "grpc-main", HTTP2: true, LBPolicy: spec.LBLeastRequest,
		Endpoints:        []spec.Endpoint{{Address: "127.0.0.1", Port: mainPort, Zone: "a"}},
		CircuitBreakers:  &spec.CircuitBreakers{MaxRequests: 100},
		OutlierDetection: &spec.OutlierDetection{Consecutive5xx: 5, Interval: spec.Duration(time.Second)}}
	cfg.Clusters["grpc-check"] = &spec.Cluster{Name: "grpc-check", HTTP2: true, LBPolicy: spec.LBRingHash,
		Endpoints: []spec.Endpoint{{Address: "127.0.0.1", Port: checkPort, Weight: 3}}}
	cfg.Clusters["gateway-only"] = &spec.Cluster{Name: "gateway-only", LBPolicy: spec.LBMaglev, TLS: &spec.UpstreamTLS{SNI: "x.test"},
		Endpoints: []spec.Endpoint{{Address: "10.9.9.9", Port: 443}}}
	cfg.JWTProviders["idp"] = &spec.JWTProvider{Name: "idp", Issuer: "https://idp", JWKSURI: "https://idp/jwks", Algorithms: []string{"RS256"}}
	cfg.Routes["grpc-all"] = &spec.Route{Name: "grpc-all", Cluster: "grpc-main",
		Match:      spec.RouteMatch{Hosts: []string{host}, PathPrefix: "/"},
		Auth:       &spec.RouteAuth{Mode: spec.AuthJWT, Provider: "idp", RequiredScopes: []string{"health"}},
		RateLimits: []spec.RouteRateLimit{{Descriptors: []spec.RateLimitDescriptorEntry{{Key: "consumer", FromHeader: "x-portico-consumer"}}}},
		Retries:    &spec.RetryPolicy{RetryOn: []string{"unavailable"}, NumRetries: 2, AllowNonIdempotent: true}}
	cfg.Routes["grpc-check"] = &spec.Route{Name: "grpc-check",
		Match:            spec.RouteMatch{Hosts: []string{host}, Path: "/grpc.health.v1.Health/Check"},
		WeightedClusters: []spec.WeightedCluster{{Cluster: "grpc-check", Weight: 100}, {Cluster: "grpc-main", Weight: 0}},
		Retries:          &spec.RetryPolicy{RetryOn: []string{"unavailable"}},
		MaxRequestBytes:  1 << 20}
	cfg.Routes["any-host"] = &spec.Route{Name: "any-host", Cluster: "grpc-main", WebSocket: true,
		Match:  spec.RouteMatch{PathPrefix: "/any", Methods: []string{"GET", "POST"}, Headers: []spec.HeaderMatch{{Name: "x-a", Regex: "b+"}}},
		Canary: &spec.HeaderCanary{Header: "x-canary", Value: "1", Cluster: "grpc-check"}}
	// Routes without hosts are merged into every virtual host, so grpc-go
	// sees (and resolves the clusters of) them too; this one names only a
	// cluster grpc-go would NACK (MAGLEV, TLS), on another host.
	cfg.Routes["web"] = &spec.Route{Name: "web", Cluster: "gateway-only", WebSocket: true,
		Match:  spec.RouteMatch{Hosts: []string{"www.portico.test"}, PathPrefix: "/web", Methods: []string{"GET", "POST"}, Headers: []spec.HeaderMatch{{Name: "x-a", Regex: "b+"}}},
		Canary: &spec.HeaderCanary{Header: "x-canary", Value: "1", Cluster: "grpc-main"}}
	// A CLOSED rule: grpc-all's rate limits go to stage 1, and the API
	// listeners carry the fail-closed ratelimit filter too (optional).
	cfg.RateLimitRules["per-consumer"] = &spec.RateLimitRule{Name: "per-consumer", Domain: DefaultRateLimitDomain,
		Descriptors: []spec.RuleDescriptor{{Key: "consumer"}}, Limit: 5, Window: spec.Duration(time.Second), FailMode: spec.FailClosed}
	snap, err := Compile(cfg, Options{DefaultMaxRequestBytes: 4096, XFFNumTrustedHops: 2})
	if err != nil {
		t.Fatal(err)
	}

	// Control plane: go-control-plane's snapshot cache and ADS server.
	wantTypes := []string{ListenerType, RouteType, ClusterType, EndpointType}
	var (
		mu    sync.Mutex
		nacks []string
		acked = map[string]bool{}
		done  = make(chan struct{})
	)
	callbacks := serverv3.CallbackFuncs{StreamRequestFunc: func(_ int64, req *discovery.DiscoveryRequest) error {
		mu.Lock()
		defer mu.Unlock()
		if req.GetErrorDetail() != nil {
			nacks = append(nacks, fmt.Sprintf("%s: %s", req.GetTypeUrl(), req.GetErrorDetail().GetMessage()))
			return nil
		}
		if req.GetVersionInfo() == snap.Version() && !acked[req.GetTypeUrl()] {
			acked[req.GetTypeUrl()] = true
			all := true
			for _, typ := range wantTypes {
				all = all && acked[typ]
			}
			if all {
				close(done)
			}
		}
		return nil
	}}
	// ads=false: in ADS mode the snapshot cache answers a request only if
	// it names every resource of the type in the snapshot, and a gRPC
	// client asks for its own listener and clusters only.
	sc := cache.NewSnapshotCache(false, cache.IDHash{}, nil)
	if err := sc.SetSnapshot(ctx, "grpc-client-0", snap); err != nil {
		t.Fatal(err)
	}
	xdsLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	xdsSrv := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(xdsSrv, serverv3.NewServer(ctx, sc, callbacks))
	go func() { _ = xdsSrv.Serve(xdsLis) }()
	defer xdsSrv.Stop()

	bootstrap := fmt.Sprintf(`{
		"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
		"node": {"id": "grpc-client-0", "cluster": "portico-grpc"}
	}`, xdsLis.Addr().String())
	resolver, err := xds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("xds:///"+host, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(resolver))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	rpcCtx, rpcCancel := context.WithTimeout(ctx, 20*time.Second)
	defer rpcCancel()
	resp, err := healthpb.NewHealthClient(conn).Check(rpcCtx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	if err != nil {
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("RPC through xDS routing failed: %v (NACKs: %v)", err, nacks)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("status %v: the exact-path route did not win over the prefix route", resp.GetStatus())
	}
	select {
	case <-done:
	case <-rpcCtx.Done():
		t.Fatal("grpc client did not ACK every type")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(nacks) > 0 {
		t.Fatalf("grpc-go NACKed:\n%s", strings.Join(nacks, "\n"))
	}
}
