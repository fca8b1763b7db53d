package scheduler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
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

	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/scheduler/jobspec"
	"github.com/portico-io/portico/scheduler/store"
	"github.com/portico-io/portico/scheduler/worker"
)

// The side-by-side benchmark: N jobs due in the same second, worked by
// three processes of each system on the same Postgres server (separate
// databases, one system at a time), each job one HTTP call to the same
// local receiver. Both sides poll every 50 ms, refill at most every 25 ms
// (our ClaimCooldown, River's FetchCooldown) and run 16 jobs at once per
// process. Lag is start − due by the database clock (our dispatched_at,
// River's attempted_at); throughput is N over due → last job finished.

const (
	benchProcs       = 3
	benchConcurrency = 16
	benchPoll        = 50 * time.Millisecond
)

func benchJobs() int {
	if n, err := strconv.Atoi(os.Getenv("PORTICO_BENCH_JOBS")); err == nil && n > 0 {
		return n
	}
	return 20000
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

// riverChildMain runs one River client (the peer's equivalent of a
// scheduler process) until SIGTERM.
func riverChildMain() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("PORTICO_DATABASE_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer pool.Close()
	workers := river.NewWorkers()
	river.AddWorker(workers, &benchWorker{client: &http.Client{Timeout: 10 * time.Second}})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: benchConcurrency}},
		FetchCooldown:     worker.DefaultClaimCooldown, // as our workers' claim cooldown
		FetchPollInterval: benchPoll,
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
	// fireP50, fireP99: due → queued by a runner (ours only; River has no
	// such step it records).
	fireP50, fireP99 float64
	// firesPerSec: N / (due → last run queued), ours only.
	firesPerSec float64
	// cpuPerJob: CPU time of the system's processes and of the Postgres
	// backends of its database, from the burst's insert to the last job
	// done, over N (the insert and the bench's own polling included, on
	// both sides).
	cpuPerJob time.Duration
}

func (r benchResult) String() string {
	s := fmt.Sprintf("%.0f jobs/s, %.2f CPU-ms/job, start lag p50 %.3fs p99 %.3fs", r.jobsPerSec,
		float64(r.cpuPerJob)/float64(time.Millisecond), r.p50, r.p99)
	if r.fireP99 > 0 {
		s += fmt.Sprintf(", fire lag p50 %.3fs p99 %.3fs, %.0f fires/s", r.fireP50, r.fireP99, r.firesPerSec)
	}
	return s
}

// startProcs starts the benchmark's processes of one system; stop ends
// them (each side's processes must be gone before the other side runs,
// or their idle polling competes with it).
func startProcs(b *testing.B, dbURL, kind string, extra ...string) (stop func(), pids []int) {
	b.Helper()
	var cmds []*exec.Cmd
	stop = func() {
		for _, cmd := range cmds {
			_ = cmd.Process.Signal(syscall.SIGTERM)
		}
		for _, cmd := range cmds {
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		}
		cmds = nil
	}
	b.Cleanup(stop)
	for i := range benchProcs {
		cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
		cmd.Env = append(os.Environ(), append([]string{"PORTICO_SCHEDULER_CHILD=" + kind, "PORTICO_DATABASE_URL=" + dbURL,
			"PORTICO_NODE_ID=" + kind + strconv.Itoa(i), "PORTICO_CHILD_PROFILE=bench"}, extra...)...)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		cmds = append(cmds, cmd)
		pids = append(pids, cmd.Process.Pid)
	}
	return stop, pids
}

// cpuTime sums the user+system CPU time of the given processes and of
// the Postgres backends serving database dbName (/proc; clock ticks of
// 10 ms). A process gone since is not counted.
func cpuTime(pids []int, dbName string) time.Duration {
	ticks := func(pid string) int64 {
		raw, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil {
			return 0
		}
		// Fields after the command name (which may hold spaces): utime
		// and stime are the 12th and 13th.
		f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
		if len(f) < 13 {
			return 0
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		return u + s
	}
	var total int64
	for _, pid := range pids {
		total += ticks(strconv.Itoa(pid))
	}
	procs, _ := os.ReadDir("/proc")
	for _, e := range procs {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		cmd, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && bytes.HasPrefix(cmd, []byte("postgres: ")) && bytes.Contains(cmd, []byte(" "+dbName+" ")) {
			total += ticks(e.Name())
		}
	}
	return time.Duration(total) * 10 * time.Millisecond
}

func dbName(b *testing.B, url string) string {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		b.Fatal(err)
	}
	return cfg.Database
}

