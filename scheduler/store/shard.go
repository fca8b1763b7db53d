package store

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// Shards is the number of logical shards of schedule_id.
const Shards = 1024

// shardLockSpaceSQL is the first key of the two-key advisory locks, one
// per owner (hashtext of its id), that fence fires against changes of
// owner: a fire holds its owner's shared (shardLockSQL), a transaction
// moving shards away from an owner holds that owner's exclusively.
const shardLockSpaceSQL = `1935894530` // 0x7363_6802

// ownerLockSQL locks $1's shard lock exclusively (its own shards released).
const ownerLockSQL = `SELECT pg_advisory_xact_lock(` + shardLockSpaceSQL + `, hashtext($1))`

// ShardLease is one shard held by a runner at an epoch.
type ShardLease struct {
	Shard int16
	Epoch int64
}

// Heartbeat membership: the runner id is live until ttl from now; returns
// the number of live runners (including this one).
func (s *Store) JoinRunners(ctx context.Context, id string, ttl time.Duration) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `WITH up AS (
			INSERT INTO scheduler.runner_member (id, expires_at) VALUES ($1, now() + $2 * interval '1 millisecond')
			ON CONFLICT (id) DO UPDATE SET expires_at = excluded.expires_at)
		SELECT 1 + count(*) FROM scheduler.runner_member WHERE expires_at > now() AND id <> $1`, id, ttl.Milliseconds()).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("store: runners: %w", err)
	}
	return n, nil
}

// LeaveRunners removes a runner and frees its shards (graceful stop).
func (s *Store) LeaveRunners(ctx context.Context, id string) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, ownerLockSQL, id); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `WITH gone AS (DELETE FROM scheduler.runner_member WHERE id = $1)
			UPDATE scheduler.shard_lease SET owner = NULL, expires_at = '-infinity', epoch = epoch + 1 WHERE owner = $1`, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: runners: %w", err)
	}
	return nil
}

// BalanceShards renews owner's unexpired shards for ttl, then moves toward
// want shards: it takes free or expired shards (bumping their epoch) when
// short, and releases its highest shards when holding more. It returns
// what owner holds afterwards and how many shards changed hands.
func (s *Store) BalanceShards(ctx context.Context, owner string, want int, ttl time.Duration) ([]ShardLease, int, error) {
	var (
		held    []ShardLease
		changed int
	)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, `UPDATE scheduler.shard_lease SET expires_at = now() + $2 * interval '1 millisecond'
			WHERE owner = $1 AND expires_at > now() RETURNING shard, epoch`, owner, ttl.Milliseconds())
		var err error
		if held, err = pgx.CollectRows(rows, pgx.RowToStructByPos[ShardLease]); err != nil {
			return fmt.Errorf("store: shards: renew: %w", err)
		}
		switch {
		case len(held) < want:
			// Free or expired leases, locked; then the shard locks of their
			// previous owners, tried (a fire of theirs in progress, or a
			// stopped process in the middle of one, keeps its shards for
			// this pass, as SKIP LOCKED skips rows); then the change.
			type cand struct {
				Shard int16
				Owner *string
			}
			rows, _ := tx.Query(ctx, `SELECT shard, owner FROM scheduler.shard_lease WHERE owner IS NULL OR expires_at <= now()
				ORDER BY shard LIMIT $1 FOR UPDATE SKIP LOCKED`, want-len(held))
			cands, err := pgx.CollectRows(rows, pgx.RowToStructByPos[cand])
			if err != nil {
				return fmt.Errorf("store: shards: acquire: %w", err)
			}
			var prev []string
			for _, c := range cands {
				if c.Owner != nil && !slices.Contains(prev, *c.Owner) {
					prev = append(prev, *c.Owner)
				}
			}
			var locked []string
			if len(prev) > 0 {
				rows, _ := tx.Query(ctx, `SELECT o FROM unnest($1::text[]) o
					WHERE pg_try_advisory_xact_lock(`+shardLockSpaceSQL+`, hashtext(o))`, prev)
				if locked, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
					return fmt.Errorf("store: shards: acquire: %w", err)
				}
			}
			var take []int16
			for _, c := range cands {
				if c.Owner == nil || slices.Contains(locked, *c.Owner) {
					take = append(take, c.Shard)
				}
			}
			if len(take) == 0 {
				return nil
			}
			rows, _ = tx.Query(ctx, `UPDATE scheduler.shard_lease l SET owner = $1, epoch = l.epoch + 1,
					expires_at = now() + $2 * interval '1 millisecond'
				WHERE l.shard = ANY ($3::smallint[])
				RETURNING l.shard, l.epoch`, owner, ttl.Milliseconds(), take)
			got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[ShardLease])
			if err != nil {
				return fmt.Errorf("store: shards: acquire: %w", err)
			}
			held = append(held, got...)
			changed = len(got)
		case len(held) > want:
			if _, err := tx.Exec(ctx, ownerLockSQL, owner); err != nil {
				return fmt.Errorf("store: shards: release: %w", err)
			}
			rows, _ := tx.Query(ctx, `UPDATE scheduler.shard_lease l SET owner = NULL, epoch = l.epoch + 1, expires_at = '-infinity'
				WHERE l.shard IN (SELECT shard FROM scheduler.shard_lease WHERE owner = $1 ORDER BY shard DESC LIMIT $2)
				RETURNING l.shard`, owner, len(held)-want)
			gone, err := pgx.CollectRows(rows, pgx.RowTo[int16])
			if err != nil {
				return fmt.Errorf("store: shards: release: %w", err)
			}
			drop := map[int16]bool{}
			for _, g := range gone {
				drop[g] = true
			}
			kept := held[:0]
			for _, h := range held {
				if !drop[h.Shard] {
					kept = append(kept, h)
				}
			}
			held, changed = kept, len(gone)
		}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	return held, changed, nil
}
