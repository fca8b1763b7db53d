package xdsclient_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/portico-io/portico/internal/xdsclient"
	"github.com/portico-io/portico/internal/xdstest"
)

// wire counts what arrives on the client's streams, per response.
type wire struct {
	mu    sync.Mutex
	resps []wireResp
}

type wireResp struct {
	resources, removed, bytes int
	delta                     bool
}

func (w *wire) dialOption() grpc.DialOption {
	return grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := streamer(ctx, desc, cc, method, opts...)
		return &countingStream{ClientStream: s, w: w}, err
	})
}

func (w *wire) since(i int) []wireResp {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]wireResp(nil), w.resps[i:]...)
}

func (w *wire) len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.resps)
}

type countingStream struct {
	grpc.ClientStream
	w *wire
}

func (s *countingStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		return err
	}
	r := wireResp{bytes: proto.Size(m.(proto.Message))}
	switch m := m.(type) {
	case *discovery.DeltaDiscoveryResponse:
		r.resources, r.removed, r.delta = len(m.GetResources()), len(m.GetRemovedResources()), true
	case *discovery.DiscoveryResponse:
		r.resources = len(m.GetResources())
	}
	s.w.mu.Lock()
	s.w.resps = append(s.w.resps, r)
	s.w.mu.Unlock()
	return nil
}

