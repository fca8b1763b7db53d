// Package store is the control plane's configuration store on Postgres.
//
// Every accepted change is one transaction that creates a new global config
// version N (immutable, gapless, serialized across control-plane replicas by
// a row lock on the head), the revisions of the resources it changed, audit
// rows, an outbox row and a NOTIFY. Resources are kept in a temporal table,
// so a version only writes what it changed (a million API keys are not copied
// per version) and the config at any past version can be rebuilt, which is
// what rollback does. Replicas learn about new versions with Watch.
//
// A Store is safe for concurrent use by many goroutines and by many
// processes sharing one database.
package store

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/portico-io/portico/controlplane/spec"
	dbmigrate "github.com/portico-io/portico/internal/migrate"
	"github.com/portico-io/portico/internal/pgtokens"
)

// Defaults for zero Config fields.
const (
	DefaultMaxConns     int32 = 10
	DefaultPollInterval       = 5 * time.Second
	// DefaultAuthor is recorded when Meta.Author is empty.
	DefaultAuthor = "anonymous"
)

// NotifyChannel is the Postgres NOTIFY channel carrying new head versions
// (payload: the version in decimal).
const NotifyChannel = "portico_config"

// migrateLockKey is the pg advisory lock serializing schema migrations of
// replicas starting at once ("portico.controlplane.migrate").
const migrateLockKey int64 = 0x706f7274_69636f01

// Config configures a Store. Zero values mean the defaults.
type Config struct {
	// DatabaseURL is a Postgres connection URL (required).
	DatabaseURL string
	// MaxConns caps the connection pool (Watch uses its own extra connection).
	MaxConns int32
	// PollInterval is how often Watch reads the head even without a
	// notification, to cover notifications lost across reconnects.
	PollInterval time.Duration
	// Check, when set, runs on every config a write would create, after
	// spec validation, for rules that depend on deployment options (a
	// listener on the built-in listener's port). A *spec.FieldError
	// rejects the write like a validation failure.
	Check  func(*spec.Config) error
	Logger *slog.Logger
}

// Store is the Postgres-backed configuration store.
type Store struct {
	pool   *pgxpool.Pool
	tokens *pgtokens.Table
	cfg    Config
	log    *slog.Logger

	// ctx is cancelled by Close and stops every Watch.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// mu guards head: the config at head.Version, shared read-only with
	// callers of ConfigAt. It is replaced, never modified.
	mu   sync.Mutex
	head *spec.Config
}

//go:embed migrations/*.sql
var migrations embed.FS

// Open connects to Postgres, applies pending migrations and returns a Store.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.DatabaseURL == "" {
		return nil, errors.New("store: DatabaseURL is required")
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.MaxConns < 0 {
		return nil, errors.New("store: MaxConns must not be negative")
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.PollInterval < 0 {
		return nil, errors.New("store: PollInterval must not be negative")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	pc, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("store: database URL: %w", err)
	}
	pc.MaxConns = cfg.MaxConns
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("store: connect: %w", err)
	}
	if err := migrate(ctx, pool, cfg.Logger); err != nil {
		pool.Close()
		return nil, err
	}
	s := &Store{pool: pool, tokens: pgtokens.New(pool, tokenTable), cfg: cfg, log: cfg.Logger}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Close stops every Watch, waits for them and closes the pool.
func (s *Store) Close() {
	s.cancel()
	s.wg.Wait()
	s.pool.Close()
}

// Ping checks that the database answers (readiness).
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("store: ping: %w", err)
	}
	return nil
}

// migrate applies the embedded migrations not yet recorded, in name order,
// in one transaction holding an advisory lock, so replicas starting together
// neither race nor see a half-migrated schema.
func migrate(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) error {
	if err := dbmigrate.Apply(ctx, pool, migrations, "migrations", "controlplane", migrateLockKey, log); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}
