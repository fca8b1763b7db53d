package xds_test

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/portico-io/portico/controlplane/nodes"
	"github.com/portico-io/portico/internal/xdsclient"
	"github.com/portico-io/portico/internal/xdstest"
)

// Two types stand in for extauthz's: clusters for the API-key shards (one
// changes at a time), a route configuration for a type that rarely does.
const (
	shardType = resource.ClusterType
	otherType = resource.RouteType
	numShards = 16
)

// content is what one config version holds: shard bodies that differ from
// the default, and the route configuration's virtual host.
type content struct {
	shards map[int]string
	route  string
}

func (c content) body(i int) string {
	if b, ok := c.shards[i]; ok {
		return b
	}
	return fmt.Sprintf("shard %d", i)
}

func (c content) snapshot(t *testing.T, version int) *cache.Snapshot {
	t.Helper()
	var shards []types.Resource
	for i := range numShards {
		shards = append(shards, &clusterv3.Cluster{Name: fmt.Sprintf("shard-%02x", i), AltStatName: c.body(i)})
	}
	rc := &routev3.RouteConfiguration{Name: "routes", VirtualHosts: []*routev3.VirtualHost{{Name: c.route, Domains: []string{"*"}}}}
	snap, err := cache.NewSnapshot(fmt.Sprint(version), map[resource.Type][]types.Resource{shardType: shards, otherType: {rc}})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// client is an xdsclient (Portico's own xDS client) whose applier keeps the
// state it accepted per type and rejects any shard with body "bad".
type client struct {
	mu      sync.Mutex
	state   map[string]map[string]string // type → name → body
	applied map[string]int               // type → applications
	nacks   int
}

func (c *client) apply(typeURL, _ string, res []*anypb.Any) error {
	st := map[string]string{}
	for _, a := range res {
		m, err := a.UnmarshalNew()
		if err != nil {
			return err
		}
		switch m := m.(type) {
		case *clusterv3.Cluster:
			if m.GetAltStatName() == "bad" {
				c.mu.Lock()
				c.nacks++
				c.mu.Unlock()
				return fmt.Errorf("shard %s is bad", m.GetName())
			}
			st[m.GetName()] = m.GetAltStatName()
		case *routev3.RouteConfiguration:
			st[m.GetName()] = m.GetVirtualHosts()[0].GetName()
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.state[typeURL] = st
	c.applied[typeURL]++
	return nil
}

// holds reports whether the client's accepted state is want.
func (c *client) holds(want content) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state[otherType]["routes"] != want.route || len(c.state[shardType]) != numShards {
		return false
	}
	for i := range numShards {
		if c.state[shardType][fmt.Sprintf("shard-%02x", i)] != want.body(i) {
			return false
		}
	}
	return true
}

func (c *client) counts() (applied map[string]int, nacks int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.applied), c.nacks
}

// runXDSClient runs an xdsclient as node id until stop is called (or the
// test ends).
func runXDSClient(t *testing.T, addr, id, protocol string) (c *client, stop func()) {
	t.Helper()
	c = &client{state: map[string]map[string]string{}, applied: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- xdsclient.Run(ctx, xdsclient.Config{Addr: addr, Node: &corev3.Node{Id: id, Cluster: "portico-extauthz"},
			Types: []string{shardType, otherType}, Apply: c.apply, InsecurePlaintext: true, Protocol: protocol,
			MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("xdsclient %s: %v", id, err)
			}
		})
	}
	t.Cleanup(stop)
	return c, stop
}

func typeStatus(tr *nodes.Tracker, node, typeURL string) nodes.TypeStatus {
	st, ok := tr.Get(node)
	if !ok || st.Types[typeURL] == nil {
		return nodes.TypeStatus{}
	}
	return *st.Types[typeURL]
}

// atVersion waits until node has both types at version v.
func atVersion(t *testing.T, tr *nodes.Tracker, node string, v int) {
	t.Helper()
	want := fmt.Sprint(v)
	xdstest.Eventually(t, 10*time.Second, fmt.Sprintf("node %s at version %s of every type", node, want), func() bool {
		return typeStatus(tr, node, shardType).AckedVersion == want && typeStatus(tr, node, otherType).AckedVersion == want
	})
}

