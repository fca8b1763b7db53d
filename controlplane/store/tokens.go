package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/portico-io/portico/internal/authn"
)

// Token is an operator API token as stored: never the token itself, only
// its SHA-256.
type Token struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	Roles      []string   `json:"roles"`
	CreatedAt  time.Time  `json:"createdAt"`
	CreatedBy  string     `json:"createdBy"`
	ExpiresAt  *time.Time `json:"expiresAt,omitempty"`
	RevokedAt  *time.Time `json:"revokedAt,omitempty"`
	RevokedBy  string     `json:"revokedBy,omitempty"`
	LastUsedAt *time.Time `json:"lastUsedAt,omitempty"`

	hash []byte
}

var _ authn.TokenStore = (*Store)(nil)

const tokenColumns = `id, hash, name, roles, created_at, created_by, expires_at, revoked_at, coalesce(revoked_by, ''), last_used_at`

func scanToken(row pgx.Row) (Token, error) {
	var t Token
	err := row.Scan(&t.ID, &t.hash, &t.Name, &t.Roles, &t.CreatedAt, &t.CreatedBy, &t.ExpiresAt, &t.RevokedAt, &t.RevokedBy, &t.LastUsedAt)
	return t, err
}

// CreateToken stores a new token (its hash, from authn.NewToken).
// ErrAlreadyExists if the id is taken (a random 64-bit id: in practice never).
func (s *Store) CreateToken(ctx context.Context, t Token, hash [32]byte) (Token, error) {
	row := s.pool.QueryRow(ctx, `INSERT INTO controlplane.api_tokens (id, hash, name, roles, created_by, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6) RETURNING `+tokenColumns, t.ID, hash[:], t.Name, t.Roles, t.CreatedBy, t.ExpiresAt)
	out, err := scanToken(row)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return Token{}, ErrAlreadyExists
	}
	if err != nil {
		return Token{}, fmt.Errorf("store: create token: %w", err)
	}
	return out, nil
}

// EnsureToken stores t unless a token with its id exists, and returns
// whether it stored it (the bootstrap admin token, created by every start
// from the same file).
func (s *Store) EnsureToken(ctx context.Context, t Token, hash [32]byte) (bool, error) {
	tag, err := s.pool.Exec(ctx, `INSERT INTO controlplane.api_tokens (id, hash, name, roles, created_by, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO NOTHING`, t.ID, hash[:], t.Name, t.Roles, t.CreatedBy, t.ExpiresAt)
	if err != nil {
		return false, fmt.Errorf("store: ensure token: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// GetToken returns a token by id, or ErrNotFound.
func (s *Store) GetToken(ctx context.Context, id string) (Token, error) {
	t, err := scanToken(s.pool.QueryRow(ctx, `SELECT `+tokenColumns+` FROM controlplane.api_tokens WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Token{}, ErrNotFound
	}
	if err != nil {
		return Token{}, fmt.Errorf("store: token: %w", err)
	}
	return t, nil
}

// ListTokens lists tokens by id after the cursor; next is "" on the last page.
func (s *Store) ListTokens(ctx context.Context, after string, limit int) (items []Token, next string, err error) {
	limit = pageSize(limit)
	rows, err := s.pool.Query(ctx, `SELECT `+tokenColumns+` FROM controlplane.api_tokens WHERE id > $1 ORDER BY id LIMIT $2`, after, limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("store: tokens: %w", err)
	}
	items, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Token, error) { return scanToken(row) })
	if err != nil {
		return nil, "", fmt.Errorf("store: tokens: %w", err)
	}
	if len(items) > limit {
		items = items[:limit]
		next = items[limit-1].ID
	}
	return items, next, nil
}

// RevokeToken marks a token revoked (the next request with it is refused)
// and returns it; revoking twice keeps the first revocation. ErrNotFound
// if there is no such token.
func (s *Store) RevokeToken(ctx context.Context, id, by string) (Token, error) {
	t, err := scanToken(s.pool.QueryRow(ctx, `UPDATE controlplane.api_tokens
		SET revoked_at = coalesce(revoked_at, now()), revoked_by = coalesce(revoked_by, $2)
		WHERE id = $1 RETURNING `+tokenColumns, id, by))
	if errors.Is(err, pgx.ErrNoRows) {
		return Token{}, ErrNotFound
	}
	if err != nil {
		return Token{}, fmt.Errorf("store: revoke token: %w", err)
	}
	return t, nil
}

// LookupToken implements authn.TokenStore: every request reads the row, so
// a revocation is in force on the next request, on every replica.
func (s *Store) LookupToken(ctx context.Context, id string) (authn.StoredToken, error) {
	t, err := s.GetToken(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return authn.StoredToken{}, authn.ErrTokenNotFound
	}
	if err != nil {
		return authn.StoredToken{}, err
	}
	st := authn.StoredToken{ID: t.ID, Name: t.Name, Roles: t.Roles, Revoked: t.RevokedAt != nil}
	copy(st.Hash[:], t.hash)
	if t.ExpiresAt != nil {
		st.ExpiresAt = *t.ExpiresAt
	}
	if t.LastUsedAt != nil {
		st.LastUsed = *t.LastUsedAt
	}
	return st, nil
}

// TouchToken implements authn.TokenStore.
func (s *Store) TouchToken(ctx context.Context, id string, at time.Time) error {
	if _, err := s.pool.Exec(ctx, `UPDATE controlplane.api_tokens SET last_used_at = greatest(last_used_at, $2) WHERE id = $1`, id, at); err != nil {
		return fmt.Errorf("store: touch token: %w", err)
	}
	return nil
}
