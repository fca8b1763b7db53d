package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/portico-io/portico/controlplane/spec"
)

// Audit actions.
const (
	ActionCreate   = "create"
	ActionUpdate   = "update"
	ActionDelete   = "delete"
	ActionRollback = "rollback"
)

// IfMatchAny as Change.IfMatch requires only that the resource exists.
const IfMatchAny = "*"

// IfMatchUpsert as Change.IfMatch states the desired end state, whatever
// the current one: a put creates or replaces the resource, and a delete of
// an absent resource changes nothing (declarative apply).
const IfMatchUpsert = "upsert"

// Change is one resource write in a change set.
type Change struct {
	Kind spec.Kind
	Name string
	// Resource is the new value (its name must equal Name); nil deletes.
	Resource spec.Resource
	// IfMatch is the precondition: "" requires that the resource does not
	// exist (a create) for puts and that it exists for deletes; IfMatchAny
	// requires that it exists; anything else must equal its current ETag.
	IfMatch string
}

// Idempotency identifies a request whose outcome is recorded with the change
// it makes, in the same transaction. RequestHash covers whatever makes two
// requests "the same" (the caller hashes the body); the store compares it.
type Idempotency struct {
	Key, Method, Path, RequestHash string
}

// Meta describes who makes a change and why.
type Meta struct {
	// Author is who made the change: the authenticated principal. Note is
	// what the client said about itself (X-Portico-Author), kept beside it.
	Author, Reason, Note string
	// Idempotency, when set, makes the write replay-safe: a second write with
	// the same key and request returns the recorded response and writes
	// nothing; the same key with another request is ErrIdempotencyMismatch.
	Idempotency *Idempotency
}

// Responder builds the response recorded for an idempotent write, given the
// new version. It runs inside the transaction and must not block. The
// recorded body must never contain secrets.
type Responder func(version int64) (status int, body []byte)

// Result is the outcome of a write.
type Result struct {
	// Version is the version the write created (on a replay: the version
	// the original write created).
	Version int64
	// ETags holds each change's ETag after the write ("" for deletes); nil
	// on a replay.
	ETags []string
	// Replayed reports that an idempotency key matched an earlier write;
	// Status and Body are then that write's recorded response.
	Replayed bool
	Status   int
	Body     []byte
	// Base is the version the changes were planned against (the head
	// before the write); Diffs are the resources written, in change order.
	// Neither is set on a replay.
	Base  int64
	Diffs []Diff
}

// Diff is one resource a write changed (or, planned, would change): its
// stored JSON before and after (nil when absent). Secrets' sealed keys are
// in it: callers showing it must redact them.
type Diff struct {
	Kind          spec.Kind
	Name          string
	Action        string
	Before, After []byte
}

// write is one resource row a version writes.
type write struct {
	kind          spec.Kind
	name          string
	before, after []byte // canonical JSON; nil = absent
	action        string
}

// plan is what a write transaction decided to do.
type plan struct {
	next       *spec.Config // the config after the writes, at the new version
	writes     []write
	etags      []string
	rollbackOf *int64
}

// Apply makes changes atomically as one new version, after checking the
// idempotency key, each change's precondition, and that the whole config
// after the change validates (*spec.FieldError otherwise; nothing is
// written). Changes equal to the current state are skipped; if all are,
// Apply returns ErrNoChange and makes no version. respond may be nil when
// meta has no idempotency key.
func (s *Store) Apply(ctx context.Context, meta Meta, changes []Change, respond Responder) (Result, error) {
	return s.apply(ctx, meta, changes, respond, false)
}

// Plan checks changes exactly as Apply does, against the head, and returns
// what Apply would write (Result.Base and Result.Diffs) without writing
// anything: a dry run. It takes no lock and records no idempotency key.
func (s *Store) Plan(ctx context.Context, changes []Change) (Result, error) {
	return s.apply(ctx, Meta{}, changes, nil, true)
}

func (s *Store) apply(ctx context.Context, meta Meta, changes []Change, respond Responder, dry bool) (Result, error) {
	if len(changes) == 0 {
		return Result{}, ErrNoChange
	}
	seen := map[[2]string]bool{}
	for i, c := range changes {
		if err := checkChange(c); err != nil {
			return Result{}, err
		}
		k := [2]string{string(c.Kind), c.Name}
		if seen[k] {
			return Result{}, &spec.FieldError{Field: fmt.Sprintf("changes[%d]", i), Code: spec.CodeConflict,
				Message: fmt.Sprintf("%s/%s changed twice in one change set", c.Kind, c.Name)}
		}
		seen[k] = true
	}
	return s.writeWith(ctx, meta, respond, writeOpts{dry: dry, diffs: true}, func(ctx context.Context, tx pgx.Tx, head *spec.Config) (*plan, error) {
		return planChanges(ctx, tx, head, changes)
	})
}

