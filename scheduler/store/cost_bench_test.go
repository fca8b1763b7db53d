package store

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/portico-io/portico/internal/peerbench"
	"github.com/portico-io/portico/internal/testdeps"
)

// BenchmarkRunCostInPostgres is issue 27's instrument: what one run costs
// Postgres over its life, statement by statement, as CPU time of the
// store's backends (from /proc) per run. n one-off runs (the scheduler
// benchmark's spec, normalized) are fired in passes of 1000, claimed
// claimSize at a time (a worker's 16 slots) and succeeded 128 at a time (a
// completer's window at that rate), one step after another with nothing
// else running: no peer and no concurrency, so unlike
// BenchmarkSchedulerVsRiver it moves only when a statement's own cost
// does — between runs back to back; its level drifts over hours on a
// shared Postgres, so compare builds back to back. Wall time is not
// reported (the machine is shared); CPU time ticks at 10 ms, so n stays in
// the thousands.
//
//	go test -run '^$' -bench RunCostInPostgres -benchtime 1x ./scheduler/store/
//	# PORTICO_BENCH_JOBS (20000)
func BenchmarkRunCostInPostgres(b *testing.B) {
	const (
		fireBatch = 1000
		claimSize = 16
		succBatch = 128
	)
	n := benchJobs(20000)
	for b.Loop() {
		ctx := context.Background()
		url := testdeps.Postgres(b)
		cfg, err := pgx.ParseConfig(url)
		if err != nil {
			b.Fatal(err)
		}
		s, err := Open(ctx, Config{DatabaseURL: url})
		if err != nil {
			b.Fatal(err)
		}
		insertDue(b, s, "bench", benchSpec, n)
		if _, err := s.pool.Exec(ctx, `VACUUM ANALYZE scheduler.scheduled_execution`); err != nil {
			b.Fatal(err)
		}
		cpu := func() time.Duration { return peerbench.BackendsCPU(cfg.Database, nil) }
		var fire, claim, succeed time.Duration
		t0 := cpu()
		for fired := 0; fired < n; {
			res, err := s.Fire(ctx, fireBatch, func(DueRun, time.Time) FireDecision { return FireDecision{Status: StatusQueued} })
			if err != nil || res.Claimed == 0 {
				b.Fatalf("fire: %+v, %v", res, err)
			}
			fired += res.Claimed
		}
		t1 := cpu()
		fire = t1 - t0
		var ids, tokens []int64
		for leased := 0; leased < n; {
			ls, err := s.Claim(ctx, "w1", claimSize, time.Minute, 2)
			if err != nil || len(ls) == 0 {
				b.Fatalf("claim: %d leases, %v", len(ls), err)
			}
			t2 := cpu()
			claim, t1 = claim+t2-t1, t2
			leased += len(ls)
			for _, l := range ls {
				ids, tokens = append(ids, l.RunID), append(tokens, l.Token)
			}
			if len(ids) >= succBatch || leased == n {
				errs, err := s.SucceedMany(ctx, ids, tokens)
				if err != nil {
					b.Fatal(err)
				}
				for _, e := range errs {
					if e != nil {
						b.Fatal(e)
					}
				}
				ids, tokens = ids[:0], tokens[:0]
				t2 := cpu()
				succeed, t1 = succeed+t2-t1, t2
			}
		}
		s.Close()
		per := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) / float64(n) }
		b.ReportMetric(per(fire), "fire-µs/run")
		b.ReportMetric(per(claim), "claim-µs/run")
		b.ReportMetric(per(succeed), "succeed-µs/run")
		b.ReportMetric(per(fire+claim+succeed), "pg-µs/run")
		b.Logf("n=%d: Postgres CPU per run: fire %.1f µs, claim %.1f µs (%d a claim), succeed %.1f µs (%d a statement); %s",
			n, per(fire), per(claim), claimSize, per(succeed), succBatch, peerbench.Machine())
	}
}

// benchJobs is PORTICO_BENCH_JOBS when set to a positive number, else def.
func benchJobs(def int) int {
	if v, err := strconv.Atoi(os.Getenv("PORTICO_BENCH_JOBS")); err == nil && v > 0 {
		return v
	}
	return def
}

// benchSpec is BenchmarkSchedulerVsRiver's job spec as stored (normalized).
const benchSpec = `{"tenant":"bench","schedule":{"type":"ONE_OFF","at":"2026-12-03T04:00:00Z"},
	"target":{"type":"HTTP","http":{"url":"http://127.0.0.1:9/","method":"POST"}},
	"execution":{"timeoutSeconds":30,"retry":{"maxAttempts":3,"initialBackoffMs":1000,"maxBackoffMs":60000},
		"concurrencyPolicy":"ALLOW","misfirePolicy":"FIRE_ONCE","misfireCap":100,"priority":"NORMAL","maxDeferSeconds":3600},
	"enabled":true}`
