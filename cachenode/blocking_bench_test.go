package cachenode_test

import (
	"bytes"
	"encoding/csv"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkBlockingVsRedisServer is BenchmarkVsRedisServer's setup (a
// built cachenode at GOMAXPROCS=1 and a Debian redis-server, both
// plaintext on loopback) for the blocking lists: two redis-benchmark
// processes at once against one list, 25 clients looping BLPOP (timeout
// 0) and 25 clients looping LPUSH, the same number of requests each, so
// every pop is eventually served. Each round's wall time gives ops/s (pushes
// and pops), each server's CPU time ops per CPU-second; the sides
// alternate, PORTICO_BENCH_ROUNDS rounds (default 3) of
// PORTICO_BENCH_BLOCKING_REQUESTS pushes (default 50k). p99 is BLPOP's,
// which includes its wait for a push.
//
//	go test -run '^$' -bench BlockingVsRedisServer -benchtime 1x ./cachenode/
func BenchmarkBlockingVsRedisServer(b *testing.B) {
	for _, tool := range []string{"redis-server", "redis-benchmark"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				b.Fatalf("%s not found (Debian redis-server/redis-tools; `make deps` installs them): %v", tool, err)
			}
			b.Skipf("SKIPPED LOUDLY: %s not found (Debian redis-server/redis-tools; `make deps` installs them): %v", tool, err)
		}
	}
	requests := envInt("PORTICO_BENCH_BLOCKING_REQUESTS", 50000)
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
	for b.Loop() {
		var ours, theirs benchResult
		var ourCPU, theirCPU float64
		for range rounds {
			r, cpu := measureCPU(b, cn.Process.Pid, func() benchResult { return pushPop(b, cnPort, requests) })
			ours, ourCPU = ours.best(r), ourCPU+cpu
			r, cpu = measureCPU(b, rs.Process.Pid, func() benchResult { return pushPop(b, redisPort, requests) })
			theirs, theirCPU = theirs.best(r), theirCPU+cpu
		}
		reportPair(b, "lpush_blpop", "cachenode", "redis-server", float64(2*rounds*requests), ours, theirs, ourCPU, theirCPU)
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
