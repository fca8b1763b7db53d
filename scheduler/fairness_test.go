package scheduler_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/portico-io/portico/internal/eventually"
	"github.com/portico-io/portico/scheduler/runner"
	"github.com/portico-io/portico/scheduler/store"
)

// queueRuns gives tenant one job and n QUEUED runs of the given priority
// rank, ready since `age` ago (older = longer ready).
func (e *env) queueRuns(t *testing.T, tenant string, n, rank int, age time.Duration) int64 {
	t.Helper()
	id := mustInt(t, e.createJob(t, `{"tenant":"`+tenant+`","schedule":{"type":"ONE_OFF","at":"2099-01-01T00:00:00Z"},
		"target":{"type":"HTTP","http":{"url":"http://127.0.0.1:9/"}}}`))
	if _, err := e.db.Exec(context.Background(), `INSERT INTO scheduler.scheduled_execution (schedule_id, scheduled_at, status, tenant, priority)
		SELECT $1, now() - $3 * interval '1 millisecond' + g * interval '1 millisecond', 'QUEUED', $2, $5
		FROM generate_series(1, $4) g`, id, tenant, age.Milliseconds(), n, rank); err != nil {
		t.Fatal(err)
	}
	return id
}

func tenantsOf(t *testing.T, e *env, ls []store.Lease) []string {
	t.Helper()
	var out []string
	for _, l := range ls {
		out = append(out, l.Spec.Tenant)
	}
	return out
}

// TestClaimRoundRobinAcrossTenants: a tenant with a large, older backlog
// does not starve two small tenants; tenants take turns, HIGH first.
func TestClaimRoundRobinAcrossTenants(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.queueRuns(t, "big", 50, 1, time.Hour)
	e.queueRuns(t, "a", 2, 1, time.Minute)
	e.queueRuns(t, "b", 2, 1, time.Minute)
	e.queueRuns(t, "c", 1, 0, time.Second) // HIGH: first whatever its age and tenant
	// Without fairness the first claims would be all big's (oldest).
	for i, want := range []string{"[c]", "[a b big]", "[a b big]", "[big big big]"} {
		ls, err := e.st.Claim(ctx, "w", []int{1, 3, 3, 3}[i], time.Minute, 2)
		if err != nil {
			t.Fatal(err)
		}
		got := tenantsOf(t, e, ls)
		slices.Sort(got)
		if fmt.Sprint(got) != want {
			t.Fatalf("claim %d took %v, want %s (HIGH first, then tenants in turn)", i, got, want)
		}
	}
	ls, err := e.st.Claim(ctx, "w", 100, time.Minute, 2)
	if err != nil || len(ls) != 45 {
		t.Fatalf("rest of the backlog: %d leases, %v", len(ls), err)
	}
}

