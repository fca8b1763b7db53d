package runner

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/scheduler/jobspec"
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
	if err := spec.Normalize(nil); err != nil {
		t.Fatal(err)
	}
	job, _, err := st.CreateJob(ctx, spec, "k", "h")
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{Store: st, Tick: time.Hour, Lookahead: time.Minute})
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
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for n := 0; n < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("%d slots fired in 10 s with the wheel waking 400 ms early; want 3", n)
		}
		<-tick.C
		_ = db.QueryRow(ctx, `SELECT count(*) FROM scheduler.scheduled_execution WHERE schedule_id = $1 AND status = 'QUEUED'`, job.ID).Scan(&n)
	}
}
