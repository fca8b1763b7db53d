package scheduler_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portico-io/portico/internal/eventually"
	"github.com/portico-io/portico/scheduler/notify"
	"github.com/portico-io/portico/scheduler/reaper"
	"github.com/portico-io/portico/scheduler/runner"
	"github.com/portico-io/portico/scheduler/store"
)

// hook is a webhook receiver recording every event; status decides the
// answer to the nth (0-based) delivery.
type hook struct {
	mu     sync.Mutex
	events []notify.Event
	keys   []string
	srv    *httptest.Server
}

func newHook(t *testing.T, status func(n int) int) *hook {
	h := &hook{}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev notify.Event
		if err := json.NewDecoder(r.Body).Decode(&ev); err != nil {
			t.Errorf("webhook body: %v", err)
		}
		h.mu.Lock()
		n := len(h.events)
		h.events = append(h.events, ev)
		h.keys = append(h.keys, r.Header.Get("Idempotency-Key"))
		h.mu.Unlock()
		w.WriteHeader(status(n))
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hook) seen() ([]notify.Event, []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]notify.Event(nil), h.events...), append([]string(nil), h.keys...)
}

func withNotifications(spec, onFailure, onDead string) string {
	return strings.Replace(spec, `"execution":`, `"notifications":{"onFailure":["`+onFailure+`"],"onDeadLetter":["`+onDead+`"]},"execution":`, 1)
}

