package store

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/portico-io/portico/internal/peerbench"
	"github.com/portico-io/portico/internal/testdeps"
)

// BenchmarkClaimContention measures what a claim costs Postgres per run
// leased, as the CPU time of the claimers' backends read in nanoseconds
// from /proc/<pid>/schedstat (Postgres on this machine), and how much of
// it is contention between concurrent claimers. The runs belong to three
// tenants, queued in three blocks (as three bursts would be). A claim is a
// worker's: 16 free slots, 4 kept for HIGH, so 12 NORMAL runs. Variants:
//   - claim-x1, plain-x1: claimSQL, claimPlainSQL, one claimer at a time;
//   - claim-x3, plain-x3: three claimers at once (three worker processes
//     in a burst), each taking from every tenant, so all three work at
//     the same heads of the ready index and the same heap pages;
//   - own-x3: three at once, each restricted to its own tenant (claimSQL's
//     tenant list): the same statement on disjoint rows and pages.
//
// The variants take turns on one database, 1,500 runs at a time, so they
// meet the same table and index state; the first turn of each is not
// counted.
//
//	go test -run '^$' -bench ClaimContention -benchtime 1x ./scheduler/store/
//	# PORTICO_BENCH_JOBS (60000)
func BenchmarkClaimContention(b *testing.B) {
	const turn = 1500
	n := benchJobs(60000)
	for b.Loop() {
		ctx := context.Background()
		url := testdeps.Postgres(b)
		s, err := Open(ctx, Config{DatabaseURL: url})
		if err != nil {
			b.Fatal(err)
		}
		tenants := []string{"t0", "t1", "t2"}
		for _, t := range tenants {
			insertDue(b, s, t, strings.Replace(benchSpec, `"tenant":"bench"`, `"tenant":"`+t+`"`, 1), n/len(tenants))
		}
		if _, err := s.pool.Exec(ctx, `VACUUM ANALYZE scheduler.scheduled_execution`); err != nil {
			b.Fatal(err)
		}
		for fired := 0; fired < n; {
			res, err := s.Fire(ctx, 1000, func(DueRun, time.Time) FireDecision { return FireDecision{Status: StatusQueued} })
			if err != nil || res.Claimed == 0 {
				b.Fatalf("fire: %+v, %v", res, err)
			}
			fired += res.Claimed
		}
		type variant struct {
			name      string
			sql       string
			args      func(claimer int) []any
			conns     []*pgx.Conn
			cpu       time.Duration
			runs, got int
		}
		claim := func(int) []any { return []any{"w", int64(60000), 16, 2, 0, nil, nil, nil, nil, 12} }
		plain := func(int) []any { return []any{"w", int64(60000), 16, 2, 12} }
		own := func(i int) []any {
			return []any{"w", int64(60000), 16, 2, 0, []string{tenants[i]}, []int32{16}, nil, nil, 12}
		}
		vs := []*variant{
			{name: "claim-x1", sql: claimSQL, args: claim}, {name: "plain-x1", sql: claimPlainSQL, args: plain},
			{name: "claim-x3", sql: claimSQL, args: claim}, {name: "plain-x3", sql: claimPlainSQL, args: plain},
			{name: "own-x3", sql: claimSQL, args: own},
		}
		for _, v := range vs {
			for range int(v.name[len(v.name)-1] - '0') {
				c, err := pgx.Connect(ctx, url)
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close(ctx)
				// claimPlanning, for the session rather than a transaction.
				if _, err := c.Exec(ctx, strings.ReplaceAll(claimPlanning[0], "true)", "false)")); err != nil {
					b.Fatal(err)
				}
				v.conns = append(v.conns, c)
			}
		}
		if least := 3 * len(vs) * turn; n < least {
			b.Fatalf("PORTICO_BENCH_JOBS=%d: at least %d (three turns a variant, the first not counted)", n, least)
		}
		cpu := func(v *variant) (sum time.Duration) {
			for _, c := range v.conns {
				sum += schedstatCPU(b, c.PgConn().PID())
			}
			return sum
		}
		for t := 0; (t+1)*turn <= n; t++ {
			v := vs[t%len(vs)]
			before := cpu(v)
			var taken, claims atomic.Int64
			var wg sync.WaitGroup
			for i, c := range v.conns {
				args := v.args(i)
				wg.Go(func() {
					for taken.Load() < turn {
						rows, err := c.Query(ctx, v.sql, args...)
						if err != nil {
							b.Error(err)
							return
						}
						got := 0
						for rows.Next() {
							got++
						}
						rows.Close()
						if err := rows.Err(); err != nil {
							b.Error(err)
							return
						}
						taken.Add(int64(got))
						claims.Add(1)
						if got == 0 { // the others took the rest
							return
						}
					}
				})
			}
			wg.Wait()
			if t >= len(vs) {
				v.cpu += cpu(v) - before
				v.runs += int(taken.Load())
				v.got += int(claims.Load())
			}
		}
		s.Close()
		var line []string
		for _, v := range vs {
			per := float64(v.cpu) / float64(time.Microsecond) / float64(v.runs)
			b.ReportMetric(per, v.name+"-µs/run")
			line = append(line, fmt.Sprintf("%s %.1f µs a run (%.1f runs a claim)", v.name, per, float64(v.runs)/float64(v.got)))
		}
		b.Logf("n=%d: Postgres CPU per run leased: %s; %s", n, strings.Join(line, ", "), peerbench.Machine())
	}
}

// schedstatCPU is the CPU time of process pid from /proc/<pid>/schedstat
// (nanoseconds; /proc/<pid>/stat counts 10 ms ticks).
func schedstatCPU(tb testing.TB, pid uint32) time.Duration {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(int(pid)) + "/schedstat")
	if err != nil {
		tb.Fatalf("backend %d: %v (Postgres must run on this machine)", pid, err)
	}
	f := strings.Fields(string(raw))
	ns, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ns)
}
