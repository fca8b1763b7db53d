package service_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/internal/xdstest"
	"github.com/portico-io/portico/ratelimitsvc/bucket"
	"github.com/portico-io/portico/ratelimitsvc/rules"
	"github.com/portico-io/portico/ratelimitsvc/service"
)

// startCluster starts n redis-server processes and joins them into a
// Cluster of n masters. Full coverage is not required, so the masters left
// keep serving their slots while one is down — what a limiter wants.
func startCluster(t *testing.T, n int) []*testdeps.RedisProc {
	var procs []*testdeps.RedisProc
	args := []string{"--cluster", "create"}
	for range n {
		p := testdeps.RedisServer(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "1000", "--cluster-require-full-coverage", "no")
		procs = append(procs, p)
		args = append(args, p.Addr)
	}
	if out, err := procs[0].CLI(append(args, "--cluster-replicas", "0", "--cluster-yes")...); err != nil {
		t.Fatalf("cluster create: %v\n%s", err, out)
	}
	waitClusterOK(t, procs...)
	return procs
}

func waitClusterOK(t *testing.T, procs ...*testdeps.RedisProc) {
	t.Helper()
	xdstest.Eventually(t, 20*time.Second, "cluster_state:ok on every node", func() bool {
		for _, p := range procs {
			if out, err := p.CLI("cluster", "info"); err != nil || !strings.Contains(out, "cluster_state:ok") {
				return false
			}
		}
		return true
	})
}

