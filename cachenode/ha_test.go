package cachenode_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/portico-io/portico/cachenode/cluster"
	"github.com/portico-io/portico/cachenode/internal/kvtest"
	"github.com/portico-io/portico/cachenode/internal/proctest"
	"github.com/portico-io/portico/cachenode/slots"
	"github.com/portico-io/portico/cachenode/topology"
)

// haCluster is six cachenode processes, three primaries (0-2) and a replica
// of each (3-5, replica of i-3), with the slot map in a kvnode group.
type haCluster struct {
	t     *testing.T
	kv    *kvtest.Group
	pub   *topology.Client
	nodes []*haNode
}

type haNode struct {
	id              string
	resp, http, bus string
	proc            *proctest.Proc
}

func loopbackAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func (n *haNode) port() int {
	_, p, _ := net.SplitHostPort(n.resp)
	v, _ := strconv.Atoi(p)
	return v
}

func (n *haNode) busPort() int {
	_, p, _ := net.SplitHostPort(n.bus)
	v, _ := strconv.Atoi(p)
	return v
}

// startHA publishes the six-node map and starts the nodes; extra are more
// cachenode flags for every node.
func startHA(t *testing.T, extra ...string) *haCluster {
	t.Helper()
	h := &haCluster{t: t, kv: kvtest.Start(t, "cache")}
	name := "ha" + strconv.FormatInt(time.Now().UnixNano()%1e6, 10)
	h.pub = &topology.Client{Addrs: h.kv.HTTPAddrs, Cluster: name}
	bin := proctest.Build(t, "./cachenode/cmd/cachenode", "cachenode")
	dir := t.TempDir()
	spec := cluster.Spec{Epoch: 1}
	for i := range 6 {
		n := &haNode{id: nodeID(i), resp: loopbackAddr(t), http: loopbackAddr(t), bus: loopbackAddr(t)}
		ns := cluster.NodeSpec{ID: n.id, Host: "127.0.0.1", Port: n.port(), BusPort: n.busPort()}
		if i < 3 {
			ns.Slots = []string{clusterRanges[i]}
		} else {
			ns.ReplicaOf = nodeID(i - 3)
		}
		spec.Nodes = append(spec.Nodes, ns)
		n.proc = &proctest.Proc{Name: fmt.Sprintf("cachenode-%d", i), Bin: bin, Log: filepath.Join(dir, fmt.Sprintf("node-%d.log", i)),
			Args: append([]string{"--node-id=" + n.id, "--resp-addr=" + n.resp, "--http-addr=" + n.http, "--bus-addr=" + n.bus,
				"--cluster-kv-addrs=" + strings.Join(h.kv.HTTPAddrs, ","), "--cluster-name=" + name,
				"--cluster-topology-check=200ms", "--log-format=text", "--log-level=info"}, extra...)}
		h.nodes = append(h.nodes, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := h.pub.Publish(ctx, spec, 0); err != nil {
		t.Fatal(err)
	}
	for _, n := range h.nodes {
		if err := n.proc.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.proc.Kill)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range h.nodes {
				t.Logf("%s log tail:\n%s", n.proc.Name, n.proc.Tail(3000))
			}
		}
	})
	for _, n := range h.nodes {
		h.waitUp(n)
	}
	return h
}

