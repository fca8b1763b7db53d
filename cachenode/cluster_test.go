package cachenode_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/portico-io/portico/cachenode"
	"github.com/portico-io/portico/cachenode/slots"
	"github.com/portico-io/portico/internal/eventually" // blocking_test.go has a func named eventually
	"github.com/portico-io/portico/internal/testdeps"
)

// testCluster is three in-process nodes on loopback ports with a static
// slot map splitting 0-5460/5461-10922/10923-16383.
type testCluster struct {
	nodes  []*node
	addrs  []string // by node index: node-0, node-1, node-2
	config string
	reload chan error
}

var clusterRanges = []string{"0-5460", "5461-10922", "10923-16383"}

func clusterYAML(epoch int, ports []string, ranges []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "epoch: %d\nnodes:\n", epoch)
	for i, p := range ports {
		fmt.Fprintf(&b, "  - id: %s\n    host: 127.0.0.1\n    port: %s\n    bus_port: %d\n    slots: [%q]\n", nodeID(i), p, busPort(p), ranges[i])
	}
	return b.String()
}

// busPorts: the bus port picked for each RESP port, stable for a test
// binary (port + 10000, the default, may not be a port or may be taken).
var busPorts sync.Map

func busPort(respPort string) int {
	if p, ok := busPorts.Load(respPort); ok {
		return p.(int)
	}
	free, err := testdeps.PickPort()
	if err != nil {
		panic(err)
	}
	p, _ := busPorts.LoadOrStore(respPort, free)
	return p.(int)
}

// nodeID is a 40-hex-digit id, as Redis's node ids look.
func nodeID(i int) string { return fmt.Sprintf("%040x", 0xa0+i) }

func startCluster(t *testing.T) *testCluster {
	t.Helper()
	tc := &testCluster{config: filepath.Join(t.TempDir(), "cluster.yaml"), reload: make(chan error, 16)}
	ports := []string{freePort(t), freePort(t), freePort(t)}
	if err := os.WriteFile(tc.config, []byte(clusterYAML(1, ports, clusterRanges)), 0o600); err != nil {
		t.Fatal(err)
	}
	for i, p := range ports {
		n := startNode(t, withConfig(func(c *cachenode.Config) {
			c.RESPAddr = "127.0.0.1:" + p
			c.NodeID = nodeID(i)
			c.ClusterConfig = tc.config
			c.ReloadInterval = 10 * time.Millisecond
			c.OnClusterReload = func(applied bool, err error) {
				if err == nil && !applied {
					return
				}
				select {
				case tc.reload <- err:
				default: // the test reads what it waits for; never block the watcher
				}
			}
		}))
		tc.nodes = append(tc.nodes, n)
		tc.addrs = append(tc.addrs, n.addrs.RESP)
	}
	return tc
}

// owner is the index of the node owning key's slot.
func owner(key string) int {
	s := slots.Of([]byte(key))
	switch {
	case s <= 5460:
		return 0
	case s <= 10922:
		return 1
	}
	return 2
}

