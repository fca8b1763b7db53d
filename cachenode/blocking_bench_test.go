package cachenode_test

import (
	"bytes"
	"cmp"
	"encoding/csv"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/portico-io/portico/internal/peerbench"
)

// BenchmarkBlockingVsRedisServer compares the blocking lists with
// redis-server the way BenchmarkVsRedisServer compares strings
// (BENCHMARKS.md, "cachenode vs redis-server"): cachenode's command built
// from the tree and a Debian redis-server (no persistence), each its own
// process on a free loopback port, both plaintext. A round is two
// redis-benchmark processes at once against one list, 25 clients looping
// BLPOP (timeout 0) and 25 clients looping LPUSH of a 100-byte value, the
// same number of requests each, so every pop is eventually served; its
// wall time gives ops/s (pushes and pops), the server's CPU time (every
// thread's) ops per CPU-second, and p99 is BLPOP's, which includes its
// wait for a push.
//
// Rounds run in peerbench.Order (ours, peer, peer, ours, …), each logged,
// and the case is reported by the "-ratio" convention (median over round
// pairs, with min and max): lpush-blpop-per-cpu (the figure to read on a
// shared machine), -throughput and -p99. Two sub-benchmarks with fresh
// processes: cachenode at GOMAXPROCS=1 (a core, as redis-server runs
// commands on one thread) and at Go's default; redis-server at its
// defaults in both, cachenode with everything else at its defaults.
//
//	go test -run '^$' -bench BlockingVsRedisServer -benchtime 1x ./cachenode/
//	# PORTICO_BENCH_ROUNDS (3 per side), PORTICO_BENCH_BLOCKING_REQUESTS (50000 pushes a round)
func BenchmarkBlockingVsRedisServer(b *testing.B) {
	for _, tool := range []string{"redis-server", "redis-benchmark"} {
		needTool(b, tool)
	}
	bin := peerbench.Build(b, "./cachenode/cmd/cachenode")
	b.Run("gomaxprocs=1", func(b *testing.B) { blockingVsRedisServer(b, bin, "1") })
	b.Run("gomaxprocs=default", func(b *testing.B) { blockingVsRedisServer(b, bin, "") })
}

func blockingVsRedisServer(b *testing.B, bin, procs string) {
	requests := envInt("PORTICO_BENCH_BLOCKING_REQUESTS", 50000)
	rounds := envInt("PORTICO_BENCH_ROUNDS", 3)
	p := startRedisPair(b, bin, procs)
	b.Logf("cachenode GOMAXPROCS=%s vs redis-server; %d rounds per side, order ours, peer, peer, ours; %s",
		cmp.Or(procs, "default"), rounds, peerbench.Machine())
	for b.Loop() {
		pairRounds(b, "lpush-blpop", rounds, 2*requests, []int{p.cnPid}, []int{p.rsPid}, func(side peerbench.Side) benchResult {
			if side == peerbench.Ours {
				return pushPop(b, p.cnPort, requests)
			}
			return pushPop(b, p.rsPort, requests)
		})
	}
}

// pushPop runs the BLPOP and the LPUSH redis-benchmark at once against
// port and returns pushes+pops per second of wall time and BLPOP's p99.
func pushPop(b *testing.B, port string, n int) benchResult {
	b.Helper()
	run := func(cmd ...string) (*exec.Cmd, *bytes.Buffer) {
		args := append([]string{"-h", "127.0.0.1", "-p", port, "-c", "25", "-n", strconv.Itoa(n), "--csv"}, cmd...)
		c := exec.Command("redis-benchmark", args...)
		var out bytes.Buffer
		c.Stdout, c.Stderr = &out, &out
		return c, &out
	}
	value := strings.Repeat("v", 100)
	pop, popOut := run("BLPOP", "bench:blocking", "0")
	push, pushOut := run("LPUSH", "bench:blocking", value)
	start := time.Now()
	if err := pop.Start(); err != nil {
		b.Fatal(err)
	}
	if err := push.Start(); err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 2)
	go func() { done <- push.Wait() }()
	go func() { done <- pop.Wait() }()
	timeout := time.After(5 * time.Minute)
	for range 2 {
		select {
		case err := <-done:
			if err != nil {
				b.Fatalf("redis-benchmark -p %s: %v\nBLPOP: %s\nLPUSH: %s", port, err, popOut, pushOut)
			}
		case <-timeout:
			_ = pop.Process.Kill()
			_ = push.Process.Kill()
			b.Fatalf("redis-benchmark -p %s: push/pop did not finish\nBLPOP: %s\nLPUSH: %s", port, popOut, pushOut)
		}
	}
	elapsed := time.Since(start)
	rows, err := csv.NewReader(strings.NewReader(popOut.String())).ReadAll()
	if err != nil || len(rows) < 2 || len(rows[len(rows)-1]) < 7 {
		b.Fatalf("redis-benchmark BLPOP csv: %v\n%s", err, popOut)
	}
	p99, _ := strconv.ParseFloat(rows[len(rows)-1][6], 64)
	return benchResult{rps: float64(2*n) / elapsed.Seconds(), p99: p99}
}
