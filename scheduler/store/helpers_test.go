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
