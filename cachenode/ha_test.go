package cachenode_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/portico-io/portico/cachenode/cluster"
	"github.com/portico-io/portico/cachenode/failover"
	"github.com/portico-io/portico/cachenode/internal/kvtest"
	"github.com/portico-io/portico/cachenode/internal/proctest"
	"github.com/portico-io/portico/cachenode/reshard"
	"github.com/portico-io/portico/cachenode/slots"
	"github.com/portico-io/portico/cachenode/topology"
	"github.com/portico-io/portico/internal/eventually" // blocking_test.go has a func named eventually
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/internal/tlsfiles"
)

// haCluster is six cachenode processes, three primaries (0-2) and a replica
// of each (3-5, replica of i-3), with the slot map in a kvnode group, all
// with certificates of one CA as in a real deployment: RESP over TLS, the
// bus on mutual TLS, probes and handovers over TLS with the nodes'
// identities, and the kvnodes called over TLS when they serve it.
type haCluster struct {
	t     *testing.T
	kv    *kvtest.Group
	pub   *topology.Client
	nodes []*haNode
	tls   *tls.Config // RESP clients' (respClientTLS)
}

type haNode struct {
	id              string
	resp, http, bus string
	proc            *proctest.Proc
}

// handedOut are the ports loopbackAddr gave this test process, so two
// nodes never get the same one before either binds it.
var handedOut sync.Map

// loopbackAddr picks a free loopback port with testdeps.FreePort: outside
// the ephemeral range, so an outgoing connection cannot take it between
// the pick and the node's bind (CI saw that with ports from 127.0.0.1:0).
func loopbackAddr(t *testing.T) string {
	for {
		p := testdeps.FreePort(t)
		if _, taken := handedOut.LoadOrStore(p, true); !taken {
			return net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		}
	}
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
// tlsArgs are the flags giving a node the certificate files c.
func tlsArgs(c tlsfiles.Config) []string {
	return []string{"--tls-cert-file=" + c.CertFile, "--tls-key-file=" + c.KeyFile, "--tls-ca-file=" + c.CAFile}
}

func startHA(t *testing.T, extra ...string) *haCluster {
	t.Helper()
	ca := nodeCA(t)
	h := &haCluster{t: t, kv: kvtest.StartWith(t, kvtest.Options{Keyspaces: []string{"cache"}, PKI: ca}), tls: respClientTLS(t)}
	name := "ha" + strconv.FormatInt(time.Now().UnixNano()%1e6, 10)
	h.pub = &topology.Client{Addrs: h.kv.URLs, Cluster: name, TLS: h.kv.TLS}
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
				"--cluster-kv-addrs=" + strings.Join(h.kv.URLs, ","), "--cluster-name=" + name,
				"--cluster-topology-check=200ms", "--log-format=text", "--log-level=info"}, append(tlsArgs(ca.Files(t, identity.CacheNode, nodeID(i))), extra...)...)}
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
	c := redis.NewClient(&redis.Options{Addr: n.resp, Protocol: 2, MaxRetries: -1, TLSConfig: h.tls})
	defer c.Close()
	if !eventually.Within(30*time.Second, func() bool {
		if c.Ping(context.Background()).Err() == nil {
			return true
		}
		if err := n.proc.Exited(); err != nil {
			h.t.Fatal(err)
		}
		return false
	}) {
		h.t.Fatalf("%s did not come up:\n%s", n.proc.Name, n.proc.Tail(2000))
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
	c := redis.NewClient(&redis.Options{Addr: h.nodes[i].resp, Protocol: 2, MaxRetries: -1, TLSConfig: h.tls})
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
	var want, got int64
	if !eventually.Within(20*time.Second, func() bool {
		want, _ = pc.DBSize(ctx).Result()
		got, _ = rc.DBSize(ctx).Result()
		if want != got {
			return false
		}
		owners := h.owners() // one read of the stored map per check, not one per key
		for k, v := range sample {
			if owners(k) != p {
				continue
			}
			if g, err := rc.Get(ctx, k).Result(); err != nil || g != v {
				return false
			}
		}
		return true
	}) {
		info, _ := rc.Info(ctx, "replication").Result()
		h.t.Fatalf("replica %d did not catch up with %d: %d of %d keys\n%s", r, p, got, want, info)
	}
}

