package cachenode_test

import (
	"bufio"
	"cmp"
	"context"
	"encoding/csv"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/portico-io/portico/internal/peerbench"
	"github.com/portico-io/portico/internal/testdeps"
)

// BenchmarkVsRedisServer runs redis-benchmark against cachenode and a
// Debian redis-server (no persistence) started side by side on loopback,
// both as separate processes: GET and SET with 100-byte values, 50
// clients, -P 1 and -P 16. Two sub-benchmarks differ only in cachenode's
// GOMAXPROCS: gomaxprocs=1 (one core's worth of scheduler, as
// redis-server executes commands on one thread) and gomaxprocs=default (no
// override: cachenode as operators run it). redis-server is at its
// defaults in both.
//
// Each side's process CPU time (every thread's, nanoseconds, see
// cpuSeconds) is read around every redis-benchmark run: throughput alone
// flatters whichever server gets more of the shared machine's CPU during
// its rounds, so ops per CPU-second is the per-core comparison. Rounds run
// in peerbench.Order (ours, peer, peer, ours, ...), every round is logged,
// and each case reports, by the "-ratio" convention tools/benchsummary
// reads (median over round pairs, with -ratio-min and -ratio-max):
// <case>-per-cpu-ratio (cachenode's ops per CPU-second ÷ redis-server's,
// > 1 favours cachenode), <case>-throughput-ratio and <case>-p99-ratio,
// plus each side's mean ops/s and ops/CPU-s.
//
// It first loads N keys with 100-byte values into each and reports memory
// per key from INFO memory (used_memory and RSS deltas). With
// -benchtime 1x (make bench) N is 200k, and each server gets 4 rounds
// (PORTICO_BENCH_ROUNDS) of 100k requests at -P 1 and of 800k at -P 16
// (about 2 s each: shorter rounds left the per-CPU ratio swinging ±10 %
// with the machine's other load); for the full-size run:
//
//	PORTICO_BENCH_KEYS=1000000 PORTICO_BENCH_REQUESTS=500000 \
//	  go test -run '^$' -bench 'BenchmarkVsRedisServer$' -benchtime 1x ./cachenode/
func BenchmarkVsRedisServer(b *testing.B) {
	for _, tool := range []string{"redis-server", "redis-benchmark"} {
		if _, err := exec.LookPath(tool); err != nil {
			b.Skipf("SKIPPED LOUDLY: %s not found (Debian redis-server/redis-tools; `make deps` installs them): %v", tool, err)
		}
	}
	bin := peerbench.Build(b, "./cachenode/cmd/cachenode")
	b.Run("gomaxprocs=1", func(b *testing.B) { vsRedisServer(b, bin, "1") })
	b.Run("gomaxprocs=default", func(b *testing.B) { vsRedisServer(b, bin, "") })
}

