package cachenode_test

import (
	"context"
	"encoding/csv"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// BenchmarkEvalShaVsRedisServer runs ratelimitsvc's token-bucket script
// (ratelimitsvc/bucket/check.lua, one bucket per call, Redis TIME as the
// clock: the production path) with EVALSHA through redis-benchmark
// against cachenode (GOMAXPROCS=1) and a Debian redis-server side by side,
// as BenchmarkVsRedisServer does for GET and SET: 50 clients, 100k random
// buckets, -P 1 and -P 16, alternating rounds, each side's best round and
// ops per CPU-second over all rounds.
//
//	go test -run '^$' -bench EvalShaVsRedisServer -benchtime 1x ./cachenode/
func BenchmarkEvalShaVsRedisServer(b *testing.B) {
	for _, tool := range []string{"redis-server", "redis-benchmark"} {
		if _, err := exec.LookPath(tool); err != nil {
			b.Skipf("SKIPPED LOUDLY: %s not found (Debian redis-server/redis-tools; `make deps` installs them): %v", tool, err)
		}
	}
	body, err := os.ReadFile("../ratelimitsvc/bucket/check.lua")
	if err != nil {
		b.Fatal(err)
	}
	requests := envInt("PORTICO_BENCH_REQUESTS", 100000)
	rounds := envInt("PORTICO_BENCH_ROUNDS", 3)
	dir := b.TempDir()
	bin := filepath.Join(dir, "cachenode")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/cachenode").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	cnPort, redisPort := freePort(b), freePort(b)
	cn := exec.Command(bin, "--resp-addr", "127.0.0.1:"+cnPort, "--http-addr", "127.0.0.1:"+freePort(b), "--log-level", "warn", "--insecure-plaintext")
	cn.Env = append(os.Environ(), "GOMAXPROCS=1")
	rs := exec.Command("redis-server", "--port", redisPort, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--protected-mode", "no", "--dir", dir, "--daemonize", "no", "--loglevel", "warning")
	for _, p := range []*exec.Cmd{cn, rs} {
		if err := p.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = p.Process.Kill(); _ = p.Wait() })
	}
	var sha string
	for _, port := range []string{cnPort, redisPort} {
		waitPing(b, "127.0.0.1:"+port)
		c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + port})
		s, err := c.ScriptLoad(context.Background(), string(body)).Result()
		c.Close()
		if err != nil {
			b.Fatal(err)
		}
		sha = s
	}
	// One token bucket: limit 100/s, capacity 100, window 1 s, cost 1,
	// vetoing, no lease; ARGV[1] "" asks for Redis TIME.
	args := []string{"EVALSHA", sha, "1", "rl:{__rand_int__}", "", "0", "t", "100", "100", "1000", "1", "1", "0"}
	for b.Loop() {
		for _, pipeline := range []int{1, 16} {
			n := requests
			if pipeline > 1 {
				n *= 4
			}
			var ours, theirs benchResult
			var ourCPU, theirCPU float64
			for range rounds {
				r, cpu := measureCPU(b, cn.Process.Pid, func() benchResult { return redisBenchmarkCmd(b, cnPort, pipeline, n, args) })
				ours, ourCPU = ours.best(r), ourCPU+cpu
				r, cpu = measureCPU(b, rs.Process.Pid, func() benchResult { return redisBenchmarkCmd(b, redisPort, pipeline, n, args) })
				theirs, theirCPU = theirs.best(r), theirCPU+cpu
			}
			reportPair(b, "evalsha_P"+strconv.Itoa(pipeline), "cachenode", "redis-server", float64(rounds*n), ours, theirs, ourCPU, theirCPU)
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
