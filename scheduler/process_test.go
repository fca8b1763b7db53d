package scheduler_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/portico-io/portico/internal/eventually"
	"github.com/portico-io/portico/internal/logging"
	"github.com/portico-io/portico/scheduler"
	"github.com/portico-io/portico/scheduler/jobspec"
	"github.com/portico-io/portico/scheduler/store"
)

// TestMain lets the test binary double as bin/scheduler: with
// PORTICO_SCHEDULER_CHILD=1 it runs scheduler.Run with every role, as the
// command does, until SIGTERM; with PORTICO_SCHEDULER_CHILD=river it is a
// River client for BenchmarkSchedulerVsRiver.
func TestMain(m *testing.M) {
	switch os.Getenv("PORTICO_SCHEDULER_CHILD") {
	case "1":
		os.Exit(childMain())
	case "river":
		os.Exit(riverChildMain())
	}
	os.Exit(m.Run())
}

func childMain() int {
	log, err := logging.New(os.Stderr, "json", "warn")
	if err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	cfg := scheduler.Config{HTTPAddr: "127.0.0.1:0", DatabaseURL: os.Getenv("PORTICO_DATABASE_URL"),
		Roles: scheduler.AllRoles, TargetAllowlist: "127.0.0.0/8", WorkerID: os.Getenv("PORTICO_NODE_ID"),
		Lease: 2 * time.Second, Tick: 100 * time.Millisecond, WorkerPoll: 50 * time.Millisecond,
		ReapInterval: 200 * time.Millisecond, ShardTTL: 2 * time.Second, Logger: log, InsecurePlaintext: true}
	err = scheduler.Run(ctx, cfg)
	if err != nil {
		log.Error("child exiting", "err", err)
		return 1
	}
	return 0
}

// child is one scheduler process.
type child struct {
	id   string
	cmd  *exec.Cmd
	mu   sync.Mutex
	logs []string
	// leaseLost receives once the process logs a refused (fenced) write.
	leaseLost chan struct{}
	once      sync.Once
}

func startChild(t *testing.T, dbURL, id string) *child {
	t.Helper()
	c := &child{id: id, leaseLost: make(chan struct{})}
	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	c.cmd.Env = append(os.Environ(), "PORTICO_SCHEDULER_CHILD=1", "PORTICO_DATABASE_URL="+dbURL, "PORTICO_NODE_ID="+id)
	stderr, err := c.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			c.mu.Lock()
			c.logs = append(c.logs, line)
			c.mu.Unlock()
			if strings.Contains(line, "lease lost") {
				c.once.Do(func() { close(c.leaseLost) })
			}
		}
	}()
	t.Cleanup(func() {
		_ = c.cmd.Process.Signal(syscall.SIGCONT)
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = c.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = c.cmd.Process.Kill()
			<-done
		}
	})
	return c
}

// effects is an idempotent receiver: it counts deliveries per
// Idempotency-Key and applies each key's effect once.
type effects struct {
	mu         sync.Mutex
	deliveries map[string]int
	applied    map[string]int
	srv        *httptest.Server
}

func newEffects(t *testing.T) *effects {
	ef := &effects{deliveries: map[string]int{}, applied: map[string]int{}}
	ef.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		_, _ = io.Copy(io.Discard, r.Body)
		ef.mu.Lock()
		ef.deliveries[key]++
		ef.mu.Unlock()
		select { // the work takes a while, so runs are in flight when processes die
		case <-time.After(300 * time.Millisecond):
		case <-r.Context().Done():
			return
		}
		ef.mu.Lock()
		if ef.applied[key] == 0 {
			ef.applied[key]++
		}
		ef.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(ef.srv.Close)
	return ef
}

