// Package pgtokens keeps API tokens (internal/authn's ptk_ tokens) in a
// PostgreSQL table: never the token, only its SHA-256, with name, roles,
// an optional tenant, creator, expiry, revocation and last use. The control
// plane and the scheduler each own one such table in their schema
// (the columns are in Columns' comment); a Table is the only code that
// reads or writes it.
//
// Lookups read the row on every request, so a revocation is in force on
// the next request on every replica.
package pgtokens

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/portico-io/portico/internal/authn"
	"github.com/portico-io/portico/internal/authz"
)

var (
	// ErrNotFound: no token with that id (for this tenant).
	ErrNotFound = errors.New("pgtokens: no such token")
	// ErrExists: the id is taken (a random 64-bit id: in practice never).
	ErrExists = errors.New("pgtokens: token id exists")
)

// Page sizes of List.
const (
	DefaultPageSize = authn.DefaultTokenPage
	MaxPageSize     = authn.MaxTokenPage
)

// Token is a token as stored and shown: never the secret (Keyspaces is
// never set: SQL tables hold operator and tenant tokens).
type Token = authn.TokenInfo

// Table is one token table; safe for concurrent use.
type Table struct {
	pool *pgxpool.Pool
	name string
}

var _ authn.TokenStore = (*Table)(nil)

var tableName = regexp.MustCompile(`^[a-z_][a-z0-9_]*\.[a-z_][a-z0-9_]*$`)

// New returns the token table name (schema.table) in pool. The table has
// the columns
//
//	id text PRIMARY KEY, hash bytea NOT NULL CHECK (length(hash) = 32),
//	name text NOT NULL, roles text[] NOT NULL, tenant text,
//	created_at timestamptz NOT NULL DEFAULT now(), created_by text NOT NULL,
//	expires_at timestamptz, revoked_at timestamptz, revoked_by text,
//	last_used_at timestamptz
//
// and is created by its owner's migrations. name is a constant of the
// caller's, never input; New panics on anything but schema.table.
func New(pool *pgxpool.Pool, name string) *Table {
	if !tableName.MatchString(name) {
		panic("pgtokens: bad table name " + name)
	}
	return &Table{pool: pool, name: name}
}

const columns = `id, hash, name, roles, coalesce(tenant, ''), created_at, created_by, expires_at, revoked_at, coalesce(revoked_by, ''), last_used_at`

func scan(row pgx.Row) (Token, error) {
	t, _, err := scanHash(row)
	return t, err
}

// scanHash scans a row with the hash, which only LookupToken needs.
func scanHash(row pgx.Row) (Token, []byte, error) {
	var t Token
	var hash []byte
	err := row.Scan(&t.ID, &hash, &t.Name, &t.Roles, &t.Tenant, &t.CreatedAt, &t.CreatedBy, &t.ExpiresAt, &t.RevokedAt, &t.RevokedBy, &t.LastUsedAt)
	return t, hash, err
}

// nullable stores "" as NULL (no tenant).
func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Create stores a new token with the hash of its secret (authn.NewToken)
// and returns it as stored. ErrExists if the id is taken.
func (t *Table) Create(ctx context.Context, tok Token, hash [32]byte) (Token, error) {
	out, err := scan(t.pool.QueryRow(ctx, `INSERT INTO `+t.name+` (id, hash, name, roles, tenant, created_by, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING `+columns,
		tok.ID, hash[:], tok.Name, tok.Roles, nullable(tok.Tenant), tok.CreatedBy, tok.ExpiresAt))
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return Token{}, ErrExists
	}
	if err != nil {
		return Token{}, fmt.Errorf("pgtokens: create: %w", err)
	}
	return out, nil
}

