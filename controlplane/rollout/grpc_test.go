package rollout

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/portico-io/portico/internal/xdstest"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/portico-io/portico/controlplane/nodes"
	"github.com/portico-io/portico/controlplane/xds"
	"github.com/portico-io/portico/internal/grpcserver"
)

// This file drives rollouts against real proxyless grpc-go xDS clients: the
// ACKs and NACKs the controller evaluates come from grpc-go itself.

const grpcTarget = "echo-grpc"

// grpcSnapshot routes grpcTarget to b; lb MAGLEV makes grpc-go NACK it.
func grpcSnapshot(t *testing.T, v int64, lb clusterv3.Cluster_LbPolicy, b *xdstest.Backend) *cache.Snapshot {
	t.Helper()
	ads := &corev3.ConfigSource{ResourceApiVersion: corev3.ApiVersion_V3, ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}}
	router, _ := anypb.New(&routerv3.Router{})
	hcm, _ := anypb.New(&hcmv3.HttpConnectionManager{
		StatPrefix:     grpcTarget,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{ConfigSource: ads, RouteConfigName: "routes"}},
		HttpFilters:    []*hcmv3.HttpFilter{{Name: "envoy.filters.http.router", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router}}},
	})
	lis := &listenerv3.Listener{Name: grpcTarget, ApiListener: &listenerv3.ApiListener{ApiListener: hcm}}
	rc := &routev3.RouteConfiguration{Name: "routes", VirtualHosts: []*routev3.VirtualHost{{
		Name: "echo", Domains: []string{grpcTarget},
		Routes: []*routev3.Route{{
			Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: "echo"}}},
		}},
	}}}
	cl := &clusterv3.Cluster{
		Name:                 "echo",
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: ads},
		ConnectTimeout:       durationpb.New(time.Second),
		LbPolicy:             lb,
	}
	host, port, _ := net.SplitHostPort(b.Addr)
	p, _ := strconv.Atoi(port)
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: "echo", Endpoints: []*endpointv3.LocalityLbEndpoints{{
		LbEndpoints: []*endpointv3.LbEndpoint{{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
			Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
				Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(p)}}}}}}}},
		LoadBalancingWeight: wrapperspb.UInt32(1), Locality: &corev3.Locality{Zone: "z1"},
	}}}
	snap, err := cache.NewSnapshot(strconv.FormatInt(v, 10), map[resource.Type][]types.Resource{
		resource.ListenerType: {lis}, resource.RouteType: {rc}, resource.ClusterType: {cl}, resource.EndpointType: {cla},
	})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func TestRolloutWithGRPCClients(t *testing.T) {
	e := newEnv(t)
	a, b := xdstest.StartBackend(t, "a"), xdstest.StartBackend(t, "b")

	// Config versions live in the store; what each serves is a grpc-go
	// snapshot picked per version (v1 → a, v2 → b, v3 → b but NACKed).
	var mu sync.Mutex
	content := map[int64]func(v int64) *cache.Snapshot{}
	def := func(v int64, lb clusterv3.Cluster_LbPolicy, to *xdstest.Backend) {
		mu.Lock()
		defer mu.Unlock()
		content[v] = func(v int64) *cache.Snapshot { return grpcSnapshot(t, v, lb, to) }
	}
	snapshots := func(_ context.Context, v int64) (cache.ResourceSnapshot, error) {
		mu.Lock()
		defer mu.Unlock()
		f, ok := content[v]
		if !ok {
			return nil, fmt.Errorf("no content for version %d", v)
		}
		return f(v), nil
	}
	rollback := func(ctx context.Context, to int64, reason string) (int64, error) {
		v, err := e.rollback(ctx, to, reason)
		if err == nil {
			mu.Lock()
			content[v] = content[to]
			mu.Unlock()
		}
		return v, err
	}
	v1 := e.commit("a")
	def(v1, clusterv3.Cluster_ROUND_ROBIN, a)

	tr := nodes.NewTracker()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	xs := xds.New(ctx, xds.Config{Tracker: tr})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpcserver.New()
	xs.Register(g.Server)
	served := make(chan struct{})
	go func() { _ = g.Serve(ctx, lis, time.Second); close(served) }()
	t.Cleanup(func() { cancel(); <-served })

	ctl, err := New(testCtx(t), Config{
		DatabaseURL: e.url, Mode: ModeManual, Tracker: tr, XDS: xs,
		Snapshots: snapshots, Rollback: rollback, ReplicaID: "grpc", timeNow: e.clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ctl.Close)
	step := func() {
		t.Helper()
		if err := ctl.Step(testCtx(t)); err != nil {
			t.Fatal(err)
		}
	}
	v2 := e.commit("b")
	def(v2, clusterv3.Cluster_ROUND_ROBIN, b)
	// The publisher publishes the head; manual mode keeps serving v1.
	head, _ := snapshots(ctx, v2)
	if err := xs.Publish(ctx, head); err != nil {
		t.Fatal(err)
	}

	canary := xdstest.Dial(t, lis.Addr().String(), "canary-1", "canary", grpcTarget)
	other := xdstest.Dial(t, lis.Addr().String(), "gw-1", nodes.DefaultGroup, grpcTarget)
	if x, y := xdstest.Reached(canary), xdstest.Reached(other); x != "a" || y != "a" {
		t.Fatalf("before the rollout: canary → %s, other → %s; want a, a", x, y)
	}

	ro, err := ctl.Start(testCtx(t), Spec{Waves: []Wave{{Groups: []string{"canary"}}, {Percent: 100}}})
	if err != nil {
		t.Fatal(err)
	}
	xdstest.Eventually(t, 10*time.Second, "the canary to move to b", func() bool { return xdstest.Reached(canary) == "b" })
	if got := xdstest.Reached(other); got != "a" {
		t.Fatalf("during wave 0 the other node reached %s", got)
	}
	xdstest.Eventually(t, 10*time.Second, "the canary's ACKs", func() bool {
		step()
		got, _ := ctl.Get(testCtx(t), ro.ID)
		return got.Nodes == NodeCounts{Total: 1, Acked: 1}
	})
	e.clock.Advance(time.Minute)
	step()
	xdstest.Eventually(t, 10*time.Second, "the other node to move to b", func() bool { return xdstest.Reached(other) == "b" })
	xdstest.Eventually(t, 10*time.Second, "both ACKs", func() bool {
		step()
		got, _ := ctl.Get(testCtx(t), ro.ID)
		return got.Nodes == NodeCounts{Total: 2, Acked: 2}
	})
	e.clock.Advance(time.Minute)
	step()
	if got, _ := ctl.Get(testCtx(t), ro.ID); got.State != StateSucceeded {
		t.Fatalf("first rollout: %+v", got)
	}

	// Version 3 is rejected by grpc-go: the canary NACKs, the rollout rolls
	// back to a new version equal to v2, and nobody ever leaves b.
	v3 := e.commit("c")
	def(v3, clusterv3.Cluster_MAGLEV, b)
	ro, err = ctl.Start(testCtx(t), Spec{Waves: []Wave{{Groups: []string{"canary"}}, {Percent: 100}}})
	if err != nil {
		t.Fatal(err)
	}
	var got Rollout
	xdstest.Eventually(t, 10*time.Second, "the canary's NACK to roll back", func() bool {
		step()
		got, _ = ctl.Get(testCtx(t), ro.ID)
		return got.State == StateRolledBack
	})
	if got.Nodes.Nacked != 1 || got.RollbackVersion != v3+1 {
		t.Fatalf("rolled back: %+v", got)
	}
	v4 := strconv.FormatInt(got.RollbackVersion, 10)
	for _, id := range []string{"canary-1", "gw-1"} {
		xdstest.Eventually(t, 10*time.Second, id+" to ACK the rollback version", func() bool {
			st, ok := tr.Get(id)
			return ok && st.Types[resource.ClusterType] != nil && st.Types[resource.ClusterType].AckedVersion == v4
		})
	}
	if x, y := xdstest.Reached(canary), xdstest.Reached(other); x != "b" || y != "b" {
		t.Fatalf("after rollback: canary → %s, other → %s; want b, b", x, y)
	}
}
