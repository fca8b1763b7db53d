// Package migrate applies a component's embedded SQL migrations to its own
// Postgres schema. Files are applied in name order, once each, recorded in
// <schema>.schema_migrations, all in one transaction under an advisory lock,
// so replicas starting at once migrate exactly once.
package migrate

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"sort"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Apply runs every *.sql file of dir in files not yet recorded in schema.
// lockKey must be unique per schema. schema is an identifier chosen by the
// caller (never user input).
func Apply(ctx context.Context, pool *pgxpool.Pool, files fs.FS, dir, schema string, lockKey int64, log *slog.Logger) error {
	names, err := fs.Glob(files, path.Join(dir, "*.sql"))
	if err != nil {
		return fmt.Errorf("migrate %s: %w", schema, err)
	}
	sort.Strings(names)
	table := pgx.Identifier{schema, "schema_migrations"}.Sanitize()
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockKey); err != nil {
			return fmt.Errorf("migrate %s: lock: %w", schema, err)
		}
		if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{schema}.Sanitize()+`;
			CREATE TABLE IF NOT EXISTS `+table+` (name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return fmt.Errorf("migrate %s: %w", schema, err)
		}
		rows, _ := tx.Query(ctx, "SELECT name FROM "+table)
		applied, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("migrate %s: %w", schema, err)
		}
		done := map[string]bool{}
		for _, n := range applied {
			done[n] = true
		}
		for _, p := range names {
			name := path.Base(p)
			if done[name] {
				continue
			}
			sql, err := fs.ReadFile(files, p)
			if err != nil {
				return fmt.Errorf("migrate %s: %s: %w", schema, name, err)
			}
			if _, err := tx.Exec(ctx, string(sql)); err != nil {
				return fmt.Errorf("migrate %s: %s: %w", schema, name, err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO "+table+" (name) VALUES ($1)", name); err != nil {
				return fmt.Errorf("migrate %s: %s: %w", schema, name, err)
			}
			if log != nil {
				log.Info("applied schema migration", "schema", schema, "name", name)
			}
		}
		return nil
	})
}
