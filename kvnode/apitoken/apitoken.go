// Package apitoken keeps kvnode's API tokens (internal/authn's
// ptk_<id>_<secret> tokens) in the consensus tier, as etcd keeps its users
// and roles in etcd: one key per token in the reserved keyspace Keyspace,
// holding the token's metadata and the SHA-256 of the token, never the
// token itself. Every member of the Raft group holds every token, so any
// node authenticates any token without a network call.
//
// Writes (Create, Revoke) run on the Raft leader; elsewhere they return
// *cp.NotLeaderError and the HTTP layer forwards them. Lookups
// (LookupToken, on every request carrying a ptk_ token) read this node's
// applied state. So a revocation is in force on the leader when Revoke
// returns, and on every other node as soon as it has applied the entry
// (normally within a heartbeat); a node forwarding a revocation waits
// until it has applied it before answering (WaitApplied). A node cut off
// from the leader keeps accepting a token revoked behind the partition
// until it catches up. Expiry needs no write: authn compares ExpiresAt
// with its clock on every request.
//
// Last use is best effort, in memory and per node: replicating it through
// Raft would put a log write behind the first use of every token, every
// minute, on every node. A token's LastUsedAt is the last use the answering
// node saw since it started.
package apitoken

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/portico-io/portico/internal/authn"
	"github.com/portico-io/portico/kvnode/cp"
)

// Keyspace is the consensus tier keyspace holding the tokens. It is a valid
// keyspace name, reserved: no HTTP data route may name it (kvnode/api
// refuses it under /v1/kv/ and /v1/cp/, in batches, transactions and
// watches, and as a --cp-keyspaces entry), so the hashes are reachable only
// through this package.
const Keyspace = "__tokens"

// Page sizes of List.
const (
	DefaultPageSize = authn.DefaultTokenPage
	MaxPageSize     = authn.MaxTokenPage
)

// Token is a token's metadata as the admin API shows it: the control
// plane's token fields plus Keyspaces, never the secret or its hash.
// LastUsedAt is the last use this node saw (see the package doc).
type Token = authn.TokenInfo

// record is a token as stored in Keyspace.
type record struct {
	Token
	Hash []byte `json:"hash"`
}

// Engine is the consensus tier as the store uses it; *cp.Group is one.
type Engine interface {
	Get(ctx context.Context, keyspace, key string, stale bool) (cp.Entry, error)
	Put(ctx context.Context, keyspace, key string, value []byte, ifRevision *uint64, lease uint64) (cp.Entry, error)
	LocalGet(keyspace, key string) (cp.Entry, bool)
	LocalScan(keyspace string) []cp.KeyEntry
	WaitApplied(ctx context.Context, rev uint64) error
}

var _ Engine = (*cp.Group)(nil)

// Store is the token table of one node. Safe for concurrent use.
type Store struct {
	e   Engine
	now func() time.Time

	mu       sync.Mutex
	lastUsed map[string]time.Time // token id → last use seen here
}

var _ authn.TokenStore = (*Store)(nil)

// New returns the store kept in e; now stamps creations and revocations
// (nil: time.Now).
func New(e Engine, now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{e: e, now: now, lastUsed: map[string]time.Time{}}
}

// maxRevokeAttempts bounds Revoke's read-modify-write retries when another
// change to the same token lands between its read and its write.
const maxRevokeAttempts = 3

// Create stores t (CreatedAt stamped when zero) with the token's hash and
// returns it with the revision it was written at. Leader only
// (*cp.NotLeaderError otherwise); ErrExists if the id is taken. The
// caller validates t (name, roles, keyspaces, expiry).
func (s *Store) Create(ctx context.Context, t Token, hash [32]byte) (Token, uint64, error) {
	if t.CreatedAt.IsZero() {
		t.CreatedAt = s.now().UTC()
	}
	t.RevokedAt, t.RevokedBy, t.LastUsedAt = nil, "", nil
	b, err := json.Marshal(record{Token: t, Hash: hash[:]})
	if err != nil {
		return Token{}, 0, fmt.Errorf("apitoken: encode: %w", err)
	}
	var absent uint64
	e, err := s.e.Put(ctx, Keyspace, t.ID, b, &absent, 0)
	if errors.Is(err, cp.ErrConflict) {
		return Token{}, 0, fmt.Errorf("%w: %s", ErrExists, t.ID)
	}
	if err != nil {
		return Token{}, 0, err
	}
	return t, e.Revision, nil
}

