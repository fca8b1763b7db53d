package scheduler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/portico-io/portico/internal/peerbench"
	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/scheduler/jobspec"
	"github.com/portico-io/portico/scheduler/store"
	"github.com/portico-io/portico/scheduler/worker"
)

// The side-by-side benchmark (BENCHMARKS.md, "scheduler vs River"): N jobs
// due in the same second, worked by three processes of each system on the
// same Postgres server (a fresh database per run, one system at a time),
// each job one HTTP POST to the same local receiver. Portico's processes
// are its real command (scheduler/cmd/scheduler, built for the run) with
// its default settings; River's are this test binary running a River
// client (River is a library).
//
// What each side gets, by tuning:
//   - matched: River gets what Portico has by default — a pgx pool of 20
//     (scheduler.Run's store pool), a fetch poll of 500 ms and a fetch
//     cooldown of 25 ms (worker.DefaultPoll, worker.DefaultClaimCooldown),
//     16 jobs at once per process (worker.DefaultConcurrency).
//   - defaults: River keeps its own defaults (pgxpool's max(4, NumCPU)
//     connections, one held by LISTEN; 1 s poll; 100 ms cooldown), 16 jobs
//     at once per process (River has no default for MaxWorkers).
//
// In both, River's worker calls the receiver through the same HTTP
// transport as Portico's HTTP executor (httptarget: 16 idle connections
// per host): River has no HTTP executor, the worker is the benchmark's
// code. Neither side's scheduling loop is tuned: Portico's runner ticks
// every 1 s (its timing wheel fires due runs in between), River's job
// scheduler runs every 5 s with a 5 s look-ahead (not configurable from
// outside River). The burst is written 10 s ahead of its due time so both
// have seen it before it is due.
//
// Lag is start − due by the database clock (our dispatched_at, River's
// attempted_at); throughput is N over due → last job finished.

const (
	benchProcs = 3
	// porticoPool is the pgx pool scheduler.Run opens (store.Config
	// MaxConns in scheduler.go); matched gives River the same.
	porticoPool = 20
	// benchLead is how far ahead of its due time the burst is written.
	benchLead = 10 * time.Second
	// benchApp marks the benchmark's own Postgres connections, which are
	// not counted as either side's.
	benchApp = "portico-bench"
)

// schedTuning is one sub-benchmark's configuration of River (Portico
// always runs at its defaults).
type schedTuning struct {
	name string
	// riverPool is River's pool size (0: pgxpool's default).
	riverPool int
	// riverPoll and riverCooldown are River's FetchPollInterval and
	// FetchCooldown (0: River's defaults).
	riverPoll, riverCooldown time.Duration
}

