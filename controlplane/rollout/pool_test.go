package rollout

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

func openPool(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(testCtx(t), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}
