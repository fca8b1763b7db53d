package cachenode_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/portico-io/portico/cachenode"
	"github.com/portico-io/portico/cachenode/cluster"
	"github.com/portico-io/portico/cachenode/internal/kvtest"
	"github.com/portico-io/portico/cachenode/slots"
	"github.com/portico-io/portico/cachenode/topology"
	"github.com/portico-io/portico/internal/eventually" // blocking_test.go has a func named eventually
	"github.com/portico-io/portico/internal/xdstest"
)

// topoSpec is a map of the three nodes on ports with ranges[i] for node i.
func topoSpec(epoch uint64, ports []string, ranges [][]string) cluster.Spec {
	s := cluster.Spec{Epoch: epoch}
	for i, p := range ports {
		port, _ := strconv.Atoi(p)
		s.Nodes = append(s.Nodes, cluster.NodeSpec{ID: nodeID(i), Host: "127.0.0.1", Port: port, BusPort: busPort(p), Slots: ranges[i]})
	}
	return s
}

// keyInSlots returns a key whose slot is within [lo, hi].
func keyInSlots(lo, hi int) string {
	for i := 0; ; i++ {
		k := "k" + strconv.Itoa(i)
		if s := slots.Of([]byte(k)); s >= lo && s <= hi {
			return k
		}
	}
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestClusterTopologyFromKVNode: three cache nodes follow a slot map
// stored in a real 3-process kvnode Raft group.
func TestClusterTopologyFromKVNode(t *testing.T) {
	g := kvtest.Start(t, "cache")
	c, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pub := &topology.Client{Addrs: g.HTTPAddrs, Cluster: "test"}
	ports := []string{freePort(t), freePort(t), freePort(t)}
	initial := [][]string{{"0-5460"}, {"5461-10922"}, {"10923-16383"}}
	r1, err := pub.Publish(c, topoSpec(1, ports, initial), 0)
	if err != nil {
		t.Fatal(err)
	}

	applied := make([]chan error, 3)
	nodes := make([]*node, 3)
	for i, p := range ports {
		applied[i] = make(chan error, 16)
		nodes[i] = startNode(t, withConfig(func(cfg *cachenode.Config) {
			cfg.RESPAddr = "127.0.0.1:" + p
			cfg.NodeID = nodeID(i)
			cfg.ClusterKVAddrs = g.HTTPAddrs
			cfg.ClusterName = "test"
			cfg.ClusterTopologyCheck = 200 * time.Millisecond
			cfg.OnTopologyApply = func(_ uint64, err error) {
				select {
				case applied[i] <- err:
				default:
				}
			}
		}))
	}
	addrs := []string{nodes[0].addrs.RESP, nodes[1].addrs.RESP, nodes[2].addrs.RESP}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs[:1], Protocol: 3, MaxRedirects: 5})
	defer cc.Close()
	direct := make([]*redis.Client, 3)
	for i := range nodes {
		direct[i] = nodes[i].client(t)
	}
	for i := range 300 {
		k := "key:" + strconv.Itoa(i)
		if err := cc.Set(c, k, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
		if v, err := cc.Get(c, k).Int(); err != nil || v != i {
			t.Fatalf("GET %s = %v, %v", k, v, err)
		}
	}
	for i := range nodes {
		if info := direct[i].ClusterInfo(c).Val(); !strings.Contains(info, "cluster_current_epoch:1\r\n") {
			t.Fatalf("node %d: %s", i, info)
		}
	}

	// converge waits until every node routes key to owner (MOVED from the
	// others) and reports epoch; it returns how long that took.
	converge := func(epoch int, key string, owner int) time.Duration {
		t.Helper()
		start := time.Now()
		slot := slots.Of([]byte(key))
		wantMoved := fmt.Sprintf("MOVED %d %s", slot, addrs[owner])
		eventually.True(t, 5*time.Second, fmt.Sprintf("the nodes to converge on epoch %d (%s on node %d)", epoch, key, owner), func() bool {
			for i := range nodes {
				err := direct[i].Get(c, key).Err()
				info := direct[i].ClusterInfo(c).Val()
				if !strings.Contains(info, fmt.Sprintf("cluster_current_epoch:%d\r\n", epoch)) {
					return false
				} else if i == owner && err != nil && !errors.Is(err, redis.Nil) {
					return false
				} else if i != owner && (err == nil || err.Error() != wantMoved) {
					return false
				}
			}
			return true
		})
		return time.Since(start)
	}

	// Epoch 2 moves slots 0-1000 from node 0 to node 2.
	moved := keyInSlots(0, 1000)
	if err := direct[0].Set(c, moved, "before", 0).Err(); err != nil {
		t.Fatal(err)
	}
	epoch2 := [][]string{{"1001-5460"}, {"5461-10922"}, {"0-1000", "10923-16383"}}
	r2, err := pub.Publish(c, topoSpec(2, ports, epoch2), r1)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("epoch 2 reached every node in %s", converge(2, moved, 2))
	// The cluster client follows MOVED to the new owner.
	if err := cc.Set(c, moved, "after", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v, _ := direct[2].Get(c, moved).Result(); v != "after" {
		t.Fatalf("%s on its new owner = %q", moved, v)
	}

	// A second publisher still holding revision r1 gets a conflict and
	// changes nothing; a map with a lower epoch is refused by the client
	// before it writes, and by the nodes if written around the client.
	if _, err := pub.Publish(c, topoSpec(3, ports, initial), r1); !errors.Is(err, topology.ErrConflict) {
		t.Fatalf("stale publisher: %v", err)
	}
	if _, err := pub.Publish(c, topoSpec(1, ports, initial), r2); !errors.Is(err, topology.ErrEpoch) {
		t.Fatalf("lower epoch: %v", err)
	}
	if got, err := pub.Load(c); err != nil || got.Revision != r2 || got.Spec.Epoch != 2 {
		t.Fatalf("stored after the refused writes: %+v, %v", got, err)
	}
	for i := range applied {
		for len(applied[i]) > 0 {
			<-applied[i]
		}
	}
	raw, _ := topology.Encode(topoSpec(1, ports, initial))
	req, _ := http.NewRequestWithContext(c, http.MethodPut, "http://"+g.HTTPAddrs[0]+"/v1/cp/cache/test/topology", bytes.NewReader(raw))
	req.Header.Set("If-Match", strconv.FormatUint(r2, 10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("raw PUT of epoch 1: %v %v", resp, err)
	}
	resp.Body.Close()
	for i := range applied {
		select {
		case err := <-applied[i]:
			if err == nil || !strings.Contains(err.Error(), "not above the current 2") {
				t.Fatalf("node %d installed a lower epoch: %v", i, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("node %d did not see the lower-epoch write", i)
		}
	}
	converge(2, moved, 2)

	// Kill the Raft leader: the nodes keep serving; after the re-election a
	// publish (epoch 3: slots 0-1000 back to node 0) reaches all of them.
	leader := g.Leader()
	g.Kill(leader)
	for i := range 100 {
		k := "after-kill:" + strconv.Itoa(i)
		if err := cc.Set(c, k, i, 0).Err(); err != nil {
			t.Fatalf("SET %s with the kvnode leader dead: %v", k, err)
		}
	}
	g.WaitLeader(30 * time.Second)
	cur, err := pub.Load(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pub.Publish(c, topoSpec(3, ports, initial), cur.Revision); err != nil {
		t.Fatal(err)
	}
	t.Logf("epoch 3 (after the leader was killed) reached every node in %s", converge(3, moved, 0))
	if err := cc.Set(c, moved, "back", 0).Err(); err != nil {
		t.Fatal(err)
	}

	// The whole store down: the nodes serve their last map and report it
	// (metric and readiness); back up, the report clears.
	for i := range 3 {
		g.Kill(i)
	}
	var code int
	var ready string
	if !eventually.Within(10*time.Second, func() bool {
		var m string
		_, m = httpGet(t, "http://"+nodes[1].addrs.HTTP+"/metrics")
		code, ready = httpGet(t, "http://"+nodes[1].addrs.HTTP+"/readyz")
		if strings.Contains(m, "portico_cachenode_cluster_topology_stale 1") && code == http.StatusServiceUnavailable &&
			strings.Contains(ready, "cluster-topology") && strings.Contains(ready, "serving epoch 3") {
			if !strings.Contains(m, "portico_cachenode_cluster_epoch 3") {
				t.Fatalf("metrics:\n%s", m)
			}
			return true
		}
		return false
	}) {
		t.Fatalf("no stale report with the store down: readyz %d %s", code, ready)
	}
	for i := range 100 {
		k := "store-down:" + strconv.Itoa(i)
		if err := cc.Set(c, k, i, 0).Err(); err != nil {
			t.Fatalf("SET %s with the store down: %v", k, err)
		}
	}
	for i := range 3 {
		g.Restart(i)
	}
	g.WaitLeader(30 * time.Second)
	eventually.True(t, 15*time.Second, "the stale report to clear once the store is back", func() bool {
		_, m := httpGet(t, "http://"+nodes[1].addrs.HTTP+"/metrics")
		code, _ := httpGet(t, "http://"+nodes[1].addrs.HTTP+"/readyz")
		return code == http.StatusOK && strings.Contains(m, "portico_cachenode_cluster_topology_stale 0")
	})
}

// TestClusterTopologyWaitsForMap: a node started before any map lists it
// waits (not listening) and starts once one does; stopped while waiting,
// it returns cleanly.
func TestClusterTopologyWaitsForMap(t *testing.T) {
	g := kvtest.Start(t, "cache")
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pub := &topology.Client{Addrs: g.HTTPAddrs, Cluster: "wait"}
	port, httpPort := freePort(t), freePort(t)
	run := func(id string) (chan cachenode.Addrs, chan error, context.CancelFunc) {
		ready, done := make(chan cachenode.Addrs, 1), make(chan error, 1)
		rctx, rcancel := context.WithCancel(c)
		go func() {
			done <- cachenode.Run(rctx, cachenode.Config{NodeID: id, RESPAddr: "127.0.0.1:" + port, HTTPAddr: "127.0.0.1:" + httpPort,
				ClusterKVAddrs: g.HTTPAddrs, ClusterName: "wait", Ready: ready, InsecurePlaintext: true})
		}()
		return ready, done, rcancel
	}
	// /readyz says why the node waits: the error of its last read of the
	// store. Waiting on it (instead of a fixed time) proves the node has
	// read the store and found no map it may start with.
	readyz := func() (int, string) {
		resp, err := http.Get("http://127.0.0.1:" + httpPort + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitingFor := func(what string) {
		xdstest.Eventually(t, 10*time.Second, "/readyz: "+what, func() bool {
			code, body := readyz()
			return code == 503 && strings.Contains(body, "waiting for a slot map listing node "+nodeID(0)) && strings.Contains(body, what)
		})
	}
	ready, done, stop := run(nodeID(0))
	waitingFor("no topology published")
	select {
	case <-ready:
		t.Fatal("the node started without a map")
	case err := <-done:
		t.Fatalf("Run: %v", err)
	default:
	}
	// Waiting, HTTP answers: alive, not ready, and why.
	if code, _ := httpGet(t, "http://127.0.0.1:"+httpPort+"/healthz"); code != 200 {
		t.Fatalf("/healthz while waiting: %d", code)
	}
	// A map without this node: still waiting, once it has read that map.
	p, _ := strconv.Atoi(port)
	other := cluster.Spec{Epoch: 1, Nodes: []cluster.NodeSpec{{ID: "someone-else", Host: "127.0.0.1", Port: p, Slots: []string{"0-16383"}}}}
	r1, err := pub.Publish(c, other, 0)
	if err != nil {
		t.Fatal(err)
	}
	waitingFor("is not among the config's nodes")
	select {
	case <-ready:
		t.Fatal("the node started with a map not listing it")
	default:
	}
	if _, err := pub.Publish(c, topoSpec(2, []string{port}, [][]string{{"0-16383"}}), r1); err != nil {
		t.Fatal(err)
	}
	var addrs cachenode.Addrs
	select {
	case addrs = <-ready:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("the node did not start once a map listed it")
	}
	rc := redis.NewClient(&redis.Options{Addr: addrs.RESP, Protocol: 3})
	defer rc.Close()
	if info := rc.ClusterInfo(c).Val(); !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_current_epoch:2") {
		t.Fatalf("CLUSTER INFO: %s", info)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	// Stopped while waiting: no error.
	_, done2, stop2 := run("not-listed")
	xdstest.Eventually(t, 10*time.Second, "the second node to wait", func() bool {
		code, body := readyz()
		return code == 503 && strings.Contains(body, "waiting for a slot map listing node not-listed")
	})
	stop2()
	if err := <-done2; err != nil {
		t.Fatalf("Run stopped while waiting: %v", err)
	}
}
