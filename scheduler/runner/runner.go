// Package runner fires due runs: every tick it claims SCHEDULED rows whose
// slot has passed by the database clock, marks them QUEUED for workers
// and inserts each recurring job's next slot, in one transaction
// (store.Fire). Any number of runners may share a database: SKIP LOCKED
// gives each due row to one of them and UNIQUE (schedule_id,
// scheduled_at) refuses a second row for a slot.
package runner

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/portico-io/portico/scheduler/jobspec"
	"github.com/portico-io/portico/scheduler/metrics"
	"github.com/portico-io/portico/scheduler/store"
	"github.com/portico-io/portico/scheduler/wheel"
)

// Defaults for zero Config fields.
const (
	DefaultTick             = time.Second
	DefaultBatch            = 1000
	DefaultMisfireThreshold = 60 * time.Second
	DefaultMaxPasses        = 50
	// DefaultLookahead is how far ahead the timing wheel is loaded.
	DefaultLookahead = 2 * time.Minute
	// wheelResolution is the wheel's slot width (how late past its slot
	// a wheel-driven fire may start).
	wheelResolution = 20 * time.Millisecond
	// maxEarlyRechecks bounds the re-looks after a wheel wake that found
	// nothing due (see Run).
	maxEarlyRechecks = 6
	// newRunsLoad is how often runs created since the last load are
	// added to the wheel (a full load runs every Lookahead/4).
	newRunsLoad = 250 * time.Millisecond
	// newRunsOverlap is how many ids below the last load's highest are
	// looked at again: ids are taken at insert, so a transaction that
	// commits late shows a run below it. Older stragglers are left to the
	// next full load or the sweep. (Each new-runs load reads this many
	// primary-key entries: 1,000 a second per runner.)
	newRunsOverlap = 256
	// maxWheelLoad bounds the runs loaded per pass.
	maxWheelLoad = 100_000
	// maxMissedScan bounds the slots FIRE_ALL walks through after an outage.
	maxMissedScan = 200_000
)

// Firer is the store method a runner needs.
type Firer interface {
	Fire(ctx context.Context, batch int, decide func(store.DueRun, time.Time) store.FireDecision) (store.FireResult, error)
}

// Loader lists upcoming due runs for the timing wheel, and fires the
// wheel's runs by id.
type Loader interface {
	DueRuns(ctx context.Context, shards []int16, within time.Duration, limit int, afterID int64) ([]store.DueRef, time.Time, int64, error)
	FireRuns(ctx context.Context, owner string, held []store.ShardLease, ids []int64,
		decide func(store.DueRun, time.Time) store.FireDecision) (store.FireResult, error)
}

// ShardFirer fires only the shards a runner holds.
type ShardFirer interface {
	FireShards(ctx context.Context, owner string, held []store.ShardLease, batch int,
		decide func(store.DueRun, time.Time) store.FireDecision) (store.FireResult, error)
}

// Shards is the runner's view of its shard leases (shard.Manager).
type Shards interface {
	Owner() string
	Held() []store.ShardLease
	Lost()
}

var (
	_ Firer      = (*store.Store)(nil)
	_ ShardFirer = (*store.Store)(nil)
	_ Loader     = (*store.Store)(nil)
)

// Config configures a Runner.
type Config struct {
	Store Firer // required
	Tick  time.Duration
	Batch int
	// MisfireThreshold is how late a slot must be to count as misfired.
	MisfireThreshold time.Duration
	// MaxPasses bounds claim passes per tick (a pass that claims nothing ends the tick).
	MaxPasses int
	// Shards, when set, restricts firing to the shards held (Store must
	// then be a ShardFirer); nil fires every due run.
	Shards Shards
	// Lookahead is how far ahead the timing wheel is loaded (default 2
	// min, reloaded every Lookahead/4); negative turns the wheel off and
	// leaves the Tick sweep alone. Store must be a Loader for the wheel.
	Lookahead time.Duration
	Metrics   *metrics.Metrics
	Logger    *slog.Logger
	// OnPass, when set, is called after every pass of the runner — each
	// wheel load and each fire pass, failed ones included — from the
	// runner's own goroutines (tests wait for passes instead of sleeping).
	// It must not block.
	OnPass func(Pass)
}

// Pass kinds reported to Config.OnPass.
const (
	PassLoad    = "load"     // a full wheel load (every Lookahead/4)
	PassLoadNew = "load-new" // a load of the runs created since the last one
	PassWheel   = "wheel"    // a fire pass over runs the wheel made ready
	PassSweep   = "sweep"    // a fire pass of the tick's sweep
)