// On a Redis Cluster every request's keys share the domain's hash tag, so
// one script call decides a multi-descriptor request. When the master of
// one domain's slot dies, that domain fails open to local buckets (its
// breaker opens) while domains on the other masters keep their shared
// state; when it returns, the breaker closes without a restart.
func TestRedisCluster(t *testing.T) {
	procs := startCluster(t, 3)
	client := bucket.NewClient(bucket.ClientConfig{Addr: procs[0].Addr, Cluster: true})
	t.Cleanup(func() { _ = client.Close() })
	rd, err := bucket.NewRedis(bucket.RedisConfig{Client: client, Timeout: 300 * time.Millisecond, BreakerDelay: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var rs []*rules.Rule
	domains := []string{"alpha", "bravo", "charlie", "delta", "echo", "foxtrot"}
	for _, d := range domains {
		per := rule(d+"-consumer", 3, 0, time.Hour, "consumer", "")
		path := rule(d+"-path", 100, 0, time.Hour, "path", "")
		per.Domain, path.Domain = d, d
		rs = append(rs, per, path)
	}
	s := newService(t, rd, rs...)
	ctx := context.Background()
	owner := map[string]string{}
	for _, d := range domains {
		m, err := client.(*redis.ClusterClient).MasterForKey(ctx, "{"+d+"}")
		if err != nil {
			t.Fatal(err)
		}
		owner[d] = m.Options().Addr
		// Two descriptors, one script: three requests pass, the fourth is
		// denied and consumes nothing from the path limit.
		r := req(d, desc("consumer", "acme"), desc("path", "/x"))
		var got []string
		for range 4 {
			got = append(got, call(t, s, r).GetOverallCode().String())
		}
		if strings.Join(got, " ") != "OK OK OK OVER_LIMIT" {
			t.Fatalf("domain %s on %s: %v", d, owner[d], got)
		}
		if st := call(t, s, req(d, desc("path", "/x"))).GetStatuses()[0]; st.GetLimitRemaining() != 96 {
			t.Fatalf("domain %s: path remaining %d, want 96 (the denied request consumed nothing)", d, st.GetLimitRemaining())
		}
	}
	served := map[string]bool{}
	for _, a := range owner {
		served[a] = true
	}
	if len(served) < 2 {
		t.Fatalf("all domains hashed to one master %v; the test needs two", owner)
	}

	// Kill the master of alpha's slot.
	var dead *testdeps.RedisProc
	for _, p := range procs {
		if p.Addr == owner["alpha"] {
			dead = p
		}
	}
	dead.Kill()
	fresh := req("alpha", desc("consumer", "fresh"))
	for i := range 3 { // local bucket at 3/1 replicas
		if resp := call(t, s, fresh); resp.GetOverallCode() != OK {
			t.Fatalf("alpha request %d with its master down: %v, want OK (fail open)", i, resp.GetOverallCode())
		}
	}
	if rd.Degraded() != 1 {
		t.Fatalf("degraded shards %d, want 1", rd.Degraded())
	}
	for _, d := range domains {
		if owner[d] == dead.Addr {
			continue
		}
		// acme is spent in the shared bucket: a local fallback would admit it.
		if resp := call(t, s, req(d, desc("consumer", "acme"))); resp.GetOverallCode() != OVER {
			t.Fatalf("domain %s on a live master: %v, want OVER_LIMIT from the shared bucket", d, resp.GetOverallCode())
		}
	}

	// The master returns (empty: no persistence); the breaker's probe
	// closes it and alpha is shared again.
	dead.Start()
	waitClusterOK(t, procs...)
	xdstest.Eventually(t, 20*time.Second, "alpha back on Redis", func() bool {
		call(t, s, req("alpha", desc("path", "/probe")))
		return rd.Degraded() == 0
	})
	back := req("alpha", desc("consumer", "back"))
	var got []string
	for range 4 {
		got = append(got, call(t, s, back).GetOverallCode().String())
	}
	if strings.Join(got, " ") != "OK OK OK OVER_LIMIT" {
		t.Fatalf("alpha after recovery: %v", got)
	}
}

// Sentinel: the client follows the master Sentinel names; after the master
// dies and Sentinel promotes the replica, requests are decided on the new
// master without a restart, with fail-open in between.
func TestRedisSentinelFailover(t *testing.T) {
	master := testdeps.RedisServer(t)
	replica := testdeps.RedisServer(t, "--replicaof", "127.0.0.1", fmt.Sprint(master.Port))
	xdstest.Eventually(t, 10*time.Second, "the replica in sync", func() bool {
		out, err := replica.CLI("info", "replication")
		return err == nil && strings.Contains(out, "master_link_status:up")
	})
	sentinel := testdeps.RedisSentinel(t, "rl", master, time.Second)
	client := bucket.NewClient(bucket.ClientConfig{Addr: sentinel.Addr, MasterName: "rl"})
	t.Cleanup(func() { _ = client.Close() })
	rd, err := bucket.NewRedis(bucket.RedisConfig{Client: client, Timeout: 300 * time.Millisecond, BreakerDelay: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	per := rule("per", 2, 0, time.Hour, "consumer", "")
	s := newService(t, rd, per)
	acme := req("portico", desc("consumer", "acme"))
	var got []string
	for range 3 {
		got = append(got, call(t, s, acme).GetOverallCode().String())
	}
	if strings.Join(got, " ") != "OK OK OVER_LIMIT" {
		t.Fatalf("through Sentinel: %v", got)
	}
	// Replication is asynchronous, so wait until the replica has the bucket
	// before the crash (the documented loss window is what was not copied).
	xdstest.Eventually(t, 10*time.Second, "the bucket replicated", func() bool {
		out, err := replica.CLI("dbsize")
		return err == nil && strings.TrimSpace(out) != "0"
	})
	master.Kill()
	xdstest.Eventually(t, 30*time.Second, "Sentinel to promote the replica", func() bool {
		out, err := sentinel.CLI("sentinel", "get-master-addr-by-name", "rl")
		return err == nil && strings.Contains(out, fmt.Sprint(replica.Port))
	})
	// The promoted replica holds acme's spent bucket: still denied, and a
	// new consumer gets the shared bucket again.
	xdstest.Eventually(t, 20*time.Second, "requests decided on the new master", func() bool {
		return call(t, s, acme).GetOverallCode() == OVER && rd.Degraded() == 0
	})
	got = got[:0]
	for range 3 {
		got = append(got, call(t, s, req("portico", desc("consumer", "newco"))).GetOverallCode().String())
	}
	if strings.Join(got, " ") != "OK OK OVER_LIMIT" {
		t.Fatalf("after failover: %v", got)
	}
}

var _ service.Backend = (*bucket.Redis)(nil)