func TestClusterGoRedisClient(t *testing.T) {
	tc := startCluster(t)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: tc.addrs[:1], Protocol: 3, MaxRedirects: 3})
	defer cc.Close()
	direct := make([]*redis.Client, 3)
	for i, a := range tc.addrs {
		direct[i] = redis.NewClient(&redis.Options{Addr: a, Protocol: 3, MaxRetries: -1})
		defer direct[i].Close()
	}
	c := ctx(t)

	// The client learns the map from CLUSTER SLOTS.
	got, err := cc.ClusterSlots(c).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Start != 0 || got[0].End != 5460 || got[2].Start != 10923 || got[2].End != 16383 ||
		got[1].Nodes[0].Addr != tc.addrs[1] || got[1].Nodes[0].ID != nodeID(1) {
		t.Fatalf("CLUSTER SLOTS = %+v", got)
	}

	const n = 3000
	perNode := [3]int64{}
	for i := range n {
		k := "key:" + strconv.Itoa(i)
		if err := cc.Set(c, k, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
		perNode[owner(k)]++
	}
	for i := range n {
		k := "key:" + strconv.Itoa(i)
		if v, err := cc.Get(c, k).Int(); err != nil || v != i {
			t.Fatalf("GET %s = %d, %v", k, v, err)
		}
	}
	// Every key is on its slot's owner, and only there.
	for i, d := range direct {
		if size := d.DBSize(c).Val(); size != perNode[i] {
			t.Errorf("node %d holds %d keys, want %d", i, size, perNode[i])
		}
	}
	for i := range 50 {
		k := "key:" + strconv.Itoa(i)
		o := owner(k)
		if v, err := direct[o].Get(c, k).Int(); err != nil || v != i {
			t.Errorf("owner %d: GET %s = %d, %v", o, k, v, err)
		}
		wrong := (o + 1) % 3
		want := fmt.Sprintf("MOVED %d %s", slots.Of([]byte(k)), tc.addrs[o])
		if err := direct[wrong].Get(c, k).Err(); err == nil || err.Error() != want {
			t.Errorf("node %d: GET %s = %v, want %s", wrong, k, err, want)
		}
	}

	// Hash tags keep multi-key commands on one slot.
	for i := range 200 {
		tag := "{user" + strconv.Itoa(i) + "}"
		if err := cc.MSet(c, tag+"a", "1", tag+"b", "2", tag+"c", "3").Err(); err != nil {
			t.Fatalf("MSET %s: %v", tag, err)
		}
		vals, err := cc.MGet(c, tag+"a", tag+"b", tag+"c").Result()
		if err != nil || fmt.Sprint(vals) != "[1 2 3]" {
			t.Fatalf("MGET %s = %v, %v", tag, vals, err)
		}
		// The slot may also hold some of the key:N keys.
		slot := slots.Of([]byte(tag))
		want := map[string]bool{tag + "a": true, tag + "b": true, tag + "c": true}
		for j := range n {
			if k := "key:" + strconv.Itoa(j); slots.Of([]byte(k)) == slot {
				want[k] = true
			}
		}
		keys := direct[owner(tag)].ClusterGetKeysInSlot(c, slot, 100).Val()
		for _, k := range keys {
			if !want[k] {
				t.Fatalf("GETKEYSINSLOT %d returned %q", slot, k)
			}
		}
		if len(keys) != len(want) {
			t.Fatalf("GETKEYSINSLOT %d = %v, want %d keys", slot, keys, len(want))
		}
		if cnt := direct[owner(tag)].ClusterCountKeysInSlot(c, slot).Val(); cnt != int64(len(want)) {
			t.Fatalf("COUNTKEYSINSLOT %d = %d, want %d", slot, cnt, len(want))
		}
		if got := direct[owner(tag)].ClusterGetKeysInSlot(c, slot, 2).Val(); len(got) != 2 {
			t.Fatalf("GETKEYSINSLOT %d 2 = %v", slot, got)
		}
		if del := cc.Del(c, tag+"a", tag+"b").Val(); del != 2 {
			t.Fatalf("DEL %s = %d", tag, del)
		}
	}
	// Untagged keys of different slots: CROSSSLOT, nothing written.
	err = cc.MSet(c, "foo", "1", "bar", "2").Err()
	if err == nil || err.Error() != "CROSSSLOT Keys in request don't hash to the same slot" {
		t.Fatalf("MSET across slots = %v", err)
	}
	if cc.Exists(c, "foo").Val()+cc.Exists(c, "bar").Val() != 0 {
		t.Fatal("a CROSSSLOT MSET wrote keys")
	}
	// Keyless commands are served locally.
	if pong := direct[1].Ping(c).Val(); pong != "PONG" {
		t.Fatalf("PING = %q", pong)
	}

	// A client with a stale map (every slot on node 0) is redirected and
	// follows MOVED.
	stale := redis.NewClusterClient(&redis.ClusterOptions{Protocol: 3, MaxRedirects: 3,
		ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) {
			return []redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: tc.addrs[0]}}}}, nil
		}})
	defer stale.Close()
	for i := range 300 {
		k := "stale:" + strconv.Itoa(i)
		if err := stale.Set(c, k, i, 0).Err(); err != nil {
			t.Fatalf("stale client SET %s: %v", k, err)
		}
		if v, err := direct[owner(k)].Get(c, k).Int(); err != nil || v != i {
			t.Fatalf("stale client's SET %s is not on its owner: %d, %v", k, v, err)
		}
	}
}