// Ensure stores tok unless a token with its id exists, and reports whether
// it stored it: the bootstrap admin token, which every start registers
// from the same file. An existing row (perhaps revoked) is left as it is.
func (t *Table) Ensure(ctx context.Context, tok Token, hash [32]byte) (bool, error) {
	tag, err := t.pool.Exec(ctx, `INSERT INTO `+t.name+` (id, hash, name, roles, tenant, created_by, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO NOTHING`,
		tok.ID, hash[:], tok.Name, tok.Roles, nullable(tok.Tenant), tok.CreatedBy, tok.ExpiresAt)
	if err != nil {
		return false, fmt.Errorf("pgtokens: ensure: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// Get returns token id, or ErrNotFound.
func (t *Table) Get(ctx context.Context, id string) (Token, error) {
	tok, err := scan(t.pool.QueryRow(ctx, `SELECT `+columns+` FROM `+t.name+` WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Token{}, ErrNotFound
	}
	if err != nil {
		return Token{}, fmt.Errorf("pgtokens: get: %w", err)
	}
	return tok, nil
}

// Filter narrows List.
type Filter struct {
	// Tenant, when set, lists only that tenant's tokens.
	Tenant string
}

// List lists tokens by id after the cursor; next is "" on the last page.
// limit is clamped to (0, MaxPageSize]; zero means DefaultPageSize.
func (t *Table) List(ctx context.Context, f Filter, after string, limit int) (items []Token, next string, err error) {
	switch {
	case limit <= 0:
		limit = DefaultPageSize
	case limit > MaxPageSize:
		limit = MaxPageSize
	}
	rows, err := t.pool.Query(ctx, `SELECT `+columns+` FROM `+t.name+`
		WHERE id > $1 AND ($2 = '' OR tenant = $2) ORDER BY id LIMIT $3`, after, f.Tenant, limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("pgtokens: list: %w", err)
	}
	items, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Token, error) { return scan(row) })
	if err != nil {
		return nil, "", fmt.Errorf("pgtokens: list: %w", err)
	}
	if len(items) > limit {
		items = items[:limit]
		next = items[limit-1].ID
	}
	return items, next, nil
}

// Revoke marks token id revoked by by (the next request with it is
// refused) and returns it; revoking twice keeps the first revocation.
// ErrNotFound if there is no such token.
func (t *Table) Revoke(ctx context.Context, id, by string) (Token, error) {
	tok, err := scan(t.pool.QueryRow(ctx, `UPDATE `+t.name+`
		SET revoked_at = coalesce(revoked_at, now()), revoked_by = coalesce(revoked_by, $2)
		WHERE id = $1 RETURNING `+columns, id, by))
	if errors.Is(err, pgx.ErrNoRows) {
		return Token{}, ErrNotFound
	}
	if err != nil {
		return Token{}, fmt.Errorf("pgtokens: revoke: %w", err)
	}
	return tok, nil
}

// LookupToken implements authn.TokenStore.
func (t *Table) LookupToken(ctx context.Context, id string) (authn.StoredToken, error) {
	tok, hash, err := scanHash(t.pool.QueryRow(ctx, `SELECT `+columns+` FROM `+t.name+` WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return authn.StoredToken{}, authn.ErrTokenNotFound
	}
	if err != nil {
		return authn.StoredToken{}, fmt.Errorf("pgtokens: lookup: %w", err)
	}
	st := authn.StoredToken{ID: tok.ID, Name: tok.Name, Roles: tok.Roles, Tenant: tok.Tenant, Revoked: tok.RevokedAt != nil}
	copy(st.Hash[:], hash)
	if tok.ExpiresAt != nil {
		st.ExpiresAt = *tok.ExpiresAt
	}
	if tok.LastUsedAt != nil {
		st.LastUsed = *tok.LastUsedAt
	}
	return st, nil
}

// TouchToken implements authn.TokenStore: last use only moves forward.
func (t *Table) TouchToken(ctx context.Context, id string, at time.Time) error {
	if _, err := t.pool.Exec(ctx, `UPDATE `+t.name+` SET last_used_at = greatest(last_used_at, $2) WHERE id = $1`, id, at); err != nil {
		return fmt.Errorf("pgtokens: touch: %w", err)
	}
	return nil
}

// BootstrapName is the name of the bootstrap admin token.
const BootstrapName = "bootstrap-admin"

// Bootstrap makes the bootstrap admin token file when it is missing
// (authn.BootstrapToken: 0600, never overwritten) and registers its hash
// as an admin token without a tenant, so the first operator can get in.
// created says the file was made now (show the token once); stored says
// the row was added now. A row that exists, revoked or not, is left as it
// is: revoking the bootstrap token survives restarts.
func (t *Table) Bootstrap(ctx context.Context, file string) (tok authn.IssuedToken, created, stored bool, err error) {
	tok, created, err = authn.BootstrapToken(file)
	if err != nil {
		return authn.IssuedToken{}, false, false, err
	}
	stored, err = t.Ensure(ctx, Token{ID: tok.ID, Name: BootstrapName, Roles: []string{string(authz.Admin)}, CreatedBy: "bootstrap"}, tok.Hash)
	return tok, created, stored, err
}
