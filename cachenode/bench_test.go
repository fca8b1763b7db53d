package cachenode_test

import (
	"bufio"
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

	"github.com/portico-io/portico/internal/testdeps"
)

// BenchmarkVsRedisServer runs redis-benchmark against cachenode and a
// Debian redis-server (no persistence) started side by side on loopback,
// both as separate processes: GET and SET with 100-byte values, 50
// clients, -P 1 and -P 16. It reports each side's ops/s and p99 and the
// cachenode/redis ratios; cachenode runs with GOMAXPROCS=1 so the ratio is
// per core (redis-server executes commands on one thread).
//
// Each side's process CPU time (every thread's, nanoseconds, see
// cpuSeconds) is read around every redis-benchmark run, and ops per
// CPU-second over all rounds is reported too: throughput alone flatters
// whichever server gets more of the shared machine's CPU during its rounds.
//
// It then loads N keys with 100-byte values into each and reports memory
// per key from INFO memory (used_memory and RSS deltas). With
// -benchtime 1x (make bench) N is 200k, and each server gets 4 rounds of
// 100k requests at -P 1 and of 800k at -P 16 (about 2 s each: shorter
// rounds left the per-CPU ratio swinging ±10 % with the machine's other
// load); for the full-size run:
//
//	PORTICO_BENCH_KEYS=1000000 PORTICO_BENCH_REQUESTS=500000 \
//	  go test -run '^$' -bench VsRedisServer -benchtime 1x ./cachenode/
func BenchmarkVsRedisServer(b *testing.B) {
	for _, tool := range []string{"redis-server", "redis-benchmark"} {
		if _, err := exec.LookPath(tool); err != nil {
			b.Skipf("SKIPPED LOUDLY: %s not found (Debian redis-server/redis-tools; `make deps` installs them): %v", tool, err)
		}
	}
	requests := envInt("PORTICO_BENCH_REQUESTS", 100000)
	keys := envInt("PORTICO_BENCH_KEYS", 200000)
	rounds := envInt("PORTICO_BENCH_ROUNDS", 4)
	dir := b.TempDir()
	bin := filepath.Join(dir, "cachenode")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/cachenode").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	cnPort, redisPort := freePort(b), freePort(b)
	// Both sides plaintext: redis-server's default port is.
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
		// Memory first, on fresh processes, so RSS deltas are not hidden by
		// pages the throughput runs already faulted in.
		ourMem := loadAndMeasure(b, "127.0.0.1:"+cnPort, keys)
		redisMem := loadAndMeasure(b, "127.0.0.1:"+redisPort, keys)
		b.ReportMetric(ourMem.used, "cachenode_used_memory_B/key")
		b.ReportMetric(ourMem.rss, "cachenode_rss_B/key")
		b.ReportMetric(redisMem.used, "redis_used_memory_B/key")
		b.ReportMetric(redisMem.rss, "redis_rss_B/key")
		b.ReportMetric(ourMem.rss/redisMem.rss, "rss_per_key_ratio")
		b.Logf("memory for %d keys, 100-byte values: cachenode used_memory %.0f B/key rss %.0f B/key | redis-server used_memory %.0f B/key rss %.0f B/key",
			keys, ourMem.used, ourMem.rss, redisMem.used, redisMem.rss)
		for _, pipeline := range []int{1, 16} {
			n := requests
			if pipeline > 1 {
				n *= 8
			}
			for _, test := range []string{"set", "get"} {
				// Alternate the two servers and keep each one's best round:
				// the machine is shared, and load from elsewhere only ever
				// makes a round slower.
				var ours, theirs benchResult
				var ourCPU, theirCPU float64
				for range rounds {
					r, cpu := measureCPU(b, cn.Process.Pid, func() benchResult { return redisBenchmark(b, cnPort, test, pipeline, n) })
					ours, ourCPU = ours.best(r), ourCPU+cpu
					r, cpu = measureCPU(b, rs.Process.Pid, func() benchResult { return redisBenchmark(b, redisPort, test, pipeline, n) })
					theirs, theirCPU = theirs.best(r), theirCPU+cpu
				}
				reportPair(b, fmt.Sprintf("%s_P%d", test, pipeline), "cachenode", "redis-server",
					float64(rounds*n), ours, theirs, ourCPU, theirCPU)
			}
		}
	}
}

type benchResult struct{ rps, p99 float64 }

// best keeps the round with the higher throughput (and its p99).
func (r benchResult) best(o benchResult) benchResult {
	if o.rps > r.rps {
		return o
	}
	return r
}

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

// reportPair reports one case of a cachenode-vs-redis benchmark: each
// side's best round (ops/s, p99), ops per CPU-second over all rounds
// (total requests over the sides' summed CPU seconds) and the ratios.
func reportPair(b *testing.B, name, ourLabel, theirLabel string, total float64, ours, theirs benchResult, ourCPU, theirCPU float64) {
	ourPerCPU, theirPerCPU := total/ourCPU, total/theirCPU
	b.ReportMetric(ourPerCPU, "cachenode_"+name+"_ops/cpu-s")
	b.ReportMetric(theirPerCPU, "redis_"+name+"_ops/cpu-s")
	b.ReportMetric(ourPerCPU/theirPerCPU, name+"_ops_per_cpu_ratio")
	b.ReportMetric(ours.rps, "cachenode_"+name+"_ops/s")
	b.ReportMetric(theirs.rps, "redis_"+name+"_ops/s")
	b.ReportMetric(ours.rps/theirs.rps, name+"_throughput_ratio")
	b.ReportMetric(ours.p99, "cachenode_"+name+"_p99_ms")
	b.ReportMetric(theirs.p99, "redis_"+name+"_p99_ms")
	b.Logf("%-7s %s %9.0f ops/s p99 %.3f ms %9.0f ops/cpu-s | %s %9.0f ops/s p99 %.3f ms %9.0f ops/cpu-s | ratio %.2f, per cpu-s %.2f",
		name, ourLabel, ours.rps, ours.p99, ourPerCPU, theirLabel, theirs.rps, theirs.p99, theirPerCPU, ours.rps/theirs.rps, ourPerCPU/theirPerCPU)
}
