package xds_test

import (
	"context"
	"net"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/portico-io/portico/controlplane/compile"
	"github.com/portico-io/portico/controlplane/nodes"
	"github.com/portico-io/portico/controlplane/spec"
	xdsserver "github.com/portico-io/portico/controlplane/xds"
	"github.com/portico-io/portico/internal/grpcserver"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/tlstest"
)

// secureControlPlane serves a compiled snapshot holding a TLS secret, API
// keys and rate-limit rules over mTLS, with views bound to identities.
func secureControlPlane(t *testing.T, p *tlstest.PKI) (string, *nodes.Tracker) {
	t.Helper()
	cfg := spec.NewConfig(3)
	cfg.Clusters["echo"] = &spec.Cluster{Name: "echo", Endpoints: []spec.Endpoint{{Address: "127.0.0.1", Port: 18900}}}
	cfg.Routes["echo"] = &spec.Route{Name: "echo", Match: spec.RouteMatch{PathPrefix: "/"}, Cluster: "echo", Auth: &spec.RouteAuth{Mode: "apikey"}}
	cfg.Secrets["gw"] = &spec.Secret{Name: "gw", Type: spec.SecretTLS, Files: &spec.SecretFiles{CertificateChain: "/etc/gw.crt", PrivateKey: "/etc/gw.key"}}
	cfg.Listeners["https"] = &spec.Listener{Name: "https", Port: 10443, TLS: &spec.ListenerTLS{Certificates: []string{"gw"}}}
	cfg.Consumers.Set("acme", &spec.Consumer{Name: "acme", Tenant: "acme"})
	cfg.APIKeys.Set("k", &spec.APIKey{Name: "k", Consumer: "acme", SHA256: "00aa0000000000000000000000000000000000000000000000000000000000ff"})
	cfg.RateLimitRules["r"] = &spec.RateLimitRule{Name: "r", Domain: "portico", Descriptors: []spec.RuleDescriptor{{Key: "consumer"}}, Limit: 5, Window: spec.Duration(time.Second)}
	snap, err := compile.Compile(cfg, compile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, typeURL := range []string{compile.SecretType, compile.ApiKeyShardType, compile.RateLimitRuleType, compile.ListenerType} {
		if len(snap.GetResourcesAndTTL(typeURL)) == 0 {
			t.Fatalf("the test snapshot holds no %s", typeURL)
		}
	}

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tracker := nodes.NewTracker()
	srv := xdsserver.New(ctx, xdsserver.Config{RequireIdentity: true, Tracker: tracker})
	files := p.Load(t, identity.ControlPlane, "controlplane")
	g := grpcserver.New(grpc.Creds(credentials.NewTLS(files.ServerConfig(identity.Policy{}))))
	srv.Register(g.Server)
	if err := srv.Publish(ctx, snap); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = g.Serve(ctx, lis, time.Second); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return lis.Addr().String(), tracker
}

// fetch opens an ADS stream as node (id, cluster, user agent), subscribes
// to typeURL and returns the names of the resources of the first answer.
func fetch(t *testing.T, addr string, client *grpc.DialOption, node *corev3.Node, typeURL string) ([]string, error) {
	t.Helper()
	cc, err := grpc.NewClient(addr, *client)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: typeURL}); err != nil {
		return nil, err
	}
	resp, err := s.Recv()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, r := range resp.GetResources() {
		names = append(names, r.GetTypeUrl())
	}
	return names, nil
}

func creds(c credentials.TransportCredentials) *grpc.DialOption {
	o := grpc.WithTransportCredentials(c)
	return &o
}

