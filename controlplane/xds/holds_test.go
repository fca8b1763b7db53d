package xds

import (
	"context"
	"fmt"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	xdsstream "github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
)

func TestHolds(t *testing.T) {
	snap := map[string]string{"a": "1", "b": "2"}
	wildcard := xdsstream.NewDeltaSubscription(nil, nil, nil, true)
	named := xdsstream.NewDeltaSubscription([]string{"a", "c"}, nil, nil, true)
	for _, tc := range []struct {
		name string
		sub  xdsstream.Subscription
		held map[string]string
		want bool
	}{
		{"wildcard, same", wildcard, map[string]string{"a": "1", "b": "2"}, true},
		{"wildcard, one changed", wildcard, map[string]string{"a": "1", "b": "1"}, false},
		{"wildcard, one missing", wildcard, map[string]string{"a": "1"}, false},
		{"wildcard, one to remove", wildcard, map[string]string{"a": "1", "b": "2", "c": "3"}, false},
		{"wildcard, unknown after a NACK", wildcard, map[string]string{"a": "1", "b": ""}, false},
		{"wildcard, nothing held yet", wildcard, map[string]string{}, false},
		{"named, others differ", named, map[string]string{"a": "1", "b": "9"}, true},
		{"named, its own changed", named, map[string]string{"a": "0"}, false},
		{"named, its own not held yet", named, map[string]string{}, false},
		{"named, held one now gone", named, map[string]string{"a": "1", "c": "3"}, false},
	} {
		if got := holds(&tc.sub, tc.held, snap); got != tc.want {
			t.Errorf("%s: holds = %v, want %v", tc.name, got, tc.want)
		}
	}
	if !holds(&wildcard, map[string]string{}, map[string]string{}) {
		t.Error("an empty type is held by a node holding nothing of it")
	}
}

// BenchmarkHolds is the accounting's cost per delta node and type when a
// new version is set: 256 API-key shards, none changed.
func BenchmarkHolds(b *testing.B) {
	snap := map[string]string{}
	for i := range 256 {
		snap[fmt.Sprintf("shard-%02x", i)] = fmt.Sprintf("%016x", i*7919)
	}
	held := map[string]string{}
	for k, v := range snap {
		held[k] = v
	}
	sub := xdsstream.NewDeltaSubscription(nil, nil, nil, true)
	for b.Loop() {
		if !holds(&sub, held, snap) {
			b.Fatal("not held")
		}
	}
}

// BenchmarkRetargetDelta is one publish to 500 delta nodes holding 256
// shards, where the shards do not change (extauthz on a route change): the
// accounting's cost over go-control-plane's, without streams (the cache has
// no watches to answer).
func BenchmarkRetargetDelta(b *testing.B) {
	const nodes, shards = 500, 256
	snaps := make([]cache.ResourceSnapshot, 2)
	var cls []types.Resource
	for i := range shards {
		cls = append(cls, &clusterv3.Cluster{Name: fmt.Sprintf("shard-%02x", i), AltStatName: fmt.Sprint(i)})
	}
	for i := range snaps {
		rc := &routev3.RouteConfiguration{Name: "routes", VirtualHosts: []*routev3.VirtualHost{{Name: fmt.Sprint(i), Domains: []string{"*"}}}}
		snap, err := cache.NewSnapshot(fmt.Sprint(i+1), map[resource.Type][]types.Resource{resource.ClusterType: cls, resource.RouteType: {rc}})
		if err != nil {
			b.Fatal(err)
		}
		if err := snap.ConstructVersionMap(); err != nil {
			b.Fatal(err)
		}
		snaps[i] = snap
	}
	ctx := context.Background()
	s := New(ctx, Config{})
	if err := s.Publish(ctx, snaps[0]); err != nil {
		b.Fatal(err)
	}
	for n := range nodes {
		id := int64(n + 1)
		if err := s.OnDeltaStreamOpen(ctx, id, resource.AnyType); err != nil {
			b.Fatal(err)
		}
		node := &corev3.Node{Id: fmt.Sprintf("node-%d", n)}
		for _, typ := range []string{resource.ClusterType, resource.RouteType} {
			if err := s.OnStreamDeltaRequest(id, &discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: typ}); err != nil {
				b.Fatal(err)
			}
			resp := &discovery.DeltaDiscoveryResponse{TypeUrl: typ, Nonce: typ, SystemVersionInfo: "1"}
			for name, v := range snaps[0].GetVersionMap(typ) {
				resp.Resources = append(resp.Resources, &discovery.Resource{Name: name, Version: v})
			}
			s.OnStreamDeltaResponse(id, nil, resp)
			if err := s.OnStreamDeltaRequest(id, &discovery.DeltaDiscoveryRequest{TypeUrl: typ, ResponseNonce: typ}); err != nil {
				b.Fatal(err)
			}
		}
	}
	i := 0
	for b.Loop() {
		i++
		if err := s.Publish(ctx, snaps[i%2]); err != nil {
			b.Fatal(err)
		}
	}
	st, _ := s.Tracker().Get("node-0")
	if ts := st.Types[resource.ClusterType]; ts == nil || !ts.Unchanged {
		b.Fatalf("shards not counted unchanged: %+v", ts)
	}
}