// shards is a snapshot of 256 clusters standing in for ApiKeyShards, each
// about size bytes; changed[i] gives shard i another body.
func shards(t *testing.T, version string, size int, changed map[int]string, drop int) *cache.Snapshot {
	t.Helper()
	var rs []types.Resource
	for i := range 256 {
		if i == drop {
			continue
		}
		body := changed[i]
		if body == "" {
			body = fmt.Sprintf("%0*d", size, i)
		}
		rs = append(rs, &clusterv3.Cluster{Name: fmt.Sprintf("shard-%02x", i), AltStatName: body})
	}
	snap, err := cache.NewSnapshot(version, map[resource.Type][]types.Resource{resource.ClusterType: rs})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// TestDeltaSendsOnlyTheChange runs the client on both protocols against
// go-control-plane's server: with delta, one changed shard arrives alone
// (and a removal as a name), while the applier still gets the whole state;
// a NACK keeps the last good state, and a resubscription reports what the
// client holds so nothing is sent again.
func TestDeltaSendsOnlyTheChange(t *testing.T) {
	for _, proto := range []string{xdsclient.ProtocolDelta, xdsclient.ProtocolSotW} {
		t.Run(proto, func(t *testing.T) { testProtocol(t, proto) })
	}
}

func testProtocol(t *testing.T, protocol string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	snaps := cache.NewSnapshotCache(false, cache.IDHash{}, nil)
	const node = "n1"
	if err := snaps.SetSnapshot(ctx, node, shards(t, "1", 2000, nil, -1)); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(g, serverv3.NewServer(ctx, snaps, nil))
	go func() { _ = g.Serve(lis) }()
	defer g.Stop()

	type state struct {
		version string
		names   []string
		bodies  map[string]string
	}
	applied := make(chan state, 16)
	var reject sync.Map
	w := &wire{}
	runClient(t, xdsclient.Config{Addr: lis.Addr().String(), Node: &corev3.Node{Id: node}, Types: []string{resource.ClusterType},
		InsecurePlaintext: true, Protocol: protocol, DialOptions: []grpc.DialOption{w.dialOption()},
		Apply: func(_, version string, res []*anypb.Any) error {
			if _, bad := reject.Load(version); bad {
				return fmt.Errorf("version %s rejected by the test", version)
			}
			st := state{version: version, bodies: map[string]string{}}
			for _, a := range res {
				var c clusterv3.Cluster
				if err := a.UnmarshalTo(&c); err != nil {
					return err
				}
				st.names = append(st.names, c.GetName())
				st.bodies[c.GetName()] = c.GetAltStatName()
			}
			applied <- st
			return nil
		}})
	next := func(want string) state {
		t.Helper()
		select {
		case st := <-applied:
			if st.version != want {
				t.Fatalf("applied version %s, want %s", st.version, want)
			}
			return st
		case <-time.After(10 * time.Second):
			t.Fatalf("version %s not applied", want)
			return state{}
		}
	}
	st := next("1")
	if len(st.names) != 256 {
		t.Fatalf("first state: %d resources", len(st.names))
	}
	full := w.since(0)[0].bytes

	// One shard changes.
	mark := w.len()
	if err := snaps.SetSnapshot(ctx, node, shards(t, "2", 2000, map[int]string{7: "changed"}, -1)); err != nil {
		t.Fatal(err)
	}
	st = next("2")
	if len(st.names) != 256 || st.bodies["shard-07"] != "changed" || st.bodies["shard-08"] == "" {
		t.Fatalf("after one change: %d resources, shard-07 %q", len(st.names), st.bodies["shard-07"])
	}
	got := w.since(mark)
	t.Logf("%s: first response %d bytes; one changed shard: %+v", protocol, full, got)
	if protocol == xdsclient.ProtocolDelta {
		if len(got) != 1 || got[0].resources != 1 || got[0].bytes > 4000 {
			t.Fatalf("delta after one change: %+v, want one response with one resource", got)
		}
	} else if len(got) != 1 || got[0].resources != 256 {
		t.Fatalf("sotw after one change: %+v", got)
	}

	// A shard goes away: delta names it; the applier gets the rest.
	mark = w.len()
	if err := snaps.SetSnapshot(ctx, node, shards(t, "3", 2000, map[int]string{7: "changed"}, 9)); err != nil {
		t.Fatal(err)
	}
	st = next("3")
	if len(st.names) != 255 || st.bodies["shard-09"] != "" {
		t.Fatalf("after a removal: %d resources", len(st.names))
	}
	if got := w.since(mark); protocol == xdsclient.ProtocolDelta && (len(got) != 1 || got[0].resources != 0 || got[0].removed != 1) {
		t.Fatalf("delta after a removal: %+v", got)
	}

	// A rejected version leaves the last good state: the next accepted
	// change merges onto version 3, not onto what was rejected.
	reject.Store("4", true)
	if err := snaps.SetSnapshot(ctx, node, shards(t, "4", 2000, map[int]string{7: "changed", 1: "rejected"}, 9)); err != nil {
		t.Fatal(err)
	}
	xdstest.Eventually(t, 10*time.Second, "the client to apply the update", func() bool { return w.len() > mark+1 })
	if err := snaps.SetSnapshot(ctx, node, shards(t, "5", 2000, map[int]string{7: "changed", 2: "five"}, 9)); err != nil {
		t.Fatal(err)
	}
	st = next("5")
	if st.bodies["shard-02"] != "five" || st.bodies["shard-07"] != "changed" || len(st.names) != 255 {
		t.Fatalf("after a NACK and a good version: shard-02 %q shard-07 %q, %d resources", st.bodies["shard-02"], st.bodies["shard-07"], len(st.names))
	}
	if protocol == xdsclient.ProtocolDelta && st.bodies["shard-01"] == "rejected" {
		t.Fatal("a rejected resource reached the state")
	}
}

// The zero Protocol is delta; an unknown one is refused.
func TestDefaultProtocolIsDelta(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	snaps := cache.NewSnapshotCache(false, cache.IDHash{}, nil)
	if err := snaps.SetSnapshot(ctx, "n1", shards(t, "1", 10, nil, -1)); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(g, serverv3.NewServer(ctx, snaps, nil))
	go func() { _ = g.Serve(lis) }()
	defer g.Stop()
	w := &wire{}
	applied := make(chan string, 4)
	runClient(t, xdsclient.Config{Addr: lis.Addr().String(), Node: &corev3.Node{Id: "n1"}, Types: []string{resource.ClusterType},
		InsecurePlaintext: true, DialOptions: []grpc.DialOption{w.dialOption()},
		Apply: func(_, version string, _ []*anypb.Any) error { applied <- version; return nil }})
	select {
	case <-applied:
	case <-time.After(10 * time.Second):
		t.Fatal("nothing applied")
	}
	if got := w.since(0); len(got) == 0 || !got[0].delta {
		t.Fatalf("responses %+v: want delta ones", got)
	}
	err = xdsclient.Run(ctx, xdsclient.Config{Addr: lis.Addr().String(), Types: []string{resource.ClusterType}, InsecurePlaintext: true,
		Protocol: "incremental", Apply: func(string, string, []*anypb.Any) error { return nil }})
	if !errors.Is(err, xdsclient.ErrConfig) {
		t.Fatalf("Protocol incremental: %v, want ErrConfig", err)
	}
}