// The refusal table for xDS: a node claiming the gateway cluster.
func TestXDSRefusesWhoIsNotAGateway(t *testing.T) {
	p := tlstest.New(t)
	addr, _ := secureControlPlane(t, p)
	node := &corev3.Node{Id: "gw-table", Cluster: xdsserver.NodeClusterGateway, UserAgentName: "envoy"}
	for _, tc := range p.Cases(t, identity.Gateway, identity.ExtAuthz) {
		t.Run(tc.Name, func(t *testing.T) {
			got, err := fetch(t, addr, creds(credentials.NewTLS(tc.Client)), node, compile.ListenerType)
			if tc.Allowed {
				if err != nil || len(got) == 0 {
					t.Fatalf("a gateway got %v, %v", got, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("served %d listeners", len(got))
			}
			if c := status.Code(err); c != codes.Unavailable && c != codes.PermissionDenied && c != codes.Unauthenticated {
				t.Fatalf("refused with %v, want a handshake failure or PermissionDenied", err)
			}
		})
	}
}

// What a client receives is decided by its certificate, not by what it
// says it is.
func TestXDSViewsFollowTheVerifiedIdentity(t *testing.T) {
	p := tlstest.New(t)
	addr, tracker := secureControlPlane(t, p)
	as := func(role identity.Role, name string) *grpc.DialOption {
		f := p.Load(t, role, name)
		return creds(credentials.NewTLS(f.ClientConfig(identity.Policy{Roles: []identity.Role{identity.ControlPlane}})))
	}
	extauthz, gateway, ratelimit, worker := as(identity.ExtAuthz, "ea-0"), as(identity.Gateway, "gw-0"), as(identity.RateLimit, "rl-0"), as(identity.Worker, "w-0")

	// An extauthz certificate that says it is Envoy in the gateway cluster
	// is refused outright.
	_, err := fetch(t, addr, extauthz, &corev3.Node{Id: "liar", Cluster: xdsserver.NodeClusterGateway, UserAgentName: "envoy"}, compile.SecretType)
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("extauthz claiming portico-gateway: %v, want PermissionDenied", err)
	}
	// Claiming no reserved cluster, it still gets no secret and no listener.
	liar := &corev3.Node{Id: "liar", Cluster: "elsewhere", UserAgentName: "envoy"}
	for _, typeURL := range []string{compile.SecretType, compile.ListenerType, compile.ClusterType} {
		if got, err := fetch(t, addr, extauthz, liar, typeURL); err != nil || len(got) != 0 {
			t.Fatalf("extauthz subscribed to %s got %d resources, %v", typeURL, len(got), err)
		}
	}

	for _, tc := range []struct {
		name   string
		client *grpc.DialOption
		node   *corev3.Node
		want   map[string]bool // type → receives resources
	}{
		{"gateway", gateway, &corev3.Node{Id: "gw-0", Cluster: xdsserver.NodeClusterGateway, UserAgentName: "envoy"},
			map[string]bool{compile.SecretType: true, compile.ListenerType: true, compile.ApiKeyShardType: false, compile.RateLimitRuleType: false}},
		{"extauthz", extauthz, &corev3.Node{Id: "ea-0", Cluster: xdsserver.NodeClusterExtAuthz},
			map[string]bool{compile.ApiKeyShardType: true, compile.SecretType: false, compile.RateLimitRuleType: false, compile.ListenerType: false}},
		{"ratelimit", ratelimit, &corev3.Node{Id: "rl-0", Cluster: xdsserver.NodeClusterRateLimit},
			map[string]bool{compile.RateLimitRuleType: true, compile.ApiKeyShardType: false, compile.SecretType: false}},
		{"proxyless", worker, &corev3.Node{Id: "w-0", Cluster: "apps"},
			map[string]bool{compile.ListenerType: true, compile.RouteType: true, compile.SecretType: false, compile.ApiKeyShardType: false}},
	} {
		for typeURL, want := range tc.want {
			got, err := fetch(t, addr, tc.client, tc.node, typeURL)
			if err != nil || (len(got) > 0) != want {
				t.Errorf("%s subscribed to %s: %d resources (%v), want some=%v", tc.name, typeURL, len(got), err, want)
			}
		}
	}

	// A node id is bound to the identity holding it while connected.
	cc, err := grpc.NewClient(addr, *gateway)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	held := &corev3.Node{Id: "gw-held", Cluster: xdsserver.NodeClusterGateway, UserAgentName: "envoy"}
	if err := s.Send(&discovery.DiscoveryRequest{Node: held, TypeUrl: compile.ListenerType}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	if st, ok := tracker.Get("gw-held"); !ok || st.Identity != "spiffe://portico.local/gateway/gw-0" {
		t.Fatalf("tracked node: %+v", st)
	}
	_, err = fetch(t, addr, worker, &corev3.Node{Id: "gw-held", Cluster: "apps"}, compile.ListenerType)
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("another identity taking a connected node id: %v, want PermissionDenied", err)
	}
}
