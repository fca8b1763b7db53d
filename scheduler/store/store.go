// Package store keeps the scheduler's job definitions and runs in Postgres
// (schema "scheduler") and holds every SQL statement of the runner,
// worker and reaper. Each hand-off is one committed row: a run's status
// moves SCHEDULED → QUEUED (runner) → RUNNING (worker, under a lease) →
// SUCCEEDED | RETRY_WAIT | DEAD, and every worker write is conditioned on
// the run's lease token (fencing).
//
// A Store is safe for concurrent use by many goroutines and processes.
package store

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	dbmigrate "github.com/portico-io/portico/internal/migrate"
	"github.com/portico-io/portico/internal/pgtokens"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/portico-io/portico/scheduler/jobspec"
)

// Run statuses.
const (
	StatusScheduled = "SCHEDULED"
	StatusQueued    = "QUEUED"
	StatusRunning   = "RUNNING"
	StatusSucceeded = "SUCCEEDED"
	StatusRetryWait = "RETRY_WAIT"
	StatusDead      = "DEAD"
	StatusCancelled = "CANCELLED"
	StatusSkipped   = "SKIPPED"
)

// DefaultMaxConns is used when Config.MaxConns is zero.
const DefaultMaxConns int32 = 10

// migrateLockKey serializes migrations of processes starting together
// ("portico.scheduler.migrate").
const migrateLockKey int64 = 0x706f7274_69636f06

// Config configures Open.
type Config struct {
	DatabaseURL string // required
	MaxConns    int32
	// TenantMaxRunning caps each tenant's RUNNING runs at claim time (0:
	// no cap). Every process sharing the database should use one value.
	TenantMaxRunning int
	// TenantRate is each tenant's dispatch rate in runs per second (a
	// token bucket TenantBurst deep, default max(1, rate)); 0: no limit.
	TenantRate  float64
	TenantBurst int
	Logger      *slog.Logger
}

// Store is the Postgres-backed scheduler store.
type Store struct {
	pool *pgxpool.Pool
	// planned is the claim's and the reaper's pool: its connections carry
	// plannedParams, so each of those statements is sent alone (no
	// transaction around it to set them) and planned once per connection.
	planned     *pgxpool.Pool
	tokens      *pgtokens.Table
	log         *slog.Logger
	tenantCap   int
	tenantRate  float64
	tenantBurst int
}

//go:embed migrations/*.sql
var migrations embed.FS

// Open connects, applies pending migrations and returns a Store.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.DatabaseURL == "" {
		return nil, errors.New("store: DatabaseURL is required")
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	pc, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	pc.MaxConns = cfg.MaxConns
	// Every statement here is OLTP-sized; JIT compiling one costs more
	// than running it (see claimPlanning). A DSN option can still set it.
	if _, set := pc.ConnConfig.RuntimeParams["jit"]; !set {
		pc.ConnConfig.RuntimeParams["jit"] = "off"
	}
	if _, set := pc.ConnConfig.RuntimeParams["application_name"]; !set {
		pc.ConnConfig.RuntimeParams["application_name"] = AppName
	}
	// plannedConns of MaxConns go to the claim's and reaper's pool.
	pc.MaxConns = max(cfg.MaxConns-plannedConns, 2)
	planned, err := plannedPool(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		planned.Close()
		return nil, fmt.Errorf("store: %w", err)
	}
	if err := migrate(ctx, pool, cfg.Logger); err != nil {
		pool.Close()
		planned.Close()
		return nil, err
	}
	if cfg.TenantMaxRunning < 0 || cfg.TenantRate < 0 || cfg.TenantBurst < 0 {
		pool.Close()
		planned.Close()
		return nil, errors.New("store: TenantMaxRunning, TenantRate and TenantBurst must not be negative")
	}
	if cfg.TenantBurst == 0 {
		cfg.TenantBurst = max(1, int(cfg.TenantRate))
	}
	return &Store{pool: pool, planned: planned, tokens: pgtokens.New(pool, "scheduler.api_tokens"), log: cfg.Logger, tenantCap: cfg.TenantMaxRunning, tenantRate: cfg.TenantRate,
		tenantBurst: cfg.TenantBurst}, nil
}

// Close releases the pool.
func (s *Store) Close() { s.pool.Close(); s.planned.Close() }

// plannedConns is the size of the claim's and reaper's pool.
const plannedConns = 4