// TestClusterRedisCLI: redis-cli -c follows MOVED between the nodes;
// without -c the redirect is shown; redis-cli --cluster check reads
// CLUSTER NODES/INFO and finds every slot covered.
func TestClusterRedisCLI(t *testing.T) {
	cli := needTool(t, "redis-cli")
	tc := startCluster(t)
	host, port, _ := net.SplitHostPort(tc.addrs[0])
	run := func(args ...string) string {
		out, err := exec.CommandContext(ctx(t), cli, append([]string{"-h", host, "-p", port}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cli %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	// "foo" is slot 12182 (node 2), "bar" 5061 (node 0).
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-c", "SET", "foo", "hello"}, "OK"},
		{[]string{"-c", "GET", "foo"}, "hello"},
		{[]string{"-c", "SET", "bar", "local"}, "OK"},
		{[]string{"GET", "bar"}, "local"},
		{[]string{"GET", "foo"}, "MOVED 12182 " + tc.addrs[2]},
		{[]string{"-c", "MSET", "{t}1", "a", "{t}2", "b"}, "OK"},
		{[]string{"-c", "MGET", "{t}1", "{t}2"}, "a\nb"},
		{[]string{"-c", "MSET", "foo", "1", "bar", "2"}, "CROSSSLOT Keys in request don't hash to the same slot"},
		{[]string{"CLUSTER", "KEYSLOT", "foo"}, "12182"},
		{[]string{"CLUSTER", "MYID"}, nodeID(0)},
	} {
		if got := run(tc.args...); got != tc.want {
			t.Errorf("redis-cli %v = %q, want %q", tc.args, got, tc.want)
		}
	}
	cmd := exec.CommandContext(ctx(t), cli, "--cluster", "check", tc.addrs[0])
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "[OK] All 16384 slots covered.") {
		t.Fatalf("redis-cli --cluster check: %v\n%s", err, out)
	}
}

// TestClusterConfigReload: a new map with a higher epoch is picked up;
// one with a lower epoch is refused and the node keeps its map.
func TestClusterConfigReload(t *testing.T) {
	tc := startCluster(t)
	c := redis.NewClient(&redis.Options{Addr: tc.addrs[0], Protocol: 3, MaxRetries: -1})
	defer c.Close()
	ports := make([]string, 3)
	for i, a := range tc.addrs {
		_, ports[i], _ = net.SplitHostPort(a)
	}
	// A file that does not parse (an empty range) is refused by every node.
	writeAtomic(t, tc.config, clusterYAML(2, ports, []string{"0-10922", "", "10923-16383"}))
	for range 3 {
		if err := waitReload(t, tc.reload); err == nil {
			t.Fatal("a config with an empty slot range was applied")
		}
	}
	// Node 0 takes node 1's slots (epoch 2); node 1 keeps none.
	body := strings.Replace(clusterYAML(2, ports, []string{"0-10922", "0", "10923-16383"}), "slots: [\"0\"]", "slots: []", 1)
	writeAtomic(t, tc.config, body)
	for range 3 {
		if err := waitReload(t, tc.reload); err != nil {
			t.Fatal(err)
		}
	}
	info := c.ClusterInfo(ctx(t)).Val()
	if !strings.Contains(info, "cluster_current_epoch:2\r\n") || !strings.Contains(info, "cluster_size:2\r\n") {
		t.Fatalf("CLUSTER INFO after reload:\n%s", info)
	}
	k := "k6000" // find a key of the moved range
	for i := 0; owner(k) != 1; i++ {
		k = "k" + strconv.Itoa(i)
	}
	if err := c.Set(ctx(t), k, "now-mine", 0).Err(); err != nil {
		t.Fatalf("SET %s (slot moved to node 0): %v", k, err)
	}
	writeAtomic(t, tc.config, clusterYAML(1, ports, clusterRanges))
	for range 3 {
		if err := waitReload(t, tc.reload); err == nil || !strings.Contains(err.Error(), "epoch 1, not above the current 2") {
			t.Fatalf("lower epoch: %v", err)
		}
	}
	if err := c.Set(ctx(t), k, "still-mine", 0).Err(); err != nil {
		t.Fatalf("after a refused reload: %v", err)
	}
}

func writeAtomic(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

func waitReload(t *testing.T, ch chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("no cluster config reload")
		return nil
	}
}

// TestClusterRepliesMatchRedisServer compares raw reply bytes, RESP2 and
// RESP3, of a single-node cachenode cluster and a single-node redis-server
// cluster (both own every slot, epoch 0).
func TestClusterRepliesMatchRedisServer(t *testing.T) {
	rs := testdeps.RedisServer(t, "--cluster-enabled", "yes")
	if out, err := rs.CLI("CLUSTER", "ADDSLOTSRANGE", "0", "16383"); err != nil {
		t.Fatal(out, err)
	}
	var out string
	if !eventually.Within(10*time.Second, func() bool {
		out, _ = rs.CLI("CLUSTER", "INFO")
		return strings.Contains(out, "cluster_state:ok")
	}) {
		t.Fatalf("redis-server cluster not ok:\n%s", out)
	}
	port := freePort(t)
	config := filepath.Join(t.TempDir(), "cluster.json")
	body := fmt.Sprintf(`{"epoch": 0, "nodes": [{"id": "%s", "host": "127.0.0.1", "port": %s, "slots": ["0-16383"]}]}`, nodeID(0), port)
	if err := os.WriteFile(config, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, withConfig(func(c *cachenode.Config) {
		c.RESPAddr, c.NodeID, c.ClusterConfig = "127.0.0.1:"+port, nodeID(0), config
	}))
	g, x := strconv.Itoa(slots.Of([]byte("{g}"))), strconv.Itoa(slots.Of([]byte("{x}")))
	script := [][]string{
		{"CLUSTER", "KEYSLOT", "foo"}, {"CLUSTER", "KEYSLOT", "{user1000}.following"}, {"CLUSTER", "KEYSLOT", ""},
		{"CLUSTER", "KEYSLOT", "{}"}, {"CLUSTER", "KEYSLOT", "{{a}}"}, {"CLUSTER", "KEYSLOT", "a{b}c{d}"}, {"CLUSTER", "KEYSLOT", "a{}b"},
		{"CLUSTER", "KEYSLOT"}, {"CLUSTER", "KEYSLOT", "a", "b"}, {"CLUSTER"}, {"CLUSTER", "BOGUS"}, {"CLUSTER", "MYID", "x"},
		{"CLUSTER", "INFO"}, {"CLUSTER", "INFO", "x"}, {"CLUSTER", "SLOTS", "x"}, {"CLUSTER", "NODES", "x"}, {"CLUSTER", "SHARDS", "x"},
		{"MSET", "{g}1", "a", "{g}2", "b", "{h}1", "c"}, {"MSET", "foo", "1", "bar", "2"}, {"MGET", "foo", "bar"}, {"DEL", "a", "b"},
		{"SET", "{g}only", "x"}, {"MSET", "{g}1", "a", "{g}2", "b"}, {"CLUSTER", "COUNTKEYSINSLOT", g}, {"CLUSTER", "COUNTKEYSINSLOT", "x"},
		{"CLUSTER", "COUNTKEYSINSLOT", "-1"}, {"CLUSTER", "COUNTKEYSINSLOT", "16384"}, {"CLUSTER", "COUNTKEYSINSLOT", "16383"},
		{"SET", "{x}only", "x"}, {"CLUSTER", "GETKEYSINSLOT", x, "10"}, {"CLUSTER", "GETKEYSINSLOT", x, "0"},
		{"CLUSTER", "GETKEYSINSLOT", "1", "-1"}, {"CLUSTER", "GETKEYSINSLOT", "16384", "1"}, {"CLUSTER", "GETKEYSINSLOT", "x", "1"},
		{"CLUSTER", "GETKEYSINSLOT", "1", "x"}, {"CLUSTER", "GETKEYSINSLOT", "1"},
		{"READONLY"}, {"READWRITE"}, {"ASKING"}, {"GET", "{g}only"}, {"READONLY", "x"}, {"ASKING", "x"}, {"PING"}, {"DBSIZE"},
	}
	for _, proto := range []string{"2", "3"} {
		ours, theirs := dialRaw(t, n.addrs.RESP), dialRaw(t, rs.Addr)
		ours.do(t, "HELLO", proto)
		theirs.do(t, "HELLO", proto)
		ours.do(t, "FLUSHALL")
		theirs.do(t, "FLUSHALL")
		for _, args := range script {
			if a, b := ours.do(t, args...), theirs.do(t, args...); a != b {
				t.Errorf("RESP%s %q:\n  cachenode:    %q\n  redis-server: %q", proto, args, a, b)
			}
		}
		// Topology replies differ in the id and address only: redis-server
		// alone in its cluster does not know its own IP.
		theirID := strings.TrimSpace(strings.SplitN(theirs.do(t, "CLUSTER", "MYID"), "\r\n", 2)[1])
		norm := strings.NewReplacer(nodeID(0), theirID, "$9\r\n127.0.0.1\r\n", "$0\r\n\r\n", ":"+port+"\r\n", ":"+strconv.Itoa(rs.Port)+"\r\n")
		for _, args := range [][]string{{"CLUSTER", "SLOTS"}, {"CLUSTER", "SHARDS"}} {
			if a, b := norm.Replace(ours.do(t, args...)), theirs.do(t, args...); a != b {
				t.Errorf("RESP%s %q:\n  cachenode:    %q\n  redis-server: %q", proto, args, a, b)
			}
		}
		nodes := func(rc *rawConn) string {
			s := rc.do(t, "CLUSTER", "NODES")
			return s[strings.Index(s, "myself"):]
		}
		if a, b := nodes(ours), nodes(theirs); a != b {
			t.Errorf("RESP%s CLUSTER NODES after the address:\n  cachenode:    %q\n  redis-server: %q", proto, a, b)
		}
	}
}

type rawConn struct {
	c net.Conn
	r *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{c: c, r: bufio.NewReader(c)}
}

// do sends args and returns one whole reply, raw.
func (rc *rawConn) do(t *testing.T, args ...string) string {
	t.Helper()
	out, err := rc.try(args...)
	if err != nil {
		t.Fatalf("%q: %v (read %q)", args, err, out)
	}
	return out
}

// try sends args and reads one whole reply, raw (what it read so far on
// an error).
func (rc *rawConn) try(args ...string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	rc.c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := rc.c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	var out strings.Builder
	err := readReply(rc.r, &out)
	return out.String(), err
}

func readReply(r *bufio.Reader, out *strings.Builder) error {
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	out.WriteString(line)
	if len(line) < 3 {
		return errors.New("short line")
	}
	n, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
	switch line[0] {
	case '$', '=', '!':
		if n < 0 {
			return nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return err
		}
		out.Write(buf)
	case '*', '~', '>', '%', '|':
		if line[0] == '%' || line[0] == '|' {
			n *= 2
		}
		for range max(n, 0) {
			if err := readReply(r, out); err != nil {
				return err
			}
		}
	}
	return nil
}

// TestClusterRedisBenchmark: redis-benchmark --cluster reads the topology
// (CLUSTER NODES) and spreads SET/GET over the three nodes.
func TestClusterRedisBenchmark(t *testing.T) {
	bench := needTool(t, "redis-benchmark")
	tc := startCluster(t)
	host, port, _ := net.SplitHostPort(tc.addrs[0])
	out, err := exec.CommandContext(ctx(t), bench, "--cluster", "-h", host, "-p", port, "-t", "set,get", "-q", "-n", "3000", "-c", "6").CombinedOutput()
	if err != nil {
		t.Fatalf("redis-benchmark --cluster: %v\n%s", err, out)
	}
	text := strings.ReplaceAll(string(out), "\r", "\n")
	for _, want := range []string{"Cluster has 3 master nodes", "SET: ", "GET: "} {
		if !strings.Contains(text, want) {
			t.Errorf("redis-benchmark --cluster output lacks %q:\n%s", want, out)
		}
	}
	var total int64
	for _, a := range tc.addrs {
		c := redis.NewClient(&redis.Options{Addr: a, Protocol: 3})
		n := c.DBSize(ctx(t)).Val()
		c.Close()
		if n == 0 {
			t.Errorf("node %s got no keys", a)
		}
		total += n
	}
	t.Logf("%d keys in the cluster (redis-benchmark writes one key per node without -r)", total)
}
