package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portico-io/portico/scheduler/jobspec"
	"github.com/portico-io/portico/scheduler/runner"
	"github.com/portico-io/portico/scheduler/store"
)

// blockingTarget holds every request open until the client goes away and
// reports each arrival and each abandonment on channels.
type blockingTarget struct {
	srv       *httptest.Server
	arrived   chan string // Idempotency-Key of each request
	abandoned chan string // ... when the worker hung up
	calls     atomic.Int32
}

func newBlockingTarget(t *testing.T) *blockingTarget {
	bt := &blockingTarget{arrived: make(chan string, 16), abandoned: make(chan string, 16)}
	bt.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bt.calls.Add(1)
		key := r.Header.Get("Idempotency-Key")
		_, _ = io.Copy(io.Discard, r.Body)
		bt.arrived <- key
		<-r.Context().Done()
		bt.abandoned <- key
	}))
	t.Cleanup(bt.srv.Close)
	return bt
}

func recv(t *testing.T, ch chan string, what string) string {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(15 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		return ""
	}
}

func (e *env) run(t *testing.T, id string) map[string]any {
	t.Helper()
	code, out := e.do(t, "GET", "/v1/runs/"+id, "", nil)
	if code != 200 {
		t.Fatalf("GET run %s: %d %v", id, code, out)
	}
	return out
}

func TestCancelPendingRunAPI(t *testing.T) {
	e := newEnv(t)
	future := `{"tenant":"acme","schedule":{"type":"ONE_OFF","at":"2099-01-01T00:00:00Z"},
		"target":{"type":"HTTP","http":{"url":"http://127.0.0.1:9/"}}}`
	id := e.createJob(t, future)
	runID := e.runs(t, id)[0]["runId"].(string)
	code, out := e.do(t, "POST", "/v1/runs/"+runID+":cancel", "", nil)
	if code != 200 || out["status"] != store.StatusCancelled {
		t.Fatalf("cancel: %d %v", code, out)
	}
	for _, c := range []struct {
		path string
		code int
	}{
		{"/v1/runs/" + runID + ":cancel", http.StatusConflict}, // already ended
		{"/v1/runs/999999:cancel", http.StatusNotFound},
		{"/v1/runs/abc:cancel", http.StatusNotFound},
		{"/v1/runs/" + runID + ":explode", http.StatusNotFound},
	} {
		code, out := e.do(t, "POST", c.path, "", nil)
		if code != c.code || out["error"] == nil {
			t.Errorf("POST %s: %d %v, want %d with an error body", c.path, code, out, c.code)
		}
	}
	if r := e.run(t, runID); r["status"] != store.StatusCancelled {
		t.Fatalf("after refused cancels: %v", r)
	}

	// Cancelling a recurring job's waiting run skips that slot only.
	hourly := e.createJob(t, `{"tenant":"acme","schedule":{"type":"FIXED_RATE","every":"PT1H","anchor":"2026-01-01T00:00:00Z"},
		"target":{"type":"HTTP","http":{"url":"http://127.0.0.1:9/"}}}`)
	first := e.runs(t, hourly)[0]
	if code, out := e.do(t, "POST", "/v1/runs/"+first["runId"].(string)+":cancel", "", nil); code != 200 {
		t.Fatalf("cancel waiting run: %d %v", code, out)
	}
	rs := e.runs(t, hourly)
	if len(rs) != 2 || rs[0]["status"] != store.StatusCancelled || rs[1]["status"] != store.StatusScheduled {
		t.Fatalf("runs after cancelling the waiting slot: %v", rs)
	}
	a, _ := time.Parse(time.RFC3339, first["scheduledAt"].(string))
	b, _ := time.Parse(time.RFC3339, rs[1]["scheduledAt"].(string))
	if b.Sub(a) != time.Hour {
		t.Fatalf("chained slot %s after cancelled %s: want the next hour", b, a)
	}
}