// AppName names the store's connections in pg_stat_activity, and
// AppName+ClaimPoolSuffix those of the claim's and reaper's pool, so what
// claims cost Postgres can be told apart (BenchmarkSchedulerVsRiver logs
// it). An application_name in the DSN replaces AppName.
const (
	AppName         = "portico-scheduler"
	ClaimPoolSuffix = "/claims"
)

// plannedPool opens the claim's and reaper's pool: claimPlanning's
// settings as connection parameters (see claimPlanning).
func plannedPool(ctx context.Context, url string) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	pc.MaxConns = plannedConns
	app, set := pc.ConnConfig.RuntimeParams["application_name"]
	if !set {
		app = AppName
	}
	pc.ConnConfig.RuntimeParams["application_name"] = app + ClaimPoolSuffix
	for k, v := range plannedParams {
		if _, set := pc.ConnConfig.RuntimeParams[k]; !set || k != "jit" {
			pc.ConnConfig.RuntimeParams[k] = v
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	return pool, nil
}

// Ping checks the database answers.
func (s *Store) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }

func migrate(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) error {
	if err := dbmigrate.Apply(ctx, pool, migrations, "migrations", "scheduler", migrateLockKey, log); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}

// Job is a stored definition with its server fields.
type Job struct {
	ID        int64
	Tenant    string
	Spec      *jobspec.Spec
	Version   int
	Enabled   bool
	Deleted   bool
	CreatedAt time.Time
	UpdatedAt time.Time
	// NextRunAt is the earliest waiting slot, nil when none.
	NextRunAt *time.Time
}

// Run is one execution row.
type Run struct {
	ID             int64
	ScheduleID     int64
	ScheduledAt    time.Time
	Status         string
	Manual         bool
	Attempt        int
	NextAttemptAt  *time.Time
	LeaseToken     int64
	LeaseExpiresAt *time.Time
	WorkerID       *string
	LastError      *string
	DispatchedAt   *time.Time
	FinishedAt     *time.Time
	UpdatedAt      time.Time
}

const jobCols = `d.id, d.tenant, d.spec, d.version, d.enabled, d.deleted_at IS NOT NULL, d.created_at, d.updated_at,
	(SELECT min(e.scheduled_at) FROM scheduler.scheduled_execution e WHERE e.schedule_id = d.id AND e.status = 'SCHEDULED')`

func scanJob(row pgx.Row) (Job, error) {
	var (
		j   Job
		raw []byte
	)
	if err := row.Scan(&j.ID, &j.Tenant, &raw, &j.Version, &j.Enabled, &j.Deleted, &j.CreatedAt, &j.UpdatedAt, &j.NextRunAt); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return Job{}, ErrNotFound
		}
		return Job{}, fmt.Errorf("store: %w", err)
	}
	spec, err := jobspec.DecodeStored(raw)
	if err != nil {
		return Job{}, fmt.Errorf("store: job %d spec: %w", j.ID, err)
	}
	j.Spec = spec
	return j, nil
}

const runCols = `id, schedule_id, scheduled_at, status, manual, attempt, next_attempt_at, lease_token, lease_expires_at,
	worker_id, last_error, dispatched_at, finished_at, updated_at`

func scanRun(row pgx.CollectableRow) (Run, error) {
	var r Run
	err := row.Scan(&r.ID, &r.ScheduleID, &r.ScheduledAt, &r.Status, &r.Manual, &r.Attempt, &r.NextAttemptAt, &r.LeaseToken,
		&r.LeaseExpiresAt, &r.WorkerID, &r.LastError, &r.DispatchedAt, &r.FinishedAt, &r.UpdatedAt)
	return r, err
}

