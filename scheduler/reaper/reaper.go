// Package reaper recovers runs whose worker vanished: RUNNING rows whose
// lease expired by the database clock go back to RETRY_WAIT (or DEAD
// after the job's maxAttempts) with a bumped lease token, so the lost
// worker's late writes change nothing.
package reaper

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/portico-io/portico/scheduler/metrics"
	"github.com/portico-io/portico/scheduler/store"
)

// Defaults for zero Config fields.
const (
	DefaultInterval = 2 * time.Second
	DefaultBatch    = 500
)

// Reaper is the store method the reaper needs.
type Store interface {
	Reap(ctx context.Context, batch int) (store.ReapResult, error)
}

var _ Store = (*store.Store)(nil)

// Config configures a Reaper.
type Config struct {
	Store    Store // required
	Interval time.Duration
	Batch    int
	Metrics  *metrics.Metrics
	Logger   *slog.Logger
}

// Reaper is a long-running reaping loop.
type Reaper struct{ cfg Config }

// New validates cfg and fills defaults.
func New(cfg Config) (*Reaper, error) {
	if cfg.Store == nil {
		return nil, errors.New("reaper: Store is required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Batch <= 0 {
		cfg.Batch = DefaultBatch
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New(nil)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Reaper{cfg: cfg}, nil
}

// Run reaps every interval until ctx is done.
func (r *Reaper) Run(ctx context.Context) error {
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if _, err := r.Pass(ctx); err != nil && ctx.Err() == nil {
			r.cfg.Logger.Error("reaper: pass failed", "err", err)
		}
	}
}

// Pass runs one reaping pass (exported for tests and tools).
func (r *Reaper) Pass(ctx context.Context) (store.ReapResult, error) {
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := r.cfg.Store.Reap(pctx, r.cfg.Batch)
	if err != nil {
		return res, err
	}
	m := r.cfg.Metrics
	m.LeaseExpirations.Add(float64(res.Retried + res.Dead))
	m.Retries.Add(float64(res.Retried))
	m.DeadLetters.Add(float64(res.Dead))
	m.Transitions.WithLabelValues(store.StatusRetryWait).Add(float64(res.Retried))
	m.Transitions.WithLabelValues(store.StatusDead).Add(float64(res.Dead))
	if res.Retried+res.Dead > 0 {
		r.cfg.Logger.Warn("reaper: expired leases recovered", "retry", res.Retried, "dead", res.Dead)
	}
	return res, nil
}