// vsRedisServer is one sub-benchmark of BenchmarkVsRedisServer: fresh
// processes of both sides, cachenode with GOMAXPROCS=procs (unset: Go's
// default).
func vsRedisServer(b *testing.B, bin, procs string) {
	requests := envInt("PORTICO_BENCH_REQUESTS", 100000)
	keys := envInt("PORTICO_BENCH_KEYS", 200000)
	rounds := envInt("PORTICO_BENCH_ROUNDS", 4)
	dir := b.TempDir()
	cnPort, redisPort := freePort(b), freePort(b)
	// Both sides plaintext: redis-server's default port is.
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

	for b.Loop() {
		// Memory first, on fresh processes, so RSS deltas are not hidden by
		// pages the throughput runs already faulted in.
		ourMem := loadAndMeasure(b, "127.0.0.1:"+cnPort, keys)
		redisMem := loadAndMeasure(b, "127.0.0.1:"+redisPort, keys)
		b.ReportMetric(ourMem.used, "portico-used-memory-B/key")
		b.ReportMetric(ourMem.rss, "portico-rss-B/key")
		b.ReportMetric(redisMem.used, "peer-used-memory-B/key")
		b.ReportMetric(redisMem.rss, "peer-rss-B/key")
		b.ReportMetric(ourMem.rss/redisMem.rss, "rss-per-key-ratio")
		b.Logf("memory for %d keys, 100-byte values: cachenode used_memory %.0f B/key rss %.0f B/key | redis-server used_memory %.0f B/key rss %.0f B/key",
			keys, ourMem.used, ourMem.rss, redisMem.used, redisMem.rss)
		for _, pipeline := range []int{1, 16} {
			n := requests
			if pipeline > 1 {
				n *= 8
			}
			for _, test := range []string{"set", "get"} {
				name := fmt.Sprintf("%s-P%d", test, pipeline)
				// Every round in run order, on one line per case: go test
				// cuts a benchmark's log after 10 lines without -v.
				var log []string
				round := func(side peerbench.Side, pid int, port string) func(int) roundResult {
					return func(i int) roundResult {
						r, cpu := measureCPU(b, pid, func() benchResult { return redisBenchmark(b, port, test, pipeline, n) })
						rr := roundResult{benchResult: r, perCPU: float64(n) / cpu}
						log = append(log, fmt.Sprintf("%s %.0f ops/s p99 %.2f ms %.0f ops/cpu-s", side, r.rps, r.p99, rr.perCPU))
						return rr
					}
				}
				ours, theirs := peerbench.Rounds(rounds, round(peerbench.Ours, cn.Process.Pid, cnPort), round(peerbench.Peer, rs.Process.Pid, redisPort))
				reportRounds(b, name, ours, theirs, strings.Join(log, "; "))
			}
		}
	}
}

// roundResult is one redis-benchmark run against one side: its ops/s and
// p99, and ops per CPU-second of the server over the run.
type roundResult struct {
	benchResult
	perCPU float64
}

// reportRounds reports one case of BenchmarkVsRedisServer by the "-ratio"
// convention (one ratio per round pair) and each side's mean, and logs the
// rounds; log lists the rounds in run order.
func reportRounds(b *testing.B, name string, ours, theirs []roundResult, log string) {
	field := func(rs []roundResult, f func(roundResult) float64) []float64 {
		out := make([]float64, len(rs))
		for i, r := range rs {
			out[i] = f(r)
		}
		return out
	}
	perCPU := func(r roundResult) float64 { return r.perCPU }
	rps := func(r roundResult) float64 { return r.rps }
	p99 := func(r roundResult) float64 { return r.p99 }
	peerbench.Report(b, name+"-per-cpu", peerbench.Ratios(field(ours, perCPU), field(theirs, perCPU)))
	peerbench.Report(b, name+"-throughput", peerbench.Ratios(field(ours, rps), field(theirs, rps)))
	peerbench.Report(b, name+"-p99", peerbench.Ratios(field(ours, p99), field(theirs, p99)))
	b.ReportMetric(peerbench.Mean(field(ours, perCPU)), "portico-"+name+"-ops/cpu-s")
	b.ReportMetric(peerbench.Mean(field(theirs, perCPU)), "peer-"+name+"-ops/cpu-s")
	b.ReportMetric(peerbench.Mean(field(ours, rps)), "portico-"+name+"-ops/s")
	b.ReportMetric(peerbench.Mean(field(theirs, rps)), "peer-"+name+"-ops/s")
	med, lo, hi := peerbench.Spread(peerbench.Ratios(field(ours, perCPU), field(theirs, perCPU)))
	b.Logf("%s: per-CPU ratio %.2f [%.2f–%.2f] over %d round pairs; rounds: %s", name, med, lo, hi, len(ours), log)
}

type benchResult struct{ rps, p99 float64 }

