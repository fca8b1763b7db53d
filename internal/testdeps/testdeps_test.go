package testdeps

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestPostgresFreshDatabase(t *testing.T) {
	url := Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var n int
	if err := c.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("fresh database has %d tables", n)
	}
}

func TestPostgresUnreachableSkips(t *testing.T) {
	t.Setenv("CI", "")
	t.Setenv("PORTICO_DATABASE_URL", "postgres://postgres@127.0.0.1:1/portico?sslmode=disable")
	var skipped bool
	// Skip calls runtime.Goexit, so run it in a subtest and look at the outcome.
	t.Run("inner", func(t *testing.T) {
		defer func() { skipped = t.Skipped() }()
		Postgres(t)
	})
	if !skipped {
		t.Fatal("unreachable Postgres outside CI should skip")
	}
}

func TestRedis(t *testing.T) {
	if addr := Redis(t); addr == "" {
		t.Fatal("empty address")
	}
}