// seed writes n keys through cc and waits until every replica has its
// primary's; it returns the keys and values.
func (h *haCluster) seed(ctx context.Context, cc *redis.ClusterClient, n int) map[string]string {
	h.t.Helper()
	sample := map[string]string{}
	for i := range n {
		k, v := "k:"+strconv.Itoa(i), "v"+strconv.Itoa(i)
		if err := cc.Set(ctx, k, v, 0).Err(); err != nil {
			h.t.Fatalf("SET %s: %v", k, err)
		}
		sample[k] = v
	}
	for p := range 3 {
		h.waitReplicated(ctx, p, p+3, sample)
	}
	return sample
}

// owners reads the stored map once and returns the index of the node
// owning a key's slot in it (a read costs a kvnode round trip over TLS:
// one per key made seeding 1500 keys take 15-20 s).
func (h *haCluster) owners() func(key string) int {
	t, err := h.pub.Load(context.Background())
	if err != nil {
		h.t.Fatal(err)
	}
	m, err := t.Spec.Map(nodeID(0))
	if err != nil {
		h.t.Fatal(err)
	}
	return func(key string) int {
		o := m.Owner(slotOfKey(key))
		for i, n := range h.nodes {
			if n.id == o.ID {
				return i
			}
		}
		return -1
	}
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
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: h.addrs()[:3:3], Protocol: 3, MaxRedirects: 8, TLSConfig: h.tls})
	defer cc.Close()
	sample := h.seed(ctx, cc, 1500)
	// A READONLY cluster client reads everything, replicas included.
	ro := redis.NewClusterClient(&redis.ClusterOptions{Addrs: h.addrs()[3:6:6], Protocol: 3, ReadOnly: true, RouteRandomly: true, TLSConfig: h.tls})
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
	// Resharding with replicas: 64 slots of node 0 move to node 1, and node
	// 1's replica receives the imported keys through node 1's stream.
	moved := map[string]string{}
	for k, v := range sample {
		if slotOfKey(k) < 64 {
			moved[k] = v
		}
	}
	if len(moved) == 0 {
		t.Fatal("no sample key in slots 0-63")
	}
	rs := &reshard.Resharder{Client: h.pub, Nodes: reshard.RESP{TLS: h.tls}, Batch: 64, StepTimeout: 30 * time.Second}
	if err := rs.Move(ctx, seq(0, 63), nodeID(1)); err != nil {
		t.Fatal(err)
	}
	h.waitReplicated(ctx, 1, 4, moved)
	// cc's slot map is stale: it follows MOVED to node 1, over TLS.
	for k, v := range moved {
		if g, err := cc.Get(ctx, k).Result(); err != nil || g != v {
			t.Fatalf("GET %s after the move = %q, %v", k, g, err)
		}
	}
	h.waitReplicated(ctx, 0, 3, nil) // the source's replica dropped them too

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
	var nWritten atomic.Int64 // len(written), for the test goroutine
	var writerExited atomic.Bool
	bounced := 0
	go func() {
		defer close(writerDone)
		defer writerExited.Store(true)
		retry := time.NewTicker(10 * time.Millisecond)
		defer retry.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			k := "w:{" + k0 + "}" + strconv.Itoa(i)
			// A map published by hand reaches the two nodes a few ms apart:
			// meanwhile each redirects to the other, and go-redis gives up
			// after MaxRedirects. Such a write did not happen; retry it.
			var err error
			for try := 0; try < 100; try++ {
				if err = cc.Set(ctx, k, "1", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "MOVED ") {
					break
				}
				bounced++
				<-retry.C
			}
			if err != nil {
				writerDone <- fmt.Errorf("SET %s: %w", k, err)
				return
			}
			written = append(written, k)
			nWritten.Add(1)
		}
	}()
	// writes waits until the writer has made n more writes (or stopped:
	// writerDone says why).
	writes := func(n int64, what string) {
		t.Helper()
		from := nWritten.Load()
		eventually.True(t, 30*time.Second, fmt.Sprintf("%d writes %s", n, what), func() bool {
			return nWritten.Load() >= from+n || writerExited.Load()
		})
	}
	writes(20, "before the swap")
	cur, err := h.pub.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	next := cur.Spec
	next.Epoch++
	var slots0 []string
	for _, n := range next.Nodes {
		if n.ID == nodeID(0) {
			slots0 = n.Slots
		}
	}
	for i := range next.Nodes {
		switch next.Nodes[i].ID {
		case nodeID(0):
			next.Nodes[i].Slots, next.Nodes[i].ReplicaOf = nil, nodeID(3)
		case nodeID(3):
			next.Nodes[i].Slots, next.Nodes[i].ReplicaOf = slots0, ""
		}
	}
	if _, err := h.pub.Publish(ctx, next, cur.Revision); err != nil {
		t.Fatal(err)
	}
	// The writer keeps writing until both nodes serve the swapped map, and
	// for 50 writes on it.
	nodeEpochs := reshard.RESP{TLS: h.tls}
	eventually.True(t, 30*time.Second, "nodes 0 and 3 serving the swapped map", func() bool {
		for _, i := range []int{0, 3} {
			if e, err := nodeEpochs.Epoch(ctx, h.nodes[i].resp); err != nil || e < next.Epoch {
				return false
			}
		}
		return true
	})
	writes(50, "on the swapped map")
	close(stop)
	if err := <-writerDone; err != nil {
		t.Fatalf("writer across the promotion: %v", err)
	}
	if len(written) == 0 {
		t.Fatal("the writer wrote nothing")
	}
	t.Logf("writer across a hand-published promotion: %d writes, %d bounced between the two nodes and retried", len(written), bounced)
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

