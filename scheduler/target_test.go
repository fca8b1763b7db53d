package scheduler_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/portico-io/portico/internal/eventually"
	"github.com/portico-io/portico/scheduler/api"
	"github.com/portico-io/portico/scheduler/api/apitest"
	"github.com/portico-io/portico/scheduler/jobspec"
	"github.com/portico-io/portico/scheduler/store"
	"github.com/portico-io/portico/scheduler/target"
	"github.com/portico-io/portico/scheduler/target/httptarget"
)

// TestOpenCircuitDefersWithoutUsingAttempts: four runs against one
// failing host with a breaker that opens after two failures: only two
// calls reach the host, the other attempts are deferred (RETRY_WAIT, the
// attempt unchanged, last_error naming the circuit) and nothing goes DEAD.
func TestOpenCircuitDefersWithoutUsingAttempts(t *testing.T) {
	e := newEnv(t)
	tg := newTarget(t, func(int) int { return 503 })
	ht, err := httptarget.New(httptarget.Config{Guard: e.guard, BreakerFailures: 2, BreakerDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 4 {
		ids = append(ids, e.createJob(t, oneOff(tg.srv.URL, `{"maxAttempts":3,"initialBackoffMs":1,"maxBackoffMs":1}`)))
	}
	// One attempt at a time, so the circuit opens after exactly two calls.
	e.start(t, roles{targets: target.Registry{jobspec.TargetHTTP: ht}, concurrency: 1})
	eventually.True(t, 15*time.Second, "every run deferred by the open circuit", func() bool {
		for _, id := range ids {
			rs := e.runs(t, id)
			if last, _ := rs[0]["lastError"].(string); !strings.Contains(last, "circuit open") {
				return false
			}
		}
		return true
	})
	if n := len(tg.seen()); n != 2 {
		t.Fatalf("host called %d times, want 2 (then the circuit opened)", n)
	}
	attempts := 0
	for _, id := range ids {
		r := e.runs(t, id)[0]
		if r["status"] == store.StatusDead || r["status"] == store.StatusSucceeded {
			t.Fatalf("run %v", r)
		}
		attempts += int(r["attempt"].(float64))
	}
	if attempts != 6 { // two runs used one attempt each (now on attempt 2), two none
		t.Fatalf("attempt numbers sum to %d, want 6", attempts)
	}
}

// queueTarget is a second target kind plugged in from outside the core:
// it validates its own configuration and records what it would publish.
type queueTarget struct{ published chan [2]string }

func (q *queueTarget) Validate(t *jobspec.Target) error {
	var cfg struct {
		Topic string `json:"topic"`
	}
	if err := json.Unmarshal(t.Queue, &cfg); err != nil || cfg.Topic == "" {
		return &jobspec.FieldError{Field: "target.queue.topic", Message: "required"}
	}
	return nil
}

func (q *queueTarget) Deliver(_ context.Context, d target.Delivery) target.Result {
	q.published <- [2]string{d.IdempotencyKey(), string(d.Payload())}
	return target.Result{Outcome: target.Succeeded}
}

// TestPluggableQueueTarget: a QUEUE kind registered by the embedding
// process is validated by its own executor and delivered by the unchanged
// worker; a scheduler without it refuses the kind.
func TestPluggableQueueTarget(t *testing.T) {
	e := newEnv(t)
	q := &queueTarget{published: make(chan [2]string, 1)}
	reg := target.Registry{jobspec.TargetQueue: q}
	ht, _ := httptarget.New(httptarget.Config{Guard: e.guard})
	reg[jobspec.TargetHTTP] = ht
	auth, tokens := apitest.New(t)
	a, err := api.New(api.Config{Store: e.st, Tokens: e.st.Tokens(), Guard: e.guard, TargetKinds: reg.Kinds(), Auth: auth})
	if err != nil {
		t.Fatal(err)
	}
	plain := e.api
	e.api = httptest.NewServer(apitest.AsDefault(a, tokens.Admin))
	t.Cleanup(e.api.Close)
	spec := func(queue string) string {
		return `{"tenant":"acme","schedule":{"type":"ONE_OFF","at":"2020-01-01T00:00:00Z"},
			"target":{"type":"QUEUE","queue":` + queue + `,"payload":{"date":"{{scheduledDate}}"}}}`
	}
	code, out := e.do(t, "POST", "/v1/jobs", spec(`{}`), map[string]string{"Idempotency-Key": "q0"})
	if errBody, _ := out["error"].(map[string]any); code != http.StatusUnprocessableEntity || errBody["field"] != "target.queue.topic" {
		t.Fatalf("QUEUE without topic: %d %v", code, out)
	}
	e.api = plain
	code, out = e.do(t, "POST", "/v1/jobs", spec(`{"topic":"t"}`), map[string]string{"Idempotency-Key": "q1"})
	if errBody, _ := out["error"].(map[string]any); code != http.StatusUnprocessableEntity || errBody["field"] != "target.type" {
		t.Fatalf("QUEUE on a scheduler without it: %d %v", code, out)
	}
	e.api = httptest.NewServer(apitest.AsDefault(a, tokens.Admin))
	t.Cleanup(e.api.Close)
	id := e.createJob(t, spec(`{"topic":"settlement.commands"}`))
	e.start(t, roles{targets: reg})
	select {
	case got := <-q.published:
		var payload map[string]string
		if err := json.Unmarshal([]byte(got[1]), &payload); err != nil || got[0] != id+":2020-01-01T00:00:00Z" || payload["date"] != "2020-01-01" {
			t.Fatalf("published %q", got)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the QUEUE target was never called")
	}
	eventually.True(t, 10*time.Second, "SUCCEEDED", func() bool { return e.runs(t, id)[0]["status"] == store.StatusSucceeded })
	j, err := e.st.GetJob(context.Background(), mustInt(t, id))
	var cfg map[string]string
	if err != nil || json.Unmarshal(j.Spec.Target.Queue, &cfg) != nil || cfg["topic"] != "settlement.commands" {
		t.Fatalf("stored queue config: %v %s", err, j.Spec.Target.Queue)
	}
}

// TestOpenCircuitDeadLettersAfterMaxDefer: a run whose host's circuit
// stays open is deferred without using attempts only until
// execution.maxDeferSeconds have passed since its first deferral; then it
// goes DEAD with reason CIRCUIT_OPEN through the DLQ and both
// notifications. The deferral wait is cut to that deadline (the breaker
// here stays open an hour), so the run dies about a second after it was
// first deferred rather than an hour later.
func TestOpenCircuitDeadLettersAfterMaxDefer(t *testing.T) {
	e := newEnv(t)
	tg := newTarget(t, func(int) int { return 503 })
	ht, err := httptarget.New(httptarget.Config{Guard: e.guard, BreakerFailures: 1, BreakerDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	onFailure, onDead := newHook(t, func(int) int { return 200 }), newHook(t, func(int) int { return 200 })
	spec := withNotifications(oneOff(tg.srv.URL, `{"maxAttempts":3,"initialBackoffMs":1,"maxBackoffMs":1}`), onFailure.srv.URL, onDead.srv.URL)
	spec = strings.Replace(spec, `"execution":{`, `"execution":{"maxDeferSeconds":1,`, 1)
	id := e.createJob(t, spec)
	e.start(t, roles{targets: target.Registry{jobspec.TargetHTTP: ht}, concurrency: 1, notifier: true})
	eventually.True(t, 15*time.Second, "the run DEAD and both notifications sent", func() bool {
		ob := e.outbox(t)
		return e.runs(t, id)[0]["status"] == store.StatusDead && ob["FAILURE/SENT"] == 2 && ob["DEAD_LETTER/SENT"] == 1
	})
	if n := len(tg.seen()); n != 1 {
		t.Fatalf("host called %d times, want 1 (then the circuit opened)", n)
	}
	r := e.runs(t, id)[0]
	last, _ := r["lastError"].(string)
	if r["attempt"] != 2.0 || !strings.HasPrefix(last, "CIRCUIT_OPEN: ") || !strings.Contains(last, "maxDeferSeconds=1 ") ||
		!strings.Contains(last, "circuit open for") {
		t.Fatalf("dead run: %v", r)
	}
	var firstDeferral, finished time.Time
	if err := e.db.QueryRow(context.Background(), `SELECT deferred_since, finished_at FROM scheduler.scheduled_execution WHERE schedule_id = $1`,
		mustInt(t, id)).Scan(&firstDeferral, &finished); err != nil {
		t.Fatal(err)
	}
	if d := finished.Sub(firstDeferral); d < time.Second || d > 10*time.Second {
		t.Fatalf("dead-lettered %s after the first deferral, want just over maxDeferSeconds (1s)", d)
	}
	code, dlq := e.do(t, "GET", "/v1/dlq?tenant=acme", "", nil)
	if items, _ := dlq["items"].([]any); code != 200 || len(items) != 1 || items[0].(map[string]any)["runId"] != r["runId"] {
		t.Fatalf("DLQ: %d %v", code, dlq)
	}
	dead, _ := onDead.seen()
	if len(dead) != 1 || dead[0].Event != store.EventDeadLetter || !strings.HasPrefix(dead[0].Error, "CIRCUIT_OPEN: ") || dead[0].Attempt != 2 {
		t.Fatalf("onDeadLetter: %+v", dead)
	}
}

// TestDeferralClockResetsOnRealAttempt drives the store directly: a
// deferral wait is cut to the deadline, a deferral past it is DEAD, and a
// real (retryable) attempt in between restarts the clock.
func TestDeferralClockResetsOnRealAttempt(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	id := mustInt(t, e.createJob(t, oneOff("http://127.0.0.1:9/", `{"maxAttempts":5}`)))
	claim := func() store.Lease {
		t.Helper()
		var (
			got []store.Lease
			err error
		)
		eventually.True(t, 10*time.Second, "a claimable run", func() bool {
			if _, err := e.st.Fire(ctx, 10, func(r store.DueRun, _ time.Time) store.FireDecision {
				return store.FireDecision{Status: store.StatusQueued}
			}); err != nil {
				t.Fatal(err)
			}
			got, err = e.st.Claim(ctx, "w", 1, time.Minute, 2)
			return err == nil && len(got) == 1
		})
		return got[0]
	}
	setSince := func(ago time.Duration) {
		t.Helper()
		if _, err := e.db.Exec(ctx, `UPDATE scheduler.scheduled_execution SET deferred_since = now() - $2 * interval '1 millisecond'
			WHERE schedule_id = $1`, id, ago.Milliseconds()); err != nil {
			t.Fatal(err)
		}
	}
	l := claim()
	if dead, err := e.st.Defer(ctx, l.RunID, l.Token, time.Hour, time.Minute, "circuit open"); err != nil || dead {
		t.Fatalf("first deferral: dead=%v %v", dead, err)
	}
	var wait time.Duration
	if err := e.db.QueryRow(ctx, `SELECT extract(epoch FROM next_attempt_at - deferred_since) * interval '1 second'
		FROM scheduler.scheduled_execution WHERE schedule_id = $1`, id).Scan(&wait); err != nil {
		t.Fatal(err)
	}
	if wait != time.Minute {
		t.Fatalf("an hour's deferral should be cut to the minute left, got %s", wait)
	}
	setSince(2 * time.Minute) // as if deferred for two minutes: past the bound
	if _, err := e.db.Exec(ctx, `UPDATE scheduler.scheduled_execution SET next_attempt_at = now() WHERE schedule_id = $1`, id); err != nil {
		t.Fatal(err)
	}
	l = claim()
	if err := e.st.RetryLater(ctx, l.RunID, l.Token, 0, "HTTP 503"); err != nil { // a real attempt clears the clock
		t.Fatal(err)
	}
	l = claim()
	if dead, err := e.st.Defer(ctx, l.RunID, l.Token, 0, time.Minute, "circuit open"); err != nil || dead {
		t.Fatalf("deferral after a real attempt: dead=%v %v", dead, err)
	}
	setSince(2 * time.Minute)
	l = claim()
	if dead, err := e.st.Defer(ctx, l.RunID, l.Token, 0, time.Minute, "circuit open"); err != nil || !dead {
		t.Fatalf("deferral past the bound: dead=%v %v", dead, err)
	}
	run := e.runs(t, strconv.FormatInt(id, 10))[0]
	if run["status"] != store.StatusDead || !strings.HasPrefix(run["lastError"].(string), "CIRCUIT_OPEN: ") || run["attempt"] != 2.0 {
		t.Fatalf("run %v", run)
	}
	if _, err := e.st.Defer(ctx, l.RunID, l.Token, 0, time.Minute, "late"); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("a second write on the dead run: %v", err)
	}
}