// TestTenantConcurrencyCap: with TenantMaxRunning 3, eight concurrent
// claimers never hold more than 3 runs of one tenant; the over-cap runs
// wait (QUEUED) and are claimable once a run finishes.
func TestTenantConcurrencyCap(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	capped, err := store.Open(ctx, store.Config{DatabaseURL: e.url, TenantMaxRunning: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer capped.Close()
	e.queueRuns(t, "big", 40, 1, time.Hour)
	e.queueRuns(t, "small", 2, 1, time.Minute)
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		all []store.Lease
	)
	for i := range 8 {
		wg.Go(func() {
			for range 5 {
				ls, err := capped.Claim(ctx, fmt.Sprint("w", i), 4, time.Minute, 2)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				all = append(all, ls...)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	per := map[string]int{}
	for _, l := range all {
		per[l.Spec.Tenant]++
	}
	if per["big"] != 3 || per["small"] != 2 {
		t.Fatalf("leases per tenant %v, want big capped at 3 and small's 2", per)
	}
	var queued int
	if err := e.db.QueryRow(ctx, `SELECT count(*) FROM scheduler.scheduled_execution WHERE tenant = 'big' AND status = 'QUEUED'`).Scan(&queued); err != nil || queued != 37 {
		t.Fatalf("big's waiting runs: %d %v, want 37 deferred, none dropped", queued, err)
	}
	for _, l := range all {
		if l.Spec.Tenant == "big" {
			if err := capped.Succeed(ctx, l.RunID, l.Token); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	ls, err := capped.Claim(ctx, "w", 10, time.Minute, 2)
	if err != nil || fmt.Sprint(tenantsOf(t, e, ls)) != "[big]" {
		t.Fatalf("after one big run finished: %v %v, want exactly one more big lease", tenantsOf(t, e, ls), err)
	}
}

// TestTenantRateLimit: with a token bucket of 0.5 runs/s, 5 deep, a
// tenant's burst takes 5 runs, then nothing until tokens refill by the
// database clock; other tenants have their own buckets; nothing is dropped.
func TestTenantRateLimit(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	limited, err := store.Open(ctx, store.Config{DatabaseURL: e.url, TenantRate: 0.5, TenantBurst: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer limited.Close()
	e.queueRuns(t, "big", 30, 1, time.Hour)
	e.queueRuns(t, "small", 3, 1, time.Minute)
	count := func(ls []store.Lease) map[string]int {
		per := map[string]int{}
		for _, l := range ls {
			per[l.Spec.Tenant]++
		}
		return per
	}
	ls, err := limited.Claim(ctx, "w", 100, time.Minute, 2)
	if got := count(ls); err != nil || got["big"] != 5 || got["small"] != 3 {
		t.Fatalf("first claim %v %v, want the burst of 5 for big and small's 3", got, err)
	}
	if ls, err := limited.Claim(ctx, "w", 100, time.Minute, 2); err != nil || len(ls) != 0 {
		t.Fatalf("claim with an empty bucket: %v %v", count(ls), err)
	}
	// Four seconds pass for big's bucket: two tokens at 0.5/s.
	if _, err := e.db.Exec(ctx, `UPDATE scheduler.tenant_bucket SET updated_at = updated_at - interval '4 seconds' WHERE tenant = 'big'`); err != nil {
		t.Fatal(err)
	}
	if ls, err := limited.Claim(ctx, "w", 100, time.Minute, 2); err != nil || fmt.Sprint(count(ls)) != "map[big:2]" {
		t.Fatalf("after 4 s: %v %v, want 2 for big", count(ls), err)
	}
	var queued int
	if err := e.db.QueryRow(ctx, `SELECT count(*) FROM scheduler.scheduled_execution WHERE tenant = 'big' AND status = 'QUEUED'`).Scan(&queued); err != nil || queued != 23 {
		t.Fatalf("big's waiting runs %d (%v), want 23", queued, err)
	}
	if _, err := store.Open(ctx, store.Config{DatabaseURL: e.url, TenantRate: -1}); err == nil {
		t.Fatal("negative TenantRate accepted")
	}
}

// TestTimingWheelFiresWithoutSweep: with the sweep tick an hour long, an
// every-second job still fires on each slot: the wheel, loaded with the
// first slot and fed each chained one, wakes the runner at its time.
func TestTimingWheelFiresWithoutSweep(t *testing.T) {
	e := newEnv(t)
	id := e.createJob(t, `{"tenant":"acme","schedule":{"type":"FIXED_RATE","every":"PT1S","anchor":"2026-01-01T00:00:00Z"},
		"target":{"type":"HTTP","http":{"url":"http://127.0.0.1:9/"}}}`)
	rn, err := runner.New(runner.Config{Store: e.st, Tick: time.Hour, Lookahead: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = rn.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	eventually.True(t, 15*time.Second, "3 slots fired by the wheel", func() bool {
		var n int
		_ = e.db.QueryRow(ctx, `SELECT count(*) FROM scheduler.scheduled_execution WHERE schedule_id = $1 AND status = 'QUEUED'`, id).Scan(&n)
		return n >= 3
	})
	var worst float64
	if err := e.db.QueryRow(ctx, `SELECT max(extract(epoch FROM queued_at - scheduled_at)) FROM scheduler.scheduled_execution
		WHERE schedule_id = $1 AND status = 'QUEUED'`, id).Scan(&worst); err != nil {
		t.Fatal(err)
	}
	t.Logf("worst fire lag under the wheel: %.3fs", worst)
	if worst > 30 { // the sweep (1 h) cannot have fired them
		t.Fatalf("fire lag %.1fs", worst)
	}
}