func checkChange(c Change) error {
	if !c.Kind.Valid() {
		return &spec.FieldError{Field: "kind", Code: spec.CodeInvalid, Message: fmt.Sprintf("unknown resource kind %q", c.Kind)}
	}
	if c.Name == "" {
		return &spec.FieldError{Field: "name", Code: spec.CodeRequired, Message: "is required"}
	}
	if c.Resource == nil {
		return nil
	}
	if spec.KindOf(c.Resource) != c.Kind {
		return &spec.FieldError{Field: "kind", Code: spec.CodeInvalid, Message: fmt.Sprintf("a %T is not a %s resource", c.Resource, c.Kind)}
	}
	if c.Resource.ResourceName() != c.Name {
		return &spec.FieldError{Field: "name", Code: spec.CodeInvalid, Message: fmt.Sprintf("resource name %q does not match %q", c.Resource.ResourceName(), c.Name)}
	}
	return c.Resource.Validate()
}

// planChanges checks preconditions against the current rows and builds the
// next config.
func planChanges(ctx context.Context, tx pgx.Tx, head *spec.Config, changes []Change) (*plan, error) {
	kinds := make([]string, len(changes))
	names := make([]string, len(changes))
	for i, c := range changes {
		kinds[i], names[i] = string(c.Kind), c.Name
	}
	rows, err := tx.Query(ctx, `SELECT r.kind, r.name, r.version_from FROM controlplane.resources r
		JOIN unnest($1::text[], $2::text[]) AS c(kind, name) ON r.kind = c.kind AND r.name = c.name
		WHERE r.version_to IS NULL AND r.body IS NOT NULL`, kinds, names)
	if err != nil {
		return nil, fmt.Errorf("store: read current rows: %w", err)
	}
	current := map[[2]string]int64{}
	var (
		kind, name string
		from       int64
	)
	_, err = pgx.ForEachRow(rows, []any{&kind, &name, &from}, func() error {
		current[[2]string{kind, name}] = from
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: read current rows: %w", err)
	}

	p := &plan{etags: make([]string, len(changes))}
	d := newDraft(head, head.Version)
	for i, c := range changes {
		from, exists := current[[2]string{string(c.Kind), c.Name}]
		ref := fmt.Sprintf("%s/%s", c.Kind, c.Name)
		if c.IfMatch == IfMatchUpsert && !exists && c.Resource == nil {
			continue // already absent
		}
		switch {
		case c.IfMatch == IfMatchUpsert:
		case c.IfMatch == "" && c.Resource != nil:
			if exists {
				return nil, fmt.Errorf("%w: %s", ErrAlreadyExists, ref)
			}
		case !exists:
			return nil, fmt.Errorf("%w: %s", ErrNotFound, ref)
		case c.IfMatch != "" && c.IfMatch != IfMatchAny && c.IfMatch != ETag(from):
			return nil, fmt.Errorf("%w: %s is at %s", ErrPreconditionFailed, ref, ETag(from))
		}
		var before, after []byte
		if cur := head.Get(c.Kind, c.Name); cur != nil {
			if before, err = json.Marshal(cur); err != nil {
				return nil, fmt.Errorf("store: encode %s: %w", ref, err)
			}
		}
		if c.Resource != nil {
			if after, err = json.Marshal(c.Resource); err != nil {
				return nil, fmt.Errorf("store: encode %s: %w", ref, err)
			}
		}
		if exists && bytes.Equal(before, after) {
			p.etags[i] = ETag(from)
			continue
		}
		action := ActionUpdate
		switch {
		case !exists:
			action = ActionCreate
		case c.Resource == nil:
			action = ActionDelete
		}
		p.writes = append(p.writes, write{kind: c.Kind, name: c.Name, before: before, after: after, action: action})
		if c.Resource != nil {
			p.etags[i] = ETag(head.Version + 1)
		}
		d.set(c.Kind, c.Name, c.Resource)
	}
	// A secret still in use after the whole change set cannot go: say so
	// on the secret rather than as a dangling reference on its user.
	for _, c := range changes {
		if c.Kind == spec.KindSecret && c.Resource == nil {
			if users := d.cfg.SecretUsers(c.Name); len(users) > 0 {
				return nil, &spec.FieldError{Field: "secrets/" + c.Name, Code: spec.CodeInUse,
					Message: fmt.Sprintf("secret %q is used by %s", c.Name, strings.Join(users, ", "))}
			}
		}
	}
	p.next = d.cfg
	return p, nil
}

// Rollback makes a new version whose content equals version to: only the
// resources that differ from the head are written (audit action rollback),
// and the version records rollback_of. A rollback always makes a version,
// even when the head already equals to, so that the operator's (or the
// rollout controller's) decision is on record and the API's "201 with the
// new version" holds. The config must still validate under today's rules.
//
// Identities and credentials — consumers, API keys and revocations, the
// kinds spec marks KeptOnRollback — are not rolled back: they keep the
// head's content. Undoing a bad route must never un-revoke a token, bring
// back a deleted key, or delete a key a customer was issued since.
func (s *Store) Rollback(ctx context.Context, meta Meta, to int64, respond Responder) (Result, error) {
	return s.write(ctx, meta, respond, func(ctx context.Context, tx pgx.Tx, head *spec.Config) (*plan, error) {
		if to < 0 || to > head.Version {
			return nil, fmt.Errorf("%w: version %d", ErrNotFound, to)
		}
		target, err := loadConfig(ctx, tx, to)
		if err != nil {
			return nil, err
		}
		for _, k := range spec.Kinds {
			if k.Info().KeptOnRollback {
				target.ShareKind(k, head)
			}
		}
		writes, err := diffConfigs(head, target)
		if err != nil {
			return nil, err
		}
		target.Version = head.Version
		return &plan{next: target, writes: writes, rollbackOf: &to}, nil
	})
}

// diffConfigs lists the writes turning from into to, in kind then name order.
func diffConfigs(from, to *spec.Config) ([]write, error) {
	var out []write
	for _, k := range spec.Kinds {
		names := map[string]bool{}
		for _, n := range from.Names(k) {
			names[n] = true
		}
		for _, n := range to.Names(k) {
			names[n] = true
		}
		for _, n := range spec.SortedKeys(names) {
			before, err := marshalOrNil(from.Get(k, n))
			if err != nil {
				return nil, err
			}
			after, err := marshalOrNil(to.Get(k, n))
			if err != nil {
				return nil, err
			}
			if !bytes.Equal(before, after) {
				out = append(out, write{kind: k, name: n, before: before, after: after, action: ActionRollback})
			}
		}
	}
	return out, nil
}

func marshalOrNil(r spec.Resource) ([]byte, error) {
	if r == nil {
		return nil, nil
	}
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("store: encode %s/%s: %w", spec.KindOf(r), r.ResourceName(), err)
	}
	return b, nil
}

