package store

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/portico-io/portico/controlplane/spec"
)

// ImportCounts is what an import did.
type ImportCounts struct {
	// ConsumersCreated are new consumers; ConsumersUnchanged were given
	// exactly as they are stored (an import may add keys to existing
	// consumers by repeating them unchanged).
	ConsumersCreated   int `json:"created"`
	ConsumersUnchanged int `json:"unchanged"`
	KeysCreated        int `json:"-"`
}

// ImportResponder builds the response recorded for an idempotent import,
// like Responder, knowing what the import did.
type ImportResponder func(version int64, counts ImportCounts) (status int, body []byte)

// Import creates consumers and API keys as one new version. A consumer
// that exists must be given exactly as stored (it is then left alone);
// a key id that exists, or a key whose hash another key (stored or
// imported) already has, rejects the whole import with a
// *spec.FieldError whose Field is "consumers/<name>: …" or
// "apikeys/<id>: …". Every resource must validate, and the config after
// the import too. Nothing is written unless everything is.
//
// Rows are written with COPY, so an import of a million keys takes
// seconds of database time, not one round trip per key.
func (s *Store) Import(ctx context.Context, meta Meta, consumers []*spec.Consumer, keys []*spec.APIKey,
	respond ImportResponder) (Result, ImportCounts, error) {
	var counts ImportCounts
	if len(consumers) == 0 && len(keys) == 0 {
		return Result{}, counts, ErrNoChange
	}
	for _, c := range consumers {
		if err := c.Validate(); err != nil {
			return Result{}, counts, prefixed("consumers/"+c.Name, err)
		}
	}
	for _, k := range keys {
		if err := k.Validate(); err != nil {
			return Result{}, counts, prefixed("apikeys/"+k.Name, err)
		}
	}
	var onVersion Responder
	if respond != nil {
		onVersion = func(v int64) (int, []byte) { return respond(v, counts) }
	}
	res, err := s.write(ctx, meta, onVersion, func(_ context.Context, _ pgx.Tx, head *spec.Config) (*plan, error) {
		counts = ImportCounts{}
		return planImport(head, consumers, keys, &counts)
	})
	if err != nil {
		return Result{}, ImportCounts{}, err
	}
	return res, counts, nil
}

// planImport checks the import against the head config, which the write
// transaction holds current (the head row is locked), and builds the next
// config.
func planImport(head *spec.Config, consumers []*spec.Consumer, keys []*spec.APIKey, counts *ImportCounts) (*plan, error) {
	p := &plan{writes: make([]write, 0, len(consumers)+len(keys))}
	d := newDraft(head, head.Version)
	for _, c := range consumers {
		after, err := json.Marshal(c)
		if err != nil {
			return nil, fmt.Errorf("store: encode consumers/%s: %w", c.Name, err)
		}
		if cur := head.Consumers.Lookup(c.Name); cur != nil {
			before, err := json.Marshal(cur)
			if err != nil {
				return nil, fmt.Errorf("store: encode consumers/%s: %w", c.Name, err)
			}
			if string(before) != string(after) {
				return nil, &spec.FieldError{Field: "consumers/" + c.Name + ": name", Code: spec.CodeConflict,
					Message: fmt.Sprintf("consumer %q exists with other settings; an import only adds (change it with PUT or PATCH)", c.Name)}
			}
			counts.ConsumersUnchanged++
			continue
		}
		p.writes = append(p.writes, write{kind: spec.KindConsumer, name: c.Name, after: after, action: ActionCreate})
		d.set(spec.KindConsumer, c.Name, c)
		counts.ConsumersCreated++
	}
	if len(keys) > 0 {
		// A hash held by two keys would make the secret ambiguous (which
		// key, which consumer?): refuse it against the stored keys too.
		hashes := make(map[string]string, head.APIKeys.Len()+len(keys))
		for id, k := range head.APIKeys.All() {
			hashes[k.SHA256] = id
		}
		for _, k := range keys {
			if head.APIKeys.Has(k.Name) {
				return nil, &spec.FieldError{Field: "apikeys/" + k.Name + ": id", Code: spec.CodeConflict,
					Message: fmt.Sprintf("API key %q exists", k.Name)}
			}
			if other, dup := hashes[k.SHA256]; dup {
				return nil, &spec.FieldError{Field: "apikeys/" + k.Name + ": sha256", Code: spec.CodeConflict,
					Message: fmt.Sprintf("the same hash as API key %q", other)}
			}
			hashes[k.SHA256] = k.Name
			after, err := json.Marshal(k)
			if err != nil {
				return nil, fmt.Errorf("store: encode apikeys/%s: %w", k.Name, err)
			}
			p.writes = append(p.writes, write{kind: spec.KindAPIKey, name: k.Name, after: after, action: ActionCreate})
			d.set(spec.KindAPIKey, k.Name, k)
			counts.KeysCreated++
		}
	}
	p.next = d.cfg
	return p, nil
}

