package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/portico-io/portico/controlplane/spec"
)

// Page size bounds for List, ListAPIKeys, Versions and Audit.
const (
	DefaultPageSize = 100
	MaxPageSize     = 1000
)

// Item is a resource with its ETag.
type Item struct {
	Resource spec.Resource
	ETag     string
}

// VersionInfo describes one config version.
type VersionInfo struct {
	Version    int64     `json:"version"`
	CreatedAt  time.Time `json:"createdAt"`
	Author     string    `json:"author"`
	Reason     string    `json:"reason"`
	RollbackOf *int64    `json:"rollbackOf,omitempty"`
	// Changes lists what the version changed, its first MaxPageSize
	// changes (only filled by Version); ChangesNext, when not 0, is the
	// cursor of the rest (VersionChanges).
	Changes     []ChangeRef `json:"changes,omitempty"`
	ChangesNext int64       `json:"-"`
}

// ChangeRef names one resource a version changed, and how.
type ChangeRef struct {
	Kind   spec.Kind `json:"kind"`
	Name   string    `json:"name"`
	Action string    `json:"action"`
}

// AuditEntry is one audit row. Diff is {"before": ..., "after": ...} with the
// resource JSON (null when absent); it never holds secrets.
type AuditEntry struct {
	ID      int64           `json:"id"`
	Version int64           `json:"version"`
	At      time.Time       `json:"at"`
	Author  string          `json:"author"`
	Note    string          `json:"note,omitempty"`
	Action  string          `json:"action"`
	Kind    spec.Kind       `json:"kind"`
	Name    string          `json:"name"`
	Diff    json.RawMessage `json:"diff"`
}

func pageSize(limit int) int {
	switch {
	case limit <= 0:
		return DefaultPageSize
	case limit > MaxPageSize:
		return MaxPageSize
	}
	return limit
}

// Head returns the current config version (0 before the first change).
func (s *Store) Head(ctx context.Context) (int64, error) {
	var v int64
	if err := s.pool.QueryRow(ctx, `SELECT version FROM controlplane.config_head`).Scan(&v); err != nil {
		return 0, fmt.Errorf("store: read head: %w", err)
	}
	return v, nil
}

// Get returns the current value of a resource and its ETag.
func (s *Store) Get(ctx context.Context, kind spec.Kind, name string) (spec.Resource, string, error) {
	var (
		from int64
		body []byte
	)
	err := s.pool.QueryRow(ctx, `SELECT version_from, body FROM controlplane.resources
		WHERE kind = $1 AND name = $2 AND version_to IS NULL AND body IS NOT NULL`, string(kind), name).Scan(&from, &body)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, "", fmt.Errorf("%w: %s/%s", ErrNotFound, kind, name)
	}
	if err != nil {
		return nil, "", fmt.Errorf("store: get %s/%s: %w", kind, name, err)
	}
	r, err := decode(kind, body)
	if err != nil {
		return nil, "", err
	}
	return r, ETag(from), nil
}

// Page queries. Both are keyset pagination on an index that holds only
// current rows (resources_current: (kind, name); resources_apikey_consumer:
// (consumer, name)), so a page reads about limit rows at a million
// resources as at ten (plan_test.go checks it with EXPLAIN).
const (
	listSQL = `SELECT name, version_from, body FROM controlplane.resources
		WHERE kind = $1 AND version_to IS NULL AND body IS NOT NULL AND name > $2
		ORDER BY name LIMIT $3`
	listAPIKeysSQL = `SELECT name, version_from, body FROM controlplane.resources
		WHERE kind = 'apikeys' AND version_to IS NULL AND body IS NOT NULL
		  AND body ->> 'consumer' = $1 AND name > $2
		ORDER BY name LIMIT $3`
)