// Pass is one pass of the runner, as reported to Config.OnPass.
type Pass struct {
	Kind string
	// Loaded is how many runs a load added to the wheel.
	Loaded int
	// Fired is how many runs a fire pass decided, by new status.
	Fired map[string]int
	Err   error
}

func (r *Runner) pass(p Pass) {
	if r.cfg.OnPass != nil {
		r.cfg.OnPass(p)
	}
}

// Runner is a long-running firing loop.
type Runner struct {
	cfg   Config
	wheel *wheel.Wheel
	// skew is database time − local time, from the last wheel load.
	skew atomic.Int64
	// clockError is added to the skew estimate (tests: an estimate that
	// believes the database clock is ahead makes the wheel wake early).
	clockError time.Duration
	// firing is set while a backlog is being fired (a pass found a full
	// batch and more may wait); see Firing.
	firing atomic.Bool
}

// Firing reports whether the runner is working through a backlog of due
// runs. A worker in the same process holds its claims meanwhile (briefly:
// see worker.Config.Yield), so a burst is fired — and its recurring
// jobs' next slots chained — before execution competes for the CPU and
// the connections.
func (r *Runner) Firing() bool { return r.firing.Load() }

// New validates cfg and fills defaults.
func New(cfg Config) (*Runner, error) {
	if cfg.Store == nil {
		return nil, errors.New("runner: Store is required")
	}
	if _, ok := cfg.Store.(ShardFirer); cfg.Shards != nil && !ok {
		return nil, errors.New("runner: Shards needs a Store that can FireShards")
	}
	if cfg.Tick <= 0 {
		cfg.Tick = DefaultTick
	}
	if cfg.Batch <= 0 {
		cfg.Batch = DefaultBatch
	}
	if cfg.MisfireThreshold <= 0 {
		cfg.MisfireThreshold = DefaultMisfireThreshold
	}
	if cfg.Lookahead == 0 {
		cfg.Lookahead = DefaultLookahead
	}
	if _, ok := cfg.Store.(Loader); cfg.Lookahead > 0 && !ok {
		cfg.Lookahead = -1 // no loader: sweep only
	}
	if cfg.MaxPasses <= 0 {
		cfg.MaxPasses = DefaultMaxPasses
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New(nil)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Runner{cfg: cfg}, nil
}

// Run fires due runs every tick (the sweep) and, with the timing wheel,
// whenever a loaded or chained slot falls due, until ctx is done.
func (r *Runner) Run(ctx context.Context) error {
	t := time.NewTicker(r.cfg.Tick)
	defer t.Stop()
	var wake <-chan struct{}
	if r.cfg.Lookahead > 0 {
		r.wheel = wheel.New(wheelResolution, r.cfg.Lookahead+r.cfg.Lookahead/2, time.Now())
		wake = r.wheel.C()
		var wg sync.WaitGroup
		defer wg.Wait()
		wg.Go(func() { r.wheel.Run(ctx, r.dbNow) })
		wg.Go(func() { r.loadLoop(ctx) })
	}
	// Runs the wheel handed over that the database does not yet consider
	// due came early (a skew estimate off by more than the wheel's
	// one-slot margin, e.g. measured under load): they go back to the
	// wheel after 20, 40 … 640 ms (1.26 s in all), then are left to the
	// sweep.
	var (
		recheck <-chan time.Time
		early   []wheel.Due
		tries   int
	)
	r.tick(ctx)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			r.tick(ctx)
		case <-wake:
			if e := r.fireWheel(ctx); len(e) > 0 {
				early = append(early, e...)
				if recheck == nil {
					recheck = time.After(wheelResolution << tries)
				}
			}
		case <-recheck:
			recheck = nil
			if tries++; tries > maxEarlyRechecks {
				early, tries = nil, 0
				continue
			}
			for _, d := range early {
				r.wheel.Add(d) // past: ready at once, and wakes the loop
			}
			early = nil
		}
		if len(early) == 0 && recheck == nil {
			tries = 0
		}
	}
}

func (r *Runner) dbNow() time.Time {
	return time.Now().Add(time.Duration(r.skew.Load()) + r.clockError)
}