// TestCancelRunningRun cancels a run whose target call is in progress: the
// worker learns it through its heartbeat and hangs up, records nothing,
// and the old token can no longer complete the run.
func TestCancelRunningRun(t *testing.T) {
	e := newEnv(t)
	bt := newBlockingTarget(t)
	id := e.createJob(t, oneOff(bt.srv.URL, `{"maxAttempts":3,"initialBackoffMs":1,"maxBackoffMs":1}`))
	e.start(t, roles{lease: 300 * time.Millisecond})
	key := recv(t, bt.arrived, "the delivery")
	r := e.runs(t, id)[0]
	if r["status"] != store.StatusRunning {
		t.Fatalf("run during delivery: %v", r)
	}
	var token int64
	ctx := context.Background()
	if err := e.db.QueryRow(ctx, `SELECT lease_token FROM scheduler.scheduled_execution WHERE id = $1`, r["runId"]).Scan(&token); err != nil {
		t.Fatal(err)
	}
	code, out := e.do(t, "POST", "/v1/runs/"+r["runId"].(string)+":cancel", "", nil)
	if code != 200 || out["status"] != store.StatusCancelled {
		t.Fatalf("cancel: %d %v", code, out)
	}
	if got := recv(t, bt.abandoned, "the worker to hang up"); got != key {
		t.Fatalf("abandoned %q, want %q", got, key)
	}
	runID := mustInt(t, r["runId"].(string))
	if err := e.st.Succeed(ctx, runID, token); !errors.Is(err, store.ErrCancelled) {
		t.Fatalf("late Succeed with the old token: %v, want ErrCancelled", err)
	}
	if err := e.st.Heartbeat(ctx, runID, token, time.Second); !errors.Is(err, store.ErrCancelled) {
		t.Fatalf("late Heartbeat: %v, want ErrCancelled", err)
	}
	if got := e.run(t, r["runId"].(string)); got["status"] != store.StatusCancelled || got["attempt"].(float64) != 1 {
		t.Fatalf("run after cancel: %v", got)
	}
	if n := bt.calls.Load(); n != 1 {
		t.Fatalf("target called %d times, want 1", n)
	}
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	var n int64
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestReplaceCancelsRunningRun: an every-second REPLACE job whose target
// never answers; each new slot cancels the run in progress (its worker
// hangs up) and takes its place.
func TestReplaceCancelsRunningRun(t *testing.T) {
	e := newEnv(t)
	bt := newBlockingTarget(t)
	id := e.createJob(t, `{"tenant":"acme","schedule":{"type":"FIXED_RATE","every":"PT1S","anchor":"2026-01-01T00:00:00Z"},
		"target":{"type":"HTTP","http":{"url":"`+bt.srv.URL+`"}},
		"execution":{"concurrencyPolicy":"REPLACE","timeoutSeconds":60}}`)
	e.start(t, roles{lease: 300 * time.Millisecond})
	first := recv(t, bt.arrived, "the first delivery")
	if got := recv(t, bt.abandoned, "the first run to be replaced"); got != first {
		t.Fatalf("abandoned %q, want %q", got, first)
	}
	second := recv(t, bt.arrived, "the replacing run's delivery")
	if second == first {
		t.Fatalf("replacement carries the same key %q", second)
	}
	var status, lastErr string
	slot := strings.TrimPrefix(first, id+":")
	if err := e.db.QueryRow(context.Background(), `SELECT status, last_error FROM scheduler.scheduled_execution
		WHERE schedule_id = $1 AND scheduled_at = $2`, id, slot).Scan(&status, &lastErr); err != nil {
		t.Fatal(err)
	}
	if status != store.StatusCancelled || !strings.Contains(lastErr, "REPLACE") {
		t.Fatalf("replaced run: %s %q", status, lastErr)
	}
	var running int
	if err := e.db.QueryRow(context.Background(), `SELECT count(*) FROM scheduler.scheduled_execution
		WHERE schedule_id = $1 AND status IN ('RUNNING','QUEUED','RETRY_WAIT')`, id).Scan(&running); err != nil {
		t.Fatal(err)
	}
	if running > 1 {
		t.Fatalf("%d runs in flight under REPLACE, want at most 1", running)
	}
}

// TestClaimByPriorityAndJitter: HIGH runs are claimed before NORMAL before
// LOW whatever their age; maxRank 0 takes HIGH only; a jittered run is not
// claimable before slot + its jitter.
func TestClaimByPriorityAndJitter(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	ids := map[string]string{}
	for i, p := range []string{"LOW", "NORMAL", "HIGH"} { // oldest first
		ids[p] = e.createJob(t, `{"tenant":"acme","schedule":{"type":"ONE_OFF","at":"2020-01-01T00:00:0`+fmt.Sprint(i)+`Z"},
			"target":{"type":"HTTP","http":{"url":"http://127.0.0.1:9/"}},"execution":{"priority":"`+p+`"}}`)
	}
	fire := func() {
		t.Helper()
		if _, err := e.st.Fire(ctx, 100, func(d store.DueRun, now time.Time) store.FireDecision { return runner.Decide(d, now, time.Minute) }); err != nil {
			t.Fatal(err)
		}
	}
	fire()
	if ls, err := e.st.Claim(ctx, "w", 5, time.Minute, 0); err != nil || len(ls) != 1 || fmt.Sprint(ls[0].ScheduleID) != ids["HIGH"] {
		t.Fatalf("HIGH-only claim: %+v %v", ls, err)
	}
	for _, p := range []string{"NORMAL", "LOW"} {
		ls, err := e.st.Claim(ctx, "w", 1, time.Minute, 2)
		if err != nil || len(ls) != 1 || fmt.Sprint(ls[0].ScheduleID) != ids[p] {
			t.Fatalf("claim, want %s (job %s): %+v %v", p, ids[p], ls, err)
		}
	}

	// Jitter: a manual run (slot = now) of a job spreading starts over an
	// hour. Its ready time is slot + StartJitter, stable per slot.
	jid := e.createJob(t, `{"tenant":"acme","schedule":{"type":"ONE_OFF","at":"2099-01-01T00:00:00Z"},
		"target":{"type":"HTTP","http":{"url":"http://127.0.0.1:9/"}},"execution":{"jitterSeconds":3600}}`)
	var (
		run  store.Run
		spec *jobspec.Spec
	)
	for range 20 { // a jitter under 10 s (p ≈ 1/360) would race the clock: take another slot
		j, err := e.st.GetJob(ctx, mustInt(t, jid))
		if err != nil {
			t.Fatal(err)
		}
		spec = j.Spec
		if run, err = e.st.Trigger(ctx, j.ID); err != nil {
			t.Fatal(err)
		}
		if spec.StartJitter(j.ID, run.ScheduledAt) > 10*time.Second {
			break
		}
		if _, err := e.st.CancelRun(ctx, run.ID); err != nil {
			t.Fatal(err)
		}
	}
	fire()
	got, err := e.st.GetRun(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := run.ScheduledAt.Add(spec.StartJitter(run.ScheduleID, run.ScheduledAt))
	if got.Status != store.StatusQueued || got.NextAttemptAt == nil || !got.NextAttemptAt.Equal(want) {
		t.Fatalf("jittered run %+v, want QUEUED ready at %s", got, want)
	}
	if ls, err := e.st.Claim(ctx, "w", 5, time.Minute, 2); err != nil || len(ls) != 0 {
		t.Fatalf("claimed a run before its jittered start: %+v %v", ls, err)
	}
	if _, err := e.db.Exec(ctx, `UPDATE scheduler.scheduled_execution SET next_attempt_at = now() WHERE id = $1`, run.ID); err != nil {
		t.Fatal(err)
	}
	if ls, err := e.st.Claim(ctx, "w", 5, time.Minute, 2); err != nil || len(ls) != 1 || ls[0].RunID != run.ID {
		t.Fatalf("claim once ready: %+v %v", ls, err)
	}
}