// CreateJob stores a normalized spec and its first run in one transaction.
// A create retried with the same (tenant, idemKey) and request hash returns
// the original job with created=false; a different hash is
// ErrIdempotencyMismatch.
func (s *Store) CreateJob(ctx context.Context, spec *jobspec.Spec, idemKey, requestHash string) (job Job, created bool, err error) {
	raw, err := json.Marshal(spec)
	if err != nil {
		return Job{}, false, fmt.Errorf("store: %w", err)
	}
	var id int64
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var now time.Time
		err := tx.QueryRow(ctx, `INSERT INTO scheduler.schedule_details (tenant, spec, enabled, idempotency_key, request_hash)
			VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
			RETURNING id, now()`, spec.Tenant, raw, *spec.Enabled, idemKey, requestHash).Scan(&id, &now)
		if errors.Is(err, pgx.ErrNoRows) {
			var hash string
			if err := tx.QueryRow(ctx, `SELECT id, request_hash FROM scheduler.schedule_details
				WHERE tenant = $1 AND idempotency_key = $2`, spec.Tenant, idemKey).Scan(&id, &hash); err != nil {
				return fmt.Errorf("store: %w", err)
			}
			if hash != requestHash {
				return ErrIdempotencyMismatch
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("store: %w", err)
		}
		created = true
		if !*spec.Enabled {
			return nil
		}
		if first, ok := spec.First(now); ok {
			if _, err := tx.Exec(ctx, `INSERT INTO scheduler.scheduled_execution (schedule_id, scheduled_at, status)
				VALUES ($1, $2, 'SCHEDULED')`, id, first); err != nil {
				return fmt.Errorf("store: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return Job{}, false, err
	}
	job, err = s.GetJob(ctx, id)
	return job, created, err
}

// GetJob returns a job, deleted ones included.
func (s *Store) GetJob(ctx context.Context, id int64) (Job, error) {
	return scanJob(s.pool.QueryRow(ctx, `SELECT `+jobCols+` FROM scheduler.schedule_details d WHERE d.id = $1`, id))
}

// ListJobs returns up to limit live jobs of tenant with id > after, by id.
func (s *Store) ListJobs(ctx context.Context, tenant string, after int64, limit int) ([]Job, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+jobCols+` FROM scheduler.schedule_details d
		WHERE d.tenant = $1 AND d.deleted_at IS NULL AND d.id > $2 ORDER BY d.id LIMIT $3`, tenant, after, limit)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	defer rows.Close()
	var out []Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, rows.Err()
}

// lockJob locks a live job row and checks its version (0 = any).
func lockJob(ctx context.Context, tx pgx.Tx, id int64, version int) (now time.Time, err error) {
	var cur int
	err = tx.QueryRow(ctx, `SELECT version, now() FROM scheduler.schedule_details
		WHERE id = $1 AND deleted_at IS NULL FOR UPDATE`, id).Scan(&cur, &now)
	if errors.Is(err, pgx.ErrNoRows) {
		return now, ErrNotFound
	}
	if err != nil {
		return now, fmt.Errorf("store: %w", err)
	}
	if version != 0 && cur != version {
		return now, ErrPreconditionFailed
	}
	return now, nil
}

// cancelWaiting cancels the schedule's waiting automatic run(s).
func cancelWaiting(ctx context.Context, tx pgx.Tx, id int64) error {
	_, err := tx.Exec(ctx, `UPDATE scheduler.scheduled_execution SET status = 'CANCELLED', updated_at = now(), finished_at = now()
		WHERE schedule_id = $1 AND status = 'SCHEDULED' AND NOT manual`, id)
	return err
}

func insertNext(ctx context.Context, tx pgx.Tx, id int64, spec *jobspec.Spec, now time.Time) error {
	next, ok := spec.NextAfter(now)
	if spec.Schedule.Type == jobspec.TypeOneOff {
		next, ok = spec.First(now)
	}
	if !ok {
		return nil
	}
	_, err := tx.Exec(ctx, `INSERT INTO scheduler.scheduled_execution (schedule_id, scheduled_at, status)
		VALUES ($1, $2, 'SCHEDULED') ON CONFLICT (schedule_id, scheduled_at) DO NOTHING`, id, next)
	return err
}

// ReplaceSpec stores a new normalized spec if the job is at version,
// bumps the version and reschedules the waiting run from now.
func (s *Store) ReplaceSpec(ctx context.Context, id int64, version int, spec *jobspec.Spec) (Job, error) {
	raw, err := json.Marshal(spec)
	if err != nil {
		return Job{}, fmt.Errorf("store: %w", err)
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		now, err := lockJob(ctx, tx, id, version)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE scheduler.schedule_details SET spec = $2, enabled = $3, version = version + 1,
			updated_at = now() WHERE id = $1`, id, raw, *spec.Enabled); err != nil {
			return fmt.Errorf("store: %w", err)
		}
		if err := cancelWaiting(ctx, tx, id); err != nil {
			return fmt.Errorf("store: %w", err)
		}
		if *spec.Enabled {
			return insertNext(ctx, tx, id, spec, now)
		}
		return nil
	})
	if err != nil {
		return Job{}, err
	}
	return s.GetJob(ctx, id)
}

// SetEnabled pauses (cancelling the waiting run) or resumes (scheduling
// the next slot after now) a job. It is a no-op when already so.
func (s *Store) SetEnabled(ctx context.Context, id int64, enabled bool) (Job, error) {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		now, err := lockJob(ctx, tx, id, 0)
		if err != nil {
			return err
		}
		var (
			was bool
			raw []byte
		)
		if err := tx.QueryRow(ctx, `SELECT enabled, spec FROM scheduler.schedule_details WHERE id = $1`, id).Scan(&was, &raw); err != nil {
			return fmt.Errorf("store: %w", err)
		}
		if was == enabled {
			return nil
		}
		spec, err := jobspec.DecodeStored(raw)
		if err != nil {
			return fmt.Errorf("store: %w", err)
		}
		spec.Enabled = &enabled
		raw, _ = json.Marshal(spec)
		if _, err := tx.Exec(ctx, `UPDATE scheduler.schedule_details SET enabled = $2, spec = $3, version = version + 1,
			updated_at = now() WHERE id = $1`, id, enabled, raw); err != nil {
			return fmt.Errorf("store: %w", err)
		}
		if !enabled {
			return cancelWaiting(ctx, tx, id)
		}
		return insertNext(ctx, tx, id, spec, now)
	})
	if err != nil {
		return Job{}, err
	}
	return s.GetJob(ctx, id)
}

// DeleteJob soft-deletes a job (version 0 = any) and cancels its waiting runs.
func (s *Store) DeleteJob(ctx context.Context, id int64, version int) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := lockJob(ctx, tx, id, version); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE scheduler.schedule_details SET deleted_at = now(), enabled = false,
			version = version + 1, updated_at = now() WHERE id = $1`, id); err != nil {
			return fmt.Errorf("store: %w", err)
		}
		_, err := tx.Exec(ctx, `UPDATE scheduler.scheduled_execution SET status = 'CANCELLED', updated_at = now(), finished_at = now()
			WHERE schedule_id = $1 AND status = 'SCHEDULED'`, id)
		return err
	})
}