var schedTunings = []schedTuning{
	{name: "matched", riverPool: porticoPool, riverPoll: worker.DefaultPoll, riverCooldown: worker.DefaultClaimCooldown},
	{name: "defaults"},
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// benchArgs is the River job: deliver to the receiver.
type benchArgs struct {
	URL string `json:"url"`
}

func (benchArgs) Kind() string { return "portico_bench" }

type benchWorker struct {
	river.WorkerDefaults[benchArgs]
	client *http.Client
}

func (w *benchWorker) Work(ctx context.Context, job *river.Job[benchArgs]) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, job.Args.URL, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Idempotency-Key", strconv.FormatInt(job.ID, 10))
	resp, err := w.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode >= 300 {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return nil
}

// executorClient is the HTTP client of Portico's HTTP executor
// (httptarget.New), minus its SSRF-guarded dialer and with the
// per-attempt timeout of a job's default (jobspec.DefaultTimeoutSeconds).
func executorClient() *http.Client {
	return &http.Client{
		Timeout: jobspec.DefaultTimeoutSeconds * time.Second,
		Transport: &http.Transport{DialContext: (&net.Dialer{}).DialContext, MaxIdleConnsPerHost: worker.DefaultConcurrency,
			IdleConnTimeout: 90 * time.Second, TLSHandshakeTimeout: 10 * time.Second},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// riverChildMain runs one River client (the peer's equivalent of a
// scheduler process) until SIGTERM, configured by PORTICO_RIVER_POOL,
// PORTICO_RIVER_POLL and PORTICO_RIVER_COOLDOWN (unset: River's and
// pgxpool's defaults).
func riverChildMain() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	pc, err := pgxpool.ParseConfig(os.Getenv("PORTICO_DATABASE_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if n := envInt("PORTICO_RIVER_POOL", 0); n > 0 {
		pc.MaxConns = int32(n)
	}
	dur := func(name string) time.Duration {
		d, _ := time.ParseDuration(os.Getenv(name))
		return d
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer pool.Close()
	workers := river.NewWorkers()
	river.AddWorker(workers, &benchWorker{client: executorClient()})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: worker.DefaultConcurrency}},
		FetchCooldown:     dur("PORTICO_RIVER_COOLDOWN"), // zero: River's default
		FetchPollInterval: dur("PORTICO_RIVER_POLL"),
		Workers:           workers,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := client.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = client.Stop(sctx)
	return 0
}

type benchResult struct {
	jobsPerSec, p50, p99 float64 // start lag p50/p99 in seconds
	// fireP50, fireP99: due → queued by a runner (ours only; River records
	// no such step).
	fireP50, fireP99 float64
	// firesPerSec: N / (due → last run queued), ours only: it is not
	// comparable with anything River reports.
	firesPerSec float64
	// cpuPerJob: CPU time of the system's processes and of the Postgres
	// backends of its database, from the end of the burst's insert to the
	// last job done, over N (the benchmark's own connections excluded, on
	// both sides); pgPerJob is the backends' part.
	cpuPerJob, pgPerJob time.Duration
	// claimsPerJob is Portico's claim pool's part of pgPerJob (its claims
	// and reaper looks, store.ClaimPoolSuffix); 0 for River.
	claimsPerJob time.Duration
	// conns: the most Postgres connections the system held at once.
	conns int
	// deliveries: the receiver's calls (N when nothing ran twice);
	// retried: jobs that took more than one attempt.
	deliveries, retried int
}

func (r benchResult) String() string {
	s := fmt.Sprintf("%.0f jobs/s, start lag p50 %.3fs p99 %.3fs, %.2f CPU-ms/job (Postgres %.2f), %d connections, %d deliveries, %d retried",
		r.jobsPerSec, r.p50, r.p99, float64(r.cpuPerJob)/float64(time.Millisecond), float64(r.pgPerJob)/float64(time.Millisecond),
		r.conns, r.deliveries, r.retried)
	if r.claimsPerJob > 0 {
		s += fmt.Sprintf(" | claim pool %.2f CPU-ms/job of the Postgres", float64(r.claimsPerJob)/float64(time.Millisecond))
	}
	if r.fireP99 > 0 {
		s += fmt.Sprintf(" | fire lag p50 %.3fs p99 %.3fs, %.0f fires/s", r.fireP50, r.fireP99, r.firesPerSec)
	}
	return s
}

// sideProcs is one system's processes in a run.
type sideProcs struct {
	procs []*peerbench.Proc
}

func (s *sideProcs) pids() []int {
	var p []int
	for _, pr := range s.procs {
		p = append(p, pr.Pid())
	}
	return p
}

// stop ends the processes: each side's must be gone before the other side
// runs, or their idle polling competes with it.
func (s *sideProcs) stop() {
	for _, p := range s.procs {
		p.Stop()
	}
}

// check fails b if a process has exited.
func (s *sideProcs) check(b *testing.B) {
	b.Helper()
	for _, p := range s.procs {
		select {
		case <-p.Exited():
			b.Fatalf("%s exited:\n%s", p.Name, p.Output())
		default:
		}
	}
}

// startPortico starts benchProcs scheduler commands at their defaults
// (every role; plaintext and a loopback target allowlist only because the
// benchmark has no certificates and its receiver is local).
func startPortico(b *testing.B, bin, dbURL string) *sideProcs {
	s := &sideProcs{}
	for i := range benchProcs {
		cmd := exec.Command(bin, "--database-url", dbURL, "--http-addr", "127.0.0.1:0", "--worker-grpc-addr", "",
			"--target-allowlist", "127.0.0.0/8", "--worker-id", "portico"+strconv.Itoa(i), "--insecure-plaintext", "--log-level", "warn")
		s.procs = append(s.procs, peerbench.Start(b, "scheduler "+strconv.Itoa(i), cmd))
	}
	return s
}

func startRiver(b *testing.B, dbURL string, tu schedTuning) *sideProcs {
	s := &sideProcs{}
	for i := range benchProcs {
		cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
		cmd.Env = append(os.Environ(), "PORTICO_SCHEDULER_CHILD=river", "PORTICO_DATABASE_URL="+dbURL)
		if tu.riverPool > 0 {
			cmd.Env = append(cmd.Env, "PORTICO_RIVER_POOL="+strconv.Itoa(tu.riverPool))
		}
		if tu.riverPoll > 0 {
			cmd.Env = append(cmd.Env, "PORTICO_RIVER_POLL="+tu.riverPoll.String(), "PORTICO_RIVER_COOLDOWN="+tu.riverCooldown.String())
		}
		s.procs = append(s.procs, peerbench.Start(b, "river "+strconv.Itoa(i), cmd))
	}
	return s
}

// cpuTime returns the CPU time of the given processes and that of the
// Postgres backends serving db, less the benchmark's own (its polling: the
// same count costs the two schemas different amounts, a seq scan of
// Portico's run table against an index of River's, and is neither
// system's work). A process gone since is not counted.
func (db *benchDB) cpuTime(b *testing.B, pids []int) (procs, backends time.Duration) {
	rows, _ := db.Query(context.Background(), `SELECT pid FROM pg_stat_activity WHERE datname = $1 AND application_name = $2`,
		db.name, benchApp)
	own, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		b.Fatal(err)
	}
	for _, pid := range pids {
		procs += peerbench.CPUTime(pid)
	}
	return procs, peerbench.BackendsCPU(db.name, own)
}

// appCPU returns the CPU time of db's backends whose application_name
// is app (a backend gone since is not counted).
func (db *benchDB) appCPU(b *testing.B, app string) time.Duration {
	rows, _ := db.Query(context.Background(), `SELECT pid FROM pg_stat_activity WHERE datname = $1 AND application_name = $2`,
		db.name, app)
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		b.Fatal(err)
	}
	var sum time.Duration
	for _, pid := range pids {
		sum += peerbench.CPUTime(int(pid))
	}
	return sum
}