// keyOwnedBy returns a key whose slot node i owns in the first map (and
// that is not among the slots 0-63 the replication test moves).
func keyOwnedBy(h *haCluster, i int) string {
	for n := 0; ; n++ {
		k := "key" + strconv.Itoa(n)
		if owner(k) == i && slotOfKey(k) >= 64 {
			return k
		}
	}
}

func slotOfKey(k string) int { return slots.Of([]byte(k)) }

func seq(lo, hi int) []int {
	var out []int
	for i := lo; i <= hi; i++ {
		out = append(out, i)
	}
	return out
}

// primaryOf returns the id of the node owning key's slot in the stored map
// and the map's epoch.
func (h *haCluster) storedOwner(ctx context.Context, key string) (string, *cluster.Map) {
	h.t.Helper()
	t, err := h.pub.Load(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	m, err := t.Spec.Map(t.Spec.Nodes[0].ID)
	if err != nil {
		h.t.Fatal(err)
	}
	return m.Owner(slotOfKey(key)).ID, m
}

// waitOwner waits until the stored map gives key's slot to node want.
func (h *haCluster) waitOwner(ctx context.Context, key, want string, within time.Duration) *cluster.Map {
	h.t.Helper()
	var o string
	var m *cluster.Map
	if !eventually.Within(within, func() bool {
		o, m = h.storedOwner(ctx, key)
		return o == want
	}) {
		h.t.Fatalf("the slot of %s is still owned by %s after %s, want %s", key, o, within, want)
	}
	return m
}

// TestClusterFailover: six processes with automatic failover (probes every
// 200 ms, fail after 3 s, 1 s write lease). With 1.5 s, a CI run on a
// starved machine (load 14) saw a primary's peers miss its probes that long
// before the test killed it: a real failover the script did not expect.
//   - SIGTERM a primary: it hands its slots to its replica before exiting
//     (a planned restart): no client error, no acknowledged write lost.
//   - SIGKILL a primary: a quorum of the other primaries reports it, its
//     replica is promoted with a higher epoch within seconds, a cluster
//     client keeps writing (errors only inside the failover window) and
//     every write acknowledged before the replica had caught up survives.
//   - The killed primary restarts: it finds itself a replica of the
//     promoted node in the stored map, resyncs from it, and its failed
//     flag is cleared.
//   - SIGSTOP another primary (a frozen process, as a partition or a long
//     pause looks to everyone else) until its replica is promoted, then
//     SIGCONT: from the moment it resumes, every write sent to it directly
//     is refused (write lease expired, then MOVED as a replica); it never
//     acknowledges a write for a slot it lost.
//   - The topology history: epochs strictly rise, one owner per slot in
//     every map.
func TestClusterFailover(t *testing.T) {
	h := startHA(t, "--failover-interval=200ms", "--fail-after=3s", "--failover-lease=1s")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// A dead primary cannot redirect: go-redis learns of the promotion at its
	// next slot-map reload (default every 60 s), so a client that should
	// ride through failovers reloads every second.
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: h.addrs(), Protocol: 3, MaxRedirects: 8, TLSConfig: h.tls,
		DialTimeout: 300 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond,
		ClusterStateReloadInterval: time.Second})
	defer cc.Close()
	sample := h.seed(ctx, cc, 600)

	// 0. A planned restart: SIGTERM primary 0 while a client writes to its
	// slots. It stops writes, waits for its replica's acknowledgement and
	// publishes the promotion itself: no write is refused for good, none
	// acknowledged is lost.
	k0 := keyOwnedBy(h, 0)
	var acked []string
	var nAcked atomic.Int64 // len(acked), for the test goroutine
	var ackerExited atomic.Bool
	stop0 := make(chan struct{})
	werr := make(chan error, 1)
	go func() {
		defer close(werr)
		defer ackerExited.Store(true)
		for i := 0; ; i++ {
			select {
			case <-stop0:
				return
			default:
			}
			k := "h:{" + k0 + "}" + strconv.Itoa(i)
			if err := cc.Set(ctx, k, strconv.Itoa(i), 0).Err(); err != nil {
				werr <- fmt.Errorf("SET %s during the handover: %w", k, err)
				return
			}
			acked = append(acked, k)
			nAcked.Add(1)
		}
	}()
	// acks waits until the writer has had n more writes acknowledged (or
	// stopped: werr says why).
	acks := func(n int64, what string) {
		t.Helper()
		from := nAcked.Load()
		eventually.True(t, 30*time.Second, fmt.Sprintf("%d acknowledged writes %s", n, what), func() bool {
			return nAcked.Load() >= from+n || ackerExited.Load()
		})
	}
	acks(20, "before the SIGTERM")
	termAt := time.Now()
	if err := h.nodes[0].proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	h.waitOwner(ctx, k0, nodeID(3), 10*time.Second)
	handedOver := time.Since(termAt)
	// The map node 0 published for its handover lists it as node 3's
	// replica, not failed. Read it now: node 0 exits after the handover,
	// and once it has been gone for --fail-after its peers rightly flag it
	// failed (under load the checks below can take that long).
	_, m0 := h.storedOwner(ctx, k0)
	if n := m0.Node(nodeID(0)); n.Failed || n.ReplicaOf < 0 || m0.Nodes[n.ReplicaOf].ID != nodeID(3) {
		t.Fatalf("node 0 after its handover: %+v", n)
	}
	// The writer keeps writing until node 3 serves the handover's map, and
	// for 50 writes on it.
	eventually.True(t, 30*time.Second, "node 3 serving the handover's map", func() bool {
		e, err := reshard.RESP{TLS: h.tls}.Epoch(ctx, h.nodes[3].resp)
		return err == nil && e >= m0.Epoch
	})
	acks(50, "on the handover's map")
	close(stop0)
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	for i, k := range acked {
		if err := cc.Get(ctx, k).Err(); err != nil {
			for j := range h.nodes {
				d := h.direct(j)
				d.ReadOnly(ctx)
				t.Logf("node %d: GET %s: %v; DBSIZE %d", j, k, d.Get(ctx, k).Err(), d.DBSize(ctx).Val())
			}
			t.Fatalf("a write acknowledged during the handover is lost (%d of %d): GET %s: %v", i, len(acked), k, err)
		}
	}
	t.Logf("SIGTERM → slots handed over in %s; %d writes acknowledged meanwhile, none lost", handedOver.Round(time.Millisecond), len(acked))
	h.nodes[0].proc.Kill() // reap it (it exits by itself after the handover)
	if err := h.nodes[0].proc.Start(); err != nil {
		t.Fatal(err)
	}
	h.waitUp(h.nodes[0])
	h.waitReplicated(ctx, 3, 0, map[string]string{acked[len(acked)-1]: strconv.Itoa(len(acked) - 1)})

	// 1. Kill primary 1.
	k1 := keyOwnedBy(h, 1)
	stop := make(chan struct{})
	type result struct {
		at  time.Time
		err error
	}
	results := make(chan result, 1<<16)
	var nOK atomic.Int64 // successful writes so far
	go func() {
		backoff := time.NewTicker(20 * time.Millisecond)
		defer backoff.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				close(results)
				return
			default:
			}
			err := cc.Set(ctx, "f:{"+k1+"}"+strconv.Itoa(i), "x", 0).Err()
			results <- result{time.Now(), err}
			if err != nil {
				<-backoff.C
			} else {
				nOK.Add(1)
			}
		}
	}()
	eventually.True(t, 30*time.Second, "20 writes before the kill", func() bool { return nOK.Load() >= 20 })
	if o := h.owners()(k1); o != 1 {
		t.Fatalf("before the kill, %s is served by node %d, not 1: a failover the test did not cause", k1, o)
	}
	killed := time.Now()
	h.nodes[1].proc.Kill()
	m := h.waitOwner(ctx, k1, nodeID(4), 15*time.Second)
	promoted := time.Since(killed)
	if n := m.Node(nodeID(1)); n.ReplicaOf < 0 || m.Nodes[n.ReplicaOf].ID != nodeID(4) || !n.Failed {
		t.Fatalf("the dead primary in the new map: %+v", n)
	}
	// Writes flow again: wait for a success after the promotion.
	var recovered time.Duration
	var probeErr error
	if !eventually.Within(15*time.Second, func() bool {
		if probeErr = cc.Set(ctx, "probe:{"+k1+"}", "1", 0).Err(); probeErr != nil {
			return false
		}
		recovered = time.Since(killed)
		return true
	}) {
		t.Fatalf("writes to the failed-over slots still fail: %v", probeErr)
	}
	close(stop)
	var okBefore, failed, okAfter int
	var lastErr error
	for r := range results {
		switch {
		case r.err != nil:
			failed++
			lastErr = r.err
		case r.at.Before(killed):
			okBefore++
		default:
			okAfter++
		}
	}
	t.Logf("kill → promotion published %s, → writes accepted again %s; writer: %d ok before, %d failed (last: %v), %d ok after",
		promoted.Round(time.Millisecond), recovered.Round(time.Millisecond), okBefore, failed, lastErr, okAfter)
	for k, v := range sample {
		if g, err := cc.Get(ctx, k).Result(); err != nil || g != v {
			t.Fatalf("after the failover GET %s = %q, %v; want %q", k, g, err, v)
		}
	}

	// 2. The old primary returns as a replica of the promoted node.
	if err := h.nodes[1].proc.Start(); err != nil {
		t.Fatal(err)
	}
	h.waitUp(h.nodes[1])
	h.waitReplicated(ctx, 4, 1, map[string]string{"probe:{" + k1 + "}": "1"})
	eventually.True(t, 15*time.Second, "the returned node's failed flag cleared", func() bool {
		_, m = h.storedOwner(ctx, k1)
		return !m.Node(nodeID(1)).Failed
	})
	if err := h.direct(1).Set(ctx, k1, "x", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "MOVED ") {
		t.Fatalf("a write to the returned old primary: %v", err)
	}

	// 3. Freeze primary 2 until its replica is promoted, then resume it
	// and write to it directly.
	k2 := keyOwnedBy(h, 2)
	old := h.direct(2)
	if err := old.Set(ctx, k2, "before", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// Replication is asynchronous: a write the replica has not received
	// when its primary stops is what a failover may lose. Wait for it.
	h.waitReplicated(ctx, 2, 5, map[string]string{k2: "before"})
	if err := h.nodes[2].proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	h.waitOwner(ctx, k2, nodeID(5), 15*time.Second)
	if err := h.nodes[2].proc.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// Write to it from the moment it resumes until it serves the map that
	// makes it a replica (50 MOVED in a row) and at least 200 times: every
	// write is refused, through the whole window in which it could still
	// believe itself a primary.
	refusals := map[string]int{}
	moved := 0
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; i < 200 || moved < 50; i++ {
		err := old.Set(ctx, k2, "stale-"+strconv.Itoa(i), 0).Err()
		if err == nil {
			t.Fatalf("write %d to the resumed old primary was acknowledged", i)
		}
		kind := strings.SplitN(err.Error(), " ", 2)[0]
		refusals[kind]++
		if kind == "MOVED" {
			moved++
		} else {
			moved = 0
		}
		if time.Now().After(deadline) {
			t.Fatalf("the resumed old primary does not redirect as a replica after %s: refused %v, last %v", 30*time.Second, refusals, err)
		}
	}
	t.Logf("writes to the resumed old primary: refused %v", refusals)
	if v, err := cc.Get(ctx, k2).Result(); err != nil || v != "before" {
		t.Fatalf("GET %s through the cluster after the second failover = %q, %v", k2, v, err)
	}

	hist, err := failover.History(ctx, h.pub)
	if err != nil {
		t.Fatal(err)
	}
	if err := failover.CheckHistory(hist); err != nil {
		t.Fatal(err)
	}
	if len(hist) < 3 {
		t.Fatalf("history has %d versions, want the first map and two promotions", len(hist))
	}
}