// loadLoop loads the held shards' runs due within Lookahead into the
// wheel: all of them every Lookahead/4 (and at start), and those created
// since the last load every newRunsLoad.
func (r *Runner) loadLoop(ctx context.Context) {
	var (
		full  time.Time // last full load
		maxID int64     // highest run id at the last load
	)
	for {
		var (
			err    error
			kind   = PassLoadNew
			loaded int
		)
		if time.Since(full) >= r.cfg.Lookahead/4 || maxID == 0 {
			full, kind = time.Now(), PassLoad
			maxID, loaded, err = r.load(ctx, r.cfg.Lookahead, 0)
		} else {
			// Runs created since the last load (and a margin of ids
			// taken by transactions that committed late): a primary-key
			// range, so new runs reach the wheel within newRunsLoad.
			var m int64
			if m, loaded, err = r.load(ctx, r.cfg.Lookahead, max(maxID-newRunsOverlap, 1)); err == nil {
				maxID = max(maxID, m)
			}
		}
		r.pass(Pass{Kind: kind, Loaded: loaded, Err: err})
		if err != nil && ctx.Err() == nil {
			r.cfg.Logger.Warn("runner: loading the timing wheel failed; the sweep still fires", "err", err)
		}
		next := newRunsLoad
		if r.cfg.Shards != nil && len(r.cfg.Shards.Held()) == 0 {
			maxID = 0 // no shards yet: load all as soon as some arrive
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(next):
		}
	}
}

// Load runs one full wheel load (exported for tests).
func (r *Runner) Load(ctx context.Context) error {
	_, _, err := r.load(ctx, r.cfg.Lookahead, 0)
	return err
}

// load adds the held shards' runs due within the given time (with ids
// above afterID, when not 0) to the wheel and returns the highest run id
// at that moment and how many runs it added.
func (r *Runner) load(ctx context.Context, within time.Duration, afterID int64) (int64, int, error) {
	var shards []int16
	if r.cfg.Shards != nil {
		held := r.cfg.Shards.Held()
		if len(held) == 0 {
			return 0, 0, nil
		}
		shards = make([]int16, len(held))
		for i, h := range held {
			shards[i] = h.Shard
		}
	}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	before := time.Now()
	due, now, maxID, err := r.cfg.Store.(Loader).DueRuns(lctx, shards, within, maxWheelLoad, afterID)
	if err != nil {
		return 0, 0, err
	}
	// The database read its clock about halfway through the call.
	r.skew.Store(int64(now.Sub(before.Add(time.Since(before) / 2))))
	r.addToWheel(due)
	return maxID, len(due), nil
}

func (r *Runner) addToWheel(due []store.DueRef) {
	if r.wheel == nil {
		return
	}
	for _, d := range due {
		r.wheel.Add(wheel.Due{ID: d.ID, At: d.At})
	}
	r.cfg.Metrics.WheelRuns.Set(float64(r.wheel.Len()))
}

func (r *Runner) decide(d store.DueRun, now time.Time) store.FireDecision {
	return Decide(d, now, r.cfg.MisfireThreshold)
}

// fireWheel fires the runs the wheel has made ready, a batch at a time,
// by id, and returns those the database did not yet consider due.
func (r *Runner) fireWheel(ctx context.Context) (early []wheel.Due) {
	defer r.firing.Store(false)
	for {
		batch := r.wheel.Take(r.cfg.Batch)
		r.cfg.Metrics.WheelRuns.Set(float64(r.wheel.Len()))
		if len(batch) == 0 {
			return early
		}
		r.firing.Store(len(batch) == r.cfg.Batch)
		ids := make([]int64, len(batch))
		for i, d := range batch {
			ids[i] = d.ID
		}
		var (
			owner string
			held  []store.ShardLease
		)
		if r.cfg.Shards != nil {
			owner, held = r.cfg.Shards.Owner(), r.cfg.Shards.Held()
		}
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		began := time.Now()
		res, err := r.cfg.Store.(Loader).FireRuns(pctx, owner, held, ids, r.decide)
		r.cfg.Metrics.FirePasses.WithLabelValues("wheel").Observe(time.Since(began).Seconds())
		cancel()
		r.pass(Pass{Kind: PassWheel, Fired: res.ByStatus, Err: err})
		if !r.record(ctx, res, err) {
			return early // the sweep fires what this batch held
		}
		fired := make(map[int64]bool, len(res.IDs))
		for _, id := range res.IDs {
			fired[id] = true
		}
		for _, d := range batch {
			if !fired[d.ID] && d.At.After(res.Now) {
				early = append(early, d)
			}
		}
	}
}

// record handles one fire pass's outcome: metrics, chained runs to the
// wheel, lost shards. It reports whether the pass succeeded.
func (r *Runner) record(ctx context.Context, res store.FireResult, err error) bool {
	if errors.Is(err, store.ErrShardsLost) {
		r.cfg.Logger.Warn("runner: shard leases lost; rebalancing")
		r.cfg.Shards.Lost()
		return false
	}
	if err != nil {
		if ctx.Err() == nil {
			r.cfg.Logger.Error("runner: fire pass failed", "err", err)
		}
		return false
	}
	for st, n := range res.ByStatus {
		r.cfg.Metrics.Transitions.WithLabelValues(st).Add(float64(n))
	}
	r.addToWheel(res.Chained)
	r.cfg.Metrics.Replaced.Add(float64(res.Replaced))
	r.cfg.Metrics.Transitions.WithLabelValues(store.StatusCancelled).Add(float64(res.Replaced))
	for _, l := range res.Lags {
		r.cfg.Metrics.Lag.Observe(l.Seconds())
	}
	return true
}

