package store

import (
	"context"
	"errors"
	"time"

	"github.com/portico-io/portico/internal/authn"
	"github.com/portico-io/portico/internal/pgtokens"
)

// Token is an operator API token as stored: never the token itself, only
// its SHA-256 (table controlplane.api_tokens, kept by internal/pgtokens).
type Token = pgtokens.Token

// tokenTable is the table's name for pgtokens.
const tokenTable = "controlplane.api_tokens"

var _ authn.TokenStore = (*Store)(nil)

// tokenErr maps pgtokens' errors to the store's.
func tokenErr(err error) error {
	switch {
	case errors.Is(err, pgtokens.ErrNotFound):
		return ErrNotFound
	case errors.Is(err, pgtokens.ErrExists):
		return ErrAlreadyExists
	}
	return err
}

// CreateToken stores a new token (its hash, from authn.NewToken).
// ErrAlreadyExists if the id is taken (a random 64-bit id: in practice never).
func (s *Store) CreateToken(ctx context.Context, t Token, hash [32]byte) (Token, error) {
	out, err := s.tokens.Create(ctx, t, hash)
	return out, tokenErr(err)
}

// EnsureToken stores t unless a token with its id exists, and returns
// whether it stored it (the bootstrap admin token, created by every start
// from the same file).
func (s *Store) EnsureToken(ctx context.Context, t Token, hash [32]byte) (bool, error) {
	return s.tokens.Ensure(ctx, t, hash)
}

// BootstrapToken makes the bootstrap admin token file when missing and
// registers its hash (pgtokens.Table.Bootstrap).
func (s *Store) BootstrapToken(ctx context.Context, file string) (tok authn.IssuedToken, created, stored bool, err error) {
	return s.tokens.Bootstrap(ctx, file)
}

// GetToken returns a token by id, or ErrNotFound.
func (s *Store) GetToken(ctx context.Context, id string) (Token, error) {
	t, err := s.tokens.Get(ctx, id)
	return t, tokenErr(err)
}

// ListTokens lists tokens by id after the cursor; next is "" on the last page.
func (s *Store) ListTokens(ctx context.Context, after string, limit int) (items []Token, next string, err error) {
	return s.tokens.List(ctx, pgtokens.Filter{}, after, pageSize(limit))
}

// RevokeToken marks a token revoked (the next request with it is refused)
// and returns it; revoking twice keeps the first revocation. ErrNotFound
// if there is no such token.
func (s *Store) RevokeToken(ctx context.Context, id, by string) (Token, error) {
	t, err := s.tokens.Revoke(ctx, id, by)
	return t, tokenErr(err)
}

// LookupToken implements authn.TokenStore: every request reads the row, so
// a revocation is in force on the next request, on every replica.
func (s *Store) LookupToken(ctx context.Context, id string) (authn.StoredToken, error) {
	return s.tokens.LookupToken(ctx, id)
}

// TouchToken implements authn.TokenStore.
func (s *Store) TouchToken(ctx context.Context, id string, at time.Time) error {
	return s.tokens.TouchToken(ctx, id, at)
}
