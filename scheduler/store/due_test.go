package store

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"
)

// DueRuns answers in one statement: the due SCHEDULED runs of the shards
// asked for (by time, or above an id), with the database's now and the
// highest run id — also when no run is due, and on an empty table.
func TestDueRunsListsDueRunsWithNowAndHighestID(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	refs, now, maxID, err := s.DueRuns(ctx, nil, time.Minute, 100, 0)
	if err != nil || len(refs) != 0 || maxID != 0 || time.Since(now).Abs() > time.Minute {
		t.Fatalf("empty table: %v %v %d %v", refs, now, maxID, err)
	}
	insertDue(t, s, "t", benchSpec, 6) // due a second ago
	var ids []int64
	var jobs []int64
	rows, _ := s.pool.Query(ctx, `SELECT id, schedule_id FROM scheduler.scheduled_execution ORDER BY id`)
	for rows.Next() {
		var id, job int64
		if err := rows.Scan(&id, &job); err != nil {
			t.Fatal(err)
		}
		ids, jobs = append(ids, id), append(jobs, job)
	}
	if rows.Err() != nil || len(ids) != 6 {
		t.Fatalf("runs: %v %v", ids, rows.Err())
	}
	// ids[4] is due in an hour, ids[5] is no longer SCHEDULED.
	if _, err := s.pool.Exec(ctx, `UPDATE scheduler.scheduled_execution SET scheduled_at = now() + interval '1 hour' WHERE id = $1;`, ids[4]); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `UPDATE scheduler.scheduled_execution SET status = 'QUEUED' WHERE id = $1`, ids[5]); err != nil {
		t.Fatal(err)
	}
	got := func(refs []DueRef) []int64 {
		var out []int64
		for _, r := range refs {
			out = append(out, r.ID)
		}
		slices.Sort(out)
		return out
	}
	refs, now, maxID, err = s.DueRuns(ctx, nil, time.Minute, 100, 0)
	if err != nil || !slices.Equal(got(refs), ids[:4]) || maxID != ids[5] || time.Since(now).Abs() > time.Minute {
		t.Fatalf("due within a minute: %v (want %v), max %d, %v", got(refs), ids[:4], maxID, err)
	}
	if refs, _, _, err = s.DueRuns(ctx, nil, 2*time.Hour, 100, 0); err != nil || !slices.Equal(got(refs), ids[:5]) {
		t.Fatalf("due within two hours: %v, %v", got(refs), err)
	}
	if refs, _, _, err = s.DueRuns(ctx, nil, time.Minute, 2, 0); err != nil || len(refs) != 2 {
		t.Fatalf("limit 2: %v, %v", got(refs), err)
	}
	if refs, _, maxID, err = s.DueRuns(ctx, nil, time.Minute, 100, ids[1]); err != nil || !slices.Equal(got(refs), ids[2:4]) || maxID != ids[5] {
		t.Fatalf("above id %d: %v, max %d, %v", ids[1], got(refs), maxID, err)
	}
	if refs, _, maxID, err = s.DueRuns(ctx, nil, time.Minute, 100, ids[5]); err != nil || len(refs) != 0 || maxID != ids[5] {
		t.Fatalf("above the highest id: %v, max %d, %v", got(refs), maxID, err)
	}
	shard := int16(jobs[0] % Shards)
	refs, _, _, err = s.DueRuns(ctx, []int16{shard}, time.Minute, 100, 0)
	if err != nil || len(refs) == 0 {
		t.Fatalf("shard %d: %v, %v", shard, got(refs), err)
	}
	for _, r := range refs {
		if i := slices.Index(ids, r.ID); i < 0 || int16(jobs[i]%Shards) != shard {
			t.Fatalf("shard %d listed run %d of another shard", shard, r.ID)
		}
	}
}

// The store's connections say whose they are in pg_stat_activity, the
// claim pool's apart; an application_name in the DSN is kept.
func TestConnectionsAreNamed(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	names := func(s *Store) (main, claims string) {
		if err := s.pool.QueryRow(ctx, `SELECT current_setting('application_name')`).Scan(&main); err != nil {
			t.Fatal(err)
		}
		if err := s.planned.QueryRow(ctx, `SELECT current_setting('application_name')`).Scan(&claims); err != nil {
			t.Fatal(err)
		}
		return main, claims
	}
	if m, c := names(s); m != AppName || c != AppName+ClaimPoolSuffix {
		t.Fatalf("names %q, %q", m, c)
	}
	url := s.pool.Config().ConnString()
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	named, err := Open(ctx, Config{DatabaseURL: url + sep + "application_name=sched-eu"})
	if err != nil {
		t.Fatal(err)
	}
	defer named.Close()
	if m, c := names(named); m != "sched-eu" || c != "sched-eu"+ClaimPoolSuffix {
		t.Fatalf("names with the DSN's: %q, %q", m, c)
	}
}
