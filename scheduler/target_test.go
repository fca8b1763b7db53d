package scheduler_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/portico-io/portico/scheduler/api"
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
	eventually(t, 15*time.Second, "every run deferred by the open circuit", func() bool {
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
	a, err := api.New(api.Config{Store: e.st, Guard: e.guard, TargetKinds: reg.Kinds()})
	if err != nil {
		t.Fatal(err)
	}
	plain := e.api
	e.api = httptest.NewServer(a)
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
	e.api = httptest.NewServer(a)
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
	eventually(t, 10*time.Second, "SUCCEEDED", func() bool { return e.runs(t, id)[0]["status"] == store.StatusSucceeded })
	j, err := e.st.GetJob(context.Background(), mustInt(t, id))
	var cfg map[string]string
	if err != nil || json.Unmarshal(j.Spec.Target.Queue, &cfg) != nil || cfg["topic"] != "settlement.commands" {
		t.Fatalf("stored queue config: %v %s", err, j.Spec.Target.Queue)
	}
}
