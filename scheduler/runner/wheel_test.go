package runner

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/scheduler/jobspec"
	"github.com/portico-io/portico/scheduler/metrics"
	"github.com/portico-io/portico/scheduler/store"
)

// TestWheelWakingEarlyStillFires: when the skew estimate is wrong by more
// than the wheel's one-slot margin (a load measured under heavy load), the
// wheel wakes the runner before the database considers the slot due. The
// runner must look again shortly instead of waiting for the sweep (an
// hour here) or the next load.
func TestWheelWakingEarlyStillFires(t *testing.T) {
	url := testdeps.Postgres(t)
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{DatabaseURL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	spec, err := jobspec.Decode(strings.NewReader(`{"tenant":"t","schedule":{"type":"FIXED_RATE","every":"PT1S","anchor":"2026-01-01T00:00:00Z"},
		"target":{"type":"HTTP","http":{"url":"http://127.0.0.1:9/"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := spec.Normalize(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	job, _, err := st.CreateJob(ctx, spec, "k", "h")
	if err != nil {
		t.Fatal(err)
	}
	passes := make(chan Pass, 1024)
	r, err := New(Config{Store: st, Tick: time.Hour, Lookahead: time.Minute, OnPass: passTo(passes)})
	if err != nil {
		t.Fatal(err)
	}
	r.clockError = 400 * time.Millisecond
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = r.Run(rctx); close(done) }()
	defer func() { cancel(); <-done }()
	db, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// Each wheel pass that queued a run, until three slots have: the hourly
	// sweep fires nothing in this test's time.
	deadline := time.After(10 * time.Second)
	for fired := 0; fired < 3; {
		p := waitPass(t, passes, PassWheel, deadline, "%d slots fired in 10 s with the wheel waking 400 ms early; want 3", fired)
		fired += p.Fired[store.StatusQueued]
	}
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM scheduler.scheduled_execution WHERE schedule_id = $1 AND status = 'QUEUED'`, job.ID).Scan(&n); err != nil || n < 3 {
		t.Fatalf("%d runs QUEUED after three wheel fires (%v); want 3", n, err)
	}
}

// passTo is an OnPass that hands each pass to ch (dropping none: ch is
// drained by the test, and sized for every pass of its run).
func passTo(ch chan<- Pass) func(Pass) { return func(p Pass) { ch <- p } }

// waitPass returns the next pass of the given kind, or fails the test with
// the message when deadline comes first.
func waitPass(t *testing.T, passes <-chan Pass, kind string, deadline <-chan time.Time, msg string, args ...any) Pass {
	t.Helper()
	for {
		select {
		case p := <-passes:
			if p.Kind == kind {
				return p
			}
		case <-deadline:
			t.Fatalf(msg, args...)
		}
	}
}

// TestWheelLoadsNewRuns: a run created after the wheel's last full load
// (an hour-long sweep tick here, full loads every 15 s) still fires on
// its slot: runs new since the last load reach the wheel within
// newRunsLoad.
func TestWheelLoadsNewRuns(t *testing.T) {
	url := testdeps.Postgres(t)
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{DatabaseURL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	create := func(key string, at time.Time) int64 {
		spec, err := jobspec.Decode(strings.NewReader(`{"tenant":"t","schedule":{"type":"ONE_OFF","at":"` +
			at.UTC().Format(time.RFC3339) + `"},"target":{"type":"HTTP","http":{"url":"http://127.0.0.1:9/"}}}`))
		if err != nil {
			t.Fatal(err)
		}
		if err := spec.Normalize(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
		job, _, err := st.CreateJob(ctx, spec, key, key)
		if err != nil {
			t.Fatal(err)
		}
		return job.ID
	}
	create("later", time.Now().Add(2*time.Hour)) // the table is not empty at the first load
	m := metrics.New(nil)
	passes := make(chan Pass, 1024)
	r, err := New(Config{Store: st, Tick: time.Hour, Lookahead: time.Minute, Metrics: m, OnPass: passTo(passes)})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = r.Run(rctx); close(done) }()
	defer func() { cancel(); <-done }()
	// Past the first full load (the next full one is 15 s away).
	waitPass(t, passes, PassLoad, time.After(10*time.Second), "no full wheel load in 10 s")
	at := time.Now().Add(1500 * time.Millisecond).Truncate(time.Second).Add(time.Second)
	jobID := create("soon", at)
	db, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// Only the wheel can fire it (the sweep is hourly): look after each
	// wheel pass.
	deadline := time.After(time.Until(at.Add(5 * time.Second)))
	for {
		p := waitPass(t, passes, PassWheel, deadline,
			"a run created after the last full load was not fired 5 s after its slot (full loads every 15 s, sweep hourly)")
		if p.Fired[store.StatusQueued] == 0 {
			continue
		}
		var lag float64
		err := db.QueryRow(ctx, `SELECT extract(epoch FROM queued_at - scheduled_at) FROM scheduler.scheduled_execution
			WHERE schedule_id = $1 AND status = 'QUEUED'`, jobID).Scan(&lag)
		if err == nil {
			t.Logf("fired %.3f s after its slot", lag)
			var pass dto.Metric
			if err := m.FirePasses.WithLabelValues("wheel").(prometheus.Histogram).Write(&pass); err != nil ||
				pass.GetHistogram().GetSampleCount() == 0 {
				t.Fatalf("no wheel fire pass in portico_scheduler_fire_pass_seconds (%v)", err)
			}
			return
		}
		t.Fatalf("a wheel pass queued a run, but not job %d's: %v", jobID, err)
	}
}
