package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/portico-io/portico/controlplane/spec"
)

// querier is what reads need from a pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ETag is the strong ETag of a resource revision: the version that wrote it.
// A write's new revisions all have ETag(Result.Version).
func ETag(versionFrom int64) string {
	return `"` + strconv.FormatInt(versionFrom, 10) + `"`
}

// decode turns a stored body into a resource. Stored bodies were validated
// when written, so decoding is lenient (fields added later are tolerated).
func decode(kind spec.Kind, body []byte) (spec.Resource, error) {
	r, err := spec.New(kind)
	if err != nil {
		return nil, fmt.Errorf("store: stored resource: %w", err)
	}
	if err := json.Unmarshal(body, r); err != nil {
		return nil, fmt.Errorf("store: stored %s: %w", kind, err)
	}
	return r, nil
}

// draft is a copy-on-write successor of a config: a kind's map is cloned the
// first time that kind changes, so changing a route does not copy a million
// API keys, and the kinds kept in Tables clone only the shards they change.
type draft struct {
	cfg   *spec.Config
	owned map[spec.Kind]bool
}

func newDraft(base *spec.Config, version int64) *draft {
	c := *base
	c.Version = version
	return &draft{cfg: &c, owned: map[spec.Kind]bool{}}
}

func (d *draft) own(k spec.Kind) {
	if d.owned[k] {
		return
	}
	d.owned[k] = true
	d.cfg.CloneKind(k)
}

// set puts r (nil: deletes name) into the draft.
func (d *draft) set(k spec.Kind, name string, r spec.Resource) {
	d.own(k)
	if r == nil {
		d.cfg.Delete(k, name)
	} else {
		d.cfg.Put(k, r)
	}
}

// headConfig returns the config at head, which the caller read through q in
// a snapshot where head is current. It reuses the cached config, catching it
// up with the rows written since (other replicas' writes), and caches the
// result. The returned config is shared: callers must not modify it.
func (s *Store) headConfig(ctx context.Context, q querier, head int64) (*spec.Config, error) {
	s.mu.Lock()
	cached := s.head
	s.mu.Unlock()
	if cached != nil && cached.Version == head {
		return cached, nil
	}
	var cfg *spec.Config
	if cached == nil || cached.Version > head {
		c, err := loadConfig(ctx, q, head)
		if err != nil {
			return nil, err
		}
		cfg = c
	} else {
		// The current row of every resource changed after cached.Version
		// has version_from > cached.Version.
		rows, err := q.Query(ctx, `SELECT kind, name, body FROM controlplane.resources
			WHERE version_from > $1 AND version_to IS NULL`, cached.Version)
		if err != nil {
			return nil, fmt.Errorf("store: refresh config: %w", err)
		}
		d := newDraft(cached, head)
		if err := scanResources(rows, d.set); err != nil {
			return nil, err
		}
		cfg = d.cfg
	}
	s.setHead(cfg)
	return cfg, nil
}

// setHead caches cfg unless a newer config is cached already.
func (s *Store) setHead(cfg *spec.Config) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.head == nil || s.head.Version <= cfg.Version {
		s.head = cfg
	}
}

// loadConfig reads the whole config at version v from the temporal table.
func loadConfig(ctx context.Context, q querier, v int64) (*spec.Config, error) {
	rows, err := q.Query(ctx, `SELECT kind, name, body FROM controlplane.resources
		WHERE version_from <= $1 AND (version_to IS NULL OR version_to > $1) AND body IS NOT NULL`, v)
	if err != nil {
		return nil, fmt.Errorf("store: load config %d: %w", v, err)
	}
	cfg := spec.NewConfig(v)
	err = scanResources(rows, func(k spec.Kind, name string, r spec.Resource) {
		if r != nil {
			cfg.Put(k, r)
		}
	})
	if err != nil {
		return nil, err
	}
	return cfg, nil
}

// scanResources decodes (kind, name, body) rows; a NULL body is passed as nil.
func scanResources(rows pgx.Rows, fn func(spec.Kind, string, spec.Resource)) error {
	defer rows.Close()
	var (
		kind, name string
		body       []byte
	)
	for rows.Next() {
		if err := rows.Scan(&kind, &name, &body); err != nil {
			return fmt.Errorf("store: scan resource: %w", err)
		}
		if body == nil {
			fn(spec.Kind(kind), name, nil)
			continue
		}
		r, err := decode(spec.Kind(kind), body)
		if err != nil {
			return err
		}
		fn(spec.Kind(kind), name, r)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("store: read resources: %w", err)
	}
	return nil
}