// waitDone polls (the bench has no other signal across processes) until
// query returns n, or fails after limit.
func waitDone(b *testing.B, db *pgxpool.Pool, query string, n int, limit time.Duration) {
	b.Helper()
	deadline := time.Now().Add(limit)
	for {
		var got int
		if err := db.QueryRow(context.Background(), query).Scan(&got); err != nil {
			b.Fatal(err)
		}
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d jobs done after %s", got, n, limit)
		}
		time.Sleep(100 * time.Millisecond) // cross-process completion has no signal to wait on
	}
}

func stats(b *testing.B, db *pgxpool.Pool, query string) benchResult {
	b.Helper()
	var r benchResult
	if err := db.QueryRow(context.Background(), query).Scan(&r.jobsPerSec, &r.p50, &r.p99); err != nil {
		b.Fatal(err)
	}
	return r
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

func benchPortico(b *testing.B, n int) benchResult {
	url := testdeps.Postgres(b)
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{DatabaseURL: url})
	if err != nil {
		b.Fatal(err)
	}
	st.Close()
	db, err := pgxpool.New(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	srv, calls := receiver(b)
	defer srv.Close()
	// Steady state: the processes are up and have split the shards before
	// the burst is written.
	stop, pids := startProcs(b, url, "1")
	defer stop()
	waitDone(b, db, `SELECT CASE WHEN min(n) >= 300 THEN count(*) ELSE 0 END FROM (SELECT owner, count(*) AS n
		FROM scheduler.shard_lease WHERE owner IS NOT NULL AND expires_at > now() GROUP BY owner) x`, benchProcs, time.Minute)
	var due time.Time
	if err := db.QueryRow(ctx, `SELECT date_trunc('second', now()) + interval '3 seconds'`).Scan(&due); err != nil {
		b.Fatal(err)
	}
	spec, err := jobspec.Decode(strings.NewReader(fmt.Sprintf(`{"tenant":"bench","schedule":{"type":"ONE_OFF","at":%q},
		"target":{"type":"HTTP","http":{"url":%q}},"execution":{"retry":{"maxAttempts":3}}}`, due.UTC().Format(time.RFC3339), srv.URL)))
	if err != nil {
		b.Fatal(err)
	}
	if err := spec.Normalize(nil); err != nil {
		b.Fatal(err)
	}
	raw, _ := json.Marshal(spec)
	cpu0 := cpuTime(pids, dbName(b, url))
	if _, err := db.Exec(ctx, `WITH d AS (INSERT INTO scheduler.schedule_details (tenant, spec, enabled)
			SELECT 'bench', $1::jsonb, true FROM generate_series(1, $2) RETURNING id)
		INSERT INTO scheduler.scheduled_execution (schedule_id, scheduled_at, status) SELECT id, $3, 'SCHEDULED' FROM d`,
		raw, n, due); err != nil {
		b.Fatal(err)
	}
	waitDone(b, db, `SELECT count(*) FROM scheduler.scheduled_execution WHERE status = 'SUCCEEDED'`, n, 10*time.Minute)
	cpu := cpuTime(pids, dbName(b, url)) - cpu0
	if c := calls.Load(); c < int64(n) {
		b.Fatalf("receiver saw %d calls for %d jobs", c, n)
	}
	r := stats(b, db, `SELECT count(*) / extract(epoch FROM max(finished_at) - min(scheduled_at))::float8,
		percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM dispatched_at - scheduled_at)),
		percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM dispatched_at - scheduled_at))
		FROM scheduler.scheduled_execution`)
	if err := db.QueryRow(ctx, `SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM queued_at - scheduled_at)),
			percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM queued_at - scheduled_at)),
			count(*) / extract(epoch FROM max(queued_at) - min(scheduled_at))::float8
		FROM scheduler.scheduled_execution`).Scan(&r.fireP50, &r.fireP99, &r.firesPerSec); err != nil {
		b.Fatal(err)
	}
	r.cpuPerJob = cpu / time.Duration(n)
	return r
}

func benchRiver(b *testing.B, n int) benchResult {
	url := testdeps.Postgres(b)
	ctx := context.Background()
	db, err := pgxpool.New(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	migrator, err := rivermigrate.New(riverpgxv5.New(db), nil)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		b.Fatal(err)
	}
	srv, calls := receiver(b)
	defer srv.Close()
	inserter, err := river.NewClient(riverpgxv5.New(db), &river.Config{})
	if err != nil {
		b.Fatal(err)
	}
	stop, pids := startProcs(b, url, "river")
	defer stop()
	waitDone(b, db, `SELECT count(*) FROM river_leader`, 1, time.Minute) // up, leader elected
	var due time.Time
	if err := db.QueryRow(ctx, `SELECT date_trunc('second', now()) + interval '3 seconds'`).Scan(&due); err != nil {
		b.Fatal(err)
	}
	cpu0 := cpuTime(pids, dbName(b, url))
	params := make([]river.InsertManyParams, 0, 1000)
	for i := 0; i < n; i++ {
		params = append(params, river.InsertManyParams{Args: benchArgs{URL: srv.URL}, InsertOpts: &river.InsertOpts{ScheduledAt: due, MaxAttempts: 3}})
		if len(params) == cap(params) || i == n-1 {
			if _, err := inserter.InsertManyFast(ctx, params); err != nil {
				b.Fatal(err)
			}
			params = params[:0]
		}
	}
	waitDone(b, db, `SELECT count(*) FROM river_job WHERE state = 'completed'`, n, 10*time.Minute)
	cpu := cpuTime(pids, dbName(b, url)) - cpu0
	if c := calls.Load(); c < int64(n) {
		b.Fatalf("receiver saw %d calls for %d jobs", c, n)
	}
	res := stats(b, db, `SELECT count(*) / extract(epoch FROM max(finalized_at) - min(scheduled_at))::float8,
		percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM attempted_at - scheduled_at)),
		percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM attempted_at - scheduled_at))
		FROM river_job`)
	res.cpuPerJob = cpu / time.Duration(n)
	return res
}

// mean averages benchmark results field by field.
func mean(rs ...benchResult) benchResult {
	var m benchResult
	for _, r := range rs {
		m.jobsPerSec += r.jobsPerSec / float64(len(rs))
		m.p50 += r.p50 / float64(len(rs))
		m.p99 += r.p99 / float64(len(rs))
		m.fireP50 += r.fireP50 / float64(len(rs))
		m.fireP99 += r.fireP99 / float64(len(rs))
		m.firesPerSec += r.firesPerSec / float64(len(rs))
		m.cpuPerJob += r.cpuPerJob / time.Duration(len(rs))
	}
	return m
}

// BenchmarkSchedulerVsRiver reports both systems' jobs/s and start-lag
// percentiles, our fire lag and fires/s, and our/River ratios
// (throughput: > 1 is better for us; lag: < 1 is better for us). Each
// side runs twice in the order ours, River, River, ours and the two runs
// are averaged, so load that drifts during the benchmark (a shared
// machine) weighs on both sides alike. PORTICO_BENCH_JOBS overrides N
// (20,000).
func BenchmarkSchedulerVsRiver(b *testing.B) {
	n := benchJobs()
	for range b.N {
		if os.Getenv("PORTICO_BENCH_ONLY") == "portico" { // profiling our side alone
			b.Logf("N=%d on %d processes: portico %s", n, benchProcs, benchPortico(b, n))
			continue
		}
		o1 := benchPortico(b, n)
		p1 := benchRiver(b, n)
		p2 := benchRiver(b, n)
		o2 := benchPortico(b, n)
		ours, peer := mean(o1, o2), mean(p1, p2)
		b.Logf("N=%d on %d processes each, runs in the order portico, river, river, portico:\n"+
			"  portico %s\n  river   %s\n  river   %s\n  portico %s\n  mean: portico %s | river %s",
			n, benchProcs, o1, p1, p2, o2, ours, peer)
		b.ReportMetric(ours.jobsPerSec, "portico_jobs/s")
		b.ReportMetric(peer.jobsPerSec, "river_jobs/s")
		b.ReportMetric(ours.jobsPerSec/peer.jobsPerSec, "throughput_ratio")
		b.ReportMetric(float64(ours.cpuPerJob)/float64(time.Millisecond), "portico_cpu_ms/job")
		b.ReportMetric(float64(peer.cpuPerJob)/float64(time.Millisecond), "river_cpu_ms/job")
		b.ReportMetric(float64(ours.cpuPerJob)/float64(peer.cpuPerJob), "cpu_per_job_ratio")
		b.ReportMetric(ours.fireP50, "portico_fire_p50_s")
		b.ReportMetric(max(o1.fireP99, o2.fireP99), "portico_fire_p99_worst_s")
		b.ReportMetric(ours.fireP99, "portico_fire_p99_s")
		b.ReportMetric(ours.firesPerSec, "portico_fires/s")
		b.ReportMetric(ours.firesPerSec/peer.jobsPerSec, "fires_vs_river_jobs_ratio")
		b.ReportMetric(ours.p50, "portico_p50_s")
		b.ReportMetric(ours.p99, "portico_p99_s")
		b.ReportMetric(peer.p50, "river_p50_s")
		b.ReportMetric(peer.p99, "river_p99_s")
		b.ReportMetric(ours.p99/peer.p99, "p99_lag_ratio")
		b.ReportMetric(ours.p50/peer.p50, "p50_lag_ratio")
	}
}
