package cachenode_test

import (
	"cmp"
	"context"
	"encoding/csv"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/portico-io/portico/internal/peerbench"
)

// BenchmarkEvalShaVsRedisServer compares scripts with redis-server the
// way BenchmarkVsRedisServer compares GET and SET (BENCHMARKS.md,
// "cachenode vs redis-server"): ratelimitsvc's token-bucket script
// (ratelimitsvc/bucket/check.lua, one bucket per call, Redis TIME as the
// clock: the production path), loaded with SCRIPT LOAD and run with
// EVALSHA through redis-benchmark, 50 clients, 100k random buckets, -P 1
// (PORTICO_BENCH_REQUESTS, 100k requests a round) and -P 16 (4× that),
// against cachenode's command built from the tree and a Debian
// redis-server (no persistence), each its own process on a free loopback
// port, both plaintext.
//
// Rounds run in peerbench.Order (ours, peer, peer, ours, …), each logged,
// each server's CPU (every thread's) read around every round, and each
// case is reported by the "-ratio" convention (median over round pairs,
// with min and max): evalsha-P<n>-per-cpu (the figure to read on a shared
// machine), -throughput and -p99. Two sub-benchmarks with fresh processes:
// cachenode at GOMAXPROCS=1 (a core, as redis-server runs commands and
// scripts on one thread) and at Go's default; redis-server at its defaults
// in both, cachenode with everything else at its defaults.
//
//	go test -run '^$' -bench EvalShaVsRedisServer -benchtime 1x ./cachenode/
//	# PORTICO_BENCH_ROUNDS (3 per side), PORTICO_BENCH_REQUESTS (100000 at -P 1; 4× at -P 16)
func BenchmarkEvalShaVsRedisServer(b *testing.B) {
	for _, tool := range []string{"redis-server", "redis-benchmark"} {
		needTool(b, tool)
	}
	body, err := os.ReadFile("../ratelimitsvc/bucket/check.lua")
	if err != nil {
		b.Fatal(err)
	}
	bin := peerbench.Build(b, "./cachenode/cmd/cachenode")
	b.Run("gomaxprocs=1", func(b *testing.B) { evalShaVsRedisServer(b, bin, "1", string(body)) })
	b.Run("gomaxprocs=default", func(b *testing.B) { evalShaVsRedisServer(b, bin, "", string(body)) })
}

func evalShaVsRedisServer(b *testing.B, bin, procs, script string) {
	requests := envInt("PORTICO_BENCH_REQUESTS", 100000)
	rounds := envInt("PORTICO_BENCH_ROUNDS", 3)
	p := startRedisPair(b, bin, procs)
	var sha string
	for _, port := range []string{p.cnPort, p.rsPort} {
		c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + port})
		s, err := c.ScriptLoad(context.Background(), script).Result()
		c.Close()
		if err != nil {
			b.Fatal(err)
		}
		sha = s
	}
	b.Logf("cachenode GOMAXPROCS=%s vs redis-server; %d rounds per side per case, order ours, peer, peer, ours; %s",
		cmp.Or(procs, "default"), rounds, peerbench.Machine())
	// One token bucket: limit 100/s, capacity 100, window 1 s, cost 1,
	// vetoing, no lease; ARGV[1] "" asks for Redis TIME.
	args := []string{"EVALSHA", sha, "1", "rl:{__rand_int__}", "", "0", "t", "100", "100", "1000", "1", "1", "0"}
	for b.Loop() {
		for _, pipeline := range []int{1, 16} {
			n := requests
			if pipeline > 1 {
				n *= 4
			}
			pairRounds(b, "evalsha-P"+strconv.Itoa(pipeline), rounds, n, []int{p.cnPid}, []int{p.rsPid}, func(side peerbench.Side) benchResult {
				if side == peerbench.Ours {
					return redisBenchmarkCmd(b, p.cnPort, pipeline, n, args)
				}
				return redisBenchmarkCmd(b, p.rsPort, pipeline, n, args)
			})
		}
	}
}

// redisBenchmarkCmd runs redis-benchmark with a command of its own.
func redisBenchmarkCmd(b *testing.B, port string, pipeline, n int, cmd []string) benchResult {
	b.Helper()
	argv := append([]string{"-h", "127.0.0.1", "-p", port, "-c", "50", "-n", strconv.Itoa(n), "-P", strconv.Itoa(pipeline),
		"-r", "100000", "--csv"}, cmd...)
	out, err := exec.Command("redis-benchmark", argv...).Output()
	if err != nil {
		b.Fatalf("redis-benchmark -p %s %v: %v\n%s", port, cmd[0], err, out)
	}
	rows, err := csv.NewReader(strings.NewReader(string(out))).ReadAll()
	if err != nil || len(rows) < 2 || len(rows[1]) < 7 {
		b.Fatalf("redis-benchmark csv: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "ERR") {
		b.Fatalf("redis-benchmark: %s", out)
	}
	rps, _ := strconv.ParseFloat(rows[1][1], 64)
	p99, _ := strconv.ParseFloat(rows[1][6], 64)
	return benchResult{rps, p99}
}