// TestDeltaNodeViewFollowsEveryVersion runs a delta client (and a state of
// the world one beside it) through versions that change one type, the
// other, a shard the client rejects, and a control-plane restart. The node
// view must show every type a version leaves unchanged at that version
// without a response (go-control-plane sends none), a changed type only
// once the client answers (a NACK stays a NACK, at every version keeping
// the rejected shard), and the client must hold exactly what the view says.
func TestDeltaNodeViewFollowsEveryVersion(t *testing.T) {
	tr := nodes.NewTracker()
	cp := startControlPlane(t, "127.0.0.1:0", tr)
	ctx := context.Background()
	version := 0
	publish := func(cp *controlPlane, c content) {
		t.Helper()
		version++
		if err := cp.srv.Publish(ctx, c.snapshot(t, version)); err != nil {
			t.Fatal(err)
		}
	}
	cur := content{route: "r1"}
	publish(cp, cur)
	dc, stopDelta := runXDSClient(t, cp.addr, "delta-1", xdsclient.ProtocolDelta)
	sc, _ := runXDSClient(t, cp.addr, "sotw-1", xdsclient.ProtocolSotW)
	atVersion(t, tr, "delta-1", 1)
	atVersion(t, tr, "sotw-1", 1)

	// Version 2 changes the routes only: the shards are not sent to the
	// delta client, yet it is at version 2 for them.
	before, _ := dc.counts()
	cur.route = "r2"
	publish(cp, cur)
	atVersion(t, tr, "delta-1", 2)
	atVersion(t, tr, "sotw-1", 2)
	if ts := typeStatus(tr, "delta-1", shardType); !ts.Unchanged {
		t.Errorf("delta shards at version 2: %+v, want unchanged (no response)", ts)
	}
	if ts := typeStatus(tr, "delta-1", otherType); ts.Unchanged {
		t.Errorf("delta routes at version 2 were sent: %+v, want ACKed", ts)
	}
	if ts := typeStatus(tr, "sotw-1", shardType); ts.Unchanged {
		t.Errorf("state of the world shards: %+v, want ACKed", ts)
	}
	xdstest.Eventually(t, 10*time.Second, "the delta client to apply version 2", func() bool { return dc.holds(cur) })
	if after, _ := dc.counts(); after[shardType] != before[shardType] {
		t.Fatalf("shards applied %d times, want %d: an unchanged type was sent", after[shardType], before[shardType])
	}

	// Version 3 changes one shard: a real ACK, and the routes unchanged.
	cur.shards = map[int]string{5: "five"}
	publish(cp, cur)
	atVersion(t, tr, "delta-1", 3)
	if s, o := typeStatus(tr, "delta-1", shardType), typeStatus(tr, "delta-1", otherType); s.Unchanged || !o.Unchanged {
		t.Errorf("version 3: shards %+v (want ACKed), routes %+v (want unchanged)", s, o)
	}
	xdstest.Eventually(t, 10*time.Second, "the delta client to apply version 3", func() bool { return dc.holds(cur) })

	// Version 4 brings a shard the client rejects: the shards are NACKed
	// at 4 and stay ACKed at 3; the routes are at 4. No re-send loop.
	good := cur
	bad := content{shards: map[int]string{5: "five", 7: "bad"}, route: cur.route}
	publish(cp, bad)
	nacked := func(v int) func() bool {
		return func() bool {
			ts := typeStatus(tr, "delta-1", shardType)
			return ts.Nack != nil && ts.Nack.Version == fmt.Sprint(v)
		}
	}
	xdstest.Eventually(t, 10*time.Second, "the NACK of version 4", nacked(4))
	if ts := typeStatus(tr, "delta-1", shardType); ts.AckedVersion != "3" {
		t.Fatalf("shards after a NACK: %+v, want ACKed at 3", ts)
	}
	xdstest.Eventually(t, 10*time.Second, "routes at 4", func() bool { return typeStatus(tr, "delta-1", otherType).AckedVersion == "4" })
	_, n := dc.counts()
	xdstest.Consistently(t, 300*time.Millisecond, "no re-send of the rejected version", func() bool { _, m := dc.counts(); return m == n })
	if !dc.holds(good) {
		t.Fatal("the client left its last good state after a NACK")
	}

	// Version 5 keeps the bad shard and changes the routes: go-control-plane
	// alone would diff against the rejected state and send nothing for the
	// shards; they must be sent again, and NACKed at 5.
	bad.route = "r5"
	publish(cp, bad)
	xdstest.Eventually(t, 10*time.Second, "the NACK of version 5 (the rejected shard sent again)", nacked(5))
	if ts := typeStatus(tr, "delta-1", shardType); ts.AckedVersion != "3" {
		t.Fatalf("shards at version 5: %+v, want still ACKed at 3", ts)
	}

	// Version 6 changes another shard and keeps the bad one: not an ACK of
	// a state missing the rejected shard, but another NACK.
	bad.shards[9] = "nine"
	publish(cp, bad)
	xdstest.Eventually(t, 10*time.Second, "the NACK of version 6", nacked(6))
	if ts := typeStatus(tr, "delta-1", shardType); ts.AckedVersion != "3" {
		t.Fatalf("shards at version 6: %+v, want still ACKed at 3", ts)
	}

	// Version 7 fixes it: ACKed, and the client holds exactly version 7.
	cur = content{shards: map[int]string{5: "five", 7: "seven", 9: "nine"}, route: "r5"}
	publish(cp, cur)
	atVersion(t, tr, "delta-1", 7)
	xdstest.Eventually(t, 10*time.Second, "the delta client to hold version 7", func() bool { return dc.holds(cur) })

	// Version 8 is rejected; version 9 goes back to version 7's shards. The
	// shard version 8 named is sent again (a client may have kept part of
	// a rejected response: Envoy does) and ACKed, the NACK of 8 is kept.
	publish(cp, content{shards: map[int]string{5: "five", 7: "seven", 9: "nine", 3: "bad"}, route: "r5"})
	xdstest.Eventually(t, 10*time.Second, "the NACK of version 8", nacked(8))
	cur.route = "r9"
	publish(cp, cur)
	atVersion(t, tr, "delta-1", 9)
	if ts := typeStatus(tr, "delta-1", shardType); ts.Unchanged || ts.Nack == nil || ts.Nack.Version != "8" {
		t.Fatalf("shards at version 9: %+v, want ACKed, the NACK of 8 kept", ts)
	}
	xdstest.Eventually(t, 10*time.Second, "the delta client to hold version 9", func() bool { return dc.holds(cur) })

	// From there an unchanged type is current without a response again.
	cur.route = "r10"
	publish(cp, cur)
	atVersion(t, tr, "delta-1", 10)
	if ts := typeStatus(tr, "delta-1", shardType); !ts.Unchanged {
		t.Fatalf("shards at version 10: %+v, want unchanged", ts)
	}
	atVersion(t, tr, "sotw-1", 10)
	if !sc.holds(cur) {
		t.Fatal("the state of the world client does not hold version 10")
	}

	// The control plane restarts: the client reconnects reporting what it
	// holds, and a new tracker sees it at the new versions from there.
	cp.stop()
	tr2 := nodes.NewTracker()
	cp2 := startControlPlane(t, cp.addr, tr2)
	cur.route = "r11"
	publish(cp2, cur)
	atVersion(t, tr2, "delta-1", 11)
	cur.route = "r12"
	publish(cp2, cur)
	atVersion(t, tr2, "delta-1", 12)
	if ts := typeStatus(tr2, "delta-1", shardType); !ts.Unchanged {
		t.Errorf("shards at version 12 after the reconnect: %+v, want unchanged", ts)
	}
	xdstest.Eventually(t, 10*time.Second, "the delta client to hold version 12", func() bool { return dc.holds(cur) })

	// The node leaves: it is no longer listed, and publishing goes on.
	stopDelta()
	xdstest.Eventually(t, 10*time.Second, "the delta node to leave", func() bool { _, ok := tr2.Get("delta-1"); return !ok })
	cur.route = "r13"
	publish(cp2, cur)
	atVersion(t, tr2, "sotw-1", 13)
	if _, ok := tr2.Get("delta-1"); ok {
		t.Fatal("a departed delta node is listed again")
	}
}

