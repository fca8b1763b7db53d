package cachenode_test

import (
	"cmp"
	"encoding/csv"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/portico-io/portico/internal/peerbench"
)

// BenchmarkClusterVsRedisCluster runs redis-benchmark --cluster against a
// 3-primary cachenode cluster (cachenode's command built from the tree,
// one static slot map file, 0-5460 / 5461-10922 / 10923-16383) and a
// 3-primary Debian redis-server cluster (cluster-enabled, no persistence,
// slots assigned by `redis-cli --cluster create`), all six processes on
// free loopback ports, both sides plaintext: SET and GET with 100-byte
// values, 50 clients, -P 1 and -P 16.
//
// Rounds run in peerbench.Order (ours, peer, peer, ours, …), each logged,
// and each case is reported by the "-ratio" convention (median over round
// pairs, with min and max): <case>-per-cpu (ops per CPU-second, the CPU
// being every thread's time in the side's three server processes: on a
// shared machine the throughput ratio mostly says which side got more
// CPU), <case>-throughput and <case>-p99. Two sub-benchmarks with fresh
// clusters: every cachenode node at GOMAXPROCS=1 (a core each, as each
// redis-server runs commands on one thread) and at Go's default (every
// node may use every CPU); the redis-server nodes at their defaults in
// both (cluster-enabled, no persistence), cachenode with everything else
// at its defaults.
//
// redis-benchmark --cluster runs one thread per primary, and a threaded
// run only notices it is done on its 250 ms progress timer, so its elapsed
// time (and ops/s) is rounded up to a multiple of 250 ms: runs last
// several seconds to keep that under ~5 %. With -benchtime 1x a -P 1 run
// is 300k requests and a -P 16 run 10 times that, 2 rounds per side:
//
//	go test -run '^$' -bench ClusterVsRedisCluster -benchtime 1x ./cachenode/
//	# PORTICO_BENCH_ROUNDS (2 per side), PORTICO_BENCH_CLUSTER_REQUESTS (300000 at -P 1; 10× at -P 16)
func BenchmarkClusterVsRedisCluster(b *testing.B) {
	for _, tool := range []string{"redis-server", "redis-cli", "redis-benchmark"} {
		needTool(b, tool)
	}
	bin := peerbench.Build(b, "./cachenode/cmd/cachenode")
	b.Run("gomaxprocs=1", func(b *testing.B) { clusterVsRedisCluster(b, bin, "1") })
	b.Run("gomaxprocs=default", func(b *testing.B) { clusterVsRedisCluster(b, bin, "") })
}

