package xds_test

import (
	"context"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/portico-io/portico/controlplane/nodes"
	xdsserver "github.com/portico-io/portico/controlplane/xds"
	"github.com/portico-io/portico/internal/grpcserver"
	"github.com/portico-io/portico/internal/xdstest"
)

// controlPlane runs an xds.Server on addr ("127.0.0.1:0" for any port).
type controlPlane struct {
	srv  *xdsserver.Server
	addr string
	stop func()
}

func startControlPlane(t *testing.T, addr string, tracker *nodes.Tracker) *controlPlane {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv := xdsserver.New(ctx, xdsserver.Config{Tracker: tracker})
	g := grpcserver.New()
	srv.Register(g.Server)
	done := make(chan struct{})
	go func() { _ = g.Serve(ctx, lis, time.Second); close(done) }()
	cp := &controlPlane{srv: srv, addr: lis.Addr().String()}
	cp.stop = func() { cancel(); <-done }
	t.Cleanup(cp.stop)
	return cp
}

const target = "echo-grpc"

// snapshot builds the resources a grpc-go client needs to reach backends
// through cluster "echo" (version v); lbPolicy lets a test make grpc-go NACK.
func snapshot(t *testing.T, v int, lb clusterv3.Cluster_LbPolicy, backends ...*xdstest.Backend) *cache.Snapshot {
	t.Helper()
	ads := &corev3.ConfigSource{ResourceApiVersion: corev3.ApiVersion_V3, ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}}
	router, _ := anypb.New(&routerv3.Router{})
	hcm, _ := anypb.New(&hcmv3.HttpConnectionManager{
		StatPrefix:     target,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{ConfigSource: ads, RouteConfigName: "routes"}},
		HttpFilters:    []*hcmv3.HttpFilter{{Name: "envoy.filters.http.router", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router}}},
	})
	lis := &listenerv3.Listener{Name: target, ApiListener: &listenerv3.ApiListener{ApiListener: hcm}}
	rc := &routev3.RouteConfiguration{Name: "routes", VirtualHosts: []*routev3.VirtualHost{{
		Name: "echo", Domains: []string{target},
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
	var eps []*endpointv3.LbEndpoint
	for _, b := range backends {
		host, port, _ := net.SplitHostPort(b.Addr)
		p, _ := strconv.Atoi(port)
		eps = append(eps, &endpointv3.LbEndpoint{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
			Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
				Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(p)}}}}}}})
	}
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: "echo", Endpoints: []*endpointv3.LocalityLbEndpoints{{
		// grpc-go ignores localities without a weight.
		LbEndpoints: eps, LoadBalancingWeight: wrapperspb.UInt32(1), Locality: &corev3.Locality{Zone: "z1"},
	}}}
	snap, err := cache.NewSnapshot(strconv.Itoa(v), map[resource.Type][]types.Resource{
		resource.ListenerType: {lis}, resource.RouteType: {rc}, resource.ClusterType: {cl}, resource.EndpointType: {cla},
	})
	if err != nil {
		t.Fatal(err)
	}
	// No Consistent() here: go-control-plane does not follow RDS references
	// out of API listeners, so it reports this (valid) set as inconsistent.
	return snap
}

func ackedVersion(tr *nodes.Tracker, node, typeURL string) string {
	st, ok := tr.Get(node)
	if !ok || st.Types[typeURL] == nil {
		return ""
	}
	return st.Types[typeURL].AckedVersion
}

func TestGRPCClientRoutesAndFollowsChanges(t *testing.T) {
	a, b := xdstest.StartBackend(t, "a"), xdstest.StartBackend(t, "b")
	tr := nodes.NewTracker()
	cp := startControlPlane(t, "127.0.0.1:0", tr)
	ctx := context.Background()
	if err := cp.srv.Publish(ctx, snapshot(t, 1, clusterv3.Cluster_ROUND_ROBIN, a)); err != nil {
		t.Fatal(err)
	}
	c := xdstest.Dial(t, cp.addr, "client-1", "canary", target)
	if got := xdstest.Reached(c); got != "a" {
		t.Fatalf("RPC reached %q, want backend a", got)
	}
	xdstest.Eventually(t, 5*time.Second, "CDS ACK of version 1", func() bool { return ackedVersion(tr, "client-1", resource.ClusterType) == "1" })
	st, _ := tr.Get("client-1")
	if st.Group != "canary" || st.Cluster != "portico-gateway" {
		t.Fatalf("node identity not recorded: %+v", st)
	}

	// An endpoint change reaches the client on the same stream.
	if err := cp.srv.Publish(ctx, snapshot(t, 2, clusterv3.Cluster_ROUND_ROBIN, b)); err != nil {
		t.Fatal(err)
	}
	xdstest.Eventually(t, 5*time.Second, "RPCs to move to backend b", func() bool { return xdstest.Reached(c) == "b" })
	xdstest.Eventually(t, 5*time.Second, "EDS ACK of version 2", func() bool { return ackedVersion(tr, "client-1", resource.EndpointType) == "2" })
	if st, _ := tr.Get("client-1"); st.Streams != 1 {
		t.Fatalf("client reconnected: %d streams", st.Streams)
	}
}