// A delta client subscribed to some resources by name is current at a
// version that changes only others, and waits for its ACK when one of its
// own changes.
func TestDeltaNamedSubscription(t *testing.T) {
	tr := nodes.NewTracker()
	cp := startControlPlane(t, "127.0.0.1:0", tr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := cp.srv.Publish(ctx, content{route: "r"}.snapshot(t, 1)); err != nil {
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
	if err := s.Send(&discovery.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "named-1"}, TypeUrl: shardType,
		ResourceNamesSubscribe: []string{"shard-01"}}); err != nil {
		t.Fatal(err)
	}
	ack := func(want string, resources int) {
		t.Helper()
		r := deltaRecv(t, s, 5*time.Second)
		if r.GetSystemVersionInfo() != want || len(r.GetResources()) != resources {
			t.Fatalf("response: version %q, %d resources; want %s, %d", r.GetSystemVersionInfo(), len(r.GetResources()), want, resources)
		}
		if err := s.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: shardType, ResponseNonce: r.GetNonce()}); err != nil {
			t.Fatal(err)
		}
	}
	ack("1", 1)
	xdstest.Eventually(t, 5*time.Second, "the ACK of 1", func() bool { return typeStatus(tr, "named-1", shardType).AckedVersion == "1" })

	// Version 2 changes a shard the client did not ask for.
	if err := cp.srv.Publish(ctx, content{shards: map[int]string{2: "two"}, route: "r"}.snapshot(t, 2)); err != nil {
		t.Fatal(err)
	}
	xdstest.Eventually(t, 5*time.Second, "unchanged at 2", func() bool {
		ts := typeStatus(tr, "named-1", shardType)
		return ts.AckedVersion == "2" && ts.Unchanged
	})

	// Version 3 changes its shard: sent, and current only once ACKed.
	if err := cp.srv.Publish(ctx, content{shards: map[int]string{1: "one", 2: "two"}, route: "r"}.snapshot(t, 3)); err != nil {
		t.Fatal(err)
	}
	xdstest.Eventually(t, 5*time.Second, "version 3 sent", func() bool { return typeStatus(tr, "named-1", shardType).SentVersion == "3" })
	if ts := typeStatus(tr, "named-1", shardType); ts.AckedVersion != "2" {
		t.Fatalf("before its ACK: %+v", ts)
	}
	ack("3", 1)
	xdstest.Eventually(t, 5*time.Second, "the ACK of 3", func() bool {
		ts := typeStatus(tr, "named-1", shardType)
		return ts.AckedVersion == "3" && !ts.Unchanged
	})
}
