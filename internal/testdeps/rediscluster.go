package testdeps

import (
	"os/exec"
	"strings"
	"testing"
	"time"
)

// RedisCluster starts n redis-server processes (RedisServer) and joins them
// into a Cluster of n primaries without replicas (redis-cli --cluster
// create), then waits until every node reports cluster_state:ok. Full
// coverage is not required, so the primaries left keep serving their slots
// while one is down, as a rate limiter wants; the node timeout is 1s. Each
// node's bus port is its port + 10000, which FreePort checks is free.
func RedisCluster(t testing.TB, n int) []*RedisProc {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		unavailable(t, "redis-cli binary", "PATH", err)
	}
	var procs []*RedisProc
	args := []string{"--cluster", "create"}
	for range n {
		p := RedisServer(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "1000", "--cluster-require-full-coverage", "no")
		procs = append(procs, p)
		args = append(args, p.Addr)
	}
	if out, err := procs[0].CLI(append(args, "--cluster-replicas", "0", "--cluster-yes")...); err != nil {
		t.Fatalf("testdeps: redis-cli --cluster create: %v\n%s", err, out)
	}
	WaitClusterOK(t, procs...)
	return procs
}

// WaitClusterOK waits up to 20s until every node in procs reports
// cluster_state:ok (after RedisCluster, or after a node was restarted).
func WaitClusterOK(t testing.TB, procs ...*RedisProc) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var bad string
		for _, p := range procs {
			if out, err := p.CLI("cluster", "info"); err != nil || !strings.Contains(out, "cluster_state:ok") {
				bad = p.Addr
				break
			}
		}
		if bad == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("testdeps: redis cluster node %s not cluster_state:ok after 20s", bad)
		}
		// Nothing signals the gossip settling: poll, as Start does for PING.
		time.Sleep(50 * time.Millisecond)
	}
}
