package cachenode_test

import (
	"cmp"
	"encoding/csv"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/portico-io/portico/internal/peerbench"
)

// BenchmarkZsetVsRedisServer compares sorted sets with redis-server the way
// BenchmarkVsRedisServer compares strings (BENCHMARKS.md, "cachenode vs
// redis-server"): cachenode's command built from the tree and a Debian
// redis-server (no persistence), each its own process on a free loopback
// port, both plaintext; redis-benchmark with 50 clients at -P 1 (100k
// requests a round) and -P 16 (800k); rounds in peerbench.Order (ours,
// peer, peer, ours, …), each logged, each server's CPU read around every
// round; reported per case by the "-ratio" convention (median over round
// pairs, with min and max): <case>-per-cpu (ops per CPU-second, the figure
// to read on a shared machine), <case>-throughput and <case>-p99. Two
// sub-benchmarks with fresh processes: cachenode at GOMAXPROCS=1 (a core,
// as redis-server runs commands on one thread) and at Go's default;
// redis-server at its defaults in both, cachenode with everything else at
// its defaults.
//
// The commands, one sorted set each, members and scores drawn from 100 000
// (-r), so the sets grow to ~100k members while the rounds run:
//
//	ZADD bench:z __rand_int__ m:__rand_int__           (mostly score changes once full)
//	ZINCRBY bench:zi 1 m:__rand_int__                  (a leaderboard)
//	ZRANGEBYSCORE bench:z __rand_int__ +inf LIMIT 0 10 (the ZADD set: a seek and 10 members)
//
//	go test -run '^$' -bench ZsetVsRedisServer -benchtime 1x ./cachenode/
//	# PORTICO_BENCH_ROUNDS (4 per side), PORTICO_BENCH_REQUESTS (100000 at -P 1; 8× at -P 16)
func BenchmarkZsetVsRedisServer(b *testing.B) {
	for _, tool := range []string{"redis-server", "redis-benchmark"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				b.Fatalf("%s not found (Debian redis-server/redis-tools; `make deps` installs them): %v", tool, err)
			}
			b.Skipf("SKIPPED LOUDLY: %s not found (Debian redis-server/redis-tools; `make deps` installs them): %v", tool, err)
		}
	}
	bin := peerbench.Build(b, "./cachenode/cmd/cachenode")
	b.Run("gomaxprocs=1", func(b *testing.B) { zsetVsRedisServer(b, bin, "1") })
	b.Run("gomaxprocs=default", func(b *testing.B) { zsetVsRedisServer(b, bin, "") })
}

// zsetRound is one redis-benchmark run against one side.
type zsetRound struct{ rps, p99, perCPU float64 }

func zsetVsRedisServer(b *testing.B, bin, procs string) {
	requests := envInt("PORTICO_BENCH_REQUESTS", 100000)
	rounds := envInt("PORTICO_BENCH_ROUNDS", 4)
	dir := b.TempDir()
	cnPort, redisPort := freePort(b), freePort(b)
	cn := exec.Command(bin, "--resp-addr", "127.0.0.1:"+cnPort, "--http-addr", "127.0.0.1:"+freePort(b), "--log-level", "warn", "--insecure-plaintext")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOMAXPROCS=") {
			cn.Env = append(cn.Env, kv)
		}
	}
	if procs != "" {
		cn.Env = append(cn.Env, "GOMAXPROCS="+procs)
	}
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
	b.Logf("cachenode GOMAXPROCS=%s vs redis-server; %d rounds per side per case, order ours, peer, peer, ours; %s",
		cmp.Or(procs, "default"), rounds, peerbench.Machine())
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
				name := fmt.Sprintf("%s-P%d", c.name, pipeline)
				var log []string
				round := func(side peerbench.Side, pid int, port string) func(int) zsetRound {
					return func(int) zsetRound {
						r, cpu := measureCPU(b, pid, func() benchResult { return redisBenchmarkCommand(b, port, pipeline, n, c.args) })
						zr := zsetRound{r.rps, r.p99, float64(n) / cpu}
						log = append(log, fmt.Sprintf("%s %.0f ops/s p99 %.2f ms %.0f ops/cpu-s", side, zr.rps, zr.p99, zr.perCPU))
						return zr
					}
				}
				ours, theirs := peerbench.Rounds(rounds, round(peerbench.Ours, cn.Process.Pid, cnPort), round(peerbench.Peer, rs.Process.Pid, redisPort))
				reportZsetRounds(b, name, ours, theirs, strings.Join(log, "; "))
			}
		}
	}
}

// reportZsetRounds reports one case by the "-ratio" convention and each
// side's means, and logs every round (in run order) on one line.
func reportZsetRounds(b *testing.B, name string, ours, theirs []zsetRound, log string) {
	field := func(rs []zsetRound, f func(zsetRound) float64) []float64 {
		out := make([]float64, len(rs))
		for i, r := range rs {
			out[i] = f(r)
		}
		return out
	}
	perCPU := func(r zsetRound) float64 { return r.perCPU }
	rps := func(r zsetRound) float64 { return r.rps }
	p99 := func(r zsetRound) float64 { return r.p99 }
	cpuRatios := peerbench.Ratios(field(ours, perCPU), field(theirs, perCPU))
	peerbench.Report(b, name+"-per-cpu", cpuRatios)
	peerbench.Report(b, name+"-throughput", peerbench.Ratios(field(ours, rps), field(theirs, rps)))
	peerbench.Report(b, name+"-p99", peerbench.Ratios(field(ours, p99), field(theirs, p99)))
	b.ReportMetric(peerbench.Mean(field(ours, perCPU)), "portico-"+name+"-ops/cpu-s")
	b.ReportMetric(peerbench.Mean(field(theirs, perCPU)), "peer-"+name+"-ops/cpu-s")
	b.ReportMetric(peerbench.Mean(field(ours, rps)), "portico-"+name+"-ops/s")
	b.ReportMetric(peerbench.Mean(field(theirs, rps)), "peer-"+name+"-ops/s")
	med, lo, hi := peerbench.Spread(cpuRatios)
	b.Logf("%s: per-CPU ratio %.2f [%.2f–%.2f] over %d round pairs; rounds: %s", name, med, lo, hi, len(ours), log)
}

// redisBenchmarkCommand runs redis-benchmark with an arbitrary command
// (each __rand_int__ replaced per request) and returns its rate and p99.
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