// List returns current resources of kind with names after the cursor, in
// name order, at most limit (DefaultPageSize when 0, capped at MaxPageSize).
// next is the cursor for the following page, "" on the last page.
func (s *Store) List(ctx context.Context, kind spec.Kind, after string, limit int) (items []Item, next string, err error) {
	limit = pageSize(limit)
	rows, err := s.pool.Query(ctx, listSQL, string(kind), after, limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("store: list %s: %w", kind, err)
	}
	return collectItems(rows, kind, limit)
}

// ListAPIKeys is List for the API keys of one consumer.
func (s *Store) ListAPIKeys(ctx context.Context, consumer, after string, limit int) (items []Item, next string, err error) {
	limit = pageSize(limit)
	rows, err := s.pool.Query(ctx, listAPIKeysSQL, consumer, after, limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("store: list api keys: %w", err)
	}
	return collectItems(rows, spec.KindAPIKey, limit)
}

func collectItems(rows pgx.Rows, kind spec.Kind, limit int) ([]Item, string, error) {
	defer rows.Close()
	items := []Item{}
	var (
		name string
		from int64
		body []byte
	)
	for rows.Next() {
		if err := rows.Scan(&name, &from, &body); err != nil {
			return nil, "", fmt.Errorf("store: list %s: %w", kind, err)
		}
		r, err := decode(kind, body)
		if err != nil {
			return nil, "", err
		}
		items = append(items, Item{Resource: r, ETag: ETag(from)})
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("store: list %s: %w", kind, err)
	}
	next := ""
	if len(items) > limit {
		items = items[:limit]
		next = items[limit-1].Resource.ResourceName()
	}
	return items, next, nil
}

