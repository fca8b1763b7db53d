package cachenode_test

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/portico-io/portico/internal/peerbench"
)

// What the side-by-side benchmarks against redis-server share
// (BENCHMARKS.md, "cachenode vs redis-server"): the environment of a
// cachenode process at a given GOMAXPROCS, the single-node pair of
// processes, and one case's alternating rounds reported by the "-ratio"
// convention.

// cachenodeEnv is this process's environment with GOMAXPROCS set to procs,
// or removed when procs is "" (Go's default: every CPU).
func cachenodeEnv(procs string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOMAXPROCS=") {
			env = append(env, kv)
		}
	}
	if procs != "" {
		env = append(env, "GOMAXPROCS="+procs)
	}
	return env
}

// redisPair is a cachenode (built from the tree, plaintext, everything at
// its defaults but GOMAXPROCS) and a Debian redis-server (no persistence,
// everything else at its defaults), each its own process on a free
// loopback port, both answering PING.
type redisPair struct {
	cnPort, rsPort string
	cnPid, rsPid   int
}

func startRedisPair(b *testing.B, bin, procs string) redisPair {
	b.Helper()
	dir := b.TempDir()
	cnPort, rsPort := freePort(b), freePort(b)
	// Both sides plaintext: redis-server's default port is.
	cn := exec.Command(bin, "--resp-addr", "127.0.0.1:"+cnPort, "--http-addr", "127.0.0.1:"+freePort(b), "--log-level", "warn", "--insecure-plaintext")
	cn.Env = cachenodeEnv(procs)
	rs := exec.Command("redis-server", "--port", rsPort, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--protected-mode", "no", "--dir", dir, "--daemonize", "no", "--loglevel", "warning")
	for _, p := range []*exec.Cmd{cn, rs} {
		if err := p.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = p.Process.Kill(); _ = p.Wait() })
	}
	for _, port := range []string{cnPort, rsPort} {
		waitPing(b, "127.0.0.1:"+port)
	}
	return redisPair{cnPort: cnPort, rsPort: rsPort, cnPid: cn.Process.Pid, rsPid: rs.Process.Pid}
}

// pairRounds runs one case rounds times per side in peerbench.Order (ours,
// peer, peer, ours, …): run(side) is one round against that side, n the
// operations a round makes, ourPids and peerPids the server processes whose
// CPU time (every thread's) is read around each round. It reports the case
// with reportRounds: <name>-per-cpu, -throughput and -p99 ratios, each
// side's means, and every round in run order on one log line.
func pairRounds(b *testing.B, name string, rounds, n int, ourPids, peerPids []int, run func(peerbench.Side) benchResult) {
	b.Helper()
	var log []string
	round := func(side peerbench.Side, pids []int) func(int) roundResult {
		return func(int) roundResult {
			r, cpu := measureCPUs(b, pids, func() benchResult { return run(side) })
			rr := roundResult{benchResult: r, perCPU: float64(n) / cpu}
			log = append(log, fmt.Sprintf("%s %.0f ops/s p99 %.2f ms %.0f ops/cpu-s", side, r.rps, r.p99, rr.perCPU))
			return rr
		}
	}
	ours, theirs := peerbench.Rounds(rounds, round(peerbench.Ours, ourPids), round(peerbench.Peer, peerPids))
	reportRounds(b, name, ours, theirs, strings.Join(log, "; "))
}
