package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// leaderLockKey is the pg advisory lock held by the leading replica
// ("portico.controlplane.rollout").
const leaderLockKey int64 = 0x706f7274_69636f02

const rolloutColumns = `id, target_version, baseline_version, spec, state, wave, wave_started_at,
	error, rollback_version, node_counts, created_at, updated_at`

// querier is what the reads need from a pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

func scanRollout(row pgx.CollectableRow) (Rollout, error) {
	var (
		r           Rollout
		specJSON    []byte
		countsJSON  []byte
		rollbackVer *int64
		state       string
	)
	if err := row.Scan(&r.ID, &r.TargetVersion, &r.BaselineVersion, &specJSON, &state, &r.Wave,
		&r.WaveStartedAt, &r.Error, &rollbackVer, &countsJSON, &r.CreatedAt, &r.UpdatedAt); err != nil {
		return Rollout{}, err
	}
	var s Spec
	if err := json.Unmarshal(specJSON, &s); err != nil {
		return Rollout{}, fmt.Errorf("rollout %d: spec: %w", r.ID, err)
	}
	if err := json.Unmarshal(countsJSON, &r.Nodes); err != nil {
		return Rollout{}, fmt.Errorf("rollout %d: node counts: %w", r.ID, err)
	}
	r.State = State(state)
	r.Waves, r.BakeSeconds, r.MaxNackRatio, r.MinNodes = s.Waves, s.BakeSeconds, s.MaxNackRatio, s.MinNodes
	if rollbackVer != nil {
		r.RollbackVersion = *rollbackVer
	}
	r.WaveStartedAt, r.CreatedAt, r.UpdatedAt = r.WaveStartedAt.UTC(), r.CreatedAt.UTC(), r.UpdatedAt.UTC()
	return r, nil
}

func (r *Rollout) spec() Spec {
	return Spec{TargetVersion: r.TargetVersion, Waves: r.Waves, BakeSeconds: r.BakeSeconds,
		MaxNackRatio: r.MaxNackRatio, MinNodes: r.MinNodes}
}

// fleet is the persisted deployment decision.
type fleet struct {
	running  *Rollout
	deployed int64 // deployment.deployed_version
	headSeen int64 // deployment.head_seen
	head     int64 // config head
}

func readFleet(ctx context.Context, q querier, forUpdate bool) (fleet, error) {
	var f fleet
	sql := `SELECT coalesce(d.deployed_version, h.version), coalesce(d.head_seen, h.version), h.version
		FROM controlplane.deployment d, controlplane.config_head h`
	if forUpdate {
		sql += " FOR UPDATE OF d"
	}
	if err := q.QueryRow(ctx, sql).Scan(&f.deployed, &f.headSeen, &f.head); err != nil {
		return f, fmt.Errorf("rollout: read deployment: %w", err)
	}
	rows, err := q.Query(ctx, `SELECT `+rolloutColumns+` FROM controlplane.rollouts WHERE state = 'running'`)
	if err != nil {
		return f, fmt.Errorf("rollout: read running rollout: %w", err)
	}
	rs, err := pgx.CollectRows(rows, scanRollout)
	if err != nil {
		return f, fmt.Errorf("rollout: read running rollout: %w", err)
	}
	if len(rs) > 0 {
		f.running = &rs[0]
	}
	return f, nil
}

// effective returns the version the fleet runs outside the running
// rollout's waves (the baseline while one runs), and whether in auto mode
// that is simply the head (so the latest published snapshot may be served).
func (f fleet) effective(mode string) (version int64, followsHead bool) {
	if f.running != nil {
		return f.running.BaselineVersion, false
	}
	v := f.deployed
	if mode == ModeAuto && f.head > f.headSeen {
		v = f.head
	}
	return v, mode == ModeAuto && v == f.head
}

func getRollout(ctx context.Context, q querier, id int64) (Rollout, error) {
	rows, err := q.Query(ctx, `SELECT `+rolloutColumns+` FROM controlplane.rollouts WHERE id = $1`, id)
	if err != nil {
		return Rollout{}, fmt.Errorf("rollout: get %d: %w", id, err)
	}
	r, err := pgx.CollectExactlyOneRow(rows, scanRollout)
	if errors.Is(err, pgx.ErrNoRows) {
		return Rollout{}, fmt.Errorf("%w: rollout %d", ErrNotFound, id)
	}
	if err != nil {
		return Rollout{}, fmt.Errorf("rollout: get %d: %w", id, err)
	}
	return r, nil
}

// tally is the union of every replica's fresh reports for one rollout.
type tally struct {
	NodeCounts
	sampleNode, sampleError string // one NACK, for the rollback reason
}

func (t tally) ratio() float64 {
	if t.Total == 0 {
		return 0
	}
	return float64(t.Nacked) / float64(t.Total)
}

// countReports counts nodes reported since cutoff; a node reported by two
// replicas (it moved) counts once, with its newest report.
func countReports(ctx context.Context, q querier, id int64, cutoff time.Time) (tally, error) {
	rows, err := q.Query(ctx, `SELECT DISTINCT ON (node_id) node_id, state, error
		FROM controlplane.rollout_reports WHERE rollout_id = $1 AND updated_at >= $2
		ORDER BY node_id, updated_at DESC`, id, cutoff)
	if err != nil {
		return tally{}, fmt.Errorf("rollout: read reports: %w", err)
	}
	defer rows.Close()
	var t tally
	for rows.Next() {
		var node, state, msg string
		if err := rows.Scan(&node, &state, &msg); err != nil {
			return tally{}, fmt.Errorf("rollout: read reports: %w", err)
		}
		t.Total++
		switch state {
		case nodeAcked:
			t.Acked++
		case nodeNacked:
			t.Nacked++
			if t.sampleNode == "" {
				t.sampleNode, t.sampleError = node, msg
			}
		default:
			t.Pending++
		}
	}
	if err := rows.Err(); err != nil {
		return tally{}, fmt.Errorf("rollout: read reports: %w", err)
	}
	return t, nil
}

// replicasCaughtUp reports whether every replica alive since cutoff has
// applied (and reported) wave of rollout id.
func replicasCaughtUp(ctx context.Context, q querier, id int64, wave int, cutoff time.Time) (bool, error) {
	var behind int
	err := q.QueryRow(ctx, `SELECT count(*) FROM controlplane.rollout_replicas
		WHERE seen_at >= $3 AND (rollout_id IS DISTINCT FROM $1 OR wave <> $2)`, id, wave, cutoff).Scan(&behind)
	if err != nil {
		return false, fmt.Errorf("rollout: read replicas: %w", err)
	}
	return behind == 0, nil
}