func redisBenchmark(b *testing.B, port, test string, pipeline, n int) benchResult {
	b.Helper()
	out, err := exec.Command("redis-benchmark", "-h", "127.0.0.1", "-p", port, "-c", "50", "-n", strconv.Itoa(n),
		"-P", strconv.Itoa(pipeline), "-d", "100", "-r", "100000", "-t", test, "--csv").Output()
	if err != nil {
		b.Fatalf("redis-benchmark -p %s -t %s: %v\n%s", port, test, err, out)
	}
	// "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
	rows, err := csv.NewReader(strings.NewReader(string(out))).ReadAll()
	if err != nil || len(rows) < 2 || len(rows[1]) < 7 {
		b.Fatalf("redis-benchmark csv: %v\n%s", err, out)
	}
	rps, _ := strconv.ParseFloat(rows[1][1], 64)
	p99, _ := strconv.ParseFloat(rows[1][6], 64)
	return benchResult{rps, p99}
}

// cpuSeconds is the CPU time a process has used so far, all live threads
// included: the sum of each thread's time on a CPU from
// /proc/<pid>/task/<tid>/schedstat (nanoseconds; /proc/<pid>/stat's
// utime+stime counts 10 ms ticks, too coarse for a round of -P 16, which
// lasts a few hundred ms). Neither server ends threads while it serves, so
// no thread's time is lost between two readings.
func cpuSeconds(b *testing.B, pid int) float64 {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(tasks) == 0 {
		b.Fatalf("process %d CPU time: no threads (%v)", pid, err)
	}
	var ns float64
	for _, t := range tasks {
		raw, err := os.ReadFile(t)
		if err != nil {
			continue // the thread ended between the glob and the read
		}
		f := strings.Fields(string(raw))
		if len(f) < 1 {
			b.Fatalf("%s: %q", t, raw)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			b.Fatalf("%s: %q: %v", t, raw, err)
		}
		ns += v
	}
	return ns / 1e9
}

// measureCPU runs fn and returns its result and the CPU seconds process pid
// used meanwhile.
func measureCPU(b *testing.B, pid int, fn func() benchResult) (benchResult, float64) {
	before := cpuSeconds(b, pid)
	r := fn()
	return r, cpuSeconds(b, pid) - before
}

type memResult struct{ used, rss float64 }

func infoMemory(b *testing.B, c *redis.Client) (used, rss float64) {
	info, err := c.Info(context.Background(), "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "used_memory:"); ok {
			used, _ = strconv.ParseFloat(v, 64)
		}
		if v, ok := strings.CutPrefix(l, "used_memory_rss:"); ok {
			rss, _ = strconv.ParseFloat(v, 64)
		}
	}
	return used, rss
}

// loadAndMeasure flushes, loads n keys "mem:%010d" with 100-byte values
// in MSET batches and returns the INFO memory growth per key.
func loadAndMeasure(b *testing.B, addr string, n int) memResult {
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	defer c.Close()
	c.FlushAll(ctx)
	used0, rss0 := infoMemory(b, c)
	val := strings.Repeat("x", 100)
	const batch = 1000
	for i := 0; i < n; i += batch {
		args := make([]any, 0, 2*batch)
		for j := i; j < i+batch && j < n; j++ {
			args = append(args, fmt.Sprintf("mem:%010d", j), val)
		}
		if err := c.MSet(ctx, args...).Err(); err != nil {
			b.Fatal(err)
		}
	}
	if got := c.DBSize(ctx).Val(); got != int64(n) {
		b.Fatalf("%s: DBSIZE %d after loading %d keys", addr, got, n)
	}
	used1, rss1 := infoMemory(b, c)
	c.FlushAll(ctx)
	return memResult{(used1 - used0) / float64(n), (rss1 - rss0) / float64(n)}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func freePort(b testing.TB) string { return strconv.Itoa(testdeps.FreePort(b)) }

// waitPing waits until addr answers PING (the process has started).
func waitPing(b testing.TB, addr string) {
	deadline := time.Now().Add(30 * time.Second)
	for delay := time.Millisecond; ; delay = min(2*delay, 200*time.Millisecond) {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.SetDeadline(time.Now().Add(time.Second))
			c.Write([]byte("PING\r\n"))
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if line == "+PONG\r\n" {
				return
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s did not answer PING", addr)
		}
		time.Sleep(delay) // process start-up backoff, not test timing
	}
}
