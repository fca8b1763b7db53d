package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestClaimReservingAndHeartbeatMany: one claim takes every HIGH run it
// has room for and at most low of the others; a batched heartbeat extends
// the leases it holds and answers the others as Heartbeat would.
func TestClaimReservingAndHeartbeatMany(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	spec := oneOffSpec
	// Two HIGH (priority 0) and five NORMAL runs, all ready.
	if _, err := s.pool.Exec(ctx, `WITH d AS (INSERT INTO scheduler.schedule_details (tenant, spec, enabled)
			SELECT 't1', $1::jsonb, true FROM generate_series(1, 7) RETURNING id)
		INSERT INTO scheduler.scheduled_execution (schedule_id, scheduled_at, status, tenant, priority)
		SELECT id, now() - interval '1 second', 'QUEUED', 't1', CASE WHEN id <= 2 THEN 0 ELSE 1 END FROM d`, spec); err != nil {
		t.Fatal(err)
	}
	got, err := s.ClaimReserving(ctx, "w", 5, 2, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var high int
	for _, l := range got {
		if l.ScheduleID <= 2 {
			high++
		}
	}
	if len(got) != 4 || high != 2 {
		t.Fatalf("claimed %d runs (%d HIGH), want both HIGH runs and 2 NORMAL", len(got), high)
	}
	if more, err := s.ClaimReserving(ctx, "w", 3, 0, time.Minute); err != nil || len(more) != 0 {
		t.Fatalf("HIGH-only room took %d runs (%v), want none: no HIGH run is left", len(more), err)
	}
	if rest, err := s.ClaimReserving(ctx, "w", 2, 5, time.Minute); err != nil || len(rest) != 2 {
		t.Fatalf("unreserved claim took %d runs (%v), want 2", len(rest), err)
	}

	// Heartbeats: a held lease, a stale token, a cancelled run.
	held, stale, cancelled := got[0], got[1], got[2]
	if _, err := s.CancelRun(ctx, cancelled.RunID); err != nil {
		t.Fatal(err)
	}
	var before time.Time
	if err := s.pool.QueryRow(ctx, `SELECT lease_expires_at FROM scheduler.scheduled_execution WHERE id = $1`, held.RunID).Scan(&before); err != nil {
		t.Fatal(err)
	}
	errs, err := s.HeartbeatMany(ctx, []int64{held.RunID, stale.RunID, cancelled.RunID},
		[]int64{held.Token, stale.Token - 1, cancelled.Token}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if errs[0] != nil || !errors.Is(errs[1], ErrLeaseLost) || !errors.Is(errs[2], ErrCancelled) {
		t.Fatalf("heartbeat errors %v, want [nil ErrLeaseLost ErrCancelled]", errs)
	}
	var after time.Time
	if err := s.pool.QueryRow(ctx, `SELECT lease_expires_at FROM scheduler.scheduled_execution WHERE id = $1`, held.RunID).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after.Sub(before) < 50*time.Minute {
		t.Fatalf("lease moved from %v to %v, want about an hour on", before, after)
	}
}