func TestNACKIsRecordedAndNotResent(t *testing.T) {
	a, b := xdstest.StartBackend(t, "a"), xdstest.StartBackend(t, "b")
	tr := nodes.NewTracker()
	var nacks atomic.Int64
	tr.Observe(func(_, typeURL, _ string, nack bool) {
		if nack && typeURL == resource.ClusterType {
			nacks.Add(1)
		}
	})
	cp := startControlPlane(t, "127.0.0.1:0", tr)
	ctx := context.Background()
	if err := cp.srv.Publish(ctx, snapshot(t, 1, clusterv3.Cluster_ROUND_ROBIN, a)); err != nil {
		t.Fatal(err)
	}
	c := xdstest.Dial(t, cp.addr, "client-1", "default", target)
	if got := xdstest.Reached(c); got != "a" {
		t.Fatalf("RPC reached %q, want a", got)
	}
	xdstest.Eventually(t, 5*time.Second, "CDS ACK of version 1", func() bool { return ackedVersion(tr, "client-1", resource.ClusterType) == "1" })

	// grpc-go rejects MAGLEV: version 2's CDS is NACKed (its EDS, unchanged,
	// is ACKed: ACK and NACK are per type).
	if err := cp.srv.Publish(ctx, snapshot(t, 2, clusterv3.Cluster_MAGLEV, a)); err != nil {
		t.Fatal(err)
	}
	xdstest.Eventually(t, 5*time.Second, "CDS NACK of version 2", func() bool { return nacks.Load() > 0 })
	st, _ := tr.Get("client-1")
	n := st.Types[resource.ClusterType]
	if n.Nack == nil || n.Nack.Version != "2" || n.Nack.Error == "" || n.AckedVersion != "1" {
		t.Fatalf("CDS status after NACK = %+v (nack %+v)", n, n.Nack)
	}
	// The client keeps routing on its last good config. Without suppression
	// go-control-plane re-sends at once and the NACK count climbs by
	// thousands per second; give it a window to show that it does not.
	for range 20 {
		if got := xdstest.Reached(c); got != "a" {
			t.Fatalf("after NACK, RPC reached %q; want last good backend a", got)
		}
	}
	xdstest.Consistently(t, 300*time.Millisecond, "at most 2 NACKs (no re-send loop)", func() bool { return nacks.Load() <= 2 })

	// The next good version is delivered and ACKed.
	if err := cp.srv.Publish(ctx, snapshot(t, 3, clusterv3.Cluster_ROUND_ROBIN, b)); err != nil {
		t.Fatal(err)
	}
	xdstest.Eventually(t, 5*time.Second, "CDS ACK of version 3", func() bool { return ackedVersion(tr, "client-1", resource.ClusterType) == "3" })
	xdstest.Eventually(t, 5*time.Second, "RPCs to reach backend b", func() bool { return xdstest.Reached(c) == "b" })
	if got := nacks.Load(); got > 2 {
		t.Fatalf("%d NACKs for one bad version", got)
	}
}

func TestClientKeepsConfigWhileControlPlaneDown(t *testing.T) {
	a, b := xdstest.StartBackend(t, "a"), xdstest.StartBackend(t, "b")
	tr := nodes.NewTracker()
	cp := startControlPlane(t, "127.0.0.1:0", tr)
	ctx := context.Background()
	if err := cp.srv.Publish(ctx, snapshot(t, 1, clusterv3.Cluster_ROUND_ROBIN, a)); err != nil {
		t.Fatal(err)
	}
	c := xdstest.Dial(t, cp.addr, "client-1", "default", target)
	if got := xdstest.Reached(c); got != "a" {
		t.Fatalf("RPC reached %q, want a", got)
	}
	cp.stop()
	for range 10 {
		if got := xdstest.Reached(c); got != "a" {
			t.Fatalf("with the control plane down, RPC reached %q; want a", got)
		}
	}
	// A new control plane on the same address with a newer version: the
	// client reconnects by itself and converges.
	tr2 := nodes.NewTracker()
	cp2 := startControlPlane(t, cp.addr, tr2)
	if err := cp2.srv.Publish(ctx, snapshot(t, 2, clusterv3.Cluster_ROUND_ROBIN, b)); err != nil {
		t.Fatal(err)
	}
	xdstest.Eventually(t, 20*time.Second, "client to converge on the restarted control plane", func() bool { return xdstest.Reached(c) == "b" })
	xdstest.Eventually(t, 5*time.Second, "CDS ACK on the new control plane", func() bool { return ackedVersion(tr2, "client-1", resource.ClusterType) == "2" })
}

