// Package shard keeps a runner's share of the 1024 logical shards of
// schedule_id. Every TTL/3 a Manager heartbeats its membership, computes
// its fair share ⌈1024 / live runners⌉ and renews, takes (free or
// expired shards, epoch + 1) or releases shards toward it
// (store.BalanceShards). The runner fires only the shards it holds
// (store.FireShards), and each fire transaction re-checks owner, epoch and
// expiry under a share lock, so a paused or partitioned runner whose
// leases lapsed writes nothing once another runner has taken over.
package shard

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/portico-io/portico/scheduler/metrics"
	"github.com/portico-io/portico/scheduler/store"
)

// DefaultTTL is the shard and membership lease; a crashed runner's shards
// are taken over within about this long.
const DefaultTTL = 10 * time.Second

// Store is what a Manager needs from the store.
type Store interface {
	JoinRunners(ctx context.Context, id string, ttl time.Duration) (int, error)
	LeaveRunners(ctx context.Context, id string) error
	BalanceShards(ctx context.Context, owner string, want int, ttl time.Duration) ([]store.ShardLease, int, error)
}

var _ Store = (*store.Store)(nil)

// Config configures a Manager.
type Config struct {
	Store Store // required
	// ID names this runner (default host-pid); unique per process.
	ID      string
	TTL     time.Duration
	Metrics *metrics.Metrics
	Logger  *slog.Logger
	// Balanced, when set, is called after every balancing pass with the
	// number of shards held (tests wait on it).
	Balanced func(held int)
}

// Manager holds a runner's shard leases; safe for concurrent use.
type Manager struct {
	cfg  Config
	wake chan struct{}
	mu   sync.Mutex
	held []store.ShardLease
}

// New validates cfg and fills defaults.
func New(cfg Config) (*Manager, error) {
	if cfg.Store == nil {
		return nil, errors.New("shard: Store is required")
	}
	if cfg.ID == "" {
		h, _ := os.Hostname()
		cfg.ID = h + "-" + strconv.Itoa(os.Getpid())
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New(nil)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Manager{cfg: cfg, wake: make(chan struct{}, 1)}, nil
}

// Owner is the id the shard leases are held under.
func (m *Manager) Owner() string { return m.cfg.ID }

// Held returns a copy of the shards held as of the last pass.
func (m *Manager) Held() []store.ShardLease {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.held)
}

// Lost tells the manager a fire found its leases stale: it drops them and
// rebalances at once.
func (m *Manager) Lost() {
	m.mu.Lock()
	m.held = nil
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Run balances every TTL/3 until ctx is done, then leaves (freeing its
// shards for the others at once).
func (m *Manager) Run(ctx context.Context) error {
	t := time.NewTicker(m.cfg.TTL / 3)
	defer t.Stop()
	defer func() {
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := m.cfg.Store.LeaveRunners(lctx, m.cfg.ID); err != nil {
			m.cfg.Logger.Warn("shard: leave failed; shards free up when their leases expire", "err", err)
		}
	}()
	for {
		if err := m.Pass(ctx); err != nil && ctx.Err() == nil {
			m.cfg.Logger.Error("shard: balancing failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-m.wake:
		}
	}
}

// Pass runs one membership heartbeat and balancing step.
func (m *Manager) Pass(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, m.cfg.TTL/3)
	defer cancel()
	n, err := m.cfg.Store.JoinRunners(pctx, m.cfg.ID, m.cfg.TTL)
	if err != nil {
		return err
	}
	want := (store.Shards + n - 1) / n
	held, changed, err := m.cfg.Store.BalanceShards(pctx, m.cfg.ID, want, m.cfg.TTL)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.held = held
	m.mu.Unlock()
	m.cfg.Metrics.ShardChanges.Add(float64(changed))
	m.cfg.Metrics.ShardsOwned.Set(float64(len(held)))
	if changed > 0 {
		m.cfg.Logger.Info("shard: ownership changed", "runner", m.cfg.ID, "held", len(held), "want", want, "changed", changed, "runners", n)
	}
	if m.cfg.Balanced != nil {
		m.cfg.Balanced(len(held))
	}
	return nil
}