// TestThreeProcessesKillAndStop runs three scheduler processes on one
// database, kill -9s one and SIGSTOPs another past its lease while they
// hold runs, and checks every intended slot ran: one run row per slot,
// all SUCCEEDED, each slot's key delivered (and its effect applied) with
// repeats only for runs that went through a lease expiry, and the paused
// process's late writes refused.
func TestThreeProcessesKillAndStop(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns three scheduler processes")
	}
	e := newEnv(t)
	ctx := context.Background()
	ef := newEffects(t)
	const jobs = 20
	var dbNow time.Time
	if err := e.db.QueryRow(ctx, `SELECT now()`).Scan(&dbNow); err != nil {
		t.Fatal(err)
	}
	endAt := dbNow.Truncate(time.Second).Add(9 * time.Second)
	ids := make([]int64, jobs)
	for i := range jobs {
		spec, err := jobspec.Decode(strings.NewReader(fmt.Sprintf(`{"tenant":"t%d","schedule":{"type":"FIXED_RATE","every":"PT1S",
			"anchor":"2026-01-01T00:00:00Z","endAt":%q},"target":{"type":"HTTP","http":{"url":%q}},
			"execution":{"timeoutSeconds":10,"retry":{"maxAttempts":20,"initialBackoffMs":10,"maxBackoffMs":100}}}`,
			i%4, endAt.Format(time.RFC3339), ef.srv.URL)))
		if err != nil {
			t.Fatal(err)
		}
		if err := spec.Normalize(context.Background(), e.guard); err != nil {
			t.Fatal(err)
		}
		j, _, err := e.st.CreateJob(ctx, spec, fmt.Sprint("k", i), "h")
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = j.ID
	}
	procs := []*child{startChild(t, e.url, "p0"), startChild(t, e.url, "p1"), startChild(t, e.url, "p2")}

	holding := func(worker string) map[int64]int64 { // run id → token
		rows, err := e.db.Query(ctx, `SELECT id, lease_token FROM scheduler.scheduled_execution WHERE status = 'RUNNING' AND worker_id = $1`, worker)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[int64]int64{}
		for rows.Next() {
			var id, tok int64
			if err := rows.Scan(&id, &tok); err != nil {
				t.Fatal(err)
			}
			out[id] = tok
		}
		return out
	}
	eventually.True(t, 20*time.Second, "p0 to hold runs", func() bool { return len(holding("p0")) > 0 })
	if err := procs[0].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var stopped map[int64]int64
	eventually.True(t, 20*time.Second, "p1 to hold runs", func() bool { stopped = holding("p1"); return len(stopped) > 0 })
	if err := procs[1].cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped = holding("p1") // what it held when it froze
	eventually.True(t, 20*time.Second, "p1's leases to expire and be taken over", func() bool {
		var n int
		_ = e.db.QueryRow(ctx, `SELECT count(*) FROM scheduler.scheduled_execution WHERE id = ANY($1) AND worker_id = 'p1' AND status = 'RUNNING'`,
			keys(stopped)).Scan(&n)
		return n == 0
	})
	if err := procs[1].cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if len(stopped) > 0 {
		select {
		case <-procs[1].leaseLost:
		case <-time.After(20 * time.Second):
			t.Fatalf("p1 resumed holding runs %v but never had a write refused", stopped)
		}
	}
	eventually.True(t, 60*time.Second, "every slot to finish", func() bool {
		var open int
		var now time.Time
		_ = e.db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status NOT IN ('SUCCEEDED','DEAD','CANCELLED','SKIPPED')), now()
			FROM scheduler.scheduled_execution`).Scan(&open, &now)
		return open == 0 && now.After(endAt)
	})

	eventually.True(t, 20*time.Second, "the survivors to hold every shard", func() bool {
		var live, dead int
		_ = e.db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE owner IN ('p1','p2')), count(*) FILTER (WHERE owner = 'p0')
			FROM scheduler.shard_lease WHERE expires_at > now()`).Scan(&live, &dead)
		return live == store.Shards && dead == 0
	})

	ef.mu.Lock()
	defer ef.mu.Unlock()
	slots, repeats := 0, 0
	for _, id := range ids {
		j, err := e.st.GetJob(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		runs, err := e.st.ListRuns(ctx, id, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		byslot := map[time.Time]store.Run{}
		for _, r := range runs {
			byslot[r.ScheduledAt.UTC()] = r
		}
		first, _ := j.Spec.First(j.CreatedAt)
		want := 0
		for at := first; !at.After(endAt); at = at.Add(time.Second) {
			want++
			r, ok := byslot[at.UTC()]
			key := jobspec.IdempotencyKey(id, at)
			switch {
			case !ok:
				t.Errorf("job %d: slot %s has no run (lost)", id, at)
			case r.Status != store.StatusSucceeded:
				t.Errorf("job %d slot %s: %s (%v)", id, at, r.Status, r.LastError)
			case ef.applied[key] != 1:
				t.Errorf("job %d slot %s: effect applied %d times", id, at, ef.applied[key])
			case ef.deliveries[key] > 1 && r.Attempt == 1:
				t.Errorf("job %d slot %s: delivered %d times without a lease expiry or retry", id, at, ef.deliveries[key])
			}
			if ef.deliveries[key] > 1 {
				repeats++
			}
		}
		if len(runs) != want {
			t.Errorf("job %d: %d run rows for %d intended slots", id, len(runs), want)
		}
		slots += want
	}
	if len(ef.applied) != slots {
		t.Errorf("target saw %d distinct keys for %d slots", len(ef.applied), slots)
	}
	t.Logf("%d slots over %d jobs ran exactly once in effect; %d were delivered more than once after a lease expiry; p1 held %d runs when stopped",
		slots, jobs, repeats, len(stopped))
}

func keys(m map[int64]int64) []int64 {
	out := make([]int64, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