// Trigger adds a manual run due now (its slot is the database's now()
// to the millisecond); it does not chain. A paused job is ErrPaused.
func (s *Store) Trigger(ctx context.Context, id int64) (Run, error) {
	var r Run
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := lockJob(ctx, tx, id, 0); err != nil {
			return err
		}
		var enabled bool
		if err := tx.QueryRow(ctx, `SELECT enabled FROM scheduler.schedule_details WHERE id = $1`, id).Scan(&enabled); err != nil {
			return fmt.Errorf("store: %w", err)
		}
		if !enabled {
			return ErrPaused
		}
		rows, _ := tx.Query(ctx, `INSERT INTO scheduler.scheduled_execution (schedule_id, scheduled_at, status, manual)
			VALUES ($1, date_trunc('milliseconds', now()), 'SCHEDULED', true)
			ON CONFLICT (schedule_id, scheduled_at) DO NOTHING RETURNING `+runCols, id)
		runs, err := pgx.CollectRows(rows, scanRun)
		if err != nil {
			return fmt.Errorf("store: %w", err)
		}
		if len(runs) == 0 {
			return ErrConflict
		}
		r = runs[0]
		return nil
	})
	return r, err
}

// ListRuns returns up to limit runs of a job with id > after, by id.
func (s *Store) ListRuns(ctx context.Context, scheduleID, after int64, limit int) ([]Run, error) {
	rows, _ := s.pool.Query(ctx, `SELECT `+runCols+` FROM scheduler.scheduled_execution
		WHERE schedule_id = $1 AND id > $2 ORDER BY id LIMIT $3`, scheduleID, after, limit)
	out, err := pgx.CollectRows(rows, scanRun)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	return out, nil
}

// ListDead returns up to limit DEAD runs (the DLQ) with id > after, by id;
// tenant "" means all tenants.
func (s *Store) ListDead(ctx context.Context, tenant string, after int64, limit int) ([]Run, error) {
	rows, _ := s.pool.Query(ctx, `SELECT `+prefixed("e.", runCols)+` FROM scheduler.scheduled_execution e
		JOIN scheduler.schedule_details d ON d.id = e.schedule_id
		WHERE e.status = 'DEAD' AND e.id > $1 AND ($2 = '' OR d.tenant = $2) ORDER BY e.id LIMIT $3`, after, tenant, limit)
	out, err := pgx.CollectRows(rows, scanRun)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	return out, nil
}

func prefixed(p, cols string) string {
	parts := strings.Split(cols, ",")
	for i, c := range parts {
		parts[i] = p + strings.TrimSpace(c)
	}
	return strings.Join(parts, ", ")
}

