package store

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestFireRuns: the timing wheel's fire takes exactly the runs it names
// that are due, still SCHEDULED and in a held shard, by primary key, and
// reports the database clock even when it fired nothing.
func TestFireRuns(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	spec := oneOffSpec
	// Eight jobs: slots alternate past and an hour ahead.
	rows, _ := s.pool.Query(ctx, `WITH d AS (INSERT INTO scheduler.schedule_details (tenant, spec, enabled)
			SELECT 't1', $1::jsonb, true FROM generate_series(1, 8) RETURNING id)
		INSERT INTO scheduler.scheduled_execution (schedule_id, scheduled_at, status)
		SELECT id, CASE WHEN id % 2 = 0 THEN now() - interval '1 second' ELSE now() + interval '1 hour' END, 'SCHEDULED' FROM d
		RETURNING id, schedule_id, scheduled_at`, spec)
	type run struct {
		ID, Job int64
		At      time.Time
	}
	runs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[run])
	if err != nil || len(runs) != 8 {
		t.Fatalf("%d runs, %v", len(runs), err)
	}
	// Hold the shards of all jobs but the last due one.
	var held []ShardLease
	var want []int64
	var ids []int64
	lastDue := int64(0)
	for _, r := range runs {
		ids = append(ids, r.ID)
		if r.Job%2 == 0 {
			lastDue = r.Job
		}
	}
	for _, r := range runs {
		if r.Job == lastDue {
			continue
		}
		held = append(held, ShardLease{Shard: int16(r.Job % Shards), Epoch: 3})
		if r.Job%2 == 0 {
			want = append(want, r.ID)
		}
	}
	for _, h := range held {
		if _, err := s.pool.Exec(ctx, `UPDATE scheduler.shard_lease SET owner = 'me', epoch = 3,
			expires_at = now() + interval '1 hour' WHERE shard = $1`, h.Shard); err != nil {
			t.Fatal(err)
		}
	}
	queue := func(DueRun, time.Time) FireDecision { return FireDecision{Status: StatusQueued} }
	res, err := s.FireRuns(ctx, "me", held, ids, queue)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(res.IDs)
	if !slices.Equal(res.IDs, want) || res.Claimed != len(want) || res.Now.IsZero() {
		t.Fatalf("fired %v (claimed %d, now %v), want %v: due runs of held shards only", res.IDs, res.Claimed, res.Now, want)
	}
	res, err = s.FireRuns(ctx, "me", held, ids, queue)
	if err != nil || res.Claimed != 0 || res.Now.IsZero() {
		t.Fatalf("second fire: %+v, %v: want nothing fired and the database clock", res, err)
	}
	for _, r := range runs {
		if r.Job%2 == 1 && !r.At.After(res.Now) {
			t.Fatalf("run %d at %v should be ahead of the database clock %v", r.ID, r.At, res.Now)
		}
	}
	var scheduled int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM scheduler.scheduled_execution WHERE status = 'SCHEDULED'`).
		Scan(&scheduled); err != nil || scheduled != 8-len(want) {
		t.Fatalf("%d runs still SCHEDULED, want %d (%v)", scheduled, 8-len(want), err)
	}
}