// ConfigAt returns the complete config at version v (0 is the empty config
// before the first change); ErrNotFound when v is not a version yet. The
// result may be shared with other callers: it must not be modified.
func (s *Store) ConfigAt(ctx context.Context, v int64) (*spec.Config, error) {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("store: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only
	var head int64
	if err := tx.QueryRow(ctx, `SELECT version FROM controlplane.config_head`).Scan(&head); err != nil {
		return nil, fmt.Errorf("store: read head: %w", err)
	}
	if v < 0 || v > head {
		return nil, fmt.Errorf("%w: version %d (head is %d)", ErrNotFound, v, head)
	}
	if v == head {
		return s.headConfig(ctx, tx, head)
	}
	return loadConfig(ctx, tx, v)
}

// HeadConfig returns the config at the head version, whatever it is by
// the time it is read: the one config kept in memory (see ConfigAt), so
// a reader that wants the newest never reads a whole version back from
// the database because the head moved on. Shared: must not be modified.
func (s *Store) HeadConfig(ctx context.Context) (*spec.Config, error) {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("store: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only
	var head int64
	if err := tx.QueryRow(ctx, `SELECT version FROM controlplane.config_head`).Scan(&head); err != nil {
		return nil, fmt.Errorf("store: read head: %w", err)
	}
	return s.headConfig(ctx, tx, head)
}

// Versions lists version metadata newest first, starting below before (0:
// from the head). next is the cursor for the following page, 0 on the last.
func (s *Store) Versions(ctx context.Context, before int64, limit int) (items []VersionInfo, next int64, err error) {
	limit = pageSize(limit)
	rows, err := s.pool.Query(ctx, `SELECT version, created_at, author, reason, rollback_of
		FROM controlplane.config_versions WHERE $1 = 0 OR version < $1
		ORDER BY version DESC LIMIT $2`, before, limit+1)
	if err != nil {
		return nil, 0, fmt.Errorf("store: list versions: %w", err)
	}
	items, err = pgx.CollectRows(rows, scanVersion)
	if err != nil {
		return nil, 0, fmt.Errorf("store: list versions: %w", err)
	}
	if len(items) > limit {
		items = items[:limit]
		next = items[limit-1].Version
	}
	return items, next, nil
}

func scanVersion(row pgx.CollectableRow) (VersionInfo, error) {
	var v VersionInfo
	err := row.Scan(&v.Version, &v.CreatedAt, &v.Author, &v.Reason, &v.RollbackOf)
	return v, err
}

// Version returns one version's metadata and the resources it changed.
func (s *Store) Version(ctx context.Context, n int64) (VersionInfo, error) {
	rows, err := s.pool.Query(ctx, `SELECT version, created_at, author, reason, rollback_of
		FROM controlplane.config_versions WHERE version = $1`, n)
	if err != nil {
		return VersionInfo{}, fmt.Errorf("store: version %d: %w", n, err)
	}
	v, err := pgx.CollectExactlyOneRow(rows, scanVersion)
	if errors.Is(err, pgx.ErrNoRows) {
		return VersionInfo{}, fmt.Errorf("%w: version %d", ErrNotFound, n)
	}
	if err != nil {
		return VersionInfo{}, fmt.Errorf("store: version %d: %w", n, err)
	}
	v.Changes, v.ChangesNext, err = s.versionChanges(ctx, n, 0, 0)
	if err != nil {
		return VersionInfo{}, err
	}
	return v, nil
}

// VersionChanges pages through what version n changed, in write order:
// the changes after cursor (an audit id; 0: from the first), at most limit
// (DefaultPageSize when 0, capped at MaxPageSize). next is the cursor of
// the following page, 0 on the last. A version that does not exist has no
// changes.
func (s *Store) VersionChanges(ctx context.Context, n, cursor int64, limit int) (changes []ChangeRef, next int64, err error) {
	return s.versionChanges(ctx, n, cursor, limit)
}

func (s *Store) versionChanges(ctx context.Context, n, cursor int64, limit int) ([]ChangeRef, int64, error) {
	if limit <= 0 {
		limit = MaxPageSize
	}
	limit = pageSize(limit)
	rows, err := s.pool.Query(ctx, `SELECT id, kind, name, action FROM controlplane.audit
		WHERE version = $1 AND id > $2 ORDER BY id LIMIT $3`, n, cursor, limit+1)
	if err != nil {
		return nil, 0, fmt.Errorf("store: version %d changes: %w", n, err)
	}
	var ids []int64
	changes, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ChangeRef, error) {
		var (
			c  ChangeRef
			id int64
		)
		err := row.Scan(&id, &c.Kind, &c.Name, &c.Action)
		ids = append(ids, id)
		return c, err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("store: version %d changes: %w", n, err)
	}
	var next int64
	if len(changes) > limit {
		changes, next = changes[:limit], ids[limit-1]
	}
	return changes, next, nil
}

// Audit lists audit entries newest first, with ids below before (0: from the
// newest). next is the cursor for the following page, 0 on the last.
func (s *Store) Audit(ctx context.Context, before int64, limit int) (items []AuditEntry, next int64, err error) {
	limit = pageSize(limit)
	rows, err := s.pool.Query(ctx, `SELECT id, version, at, author, note, action, kind, name, diff
		FROM controlplane.audit WHERE $1 = 0 OR id < $1 ORDER BY id DESC LIMIT $2`, before, limit+1)
	if err != nil {
		return nil, 0, fmt.Errorf("store: audit: %w", err)
	}
	items, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (AuditEntry, error) {
		var a AuditEntry
		err := row.Scan(&a.ID, &a.Version, &a.At, &a.Author, &a.Note, &a.Action, &a.Kind, &a.Name, &a.Diff)
		return a, err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("store: audit: %w", err)
	}
	if len(items) > limit {
		items = items[:limit]
		next = items[limit-1].ID
	}
	return items, next, nil
}

// PruneIdempotency deletes idempotency records older than age; a key older
// than that is treated as new. It returns how many were deleted.
func (s *Store) PruneIdempotency(ctx context.Context, age time.Duration) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM controlplane.idempotency WHERE created_at < now() - $1::interval`, age)
	if err != nil {
		return 0, fmt.Errorf("store: prune idempotency: %w", err)
	}
	return tag.RowsAffected(), nil
}