// tick runs sweep passes until one claims nothing (at most MaxPasses)
// and returns how many due runs they claimed.
func (r *Runner) tick(ctx context.Context) (claimed int) {
	defer r.firing.Store(false)
	for range r.cfg.MaxPasses {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var (
			res store.FireResult
			err error
		)
		began := time.Now()
		if r.cfg.Shards != nil {
			res, err = r.cfg.Store.(ShardFirer).FireShards(pctx, r.cfg.Shards.Owner(), r.cfg.Shards.Held(), r.cfg.Batch, r.decide)
		} else {
			res, err = r.cfg.Store.Fire(pctx, r.cfg.Batch, r.decide)
		}
		r.cfg.Metrics.FirePasses.WithLabelValues("sweep").Observe(time.Since(began).Seconds())
		cancel()
		r.pass(Pass{Kind: PassSweep, Fired: res.ByStatus, Err: err})
		if !r.record(ctx, res, err) {
			return claimed
		}
		claimed += res.Claimed
		if res.Claimed < r.cfg.Batch {
			return claimed
		}
		r.firing.Store(true)
		if r.wheel != nil {
			// A backlog the wheel did not know (runs created or recovered
			// since the last load): list it once and fire it by id instead
			// of scanning the due index again on every pass.
			if _, _, err := r.load(ctx, 0, 0); err != nil {
				if ctx.Err() == nil {
					r.cfg.Logger.Warn("runner: listing the due backlog failed; sweeping", "err", err)
				}
				continue
			}
			r.fireWheel(ctx) // listed as due by the database clock: none is early
		}
	}
	return claimed
}

// Decide is the firing policy for one due run at database time now. It is
// pure so it can be tested with any clock:
//   - a paused or deleted job's run is CANCELLED and does not chain;
//   - a manual (:trigger) run is QUEUED and does not chain;
//   - FORBID with another run in flight → SKIPPED (the chain continues);
//   - REPLACE with another run in flight → QUEUED, cancelling the others
//     (manual runs are exempt from both policies);
//   - on time: QUEUED, next = the slot after this one;
//   - misfired (later than threshold): FIRE_ONCE queues this run and skips
//     to the first slot after now; SKIP marks it SKIPPED and does the same;
//     FIRE_ALL queues it and inserts the missed slots (the most recent
//     misfireCap−1 of them) plus the first slot after now;
//   - ONE_OFF runs always fire, however late.
func Decide(d store.DueRun, now time.Time, threshold time.Duration) store.FireDecision {
	if !d.Live {
		return store.FireDecision{Status: store.StatusCancelled}
	}
	status := store.StatusQueued
	if !d.Manual && d.Busy && d.Spec.Execution.ConcurrencyPolicy == jobspec.ConcurrencyForbid {
		status = store.StatusSkipped
	}
	if d.Manual || !d.Spec.Recurring() {
		return store.FireDecision{Status: status}
	}
	dec := decideSlots(d, now, threshold, status)
	dec.Replace = dec.Status == store.StatusQueued && d.Busy && d.Spec.Execution.ConcurrencyPolicy == jobspec.ConcurrencyReplace
	return dec
}

func decideSlots(d store.DueRun, now time.Time, threshold time.Duration, status string) store.FireDecision {
	var next []time.Time
	late := now.Sub(d.ScheduledAt) > threshold
	if !late {
		if n, ok := d.Spec.NextAfter(d.ScheduledAt); ok {
			next = append(next, n)
		}
		return store.FireDecision{Status: status, Next: next}
	}
	switch d.Spec.Execution.MisfirePolicy {
	case jobspec.MisfireSkip:
		status = store.StatusSkipped
	case jobspec.MisfireFireAll:
		keep := max(d.Spec.Execution.MisfireCap-1, 0)
		var missed []time.Time
		at := d.ScheduledAt
		for range maxMissedScan {
			n, ok := d.Spec.NextAfter(at)
			if !ok || n.After(now) {
				break
			}
			missed = append(missed, n)
			if len(missed) > keep {
				missed = missed[1:]
			}
			at = n
		}
		next = append(next, missed...)
	}
	if n, ok := d.Spec.NextAfter(now); ok {
		next = append(next, n)
	}
	return store.FireDecision{Status: status, Next: next}
}