// deltaRecv receives the next delta response or fails after d.
func deltaRecv(t *testing.T, s discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesClient, d time.Duration) *discovery.DeltaDiscoveryResponse {
	t.Helper()
	ch := make(chan *discovery.DeltaDiscoveryResponse, 1)
	errc := make(chan error, 1)
	go func() {
		r, err := s.Recv()
		if err != nil {
			errc <- err
			return
		}
		ch <- r
	}()
	select {
	case r := <-ch:
		return r
	case err := <-errc:
		t.Fatalf("delta recv: %v", err)
	case <-time.After(d):
		t.Fatalf("no delta response after %v", d)
	}
	return nil
}

// Delta xDS: ACKs and NACKs are recorded per node; a NACK is not answered
// with the same resources again; the next version is delivered.
func TestDeltaACKAndNACK(t *testing.T) {
	a, b := xdstest.StartBackend(t, "a"), xdstest.StartBackend(t, "b")
	tr := nodes.NewTracker()
	cp := startControlPlane(t, "127.0.0.1:0", tr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := cp.srv.Publish(ctx, snapshot(t, 1, clusterv3.Cluster_ROUND_ROBIN, a)); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(cp.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	s, err := discovery.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node := &corev3.Node{Id: "delta-1", Cluster: "portico-gateway"}
	if err := s.Send(&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: resource.ClusterType}); err != nil {
		t.Fatal(err)
	}
	r := deltaRecv(t, s, 5*time.Second)
	if len(r.GetResources()) != 1 || r.GetResources()[0].GetName() != "echo" {
		t.Fatalf("first delta response: %v", r.GetResources())
	}
	if err := s.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType, ResponseNonce: r.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	xdstest.Eventually(t, 5*time.Second, "delta ACK", func() bool { return ackedVersion(tr, "delta-1", resource.ClusterType) != "" })

	// Version 2 changes the cluster; the client rejects it.
	if err := cp.srv.Publish(ctx, snapshot(t, 2, clusterv3.Cluster_MAGLEV, b)); err != nil {
		t.Fatal(err)
	}
	r = deltaRecv(t, s, 5*time.Second)
	if err := s.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType, ResponseNonce: r.GetNonce(),
		ErrorDetail: &statuspb.Status{Code: 3, Message: "maglev unsupported"}}); err != nil {
		t.Fatal(err)
	}
	xdstest.Eventually(t, 5*time.Second, "delta NACK recorded", func() bool {
		st, ok := tr.Get("delta-1")
		return ok && st.Types[resource.ClusterType].Nack != nil && st.Types[resource.ClusterType].Nack.Error == "maglev unsupported"
	})
	// The next response must be version 3, not a re-send of 2.
	if err := cp.srv.Publish(ctx, snapshot(t, 3, clusterv3.Cluster_ROUND_ROBIN, b)); err != nil {
		t.Fatal(err)
	}
	r = deltaRecv(t, s, 5*time.Second)
	if r.GetSystemVersionInfo() != "3" {
		t.Fatalf("after NACK got system version %q, want 3 (no re-send of 2)", r.GetSystemVersionInfo())
	}
}

// go-control-plane numbers delta and state-of-the-world streams from 1
// each: a delta client and a SotW client connected at once are both served
// and both tracked (their stream ids once collided, and the second client
// was never identified nor answered).
func TestDeltaAndSotWStreamsTogether(t *testing.T) {
	a := xdstest.StartBackend(t, "a")
	tr := nodes.NewTracker()
	cp := startControlPlane(t, "127.0.0.1:0", tr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := cp.srv.Publish(ctx, snapshot(t, 1, clusterv3.Cluster_ROUND_ROBIN, a)); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(cp.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ads := discovery.NewAggregatedDiscoveryServiceClient(conn)
	ds, err := ads.DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ds.Send(&discovery.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "delta-1"}, TypeUrl: resource.ClusterType}); err != nil {
		t.Fatal(err)
	}
	r := deltaRecv(t, ds, 5*time.Second)
	if err := ds.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType, ResponseNonce: r.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	ss, err := ads.StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ss.Send(&discovery.DiscoveryRequest{Node: &corev3.Node{Id: "sotw-1"}, TypeUrl: resource.ClusterType}); err != nil {
		t.Fatal(err)
	}
	got := make(chan *discovery.DiscoveryResponse, 1)
	go func() {
		if r, err := ss.Recv(); err == nil {
			got <- r
		}
	}()
	var sr *discovery.DiscoveryResponse
	select {
	case sr = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the SotW client got no response while a delta client is connected")
	}
	if err := ss.Send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: sr.GetVersionInfo(), ResponseNonce: sr.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	xdstest.Eventually(t, 5*time.Second, "both nodes ACKed", func() bool {
		return ackedVersion(tr, "delta-1", resource.ClusterType) == "1" && ackedVersion(tr, "sotw-1", resource.ClusterType) == "1"
	})
}