// GetRun returns one run.
func (s *Store) GetRun(ctx context.Context, id int64) (Run, error) {
	rows, _ := s.pool.Query(ctx, `SELECT `+runCols+` FROM scheduler.scheduled_execution WHERE id = $1`, id)
	r, err := pgx.CollectExactlyOneRow(rows, scanRun)
	if errors.Is(err, pgx.ErrNoRows) {
		return Run{}, ErrNotFound
	}
	if err != nil {
		return Run{}, fmt.Errorf("store: %w", err)
	}
	return r, nil
}

// CancelRun cancels a run that has not ended. A waiting or queued run is
// simply CANCELLED. A RUNNING run is CANCELLED with its lease token
// bumped: its worker learns it at the next heartbeat (ErrCancelled) and
// stops, and any later write of that worker is fenced off. Cancelling
// the waiting (SCHEDULED, automatic) run of a live recurring job skips
// that one slot: the next slot is chained in the same transaction, so the
// job keeps firing. A run that already ended is ErrFinished.
func (s *Store) CancelRun(ctx context.Context, id int64) (Run, error) {
	var out Run
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var (
			status  string
			manual  bool
			slot    time.Time
			jobID   int64
			live    bool
			rawSpec []byte
		)
		err := tx.QueryRow(ctx, `SELECT e.status, e.manual, e.scheduled_at, e.schedule_id,
				d.enabled AND d.deleted_at IS NULL, d.spec
			FROM scheduler.scheduled_execution e JOIN scheduler.schedule_details d ON d.id = e.schedule_id
			WHERE e.id = $1 FOR UPDATE OF e`, id).Scan(&status, &manual, &slot, &jobID, &live, &rawSpec)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("store: cancel: %w", err)
		}
		switch status {
		case StatusScheduled, StatusQueued, StatusRunning, StatusRetryWait:
		default:
			return ErrFinished
		}
		rows, _ := tx.Query(ctx, `UPDATE scheduler.scheduled_execution SET status = 'CANCELLED',
				lease_token = lease_token + CASE WHEN status = 'RUNNING' THEN 1 ELSE 0 END,
				lease_expires_at = NULL, finished_at = now(), updated_at = now(), last_error = 'cancelled via the API'
			WHERE id = $1 RETURNING `+runCols, id)
		if out, err = pgx.CollectExactlyOneRow(rows, scanRun); err != nil {
			return fmt.Errorf("store: cancel: %w", err)
		}
		if status != StatusScheduled || manual || !live {
			return nil
		}
		spec, err := jobspec.DecodeStored(rawSpec)
		if err != nil {
			return fmt.Errorf("store: cancel: job %d: %w", jobID, err)
		}
		if next, ok := spec.NextAfter(slot); ok && spec.Recurring() {
			if _, err := tx.Exec(ctx, `INSERT INTO scheduler.scheduled_execution (schedule_id, scheduled_at, status)
				VALUES ($1, $2, 'SCHEDULED') ON CONFLICT (schedule_id, scheduled_at) DO NOTHING`, jobID, next); err != nil {
				return fmt.Errorf("store: cancel: %w", err)
			}
		}
		return nil
	})
	return out, err
}

// CountRuns counts runs per non-terminal state and DEAD (each through its
// partial index) and the due backlog, for metrics.StateCollector.
func (s *Store) CountRuns(ctx context.Context) (map[string]int64, int64, error) {
	var sched, due, queued, retry, running, dead int64
	err := s.pool.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM scheduler.scheduled_execution WHERE status = 'SCHEDULED'),
			(SELECT count(*) FROM scheduler.scheduled_execution WHERE status = 'SCHEDULED' AND scheduled_at <= now()),
			(SELECT count(*) FROM scheduler.scheduled_execution WHERE status = 'QUEUED'),
			(SELECT count(*) FROM scheduler.scheduled_execution WHERE status = 'RETRY_WAIT'),
			(SELECT count(*) FROM scheduler.scheduled_execution WHERE status = 'RUNNING'),
			(SELECT count(*) FROM scheduler.scheduled_execution WHERE status = 'DEAD')`).Scan(
		&sched, &due, &queued, &retry, &running, &dead)
	if err != nil {
		return nil, 0, fmt.Errorf("store: count runs: %w", err)
	}
	return map[string]int64{StatusScheduled: sched, StatusQueued: queued, StatusRetryWait: retry, StatusRunning: running,
		StatusDead: dead}, due, nil
}