// write runs one write transaction: lock the head (serializing writers of
// every replica), replay or reject by idempotency key, let build plan the
// change against the head config, validate the result, then record the
// version, resource rows, audit, outbox, NOTIFY and idempotency row and
// commit.
func (s *Store) write(ctx context.Context, meta Meta, respond Responder,
	build func(context.Context, pgx.Tx, *spec.Config) (*plan, error)) (Result, error) {
	return s.writeWith(ctx, meta, respond, writeOpts{}, build)
}

// writeOpts are write's variants: dry stops after validation, in a
// read-only snapshot that takes no lock; diffs fills Result.Diffs (kept
// off for bulk writes, where they would cost memory per resource).
type writeOpts struct {
	dry, diffs bool
}

func (s *Store) writeWith(ctx context.Context, meta Meta, respond Responder, o writeOpts,
	build func(context.Context, pgx.Tx, *spec.Config) (*plan, error)) (Result, error) {
	dry := o.dry
	if s.ctx.Err() != nil {
		return Result{}, ErrClosed
	}
	if meta.Author == "" {
		meta.Author = DefaultAuthor
	}
	opts, lock := pgx.TxOptions{}, ` FOR UPDATE`
	if dry {
		opts, lock = pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, ""
		meta.Idempotency = nil
	}
	tx, err := s.pool.BeginTx(ctx, opts)
	if err != nil {
		return Result{}, fmt.Errorf("store: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit

	var headVersion int64
	if err := tx.QueryRow(ctx, `SELECT version FROM controlplane.config_head`+lock).Scan(&headVersion); err != nil {
		return Result{}, fmt.Errorf("store: lock head: %w", err)
	}
	if idem := meta.Idempotency; idem != nil {
		var (
			method, path, hash string
			r                  Result
		)
		err := tx.QueryRow(ctx, `SELECT method, path, request_hash, version, status, response
			FROM controlplane.idempotency WHERE key = $1`, idem.Key).Scan(&method, &path, &hash, &r.Version, &r.Status, &r.Body)
		switch {
		case err == nil:
			if method != idem.Method || path != idem.Path || hash != idem.RequestHash {
				return Result{}, ErrIdempotencyMismatch
			}
			r.Replayed = true
			return r, nil
		case !errors.Is(err, pgx.ErrNoRows):
			return Result{}, fmt.Errorf("store: read idempotency key: %w", err)
		}
	}
	head, err := s.headConfig(ctx, tx, headVersion)
	if err != nil {
		return Result{}, err
	}
	p, err := build(ctx, tx, head)
	if err != nil {
		return Result{}, err
	}
	if len(p.writes) == 0 && p.rollbackOf == nil {
		return Result{}, ErrNoChange
	}
	if err := p.next.ValidateFrom(head); err != nil {
		return Result{}, err
	}
	if s.cfg.Check != nil {
		if err := s.cfg.Check(p.next); err != nil {
			return Result{}, err
		}
	}
	var planned []Diff
	if o.diffs {
		planned = make([]Diff, len(p.writes))
		for i, w := range p.writes {
			planned[i] = Diff{Kind: w.kind, Name: w.name, Action: w.action, Before: w.before, After: w.after}
		}
	}
	if dry {
		return Result{Base: headVersion, Diffs: planned}, nil
	}
	v := headVersion + 1
	p.next.Version = v

	b := &pgx.Batch{}
	b.Queue(`INSERT INTO controlplane.config_versions (version, author, reason, rollback_of) VALUES ($1, $2, $3, $4)`,
		v, meta.Author, meta.Reason, p.rollbackOf)
	b.Queue(`UPDATE controlplane.config_head SET version = $1`, v)
	switch n := len(p.writes); {
	case n >= copyThreshold:
		// The version row first: resource and audit rows reference it.
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return Result{}, fmt.Errorf("store: write version %d: %w", v, err)
		}
		if err := writeRowsCopy(ctx, tx, v, meta, p.writes); err != nil {
			return Result{}, err
		}
		b = &pgx.Batch{}
	case n > 0:
		kinds, names, actions := make([]string, n), make([]string, n), make([]string, n)
		bodies, diffs := make([]*string, n), make([]string, n)
		for i, w := range p.writes {
			kinds[i], names[i], actions[i] = string(w.kind), w.name, w.action
			if w.after != nil {
				b := string(w.after)
				bodies[i] = &b
			}
			d, err := diffJSON(w)
			if err != nil {
				return Result{}, err
			}
			diffs[i] = string(d)
		}
		b.Queue(`UPDATE controlplane.resources r SET version_to = $1
			FROM unnest($2::text[], $3::text[]) AS c(kind, name)
			WHERE r.kind = c.kind AND r.name = c.name AND r.version_to IS NULL`, v, kinds, names)
		b.Queue(`INSERT INTO controlplane.resources (kind, name, version_from, body)
			SELECT kind, name, $1, body FROM unnest($2::text[], $3::text[], $4::jsonb[]) AS c(kind, name, body)`,
			v, kinds, names, bodies)
		b.Queue(`INSERT INTO controlplane.audit (version, author, note, action, kind, name, diff)
			SELECT $1, $2, $7, action, kind, name, diff
			FROM unnest($3::text[], $4::text[], $5::text[], $6::jsonb[]) WITH ORDINALITY AS c(action, kind, name, diff, i)
			ORDER BY i`, v, meta.Author, actions, kinds, names, diffs, meta.Note)
	}
	b.Queue(`INSERT INTO controlplane.outbox (version) VALUES ($1)`, v)
	b.Queue(`SELECT pg_notify($1, $2)`, NotifyChannel, strconv.FormatInt(v, 10))
	var res = Result{Version: v, ETags: p.etags, Base: headVersion, Diffs: planned}
	if idem := meta.Idempotency; idem != nil {
		status, body := 0, []byte{}
		if respond != nil {
			status, body = respond(v)
		}
		if body == nil {
			body = []byte{}
		}
		b.Queue(`INSERT INTO controlplane.idempotency (key, method, path, request_hash, version, status, response)
			VALUES ($1, $2, $3, $4, $5, $6, $7)`, idem.Key, idem.Method, idem.Path, idem.RequestHash, v, status, body)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return Result{}, fmt.Errorf("store: write version %d: %w", v, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return Result{}, fmt.Errorf("store: commit version %d: %w", v, err)
	}
	s.setHead(p.next)
	return res, nil
}

// CreateAPIKey stores a new API key as one version. The key carries only the
// SHA-256 of its secret: generating and showing the secret is the caller's
// job, and the secret must never reach the store (nor respond's body).
func (s *Store) CreateAPIKey(ctx context.Context, meta Meta, key *spec.APIKey, respond Responder) (Result, error) {
	return s.Apply(ctx, meta, []Change{{Kind: spec.KindAPIKey, Name: key.Name, Resource: key}}, respond)
}
