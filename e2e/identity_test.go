package e2e_test

import (
	"context"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/portico-io/portico/controlplane"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/internal/tlstest"
)

// The config path over mutual TLS: the control plane serves xDS only to
// platform certificates; extauthz and ratelimitsvc present theirs, receive
// their views, ACK, and show up in /admin/v1/nodes with their verified
// identities; both decide with what arrived that way, for gateways only;
// a client without a certificate gets nothing from xDS.
func TestConfigPathOverMutualTLS(t *testing.T) {
	dbURL := testdeps.Postgres(t)
	p := tlstest.New(t)
	cp := startControlPlane(t, dbURL, controlplane.Config{TLS: p.Files(t, identity.ControlPlane, "controlplane")})
	ea := startExtauthzTLS(t, cp.XDS, "127.0.0.1:0", "e2e-mtls-extauthz", p.Files(t, identity.ExtAuthz, "extauthz-0"))
	rl := startRateLimitTLS(t, cp.XDS, "127.0.0.1:0", "e2e-mtls-ratelimit", p.Files(t, identity.RateLimit, "ratelimit-0"))

	api := newAdminAPITLS(t, cp.Admin, p.ClientTLS(nil))
	key, _ := api.seedKeyed()
	v := api.create("ratelimit-rules", map[string]any{"name": "per-consumer", "domain": "portico",
		"descriptors": []any{map[string]any{"key": "consumer"}}, "limit": 3, "window": "1h"}, nil)

	n := api.waitAcked("e2e-mtls-extauthz", "portico-extauthz", v, extauthzTypes...)
	if n.Identity != "spiffe://portico.local/extauthz/extauthz-0" {
		t.Fatalf("extauthz listed as %q", n.Identity)
	}
	n = api.waitAcked("e2e-mtls-ratelimit", "portico-ratelimit", v, ratelimitTypes...)
	if n.Identity != "spiffe://portico.local/ratelimit/ratelimit-0" {
		t.Fatalf("ratelimitsvc listed as %q", n.Identity)
	}

	// extauthz admits the key it received over mTLS, asked by a gateway
	// (the only role its port admits); the refusal table on both service
	// ports, with the requests Envoy's filters send.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	check := keyedCheck(key)
	limit := &rlsv3.RateLimitRequest{Domain: "portico", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{
		{Entries: []*ratelimitcommonv3.RateLimitDescriptor_Entry{{Key: "consumer", Value: "acme"}}}}}
	for _, tc := range p.Cases(t, identity.Gateway, identity.Worker) {
		t.Run(tc.Name, func(t *testing.T) {
			dial := func(addr string) *grpc.ClientConn {
				cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(tc.Client)))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { cc.Close() })
				return cc
			}
			resp, err := authv3.NewAuthorizationClient(dial(ea.GRPC)).Check(ctx, check, grpc.WaitForReady(tc.Allowed))
			if tc.Allowed && (err != nil || codes.Code(resp.GetStatus().GetCode()) != codes.OK) {
				t.Fatalf("Check with the key: %v, %v", resp.GetStatus(), err)
			}
			if !tc.Allowed && err == nil {
				t.Fatalf("extauthz answered: %v", resp.GetStatus())
			}
			rresp, err := rlsv3.NewRateLimitServiceClient(dial(rl.GRPC)).ShouldRateLimit(ctx, limit, grpc.WaitForReady(tc.Allowed))
			if tc.Allowed && (err != nil || rresp.GetOverallCode() != rlsv3.RateLimitResponse_OK) {
				t.Fatalf("ShouldRateLimit: %v, %v", rresp.GetOverallCode(), err)
			}
			if !tc.Allowed && err == nil {
				t.Fatalf("ratelimitsvc answered: %v", rresp.GetOverallCode())
			}
		})
	}

	// Without a certificate, the xDS port answers nothing.
	cc, err := grpc.NewClient(cp.XDS, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	s, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err == nil {
		err = s.Send(&discovery.DiscoveryRequest{Node: &corev3.Node{Id: "anon", Cluster: "portico-gateway", UserAgentName: "envoy"},
			TypeUrl: "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"})
	}
	if err == nil {
		_, err = s.Recv()
	}
	if err == nil {
		t.Fatal("a plaintext client was served")
	}
}
