package scheduler_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/portico-io/portico/internal/eventually"
	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/scheduler"
	"github.com/portico-io/portico/scheduler/api"
	"github.com/portico-io/portico/scheduler/api/apitest"
	"github.com/portico-io/portico/scheduler/jobspec"
	"github.com/portico-io/portico/scheduler/notify"
	"github.com/portico-io/portico/scheduler/reaper"
	"github.com/portico-io/portico/scheduler/runner"
	"github.com/portico-io/portico/scheduler/store"
	"github.com/portico-io/portico/scheduler/target"
	"github.com/portico-io/portico/scheduler/worker"
)

// env is one fresh database with a store, the API behind httptest and a
// raw pool for assertions.
type env struct {
	url   string
	st    *store.Store
	api   *httptest.Server
	db    *pgxpool.Pool
	guard *jobspec.Guard
	// client calls api (default http.DefaultClient); a TLS one for a
	// scheduler serving its REST API over TLS.
	client *http.Client
	// token, when set, is the credential of every request (a scheduler
	// run by the test; newEnv's API adds its own).
	token string
}

// adminToken gives a scheduler.Run of the test a bootstrap admin token
// file and returns its path and a reader of the token.
func adminToken(t testing.TB) (file string, read func() string) {
	file = filepath.Join(t.TempDir(), "admin-token")
	return file, func() string {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
}

func newEnv(t *testing.T) *env {
	t.Helper()
	url := testdeps.Postgres(t)
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{DatabaseURL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	guard, err := jobspec.NewGuard("127.0.0.0/8", nil)
	if err != nil {
		t.Fatal(err)
	}
	auth, tokens := apitest.New(t)
	a, err := api.New(api.Config{Store: st, Tokens: st.Tokens(), Guard: guard, Auth: auth})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(apitest.AsDefault(a, tokens.Admin))
	t.Cleanup(srv.Close)
	db, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return &env{url: url, st: st, api: srv, db: db, guard: guard}
}

func (e *env) do(t *testing.T, method, path, body string, hdr map[string]string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, e.api.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if e.token != "" {
		req.Header.Set("Authorization", "Bearer "+e.token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	hc := e.client
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

func (e *env) createJob(t *testing.T, spec string) string {
	t.Helper()
	code, out := e.do(t, "POST", "/v1/jobs", spec, map[string]string{"Idempotency-Key": fmt.Sprint(time.Now().UnixNano())})
	if code != http.StatusCreated {
		t.Fatalf("create: %d %v", code, out)
	}
	return out["jobId"].(string)
}

type roles struct {
	lease        time.Duration
	beforeRecord func(store.Lease)
	notifier     bool
	targets      target.Registry // nil: HTTP through the env's guard
	concurrency  int
}

// start runs a runner, a worker and a reaper with test-speed intervals.
func (e *env) start(t *testing.T, r roles) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	rn, err := runner.New(runner.Config{Store: e.st, Tick: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	wk, err := worker.New(worker.Config{Store: e.st, Guard: e.guard, Targets: r.targets, ID: "w-test", Lease: r.lease,
		Concurrency: r.concurrency, ReservedHigh: -1, Poll: 20 * time.Millisecond, BeforeRecord: r.beforeRecord})
	if err != nil {
		t.Fatal(err)
	}
	rp, err := reaper.New(reaper.Config{Store: e.st, Interval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() { _ = rn.Run(ctx) })
	wg.Go(func() { _ = wk.Run(ctx) })
	wg.Go(func() { _ = rp.Run(ctx) })
	if r.notifier {
		n, err := notify.New(notify.Config{Store: e.st, Guard: e.guard, Poll: 20 * time.Millisecond,
			InitialBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, MaxAttempts: 3})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { _ = n.Run(ctx) })
	}
}

func (e *env) runs(t *testing.T, jobID string) []map[string]any {
	t.Helper()
	code, out := e.do(t, "GET", "/v1/jobs/"+jobID+"/runs?limit=200", "", nil)
	if code != 200 {
		t.Fatalf("runs: %d %v", code, out)
	}
	var rs []map[string]any
	for _, it := range out["items"].([]any) {
		rs = append(rs, it.(map[string]any))
	}
	return rs
}

// target is an HTTP target recording Idempotency-Keys; fail decides the
// status of the nth (0-based) request.
type recTarget struct {
	mu   sync.Mutex
	keys []string
	srv  *httptest.Server
}

func newTarget(t *testing.T, status func(n int) int) *recTarget {
	tg := &recTarget{}
	tg.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tg.mu.Lock()
		n := len(tg.keys)
		tg.keys = append(tg.keys, r.Header.Get("Idempotency-Key"))
		tg.mu.Unlock()
		w.WriteHeader(status(n))
	}))
	t.Cleanup(tg.srv.Close)
	return tg
}

func (tg *recTarget) seen() []string {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return append([]string(nil), tg.keys...)
}

func oneOff(url string, retry string) string {
	return `{"tenant":"acme","schedule":{"type":"ONE_OFF","at":"2020-01-01T00:00:00Z"},
		"target":{"type":"HTTP","http":{"url":"` + url + `"},"payload":{"job":"{{jobId}}","at":"{{scheduledAt}}"}},
		"execution":{"timeoutSeconds":5,"retry":` + retry + `}}`
}

func TestOneOffInThePastSucceedsWithIdempotencyKey(t *testing.T) {
	e := newEnv(t)
	tg := newTarget(t, func(int) int { return 200 })
	id := e.createJob(t, oneOff(tg.srv.URL, `{"maxAttempts":1}`))
	e.start(t, roles{})
	eventually.True(t, 15*time.Second, "SUCCEEDED", func() bool {
		rs := e.runs(t, id)
		return len(rs) == 1 && rs[0]["status"] == store.StatusSucceeded
	})
	if got := tg.seen(); len(got) != 1 || got[0] != id+":2020-01-01T00:00:00Z" {
		t.Fatalf("target saw keys %v", got)
	}
}

func TestFixedRateEverySecond(t *testing.T) {
	e := newEnv(t)
	tg := newTarget(t, func(int) int { return 204 })
	id := e.createJob(t, `{"tenant":"acme","schedule":{"type":"FIXED_RATE","every":"PT1S","anchor":"2026-01-01T00:00:00Z"},
		"target":{"type":"HTTP","http":{"url":"`+tg.srv.URL+`","method":"PUT","body":"{{scheduledAt}}"}}}`)
	e.start(t, roles{})
	var done []map[string]any
	eventually.True(t, 20*time.Second, "3 successful runs", func() bool {
		done = done[:0]
		for _, r := range e.runs(t, id) {
			if r["status"] == store.StatusSucceeded {
				done = append(done, r)
			}
		}
		return len(done) >= 3
	})
	seen := map[string]bool{}
	for _, k := range tg.seen() {
		seen[k] = true
	}
	var prev time.Time
	for i, r := range done {
		at, _ := time.Parse(time.RFC3339, r["scheduledAt"].(string))
		if !seen[id+":"+at.Format(time.RFC3339)] {
			t.Errorf("run for %s: target never saw its key (saw %v)", at, tg.seen())
		}
		if i > 0 && at.Sub(prev) != time.Second {
			t.Errorf("slots %s then %s: not consecutive", prev, at)
		}
		prev = at
	}
}

func TestRetriesThenSucceeds(t *testing.T) {
	e := newEnv(t)
	tg := newTarget(t, func(n int) int {
		if n < 2 {
			return []int{503, 429}[n]
		}
		return 200
	})
	id := e.createJob(t, oneOff(tg.srv.URL, `{"maxAttempts":5,"initialBackoffMs":10,"maxBackoffMs":50}`))
	e.start(t, roles{})
	eventually.True(t, 15*time.Second, "SUCCEEDED after retries", func() bool {
		rs := e.runs(t, id)
		return len(rs) == 1 && rs[0]["status"] == store.StatusSucceeded
	})
	rs := e.runs(t, id)
	if rs[0]["attempt"].(float64) != 3 {
		t.Errorf("attempt = %v, want 3", rs[0]["attempt"])
	}
	keys := tg.seen()
	if len(keys) != 3 || keys[0] != keys[1] || keys[1] != keys[2] {
		t.Fatalf("want 3 deliveries with one key, got %v", keys)
	}
}

func TestAlwaysFailingGoesToDLQ(t *testing.T) {
	e := newEnv(t)
	tg := newTarget(t, func(int) int { return 500 })
	fatal := newTarget(t, func(int) int { return 404 })
	id := e.createJob(t, oneOff(tg.srv.URL, `{"maxAttempts":3,"initialBackoffMs":10,"maxBackoffMs":20}`))
	id404 := e.createJob(t, oneOff(fatal.srv.URL, `{"maxAttempts":3,"initialBackoffMs":10,"maxBackoffMs":20}`))
	e.start(t, roles{})
	eventually.True(t, 15*time.Second, "both DEAD and in the DLQ", func() bool {
		_, out := e.do(t, "GET", "/v1/dlq?tenant=acme", "", nil)
		items, _ := out["items"].([]any)
		return len(items) == 2
	})
	if n := len(tg.seen()); n != 3 {
		t.Errorf("5xx target called %d times, want 3 (maxAttempts)", n)
	}
	if n := len(fatal.seen()); n != 1 {
		t.Errorf("404 target called %d times, want 1 (not retryable)", n)
	}
	for _, j := range []string{id, id404} {
		if rs := e.runs(t, j); rs[0]["status"] != store.StatusDead || rs[0]["lastError"] == nil {
			t.Errorf("job %s run: %v", j, rs[0])
		}
	}
}

// TestFencingStaleWorkerCannotComplete stalls a worker after its call until
// the reaper has expired its lease; its completion must change nothing and
// the run must be executed again, under a new token, with the same key.
func TestFencingStaleWorkerCannotComplete(t *testing.T) {
	e := newEnv(t)
	tg := newTarget(t, func(int) int { return 200 })
	id := e.createJob(t, oneOff(tg.srv.URL, `{"maxAttempts":3,"initialBackoffMs":1,"maxBackoffMs":1}`))
	ctx := context.Background()
	if _, err := e.st.Fire(ctx, 10, func(d store.DueRun, now time.Time) store.FireDecision { return runner.Decide(d, now, time.Minute) }); err != nil {
		t.Fatal(err)
	}
	leases, err := e.st.Claim(ctx, "zombie", 1, 300*time.Millisecond, 2)
	if err != nil || len(leases) != 1 {
		t.Fatalf("claim: %v %v", leases, err)
	}
	stale := leases[0]
	rp, _ := reaper.New(reaper.Config{Store: e.st})
	var reaped atomic.Bool
	zombie, _ := worker.New(worker.Config{Store: e.st, Guard: e.guard, ID: "zombie", Lease: 300 * time.Millisecond,
		BeforeRecord: func(store.Lease) {
			// Paused past the lease: the reaper takes the run away.
			eventually.True(t, 10*time.Second, "lease expiry reaped", func() bool {
				res, err := rp.Pass(ctx)
				return err == nil && res.Retried == 1
			})
			reaped.Store(true)
		}})
	zombie.Execute(ctx, stale)
	if !reaped.Load() {
		t.Fatal("zombie never paused")
	}
	if err := e.st.Succeed(ctx, stale.RunID, stale.Token); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("stale Succeed: %v, want ErrLeaseLost", err)
	}
	rs := e.runs(t, id)
	if rs[0]["status"] != store.StatusRetryWait {
		t.Fatalf("after zombie completion: %v", rs[0])
	}
	var fresh []store.Lease
	eventually.True(t, 10*time.Second, "re-claim", func() bool {
		fresh, err = e.st.Claim(ctx, "w2", 1, 30*time.Second, 2)
		return err == nil && len(fresh) == 1
	})
	if fresh[0].Token <= stale.Token+1 || fresh[0].Attempt != 2 {
		t.Fatalf("fresh lease %+v after stale token %d", fresh[0], stale.Token)
	}
	w2, _ := worker.New(worker.Config{Store: e.st, Guard: e.guard, ID: "w2"})
	w2.Execute(ctx, fresh[0])
	if rs := e.runs(t, id); rs[0]["status"] != store.StatusSucceeded {
		t.Fatalf("after re-execution: %v", rs[0])
	}
	keys := tg.seen()
	if len(keys) != 2 || keys[0] != keys[1] || keys[0] != id+":2020-01-01T00:00:00Z" {
		t.Fatalf("deliveries %v: want two with the same key", keys)
	}
}

// TestTwoRunnersNoLostOrDuplicateSlots runs two runners (separate pools)
// on one database over every-second jobs: each job's slots must form an
// unbroken one-second sequence, one row each.
func TestTwoRunnersNoLostOrDuplicateSlots(t *testing.T) {
	e := newEnv(t)
	const jobs = 20
	for range jobs {
		e.createJob(t, `{"tenant":"acme","schedule":{"type":"FIXED_RATE","every":"PT1S","anchor":"2026-01-01T00:00:00Z"},
			"target":{"type":"HTTP","http":{"url":"http://127.0.0.1:9/"}}}`)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 2 {
		st, err := store.Open(ctx, store.Config{DatabaseURL: e.url})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		rn, _ := runner.New(runner.Config{Store: st, Tick: 10 * time.Millisecond, Batch: 7})
		wg.Go(func() { _ = rn.Run(ctx) })
	}
	eventually.True(t, 20*time.Second, "4 fired slots per job", func() bool {
		var n int
		_ = e.db.QueryRow(ctx, `SELECT coalesce(min(c), 0) FROM (SELECT count(*) c FROM scheduler.scheduled_execution
			WHERE status = 'QUEUED' GROUP BY schedule_id) x`).Scan(&n)
		return n >= 4
	})
	cancel()
	wg.Wait()
	rows, err := e.db.Query(context.Background(), `SELECT schedule_id, count(*), count(DISTINCT scheduled_at),
			extract(epoch FROM max(scheduled_at) - min(scheduled_at))::int, count(*) FILTER (WHERE status = 'SCHEDULED')
		FROM scheduler.scheduled_execution GROUP BY schedule_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	seen := 0
	for rows.Next() {
		var id, n, distinct, span, waiting int64
		if err := rows.Scan(&id, &n, &distinct, &span, &waiting); err != nil {
			t.Fatal(err)
		}
		seen++
		if n != distinct || span != n-1 || waiting != 1 {
			t.Errorf("job %d: %d rows, %d distinct slots over %ds, %d waiting: want an unbroken chain with one waiting run", id, n, distinct, span, waiting)
		}
	}
	if seen != jobs {
		t.Fatalf("%d jobs have runs, want %d", seen, jobs)
	}
}

// TestHeartbeatKeepsLongRunAlive holds the target call open across several
// lease lengths; heartbeats must keep the lease so the reaper never steals
// the run and the target sees exactly one delivery.
func TestHeartbeatKeepsLongRunAlive(t *testing.T) {
	e := newEnv(t)
	release := make(chan struct{})
	tg := newTarget(t, func(int) int { <-release; return 200 })
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock) // runs before the target closes, even on failure
	id := e.createJob(t, oneOff(tg.srv.URL, `{"maxAttempts":3,"initialBackoffMs":1,"maxBackoffMs":1}`))
	e.start(t, roles{lease: 300 * time.Millisecond})
	ctx := context.Background()
	var first time.Time
	eventually.True(t, 10*time.Second, "the run is leased", func() bool {
		return e.db.QueryRow(ctx, `SELECT lease_expires_at FROM scheduler.scheduled_execution WHERE status = 'RUNNING'`).Scan(&first) == nil
	})
	// Wait (by the database clock) until the lease has been extended past
	// three original lease lengths.
	eventually.True(t, 10*time.Second, "heartbeats extend the lease", func() bool {
		var cur time.Time
		_ = e.db.QueryRow(ctx, `SELECT lease_expires_at FROM scheduler.scheduled_execution WHERE status = 'RUNNING'`).Scan(&cur)
		return cur.Sub(first) > 900*time.Millisecond
	})
	unblock()
	eventually.True(t, 10*time.Second, "SUCCEEDED", func() bool {
		rs := e.runs(t, id)
		return rs[0]["status"] == store.StatusSucceeded
	})
	if rs := e.runs(t, id); rs[0]["attempt"].(float64) != 1 || len(tg.seen()) != 1 {
		t.Fatalf("run %v, deliveries %v: want one attempt", rs[0], tg.seen())
	}
}

// TestRunServesAllRoles drives the process entry point: one Run with every
// role, a job created over HTTP, its run executed, /metrics and /readyz.
func TestRunServesAllRoles(t *testing.T) {
	url := testdeps.Postgres(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tokenFile, token := adminToken(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- scheduler.Run(ctx, scheduler.Config{DatabaseURL: url, Listener: lis, Roles: scheduler.AllRoles, InsecurePlaintext: true,
			TargetAllowlist: "127.0.0.0/8", Tick: 50 * time.Millisecond, WorkerPoll: 20 * time.Millisecond, AdminTokenFile: tokenFile})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	base := "http://" + lis.Addr().String()
	eventually.True(t, 10*time.Second, "ready", func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	tg := newTarget(t, func(int) int { return 200 })
	e := &env{api: &httptest.Server{URL: base}, token: token()}
	id := e.createJob(t, oneOff(tg.srv.URL, `{"maxAttempts":1}`))
	eventually.True(t, 10*time.Second, "SUCCEEDED", func() bool {
		rs := e.runs(t, id)
		return len(rs) == 1 && rs[0]["status"] == store.StatusSucceeded
	})
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), `portico_scheduler_run_transitions_total{to="SUCCEEDED"} 1`) {
		t.Errorf("metrics missing the SUCCEEDED transition:\n%s", body)
	}
	for _, want := range []string{`portico_scheduler_runs{state="RUNNING"} 0`, `portico_scheduler_runs{state="DEAD"} 0`,
		"portico_scheduler_due_backlog 0"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics missing %q", want)
		}
	}
}

// TestMisfireAfterOutage moves an hourly job's waiting run ten hours into
// the past (an outage of ten slots) and lets runners catch up under each
// misfire policy.
func TestMisfireAfterOutage(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	cases := []struct {
		policy string
		want   map[string]int // status → runs, after catching up
	}{
		{"FIRE_ONCE", map[string]int{store.StatusQueued: 1, store.StatusScheduled: 1}},
		{"SKIP", map[string]int{store.StatusSkipped: 1, store.StatusScheduled: 1}},
		{"FIRE_ALL", map[string]int{store.StatusQueued: 5, store.StatusScheduled: 1}}, // cap 5: the late run + 4 most recent
	}
	ids := make([]string, len(cases))
	for i, c := range cases {
		id := e.createJob(t, `{"tenant":"acme","schedule":{"type":"FIXED_RATE","every":"PT1H","anchor":"2026-01-01T00:00:00Z"},
			"target":{"type":"HTTP","http":{"url":"http://127.0.0.1:9/"}},
			"execution":{"misfirePolicy":"`+c.policy+`","misfireCap":5}}`)
		if _, err := e.db.Exec(ctx, `UPDATE scheduler.scheduled_execution SET scheduled_at = scheduled_at - interval '10 hours'
			WHERE schedule_id = $1`, id); err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	for {
		res, err := e.st.Fire(ctx, 100, func(d store.DueRun, now time.Time) store.FireDecision {
			return runner.Decide(d, now, runner.DefaultMisfireThreshold)
		})
		if err != nil {
			t.Fatal(err)
		}
		if res.Claimed == 0 {
			break
		}
	}
	for i, c := range cases {
		got := map[string]int{}
		rows, _ := e.db.Query(ctx, `SELECT status, count(*) FROM scheduler.scheduled_execution WHERE schedule_id = $1 GROUP BY status`, ids[i])
		for rows.Next() {
			var (
				st string
				n  int
			)
			if err := rows.Scan(&st, &n); err != nil {
				t.Fatal(err)
			}
			got[st] = n
		}
		rows.Close()
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: runs by status %v, want %v", c.policy, got, c.want)
		}
	}
}

// TestAttemptTimeoutRetries: the first delivery outlives timeoutSeconds and
// is abandoned; the retry succeeds with the same key.
func TestAttemptTimeoutRetries(t *testing.T) {
	e := newEnv(t)
	var calls atomic.Int32
	keys := make(chan string, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		keys <- r.Header.Get("Idempotency-Key")
		_, _ = io.Copy(io.Discard, r.Body) // lets the server notice the client hanging up
		if calls.Add(1) == 1 {
			<-r.Context().Done() // hang until the worker gives up
			return
		}
		w.WriteHeader(200)
	}))
	t.Cleanup(srv.Close)
	spec := strings.Replace(oneOff(srv.URL, `{"maxAttempts":2,"initialBackoffMs":1,"maxBackoffMs":1}`), `"timeoutSeconds":5`, `"timeoutSeconds":1`, 1)
	id := e.createJob(t, spec)
	e.start(t, roles{})
	eventually.True(t, 15*time.Second, "SUCCEEDED on attempt 2", func() bool {
		rs := e.runs(t, id)
		return rs[0]["status"] == store.StatusSucceeded
	})
	if rs := e.runs(t, id); rs[0]["attempt"].(float64) != 2 {
		t.Fatalf("run %v", rs[0])
	}
	if a, b := <-keys, <-keys; a != b || a != id+":2020-01-01T00:00:00Z" {
		t.Fatalf("keys %q %q", a, b)
	}
}