// Revoke marks the token revoked by by and returns it with the revision
// the revocation was written at; revoking twice keeps the first revocation
// (and returns the revision of that write). Leader only
// (*cp.NotLeaderError otherwise); ErrNotFound for an unknown id.
func (s *Store) Revoke(ctx context.Context, id, by string) (Token, uint64, error) {
	for attempt := 1; ; attempt++ {
		e, err := s.e.Get(ctx, Keyspace, id, false)
		if errors.Is(err, cp.ErrNotFound) {
			return Token{}, 0, fmt.Errorf("%w: %s", ErrNotFound, id)
		}
		if err != nil {
			return Token{}, 0, err
		}
		rec, err := decode(e.Value)
		if err != nil {
			return Token{}, 0, err
		}
		if rec.RevokedAt != nil {
			return s.withLastUsed(rec.Token), e.Revision, nil
		}
		at := s.now().UTC()
		rec.RevokedAt, rec.RevokedBy = &at, by
		b, err := json.Marshal(rec)
		if err != nil {
			return Token{}, 0, fmt.Errorf("apitoken: encode: %w", err)
		}
		cur := e.Revision
		w, err := s.e.Put(ctx, Keyspace, id, b, &cur, 0)
		if errors.Is(err, cp.ErrConflict) && attempt < maxRevokeAttempts {
			continue
		}
		if err != nil {
			return Token{}, 0, err
		}
		return s.withLastUsed(rec.Token), w.Revision, nil
	}
}

// Get returns the token as this node has applied it; ErrNotFound if absent.
func (s *Store) Get(id string) (Token, error) {
	rec, err := s.local(id)
	if err != nil {
		return Token{}, err
	}
	return s.withLastUsed(rec.Token), nil
}

// List returns up to limit tokens (DefaultPageSize when <= 0, at most
// MaxPageSize) with ids after the cursor, by id, as this node has applied
// them; next is the cursor of the following page, "" on the last one.
func (s *Store) List(after string, limit int) (items []Token, next string, err error) {
	switch {
	case limit <= 0:
		limit = DefaultPageSize
	case limit > MaxPageSize:
		limit = MaxPageSize
	}
	all := s.e.LocalScan(Keyspace)
	i := sort.Search(len(all), func(i int) bool { return all[i].Key > after })
	items = []Token{}
	for _, ke := range all[i:] {
		if len(items) == limit {
			return items, items[limit-1].ID, nil
		}
		rec, err := decode(ke.Value)
		if err != nil {
			return nil, "", err
		}
		items = append(items, s.withLastUsed(rec.Token))
	}
	return items, "", nil
}

// WaitApplied waits until this node has applied revision rev (one Create or
// Revoke on the leader answered with), so its lookups reflect that write.
func (s *Store) WaitApplied(ctx context.Context, rev uint64) error {
	return s.e.WaitApplied(ctx, rev)
}

// LookupToken implements authn.TokenStore from this node's applied state.
func (s *Store) LookupToken(_ context.Context, id string) (authn.StoredToken, error) {
	rec, err := s.local(id)
	if errors.Is(err, ErrNotFound) {
		return authn.StoredToken{}, authn.ErrTokenNotFound
	}
	if err != nil {
		return authn.StoredToken{}, err
	}
	st := authn.StoredToken{ID: rec.ID, Name: rec.Name, Roles: rec.Roles, Keyspaces: rec.Keyspaces, Revoked: rec.RevokedAt != nil}
	if len(rec.Hash) != len(st.Hash) {
		return authn.StoredToken{}, fmt.Errorf("%w: token %s: hash of %d bytes", ErrCorrupt, id, len(rec.Hash))
	}
	copy(st.Hash[:], rec.Hash)
	if rec.ExpiresAt != nil {
		st.ExpiresAt = *rec.ExpiresAt
	}
	s.mu.Lock()
	st.LastUsed = s.lastUsed[id]
	s.mu.Unlock()
	return st, nil
}

// TouchToken implements authn.TokenStore: it records the use on this node
// only (see the package doc).
func (s *Store) TouchToken(_ context.Context, id string, at time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if at.After(s.lastUsed[id]) {
		s.lastUsed[id] = at
	}
	return nil
}

func (s *Store) local(id string) (record, error) {
	e, ok := s.e.LocalGet(Keyspace, id)
	if !ok {
		return record{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return decode(e.Value)
}

func (s *Store) withLastUsed(t Token) Token {
	s.mu.Lock()
	at, ok := s.lastUsed[t.ID]
	s.mu.Unlock()
	if ok {
		t.LastUsedAt = &at
	}
	return t
}

func decode(b []byte) (record, error) {
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil {
		return record{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return rec, nil
}