func (e *env) outbox(t *testing.T) map[string]int {
	t.Helper()
	rows, err := e.db.Query(context.Background(), `SELECT event || '/' || status, count(*) FROM scheduler.notification_outbox GROUP BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var (
			k string
			n int
		)
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		out[k] = n
	}
	return out
}

// TestNotificationsOnFailureAndDeadLetter: a run failing twice notifies
// onFailure for each attempt and onDeadLetter once; a webhook that fails
// its first delivery gets it again.
func TestNotificationsOnFailureAndDeadLetter(t *testing.T) {
	e := newEnv(t)
	tg := newTarget(t, func(int) int { return 500 })
	onFailure := newHook(t, func(n int) int {
		if n == 0 {
			return 503
		}
		return 200
	})
	onDead := newHook(t, func(int) int { return 204 })
	id := e.createJob(t, withNotifications(oneOff(tg.srv.URL, `{"maxAttempts":2,"initialBackoffMs":1,"maxBackoffMs":1}`),
		onFailure.srv.URL, onDead.srv.URL))
	e.start(t, roles{notifier: true})
	eventually.True(t, 15*time.Second, "every notification SENT", func() bool {
		ob := e.outbox(t)
		return ob["FAILURE/SENT"] == 2 && ob["DEAD_LETTER/SENT"] == 1 && len(ob) == 2
	})
	run := e.runs(t, id)[0]
	events, keys := onFailure.seen()
	if len(events) != 3 {
		t.Fatalf("onFailure received %d deliveries, want 3 (two events, the first retried): %+v", len(events), events)
	}
	attempts, perID := map[int]int{}, map[string]int{}
	for i, ev := range events {
		perID[ev.NotificationID]++
		if ev.Event != store.EventFailure || ev.JobID != id || ev.RunID != run["runId"] || ev.IdempotencyKey != run["idempotencyKey"] ||
			!strings.Contains(ev.Error, "HTTP 500") || keys[i] != "notification:"+ev.NotificationID {
			t.Errorf("onFailure event %d: %+v key %q", i, ev, keys[i])
		}
		attempts[ev.Attempt]++
	}
	if attempts[1] == 0 || attempts[2] == 0 || len(perID) != 2 || perID[events[0].NotificationID] != 2 {
		t.Errorf("want attempts 1 and 2 notified, the first (refused) delivery repeated: %+v", events)
	}
	dead, _ := onDead.seen()
	if len(dead) != 1 || dead[0].Event != store.EventDeadLetter || dead[0].Attempt != 2 || dead[0].Tenant != "acme" {
		t.Fatalf("onDeadLetter: %+v", dead)
	}
}

// TestNotificationOutboxSurvivesCrash: the reaper dead-letters a run whose
// worker vanished while no notifier runs; the events wait in the outbox. A
// notifier claims them and "crashes" (never answers); once its visibility
// lease lapses a fresh notifier delivers them, and the crashed one's late
// completion is refused.
func TestNotificationOutboxSurvivesCrash(t *testing.T) {
	e := newEnv(t)
	onFailure := newHook(t, func(int) int { return 200 })
	onDead := newHook(t, func(int) int { return 200 })
	id := e.createJob(t, withNotifications(oneOff("http://127.0.0.1:9/", `{"maxAttempts":1}`), onFailure.srv.URL, onDead.srv.URL))
	ctx := context.Background()
	if _, err := e.st.Fire(ctx, 10, func(d store.DueRun, now time.Time) store.FireDecision { return runner.Decide(d, now, time.Minute) }); err != nil {
		t.Fatal(err)
	}
	if ls, err := e.st.Claim(ctx, "vanishing", 1, 50*time.Millisecond, 2); err != nil || len(ls) != 1 {
		t.Fatalf("claim: %v %v", ls, err)
	}
	rp, _ := reaper.New(reaper.Config{Store: e.st})
	eventually.True(t, 10*time.Second, "the lease to be reaped", func() bool {
		res, err := rp.Pass(ctx)
		return err == nil && res.Dead == 1
	})
	if ob := e.outbox(t); ob["FAILURE/PENDING"] != 1 || ob["DEAD_LETTER/PENDING"] != 1 {
		t.Fatalf("outbox after the reaper: %v", ob)
	}
	crashed, err := e.st.ClaimNotifications(ctx, 10, 200*time.Millisecond)
	if err != nil || len(crashed) != 2 {
		t.Fatalf("crashed notifier's claim: %v %v", crashed, err)
	}
	e.start(t, roles{notifier: true})
	eventually.True(t, 10*time.Second, "delivery after the lease lapses", func() bool {
		ob := e.outbox(t)
		return ob["FAILURE/SENT"] == 1 && ob["DEAD_LETTER/SENT"] == 1
	})
	for _, x := range crashed {
		if err := e.st.NotificationSent(ctx, x.ID, x.Attempt); !errors.Is(err, store.ErrLeaseLost) {
			t.Errorf("crashed notifier completing %d: %v, want ErrLeaseLost", x.ID, err)
		}
	}
	f, _ := onFailure.seen()
	d, _ := onDead.seen()
	if len(f) != 1 || len(d) != 1 || f[0].JobID != id || !strings.Contains(f[0].Error, "lease expired") || d[0].Event != store.EventDeadLetter {
		t.Fatalf("deliveries: onFailure %+v onDeadLetter %+v", f, d)
	}
}

// TestNotificationURLsValidated: a webhook outside the allowlist or not an
// http(s) URL is 422 naming the field, and nothing is stored.
func TestNotificationURLsValidated(t *testing.T) {
	e := newEnv(t)
	spec := oneOff("http://127.0.0.1:9/", `{"maxAttempts":1}`)
	for _, c := range []struct{ onFailure, onDead, field string }{
		{"http://10.1.2.3/hook", "http://127.0.0.1:1/", "notifications.onFailure[0]"},
		{"http://127.0.0.1:1/", "slack:#oncall", "notifications.onDeadLetter[0]"},
		{"http://127.0.0.1:1/", "http://169.254.169.254/", "notifications.onDeadLetter[0]"},
	} {
		code, out := e.do(t, "POST", "/v1/jobs", withNotifications(spec, c.onFailure, c.onDead), map[string]string{"Idempotency-Key": c.field + c.onDead})
		errBody, _ := out["error"].(map[string]any)
		if code != http.StatusUnprocessableEntity || errBody["field"] != c.field {
			t.Errorf("%s / %s: %d %v, want 422 on %s", c.onFailure, c.onDead, code, out, c.field)
		}
	}
	var n int
	if err := e.db.QueryRow(context.Background(), `SELECT count(*) FROM scheduler.schedule_details`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d jobs stored (%v), want 0", n, err)
	}
}
