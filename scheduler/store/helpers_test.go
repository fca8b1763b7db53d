package store

import (
	"context"
	"testing"

	"github.com/portico-io/portico/internal/testdeps"
)

// One-off HTTP job specs of tenant t1, for rows a test inserts straight
// into the tables (the target is never called).
const (
	oneOffSpec = `{"tenant":"t1","schedule":{"type":"ONE_OFF","at":"2026-01-01T00:00:00Z"},
		"target":{"type":"HTTP","http":{"url":"http://127.0.0.1:9/"}}}`
	oneOffRetrySpec = `{"tenant":"t1","schedule":{"type":"ONE_OFF","at":"2026-01-01T00:00:00Z"},
		"target":{"type":"HTTP","http":{"url":"http://127.0.0.1:9/"}},"execution":{"retry":{"maxAttempts":3}}}`
)

// insertDue inserts n jobs of tenant with spec, each with one run
// SCHEDULED a second ago, as a burst is written: straight into the tables.
func insertDue(tb testing.TB, s *Store, tenant, spec string, n int) {
	tb.Helper()
	if _, err := s.pool.Exec(context.Background(), `WITH d AS (INSERT INTO scheduler.schedule_details (tenant, spec, enabled)
			SELECT $3, $1::jsonb, true FROM generate_series(1, $2) RETURNING id)
		INSERT INTO scheduler.scheduled_execution (schedule_id, scheduled_at, status)
		SELECT id, now() - interval '1 second', 'SCHEDULED' FROM d`, spec, n, tenant); err != nil {
		tb.Fatal(err)
	}
}

// openTestStore opens a Store on the test database, closed when t ends.
func openTestStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), Config{DatabaseURL: testdeps.Postgres(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}
