package pgtokens_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/portico-io/portico/internal/authn"
	"github.com/portico-io/portico/internal/pgtokens"
	"github.com/portico-io/portico/internal/testdeps"
)

const schema = `CREATE SCHEMA t;
CREATE TABLE t.tokens (
    id text PRIMARY KEY, hash bytea NOT NULL CHECK (length(hash) = 32),
    name text NOT NULL, roles text[] NOT NULL, tenant text,
    created_at timestamptz NOT NULL DEFAULT now(), created_by text NOT NULL,
    expires_at timestamptz, revoked_at timestamptz, revoked_by text, last_used_at timestamptz)`

func table(t *testing.T) *pgtokens.Table {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, testdeps.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, schema); err != nil {
		t.Fatal(err)
	}
	return pgtokens.New(pool, "t.tokens")
}

func TestTokenLifecycle(t *testing.T) {
	ctx := context.Background()
	tab := table(t)
	a, b, op := authn.NewToken(), authn.NewToken(), authn.NewToken()
	exp := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	ta, err := tab.Create(ctx, pgtokens.Token{ID: a.ID, Name: "ci", Roles: []string{"editor"}, Tenant: "acme", CreatedBy: "test", ExpiresAt: &exp}, a.Hash)
	if err != nil {
		t.Fatal(err)
	}
	if ta.Tenant != "acme" || ta.ExpiresAt == nil || !ta.ExpiresAt.Equal(exp) || ta.CreatedAt.IsZero() {
		t.Fatalf("created %+v", ta)
	}
	if _, err := tab.Create(ctx, pgtokens.Token{ID: a.ID, Name: "dup", Roles: []string{"viewer"}, CreatedBy: "test"}, b.Hash); !errors.Is(err, pgtokens.ErrExists) {
		t.Fatalf("duplicate id: %v, want ErrExists", err)
	}
	if _, err := tab.Create(ctx, pgtokens.Token{ID: b.ID, Name: "other", Roles: []string{"viewer"}, Tenant: "globex", CreatedBy: "test"}, b.Hash); err != nil {
		t.Fatal(err)
	}
	stored, err := tab.Ensure(ctx, pgtokens.Token{ID: op.ID, Name: "bootstrap", Roles: []string{"admin"}, CreatedBy: "bootstrap"}, op.Hash)
	if err != nil || !stored {
		t.Fatalf("ensure: %v %v", stored, err)
	}
	if stored, err := tab.Ensure(ctx, pgtokens.Token{ID: op.ID, Name: "again", Roles: []string{"viewer"}, CreatedBy: "x"}, a.Hash); err != nil || stored {
		t.Fatalf("second ensure: stored=%v %v, want an untouched row", stored, err)
	}

	// The tenant filter lists one tenant's tokens only; no filter lists all.
	items, next, err := tab.List(ctx, pgtokens.Filter{Tenant: "acme"}, "", 0)
	if err != nil || len(items) != 1 || items[0].ID != a.ID || next != "" {
		t.Fatalf("acme's tokens: %+v next=%q %v", items, next, err)
	}
	var ids []string
	for cursor := ""; ; {
		page, next, err := tab.List(ctx, pgtokens.Filter{}, cursor, 1)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range page {
			ids = append(ids, it.ID)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if len(ids) != 3 {
		t.Fatalf("paged list: %v", ids)
	}

	// Lookup carries the hash, tenant and expiry the authenticator checks.
	st, err := tab.LookupToken(ctx, a.ID)
	if err != nil || st.Hash != a.Hash || st.Tenant != "acme" || !st.ExpiresAt.Equal(exp) || st.Revoked {
		t.Fatalf("lookup: %+v %v", st, err)
	}
	if _, err := tab.LookupToken(ctx, "nope"); !errors.Is(err, authn.ErrTokenNotFound) {
		t.Fatalf("lookup of a missing id: %v", err)
	}
	at := time.Now().UTC().Truncate(time.Microsecond)
	if err := tab.TouchToken(ctx, a.ID, at); err != nil {
		t.Fatal(err)
	}
	if err := tab.TouchToken(ctx, a.ID, at.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got, _ := tab.Get(ctx, a.ID); got.LastUsedAt == nil || !got.LastUsedAt.Equal(at) {
		t.Fatalf("last used %v, want %v (never moves back)", got.LastUsedAt, at)
	}

	// Revocation is visible to the next lookup; a second revoke keeps the first.
	r1, err := tab.Revoke(ctx, a.ID, "alice")
	if err != nil || r1.RevokedAt == nil || r1.RevokedBy != "alice" {
		t.Fatalf("revoke: %+v %v", r1, err)
	}
	if r2, _ := tab.Revoke(ctx, a.ID, "bob"); r2.RevokedBy != "alice" || !r2.RevokedAt.Equal(*r1.RevokedAt) {
		t.Fatalf("second revoke replaced the first: %+v", r2)
	}
	if st, _ := tab.LookupToken(ctx, a.ID); !st.Revoked {
		t.Fatal("lookup after revoke: not revoked")
	}
	if _, err := tab.Revoke(ctx, "nope", "alice"); !errors.Is(err, pgtokens.ErrNotFound) {
		t.Fatalf("revoke of a missing id: %v", err)
	}
}

func TestNewRefusesATableNameThatIsNotSchemaDotTable(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("New accepted an injectable name")
		}
	}()
	pgtokens.New(nil, "t.tokens; DROP TABLE x")
}