// prefixed puts "<ref>: " before a resource's own field error.
func prefixed(ref string, err error) error {
	if fe, ok := err.(*spec.FieldError); ok { //nolint:errorlint // Validate returns it unwrapped
		return &spec.FieldError{Field: ref + ": " + fe.Field, Code: fe.Code, Message: fe.Message}
	}
	return err
}

// copyThreshold is the write count from which a version's rows go through
// COPY into a staging table rather than array parameters.
const copyThreshold = 1000

// writeRowsCopy records a large version's resource and audit rows: COPY
// into a temporary table, then close the current rows and insert from it.
func writeRowsCopy(ctx context.Context, tx pgx.Tx, v int64, meta Meta, writes []write) error {
	if _, err := tx.Exec(ctx, `CREATE TEMP TABLE staged_writes (
		i int, kind text, name text, body jsonb, action text, diff jsonb) ON COMMIT DROP`); err != nil {
		return fmt.Errorf("store: stage writes: %w", err)
	}
	_, err := tx.CopyFrom(ctx, pgx.Identifier{"staged_writes"}, []string{"i", "kind", "name", "body", "action", "diff"},
		pgx.CopyFromSlice(len(writes), func(i int) ([]any, error) {
			w := writes[i]
			d, err := diffJSON(w)
			if err != nil {
				return nil, err
			}
			var body any
			if w.after != nil {
				body = string(w.after)
			}
			return []any{int32(i), string(w.kind), w.name, body, w.action, string(d)}, nil
		}))
	if err != nil {
		return fmt.Errorf("store: copy writes: %w", err)
	}
	b := &pgx.Batch{}
	b.Queue(`ANALYZE staged_writes`)
	b.Queue(`UPDATE controlplane.resources r SET version_to = $1 FROM staged_writes c
		WHERE r.kind = c.kind AND r.name = c.name AND r.version_to IS NULL`, v)
	b.Queue(`INSERT INTO controlplane.resources (kind, name, version_from, body)
		SELECT kind, name, $1, body FROM staged_writes`, v)
	b.Queue(`INSERT INTO controlplane.audit (version, author, note, action, kind, name, diff)
		SELECT $1, $2, $3, action, kind, name, diff FROM staged_writes ORDER BY i`, v, meta.Author, meta.Note)
	// Fresh statistics at once: the next writes' lookups by (kind, name)
	// must keep using the indexes rather than wait for autovacuum.
	b.Queue(`ANALYZE controlplane.resources`)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("store: write staged rows: %w", err)
	}
	return nil
}

// diffJSON is a write's audit diff: {"before": …, "after": …}.
func diffJSON(w write) ([]byte, error) {
	d, err := json.Marshal(struct {
		Before json.RawMessage `json:"before"`
		After  json.RawMessage `json:"after"`
	}{w.before, w.after})
	if err != nil {
		return nil, fmt.Errorf("store: encode diff: %w", err)
	}
	return d, nil
}