// clusterVsRedisCluster is one sub-benchmark of
// BenchmarkClusterVsRedisCluster: fresh clusters of both sides, every
// cachenode node with GOMAXPROCS=procs (unset: Go's default).
func clusterVsRedisCluster(b *testing.B, bin, procs string) {
	requests := envInt("PORTICO_BENCH_CLUSTER_REQUESTS", 300000)
	rounds := envInt("PORTICO_BENCH_ROUNDS", 2)
	dir := b.TempDir()
	start := func(cmd *exec.Cmd, logName string) *exec.Cmd {
		log, err := os.Create(filepath.Join(dir, logName))
		if err != nil {
			b.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); log.Close() })
		return cmd
	}

	// cachenode: one static map for the three nodes.
	cnPorts := []string{freePort(b), freePort(b), freePort(b)}
	config := filepath.Join(dir, "cluster.yaml")
	if err := os.WriteFile(config, []byte(clusterYAML(1, cnPorts, clusterRanges)), 0o600); err != nil {
		b.Fatal(err)
	}
	var cnPids []int
	for i, p := range cnPorts {
		cmd := exec.Command(bin, "--resp-addr", "127.0.0.1:"+p, "--http-addr", "127.0.0.1:"+freePort(b),
			"--node-id", nodeID(i), "--cluster-config", config, "--log-level", "warn",
			// Both sides plaintext: redis-server's client port and cluster
			// bus are unless tls-port and tls-cluster are configured.
			"--insecure-plaintext")
		cmd.Env = cachenodeEnv(procs)
		cnPids = append(cnPids, start(cmd, fmt.Sprintf("cachenode-%d.log", i)).Process.Pid)
	}

	// redis-server: three cluster-enabled primaries, slots assigned by
	// redis-cli --cluster create.
	rsPorts := []string{freePort(b), freePort(b), freePort(b)}
	var rsAddrs []string
	var rsPidInts []int
	for i, p := range rsPorts {
		d := filepath.Join(dir, fmt.Sprintf("redis-%d", i))
		if err := os.Mkdir(d, 0o700); err != nil {
			b.Fatal(err)
		}
		cmd := exec.Command("redis-server", "--port", p, "--bind", "127.0.0.1", "--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(d, "nodes.conf"), "--save", "", "--appendonly", "no",
			"--protected-mode", "no", "--dir", d, "--daemonize", "no", "--loglevel", "warning")
		pid := start(cmd, fmt.Sprintf("redis-%d.log", i)).Process.Pid
		rsPidInts = append(rsPidInts, pid)
		rsAddrs = append(rsAddrs, "127.0.0.1:"+p)
	}
	for _, p := range append(append([]string{}, cnPorts...), rsPorts...) {
		waitPing(b, "127.0.0.1:"+p)
	}
	create := append([]string{"--cluster", "create"}, rsAddrs...)
	create = append(create, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", create...).CombinedOutput(); err != nil {
		b.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, p := range rsPorts {
		for {
			out, _ := exec.Command("redis-cli", "-h", "127.0.0.1", "-p", p, "CLUSTER", "INFO").Output()
			if strings.Contains(string(out), "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("redis-server :%s: cluster_state not ok:\n%s", p, out)
			}
			time.Sleep(50 * time.Millisecond) // cluster bus convergence, not test timing
		}
	}
	// redis-benchmark --cluster asks one node for CLUSTER NODES; every node
	// must already know all three masters' slots.
	for _, p := range rsPorts {
		for {
			out, _ := exec.Command("redis-cli", "-h", "127.0.0.1", "-p", p, "CLUSTER", "INFO").Output()
			if strings.Contains(string(out), "cluster_known_nodes:3") && strings.Contains(string(out), "cluster_size:3") {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("redis-server :%s: cluster not formed:\n%s", p, out)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	b.Logf("cachenode cluster GOMAXPROCS=%s per node vs redis-server cluster; %d rounds per side per case, order ours, peer, peer, ours; %s",
		cmp.Or(procs, "default"), rounds, peerbench.Machine())
	for b.Loop() {
		for _, pipeline := range []int{1, 16} {
			for _, test := range []string{"set", "get"} {
				n := requests
				if pipeline > 1 {
					n *= 10
				}
				pairRounds(b, fmt.Sprintf("%s-P%d", test, pipeline), rounds, n, cnPids, rsPidInts, func(side peerbench.Side) benchResult {
					if side == peerbench.Ours {
						return redisBenchmarkCluster(b, cnPorts[0], test, pipeline, n)
					}
					return redisBenchmarkCluster(b, rsPorts[0], test, pipeline, n)
				})
			}
		}
	}
	// Both sides really spread the keys over their three primaries.
	for _, p := range append(append([]string{}, cnPorts...), rsPorts...) {
		out, err := exec.Command("redis-cli", "-h", "127.0.0.1", "-p", p, "DBSIZE").Output()
		if n, _ := strconv.Atoi(strings.TrimSpace(string(out))); err != nil || n == 0 {
			b.Fatalf("node :%s holds no keys after the runs (DBSIZE %q, %v)", p, out, err)
		}
	}
}

// redisBenchmarkCluster runs one redis-benchmark --cluster test through
// the node on port and parses its --csv row (same columns as without
// --cluster; the topology lines before it are skipped).
func redisBenchmarkCluster(b *testing.B, port, test string, pipeline, n int) benchResult {
	b.Helper()
	out, err := exec.Command("redis-benchmark", "--cluster", "-h", "127.0.0.1", "-p", port, "-c", "50", "-n", strconv.Itoa(n),
		"-P", strconv.Itoa(pipeline), "-d", "100", "-r", "100000", "-t", test, "--csv").CombinedOutput()
	if err != nil {
		b.Fatalf("redis-benchmark --cluster -p %s -t %s: %v\n%s", port, test, err, out)
	}
	want := strings.ToUpper(test)
	for _, line := range strings.Split(strings.ReplaceAll(string(out), "\r", "\n"), "\n") {
		if !strings.HasPrefix(line, `"`+want+`"`) {
			continue
		}
		row, err := csv.NewReader(strings.NewReader(line)).Read()
		if err != nil || len(row) < 7 {
			break
		}
		rps, err1 := strconv.ParseFloat(row[1], 64)
		p99, err2 := strconv.ParseFloat(row[6], 64)
		if err1 != nil || err2 != nil || rps <= 0 {
			break
		}
		return benchResult{rps, p99}
	}
	b.Fatalf("redis-benchmark --cluster -p %s -t %s: no %s csv row:\n%s", port, test, want, out)
	return benchResult{}
}

// measureCPUs runs fn and returns its result and the CPU seconds the
// processes pids used meanwhile, summed.
func measureCPUs(b *testing.B, pids []int, fn func() benchResult) (benchResult, float64) {
	sum := func() (s float64) {
		for _, p := range pids {
			s += cpuSeconds(b, p)
		}
		return s
	}
	before := sum()
	r := fn()
	return r, sum() - before
}