// waitUp waits until n answers PING.
func (h *haCluster) waitUp(n *haNode) {
	h.t.Helper()
	c := redis.NewClient(&redis.Options{Addr: n.resp, Protocol: 2, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(30 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		if err := n.proc.Exited(); err != nil {
			h.t.Fatal(err)
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%s did not come up:\n%s", n.proc.Name, n.proc.Tail(2000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (h *haCluster) addrs() []string {
	var out []string
	for _, n := range h.nodes {
		out = append(out, n.resp)
	}
	return out
}

func (h *haCluster) direct(i int) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: h.nodes[i].resp, Protocol: 2, MaxRetries: -1})
	h.t.Cleanup(func() { c.Close() })
	return c
}

// waitReplicated waits until replica r holds the same keys as primary p
// (DBSIZE and every key of sample).
func (h *haCluster) waitReplicated(ctx context.Context, p, r int, sample map[string]string) {
	h.t.Helper()
	pc, rc := h.direct(p), h.direct(r)
	if err := rc.ReadOnly(ctx).Err(); err != nil {
		h.t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		want, _ := pc.DBSize(ctx).Result()
		got, _ := rc.DBSize(ctx).Result()
		ok := want == got
		for k, v := range sample {
			if !ok {
				break
			}
			if h.ownerIndex(k) != p {
				continue
			}
			if g, err := rc.Get(ctx, k).Result(); err != nil || g != v {
				ok = false
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			info, _ := rc.Info(ctx, "replication").Result()
			h.t.Fatalf("replica %d did not catch up with %d: %d of %d keys\n%s", r, p, got, want, info)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ownerIndex is the index of the node owning key's slot in the current
// stored map.
func (h *haCluster) ownerIndex(key string) int {
	t, err := h.pub.Load(context.Background())
	if err != nil {
		h.t.Fatal(err)
	}
	m, err := t.Spec.Map(nodeID(0))
	if err != nil {
		h.t.Fatal(err)
	}
	o := m.Owner(slotOfKey(key))
	for i, n := range h.nodes {
		if n.id == o.ID {
			return i
		}
	}
	return -1
}

// TestClusterReplicasAndPromotion: six processes, three primaries with a
// replica each, the map in kvnode. Writes through a go-redis ClusterClient
// reach every replica (full sync, then the stream); a READONLY
// ClusterClient reads from replicas; a replica refuses writes with MOVED;
// CLUSTER SHARDS and INFO replication report the pairs. Then a published
// map swaps one pair while a client keeps writing: the replica takes the
// writes and the old primary, now its replica, resyncs from it.
func TestClusterReplicasAndPromotion(t *testing.T) {
	h := startHA(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: h.addrs()[:3], Protocol: 3, MaxRedirects: 8})
	defer cc.Close()
	sample := map[string]string{}
	for i := range 1500 {
		k, v := "k:"+strconv.Itoa(i), "v"+strconv.Itoa(i)
		if err := cc.Set(ctx, k, v, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
		sample[k] = v
	}
	for p := range 3 {
		h.waitReplicated(ctx, p, p+3, sample)
	}
	// A READONLY cluster client reads everything, replicas included.
	ro := redis.NewClusterClient(&redis.ClusterOptions{Addrs: h.addrs()[3:], Protocol: 3, ReadOnly: true, RouteRandomly: true})
	defer ro.Close()
	for k, v := range sample {
		if g, err := ro.Get(ctx, k).Result(); err != nil || g != v {
			t.Fatalf("READONLY GET %s = %q, %v", k, g, err)
		}
	}
	// A replica refuses writes: MOVED to its primary (READONLY error for
	// keyless writes).
	r0 := h.direct(3)
	k0 := keyOwnedBy(h, 0)
	if err := r0.Set(ctx, k0, "x", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "MOVED ") || !strings.HasSuffix(err.Error(), h.nodes[0].resp) {
		t.Fatalf("SET on a replica: %v", err)
	}
	if err := r0.FlushDB(ctx).Err(); err == nil || !strings.HasPrefix(err.Error(), "READONLY") {
		t.Fatalf("FLUSHDB on a replica: %v", err)
	}
	info, _ := r0.Info(ctx, "replication").Result()
	if !strings.Contains(info, "role:slave") || !strings.Contains(info, "master_link_status:up") {
		t.Fatalf("replica INFO replication:\n%s", info)
	}
	pinfo, _ := h.direct(0).Info(ctx, "replication").Result()
	if !strings.Contains(pinfo, "role:master") || !strings.Contains(pinfo, "connected_slaves:1") {
		t.Fatalf("primary INFO replication:\n%s", pinfo)
	}
	shards, err := cc.ClusterShards(ctx).Result()
	if err != nil || len(shards) != 3 {
		t.Fatalf("CLUSTER SHARDS: %v, %v", shards, err)
	}
	for _, s := range shards {
		if len(s.Nodes) != 2 || s.Nodes[0].Role != "master" || s.Nodes[1].Role != "replica" || s.Nodes[1].Health != "online" {
			t.Fatalf("shard %+v", s)
		}
	}

	// Swap pair 0 while a writer runs.
	stop := make(chan struct{})
	writerDone := make(chan error, 1)
	var written []string
	go func() {
		defer close(writerDone)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			k := "w:{" + k0 + "}" + strconv.Itoa(i)
			if err := cc.Set(ctx, k, "1", 0).Err(); err != nil {
				writerDone <- fmt.Errorf("SET %s: %w", k, err)
				return
			}
			written = append(written, k)
		}
	}()
	time.Sleep(100 * time.Millisecond)
	cur, err := h.pub.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	next := cur.Spec
	next.Epoch++
	for i := range next.Nodes {
		switch next.Nodes[i].ID {
		case nodeID(0):
			next.Nodes[i].Slots, next.Nodes[i].ReplicaOf = nil, nodeID(3)
		case nodeID(3):
			next.Nodes[i].Slots, next.Nodes[i].ReplicaOf = []string{clusterRanges[0]}, ""
		}
	}
	if _, err := h.pub.Publish(ctx, next, cur.Revision); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	close(stop)
	if err := <-writerDone; err != nil {
		t.Fatalf("writer across the promotion: %v", err)
	}
	if len(written) == 0 {
		t.Fatal("the writer wrote nothing")
	}
	// Writes made while node 0 was still primary may be lost (asynchronous
	// replication), but the new primary takes every write after the switch
	// and the old primary converges to it.
	after := map[string]string{}
	for i := range 200 {
		k := "after:{" + k0 + "}" + strconv.Itoa(i)
		if err := cc.Set(ctx, k, "2", 0).Err(); err != nil {
			t.Fatalf("SET after the promotion: %v", err)
		}
		after[k] = "2"
	}
	h.waitReplicated(ctx, 3, 0, after)
	info, _ = h.direct(0).Info(ctx, "replication").Result()
	if !strings.Contains(info, "role:slave") || !strings.Contains(info, "master_port:"+strconv.Itoa(h.nodes[3].busPort())) {
		t.Fatalf("old primary after the promotion:\n%s", info)
	}
}

// keyOwnedBy returns a key whose slot node i owns in the first map.
func keyOwnedBy(h *haCluster, i int) string {
	for n := 0; ; n++ {
		k := "key" + strconv.Itoa(n)
		if owner(k) == i {
			return k
		}
	}
}

func slotOfKey(k string) int { return slots.Of([]byte(k)) }
