package e2e_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/portico-io/portico/cachenode"
	"github.com/portico-io/portico/controlplane"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/internal/tlstest"
	"github.com/portico-io/portico/internal/xdstest"
)

// TestLiveEnvoyRedisProxy puts a real Envoy in front of a three-node
// cachenode cluster (in-process, static slot map) through the admin API's
// redis-proxies resource: a plain single-node Redis client SETs and GETs
// keys of every slot range through the proxy, Envoy finding each key's
// primary from CLUSTER SLOTS; each key is then read directly from the node
// owning its slot, so the proxy did not merely cache or keep it locally.
func TestLiveEnvoyRedisProxy(t *testing.T) {
	envoy := envoyBinary(t)
	dbURL := testdeps.Postgres(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The cache cluster: node i owns one third of the slots.
	ranges := []string{"0-5460", "5461-10922", "10923-16383"}
	ports := []int{freePort(t), freePort(t), freePort(t)}
	var yaml strings.Builder
	yaml.WriteString("epoch: 1\nnodes:\n")
	for i, p := range ports {
		fmt.Fprintf(&yaml, "  - id: %040x\n    host: 127.0.0.1\n    port: %d\n    bus_port: %d\n    slots: [%q]\n", 0xe0+i, p, freePort(t), ranges[i])
	}
	clusterFile := filepath.Join(t.TempDir(), "cluster.yaml")
	if err := os.WriteFile(clusterFile, []byte(yaml.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	nodes := make([]*redis.Client, len(ports))
	for i, p := range ports {
		ready := make(chan cachenode.Addrs, 1)
		done := make(chan error, 1)
		go func() {
			done <- cachenode.Run(ctx, cachenode.Config{NodeID: fmt.Sprintf("%040x", 0xe0+i), RESPAddr: "127.0.0.1:" + strconv.Itoa(p),
				HTTPAddr: "127.0.0.1:0", ClusterConfig: clusterFile, Ready: ready, InsecurePlaintext: true})
		}()
		t.Cleanup(func() { cancel(); <-done })
		select {
		case <-ready:
		case err := <-done:
			t.Fatalf("cachenode %d: %v", i, err)
		}
		nodes[i] = redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(p), MaxRetries: -1})
		defer nodes[i].Close()
	}

	// The control plane, with the proxy in front of the cluster.
	listenerPort, proxyPort := freePort(t), freePort(t)
	gwPKI := tlstest.New(t)
	addrs := startControlPlane(t, dbURL, controlplane.Config{TLS: gwPKI.Files(t, identity.ControlPlane, "controlplane"), Compile: compileOptions(listenerPort)})
	seeds := []any{}
	for _, p := range ports {
		seeds = append(seeds, map[string]any{"address": "127.0.0.1", "port": p})
	}
	newAdminAPITLS(t, addrs.Admin, gwPKI.ClientTLS(nil)).create("redis-proxies", map[string]any{
		"name":   "cache",
		"listen": map[string]any{"address": "127.0.0.1", "port": proxyPort},
		"cluster": map[string]any{"seeds": seeds, "clusterRefreshRate": "1s", "clusterRefreshTimeout": "500ms",
			"redirectRefreshInterval": "200ms", "redirectRefreshThreshold": 1},
		"opTimeout": "2s",
	}, nil)

	startEnvoy(t, envoy, addrs.XDS, gwPKI)

	// A plain client: no cluster support, no redirections of its own;
	// RESP2 and no CLIENT SETINFO, which Envoy's redis proxy does not speak.
	proxy := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(proxyPort), MaxRetries: -1, Protocol: 2,
		DisableIdentity: true, DialTimeout: time.Second, ReadTimeout: 3 * time.Second})
	defer proxy.Close()
	xdstest.Eventually(t, 30*time.Second, "Envoy's redis proxy to answer SET", func() bool {
		c, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		return proxy.Set(c, "probe", "1", 0).Err() == nil
	})
	c, cancelOps := context.WithTimeout(ctx, 60*time.Second)
	defer cancelOps()
	const n = 300
	for i := range n {
		k, v := "user:"+strconv.Itoa(i), "v"+strconv.Itoa(i)
		if err := proxy.Set(c, k, v, 0).Err(); err != nil {
			t.Fatalf("SET %s through the proxy: %v", k, err)
		}
	}
	perNode := make([]int, len(nodes))
	for i := range n {
		k, want := "user:"+strconv.Itoa(i), "v"+strconv.Itoa(i)
		if got, err := proxy.Get(c, k).Result(); err != nil || got != want {
			t.Fatalf("GET %s through the proxy = %q, %v; want %q", k, got, err, want)
		}
		// Exactly one node holds the key, and it answers for it directly.
		holders := 0
		for j, node := range nodes {
			if got, err := node.Get(c, k).Result(); err == nil && got == want {
				holders++
				perNode[j]++
			}
		}
		if holders != 1 {
			t.Fatalf("%s is held by %d nodes, want exactly its slot's owner", k, holders)
		}
	}
	for j, got := range perNode {
		if got == 0 {
			t.Fatalf("node %d got none of %d keys (%v): the proxy did not spread keys by slot", j, n, perNode)
		}
	}
	// Hashtagged multi-key commands stay on one slot through the proxy.
	if err := proxy.MSet(c, "{tag}a", "1", "{tag}b", "2").Err(); err != nil {
		t.Fatalf("MSET through the proxy: %v", err)
	}
	if got, err := proxy.MGet(c, "{tag}a", "{tag}b", "user:1").Result(); err != nil || got[0] != "1" || got[1] != "2" || got[2] != "v1" {
		t.Fatalf("MGET through the proxy = %v, %v", got, err)
	}
}
