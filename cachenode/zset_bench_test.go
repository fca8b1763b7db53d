package cachenode_test

import (
	"encoding/csv"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkZsetVsRedisServer is BenchmarkVsRedisServer's comparison for
// sorted sets: cachenode (GOMAXPROCS=1) and a Debian redis-server side by
// side on loopback, redis-benchmark with 50 clients at -P 1 and -P 16,
// rounds alternating between the servers, each side's best round (ops/s,
// p99) and ops per CPU-second over all rounds reported with the ratios.
// The commands, one sorted set each, members and scores drawn from
// 100 000 (-r):
//
//	ZADD bench:z __rand_int__ m:__rand_int__           (grows to ~100k members)
//	ZINCRBY bench:zi 1 m:__rand_int__                  (a leaderboard)
//	ZRANGEBYSCORE bench:z __rand_int__ +inf LIMIT 0 10 (the ZADD set: a seek and 10 members)
//
// Reproduce (counts and rounds as in BenchmarkVsRedisServer):
//
//	go test -run '^$' -bench ZsetVsRedisServer -benchtime 1x ./cachenode/
func BenchmarkZsetVsRedisServer(b *testing.B) {
	for _, tool := range []string{"redis-server", "redis-benchmark"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				b.Fatalf("%s not found (Debian redis-server/redis-tools; `make deps` installs them): %v", tool, err)
			}
			b.Skipf("SKIPPED LOUDLY: %s not found (Debian redis-server/redis-tools; `make deps` installs them): %v", tool, err)
		}
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
	for _, port := range []string{cnPort, redisPort} {
		waitPing(b, "127.0.0.1:"+port)
	}
	cases := []struct {
		name string
		args []string
	}{
		{"zadd", []string{"ZADD", "bench:z", "__rand_int__", "m:__rand_int__"}},
		{"zincrby", []string{"ZINCRBY", "bench:zi", "1", "m:__rand_int__"}},
		{"zrangebyscore", []string{"ZRANGEBYSCORE", "bench:z", "__rand_int__", "+inf", "LIMIT", "0", "10"}},
	}
	for b.Loop() {
		for _, pipeline := range []int{1, 16} {
			n := requests
			if pipeline > 1 {
				n *= 8
			}
			for _, c := range cases {
				var ours, theirs benchResult
				var ourCPU, theirCPU float64
				for range rounds {
					r, cpu := measureCPU(b, cn.Process.Pid, func() benchResult { return redisBenchmarkCommand(b, cnPort, pipeline, n, c.args) })
					ours, ourCPU = ours.best(r), ourCPU+cpu
					r, cpu = measureCPU(b, rs.Process.Pid, func() benchResult { return redisBenchmarkCommand(b, redisPort, pipeline, n, c.args) })
					theirs, theirCPU = theirs.best(r), theirCPU+cpu
				}
				reportPair(b, fmt.Sprintf("%s_P%d", c.name, pipeline), "cachenode", "redis-server",
					float64(rounds*n), ours, theirs, ourCPU, theirCPU)
			}
		}
	}
}

// redisBenchmarkCommand runs redis-benchmark with an arbitrary command
// (__rand_int__ replaced per request) and returns its rate and p99.
func redisBenchmarkCommand(b *testing.B, port string, pipeline, n int, args []string) benchResult {
	b.Helper()
	cmd := append([]string{"-h", "127.0.0.1", "-p", port, "-c", "50", "-n", strconv.Itoa(n), "-P", strconv.Itoa(pipeline),
		"-r", "100000", "--csv"}, args...)
	out, err := exec.Command("redis-benchmark", cmd...).Output()
	if err != nil {
		b.Fatalf("redis-benchmark -p %s %v: %v\n%s", port, args, err, out)
	}
	rows, err := csv.NewReader(strings.NewReader(string(out))).ReadAll()
	if err != nil || len(rows) < 2 || len(rows[1]) < 7 {
		b.Fatalf("redis-benchmark csv: %v\n%s", err, out)
	}
	rps, _ := strconv.ParseFloat(rows[1][1], 64)
	p99, _ := strconv.ParseFloat(rows[1][6], 64)
	return benchResult{rps, p99}
}
