package compile_test

import (
	"context"
	"net"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	redisclusterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/redis/v3"
	redisproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/redis_proxy/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/portico-io/portico/controlplane/compile"
	"github.com/portico-io/portico/controlplane/nodes"
	"github.com/portico-io/portico/controlplane/spec"
	xdsserver "github.com/portico-io/portico/controlplane/xds"
	"github.com/portico-io/portico/internal/grpcserver"
	"github.com/portico-io/portico/internal/xdstest"
)

// TestRedisProxyOverXDS serves a snapshot holding a redis proxy next to an
// HTTP/gRPC route through the control plane's xDS server, to two real
// clients on one server:
//   - an ADS stream identifying as Envoy (user agent "envoy", node cluster
//     portico-gateway) subscribing to every cluster and listener, as a
//     gateway does: it receives redis_cache (listener with the redis_proxy
//     filter, cluster of type envoy.clusters.redis), whose typed configs
//     unpack and validate, and ACKs them;
//   - grpc-go's proxyless xDS client, which must keep routing and ACKing
//     with the redis resources in the snapshot (it never asks for them: it
//     could not use them, since grpc-go NACKs listeners without an API
//     listener and clusters of custom types).
func TestRedisProxyOverXDS(t *testing.T) {
	backend := xdstest.StartBackend(t, "grpc-backend")
	const host = "echo.portico.test"
	cfg := spec.NewConfig(7)
	cfg.Clusters["grpc"] = &spec.Cluster{Name: "grpc", HTTP2: true,
		Endpoints: []spec.Endpoint{{Address: "127.0.0.1", Port: uint32(backend.Port)}}}
	cfg.Routes["grpc"] = &spec.Route{Name: "grpc", Cluster: "grpc", Match: spec.RouteMatch{Hosts: []string{host}, PathPrefix: "/"},
		Retries: &spec.RetryPolicy{Disabled: true}}
	threshold := uint32(3)
	cfg.RedisProxies["cache"] = &spec.RedisProxy{Name: "cache", Listen: spec.RedisListen{Port: 6380},
		Cluster: spec.RedisCluster{Seeds: []spec.RedisSeed{{Address: "127.0.0.1", Port: 7000}, {Address: "127.0.0.1", Port: 7001}},
			ClusterRefreshRate: spec.Duration(2 * time.Second), RedirectRefreshThreshold: &threshold},
		ReadPolicy: spec.ReadPreferReplica}
	snap, err := compile.Compile(cfg, compile.Options{})
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tracker := nodes.NewTracker()
	srv := xdsserver.New(ctx, xdsserver.Config{Tracker: tracker})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpcserver.New()
	srv.Register(g.Server)
	done := make(chan struct{})
	go func() { _ = g.Serve(ctx, lis, time.Second); close(done) }()
	defer func() { cancel(); <-done }()
	if err := srv.Publish(ctx, snap); err != nil {
		t.Fatal(err)
	}

	// The gateway's view: every cluster and listener over one ADS stream.
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
	defer scancel()
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(sctx)
	if err != nil {
		t.Fatal(err)
	}
	node := &corev3.Node{Id: "gateway-redis-0", Cluster: "portico-gateway", UserAgentName: "envoy"}
	fetch := func(typeURL string) map[string]proto.Message {
		t.Helper()
		if err := stream.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: typeURL}); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetTypeUrl() != typeURL || resp.GetVersionInfo() != "7" {
			t.Fatalf("response %s version %q, want %s version 7", resp.GetTypeUrl(), resp.GetVersionInfo(), typeURL)
		}
		out := map[string]proto.Message{}
		for _, a := range resp.GetResources() {
			m, err := a.UnmarshalNew()
			if err != nil {
				t.Fatal(err)
			}
			if v, ok := m.(interface{ ValidateAll() error }); ok {
				if err := v.ValidateAll(); err != nil {
					t.Fatalf("%s: %v", typeURL, err)
				}
			}
			switch r := m.(type) {
			case *clusterv3.Cluster:
				out[r.GetName()] = r
			case *listenerv3.Listener:
				out[r.GetName()] = r
			}
		}
		// ACK.
		if err := stream.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: typeURL,
			VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	clusters := fetch(compile.ClusterType)
	cl, ok := clusters["redis_cache"].(*clusterv3.Cluster)
	if !ok {
		t.Fatalf("no cluster redis_cache among %d clusters", len(clusters))
	}
	ct := cl.GetClusterType()
	rc := &redisclusterv3.RedisClusterConfig{}
	if ct.GetName() != compile.RedisClusterType || ct.GetTypedConfig().UnmarshalTo(rc) != nil || rc.ValidateAll() != nil {
		t.Fatalf("cluster type %v", ct)
	}
	if cl.GetLbPolicy() != clusterv3.Cluster_CLUSTER_PROVIDED || rc.GetClusterRefreshRate().AsDuration() != 2*time.Second ||
		rc.GetRedirectRefreshThreshold().GetValue() != 3 || len(cl.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()) != 2 {
		t.Fatalf("redis cluster: %v", cl)
	}
	listeners := fetch(compile.ListenerType)
	l, ok := listeners["redis_cache"].(*listenerv3.Listener)
	if !ok {
		t.Fatalf("no listener redis_cache among %d listeners", len(listeners))
	}
	if _, api := listeners[host]; api {
		t.Fatal("the gateway was sent the proxyless API listener")
	}
	f := l.GetFilterChains()[0].GetFilters()[0]
	rp := &redisproxyv3.RedisProxy{}
	if f.GetName() != compile.RedisProxyFilter || f.GetTypedConfig().UnmarshalTo(rp) != nil || rp.ValidateAll() != nil {
		t.Fatalf("filter %v", f)
	}
	s := rp.GetSettings()
	if rp.GetPrefixRoutes().GetCatchAllRoute().GetCluster() != "redis_cache" || !s.GetEnableRedirection() || !s.GetEnableHashtagging() ||
		s.GetReadPolicy() != redisproxyv3.RedisProxy_ConnPoolSettings_PREFER_REPLICA || l.GetAddress().GetSocketAddress().GetPortValue() != 6380 {
		t.Fatalf("redis_proxy: %v on %v", rp, l.GetAddress())
	}
	xdstest.Eventually(t, 10*time.Second, "the gateway's ACKs to be recorded", func() bool {
		st, ok := tracker.Get(node.GetId())
		if !ok {
			return false
		}
		for _, typ := range []string{compile.ClusterType, compile.ListenerType} {
			ts := st.Types[typ]
			if ts == nil || ts.AckedVersion != "7" || ts.Nack != nil {
				return false
			}
		}
		return true
	})

	// A proxyless gRPC client on the same server still routes and ACKs.
	client := xdstest.Dial(t, lis.Addr().String(), "grpc-redis-0", "default", host)
	if got := xdstest.Reached(client); got != "grpc-backend" {
		t.Fatalf("proxyless RPC: %s", got)
	}
	xdstest.Eventually(t, 10*time.Second, "the grpc client's ACKs", func() bool {
		st, ok := tracker.Get("grpc-redis-0")
		if !ok {
			return false
		}
		for _, typ := range []string{compile.ListenerType, compile.RouteType, compile.ClusterType, compile.EndpointType} {
			ts := st.Types[typ]
			if ts == nil || ts.AckedVersion != "7" {
				return false
			}
		}
		return true
	})
	st, _ := tracker.Get("grpc-redis-0")
	for typ, ts := range st.Types {
		if ts.Nack != nil {
			t.Fatalf("grpc client NACKed %s: %+v", typ, ts.Nack)
		}
	}
}