// benchDB is the benchmark's own connection to one run's database.
type benchDB struct {
	*pgxpool.Pool
	url, name string
	// maxConns is the most connections of the system under test seen by
	// waitDone.
	maxConns int
}

func openBenchDB(b *testing.B) *benchDB {
	url := testdeps.Postgres(b)
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		b.Fatal(err)
	}
	pc.ConnConfig.RuntimeParams["application_name"] = benchApp
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		b.Fatal(err)
	}
	return &benchDB{Pool: pool, url: url, name: cfg.Database}
}

// waitDone polls (there is no other signal across processes) until query
// returns at least n, recording the system's connections, or fails after
// limit or when one of procs exits.
func (db *benchDB) waitDone(b *testing.B, procs *sideProcs, query string, n int, limit time.Duration) {
	b.Helper()
	deadline := time.Now().Add(limit)
	for {
		var got, conns int
		if err := db.QueryRow(context.Background(), query).Scan(&got); err != nil {
			b.Fatal(err)
		}
		if err := db.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND application_name <> $2`,
			db.name, benchApp).Scan(&conns); err != nil {
			b.Fatal(err)
		}
		db.maxConns = max(db.maxConns, conns)
		if got >= n {
			return
		}
		procs.check(b)
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d after %s", got, n, limit)
		}
		time.Sleep(100 * time.Millisecond) // cross-process completion has no signal to wait on
	}
}

func (db *benchDB) due(b *testing.B) time.Time {
	var due time.Time
	if err := db.QueryRow(context.Background(), `SELECT date_trunc('second', now()) + $1::interval`, benchLead.String()).Scan(&due); err != nil {
		b.Fatal(err)
	}
	return due
}

func receiver(b *testing.B) (*httptest.Server, *atomic.Int64) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	b.Cleanup(srv.Close)
	return srv, &calls
}

func benchPortico(b *testing.B, bin string, n int) benchResult {
	db := openBenchDB(b)
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{DatabaseURL: db.url}) // migrations, before the processes race to
	if err != nil {
		b.Fatal(err)
	}
	st.Close()
	srv, calls := receiver(b)
	defer srv.Close()
	// Steady state: the processes are up and have split the shards before
	// the burst is written.
	procs := startPortico(b, bin, db.url)
	defer procs.stop()
	db.waitDone(b, procs, `SELECT CASE WHEN min(n) >= 300 THEN count(*) ELSE 0 END FROM (SELECT owner, count(*) AS n
		FROM scheduler.shard_lease WHERE owner IS NOT NULL AND expires_at > now() GROUP BY owner) x`, benchProcs, 2*time.Minute)
	due := db.due(b)
	spec, err := jobspec.Decode(strings.NewReader(fmt.Sprintf(`{"tenant":"bench","schedule":{"type":"ONE_OFF","at":%q},
		"target":{"type":"HTTP","http":{"url":%q}},"execution":{"retry":{"maxAttempts":3}}}`, due.UTC().Format(time.RFC3339), srv.URL)))
	if err != nil {
		b.Fatal(err)
	}
	if err := spec.Normalize(context.Background(), nil); err != nil {
		b.Fatal(err)
	}
	raw, _ := json.Marshal(spec)
	if _, err := db.Exec(ctx, `WITH d AS (INSERT INTO scheduler.schedule_details (tenant, spec, enabled)
			SELECT 'bench', $1::jsonb, true FROM generate_series(1, $2) RETURNING id)
		INSERT INTO scheduler.scheduled_execution (schedule_id, scheduled_at, status) SELECT id, $3, 'SCHEDULED' FROM d`,
		raw, n, due); err != nil {
		b.Fatal(err)
	}
	checkLead(b, "portico", due)
	proc0, pg0 := db.cpuTime(b, procs.pids())
	claims0 := db.appCPU(b, store.AppName+store.ClaimPoolSuffix)
	db.waitDone(b, procs, `SELECT count(*) FROM scheduler.scheduled_execution WHERE status = 'SUCCEEDED'`, n, 10*time.Minute)
	proc1, pg1 := db.cpuTime(b, procs.pids())
	claims1 := db.appCPU(b, store.AppName+store.ClaimPoolSuffix)
	cpu, pg := proc1-proc0+pg1-pg0, pg1-pg0
	if c := calls.Load(); c < int64(n) {
		b.Fatalf("receiver saw %d calls for %d jobs", c, n)
	}
	var r benchResult
	if err := db.QueryRow(ctx, `SELECT count(*) / extract(epoch FROM max(finished_at) - min(scheduled_at))::float8,
		percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM dispatched_at - scheduled_at)),
		percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM dispatched_at - scheduled_at)),
		percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM queued_at - scheduled_at)),
		percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM queued_at - scheduled_at)),
		count(*) / extract(epoch FROM max(queued_at) - min(scheduled_at))::float8,
		count(*) FILTER (WHERE attempt > 1)
		FROM scheduler.scheduled_execution`).Scan(&r.jobsPerSec, &r.p50, &r.p99, &r.fireP50, &r.fireP99, &r.firesPerSec, &r.retried); err != nil {
		b.Fatal(err)
	}
	r.cpuPerJob, r.pgPerJob = cpu/time.Duration(n), pg/time.Duration(n)
	r.claimsPerJob = (claims1 - claims0) / time.Duration(n)
	r.conns, r.deliveries = db.maxConns, int(calls.Load())
	return r
}

func benchRiver(b *testing.B, tu schedTuning, n int) benchResult {
	db := openBenchDB(b)
	ctx := context.Background()
	migrator, err := rivermigrate.New(riverpgxv5.New(db.Pool), nil)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		b.Fatal(err)
	}
	srv, calls := receiver(b)
	defer srv.Close()
	inserter, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{})
	if err != nil {
		b.Fatal(err)
	}
	procs := startRiver(b, db.url, tu)
	defer procs.stop()
	db.waitDone(b, procs, `SELECT count(*) FROM river_leader`, 1, time.Minute) // up, leader elected
	due := db.due(b)
	params := make([]river.InsertManyParams, 0, 1000)
	for i := range n {
		params = append(params, river.InsertManyParams{Args: benchArgs{URL: srv.URL}, InsertOpts: &river.InsertOpts{ScheduledAt: due, MaxAttempts: 3}})
		if len(params) == cap(params) || i == n-1 {
			if _, err := inserter.InsertManyFast(ctx, params); err != nil {
				b.Fatal(err)
			}
			params = params[:0]
		}
	}
	checkLead(b, "river", due)
	proc0, pg0 := db.cpuTime(b, procs.pids())
	db.waitDone(b, procs, `SELECT count(*) FROM river_job WHERE state = 'completed'`, n, 10*time.Minute)
	proc1, pg1 := db.cpuTime(b, procs.pids())
	cpu, pg := proc1-proc0+pg1-pg0, pg1-pg0
	if c := calls.Load(); c < int64(n) {
		b.Fatalf("receiver saw %d calls for %d jobs", c, n)
	}
	var r benchResult
	if err := db.QueryRow(ctx, `SELECT count(*) / extract(epoch FROM max(finalized_at) - min(scheduled_at))::float8,
		percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM attempted_at - scheduled_at)),
		percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM attempted_at - scheduled_at)),
		count(*) FILTER (WHERE attempt > 1)
		FROM river_job`).Scan(&r.jobsPerSec, &r.p50, &r.p99, &r.retried); err != nil {
		b.Fatal(err)
	}
	r.cpuPerJob, r.pgPerJob = cpu/time.Duration(n), pg/time.Duration(n)
	r.conns, r.deliveries = db.maxConns, int(calls.Load())
	return r
}

// checkLead logs when a side's insert ended less than 5 s before the
// burst was due: River's scheduler (every 5 s, 5 s look-ahead) might then
// see it late, which would count against River.
func checkLead(b *testing.B, side string, due time.Time) {
	if left := time.Until(due); left < 5*time.Second {
		b.Logf("WARNING: %s's insert ended only %s before the burst was due", side, left.Round(time.Millisecond))
	}
}

// BenchmarkSchedulerVsRiver runs each tuning (schedTunings) as a
// sub-benchmark: PORTICO_BENCH_ROUNDS runs of each side (default 3), in
// the order ours, River, River, ours (repeated), every run logged, and
// reports each side's means, and the ratios ours/River over round pairs
// (peerbench.Report: median, min, max): throughput-ratio (> 1 favours
// us), p50-ratio and p99-ratio of start lag and cpu-ratio of CPU per job
// (< 1 favours us). Fire lag and fires/s are ours only. PORTICO_BENCH_JOBS
// overrides N (20,000); PORTICO_BENCH_ONLY=portico runs our side alone
// (profiling).
//
//	go test -run '^$' -bench SchedulerVsRiver -benchtime 1x ./scheduler/
func BenchmarkSchedulerVsRiver(b *testing.B) {
	n := envInt("PORTICO_BENCH_JOBS", 20000)
	rounds := envInt("PORTICO_BENCH_ROUNDS", 3)
	bin := peerbench.Build(b, "./scheduler/cmd/scheduler")
	for _, tu := range schedTunings {
		b.Run("tuning="+tu.name, func(b *testing.B) {
			for range b.N {
				if os.Getenv("PORTICO_BENCH_ONLY") == "portico" {
					b.Logf("N=%d on %d processes: portico %s", n, benchProcs, benchPortico(b, bin, n))
					continue
				}
				b.Logf("N=%d jobs on %d processes each, %d runs each in the order portico, river, river, portico; %s",
					n, benchProcs, rounds, peerbench.Machine())
				ours, peer := peerbench.Rounds(rounds, func(i int) benchResult {
					r := benchPortico(b, bin, n)
					b.Logf("round %d portico: %s (%s)", i+1, r, peerbench.Machine())
					return r
				}, func(i int) benchResult {
					r := benchRiver(b, tu, n)
					b.Logf("round %d river:   %s (%s)", i+1, r, peerbench.Machine())
					return r
				})
				reportSched(b, ours, peer)
			}
		})
	}
}

func reportSched(b *testing.B, ours, peer []benchResult) {
	col := func(rs []benchResult, f func(benchResult) float64) []float64 {
		var out []float64
		for _, r := range rs {
			out = append(out, f(r))
		}
		return out
	}
	jobs := func(r benchResult) float64 { return r.jobsPerSec }
	p50 := func(r benchResult) float64 { return r.p50 }
	p99 := func(r benchResult) float64 { return r.p99 }
	cpu := func(r benchResult) float64 { return float64(r.cpuPerJob) / float64(time.Millisecond) }
	for _, m := range []struct {
		name, unit string
		f          func(benchResult) float64
	}{{"throughput", "jobs/s", jobs}, {"p50", "p50-s", p50}, {"p99", "p99-s", p99}, {"cpu", "cpu-ms/job", cpu}} {
		o, p := col(ours, m.f), col(peer, m.f)
		b.ReportMetric(peerbench.Mean(o), "portico-"+m.unit)
		b.ReportMetric(peerbench.Mean(p), "river-"+m.unit)
		peerbench.Report(b, m.name, peerbench.Ratios(o, p))
	}
	b.ReportMetric(peerbench.Mean(col(ours, func(r benchResult) float64 { return float64(r.conns) })), "portico-pg-conns")
	b.ReportMetric(peerbench.Mean(col(peer, func(r benchResult) float64 { return float64(r.conns) })), "river-pg-conns")
	b.ReportMetric(peerbench.Mean(col(ours, func(r benchResult) float64 { return r.fireP99 })), "portico-fire-p99-s")
	b.ReportMetric(peerbench.Mean(col(ours, func(r benchResult) float64 { return r.firesPerSec })), "portico-fires/s")
}
