// Package worker executes queued runs: it leases them (store.Claim bumps
// a fencing token), hands each attempt to the target registered for the
// job's target.type (HTTP by default) with a per-attempt timeout, heartbeats every lease/3 and records the
// outcome with writes conditioned on the token. A worker that lost its
// lease (reaped while paused) stops its attempt and writes nothing.
//
// Delivery is at-least-once: a run is re-executed only after a lease
// expiry or a retryable failure, always with the same Idempotency-Key.
package worker

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/portico-io/portico/scheduler/jobspec"
	"github.com/portico-io/portico/scheduler/metrics"
	"github.com/portico-io/portico/scheduler/store"
	"github.com/portico-io/portico/scheduler/target"
	"github.com/portico-io/portico/scheduler/target/httptarget"
)

// Defaults for zero Config fields.
const (
	DefaultLease       = 30 * time.Second
	DefaultPoll        = 500 * time.Millisecond
	DefaultConcurrency = 16
	// DefaultClaimCooldown spaces claims while some attempts are running,
	// so completions are refilled in batches rather than one claim each.
	DefaultClaimCooldown = 25 * time.Millisecond
	// completeWindow is how long the completer gathers successes into
	// one UPDATE; maxCompleteBatch bounds a batch. A success does not
	// hold its slot while it waits (the attempt has ended), so the window
	// costs the run's finished_at up to 50 ms and the database one
	// statement per window instead of one per few runs (River's completer
	// flushes every 50 ms too).
	completeWindow   = 50 * time.Millisecond
	maxCompleteBatch = 1000
)

// Store is what a worker needs from the store.
type Store interface {
	Claim(ctx context.Context, workerID string, n int, ttl time.Duration, maxRank int) ([]store.Lease, error)
	Heartbeat(ctx context.Context, runID, token int64, ttl time.Duration) error
	Succeed(ctx context.Context, runID, token int64) error
	RetryLater(ctx context.Context, runID, token int64, delay time.Duration, msg string) error
	Dead(ctx context.Context, runID, token int64, msg string) error
	Defer(ctx context.Context, runID, token int64, delay, maxDefer time.Duration, msg string) (dead bool, err error)
}

// BatchSucceeder is optionally implemented by a Store to record many
// successes in one statement (per-run fencing unchanged).
type BatchSucceeder interface {
	SucceedMany(ctx context.Context, runIDs, tokens []int64) ([]error, error)
}

// BatchHeartbeater is optionally implemented by a Store to extend many
// leases in one statement (per-run fencing unchanged): while Run runs,
// the worker's attempts are heartbeated together, one statement per
// heartbeat tick.
type BatchHeartbeater interface {
	HeartbeatMany(ctx context.Context, runIDs, tokens []int64, ttl time.Duration) ([]error, error)
}

// ReservingClaimer is optionally implemented by a Store to claim runs of
// any priority of which at most low are below HIGH in one statement
// (instead of a HIGH-only claim followed by one for the rest).
type ReservingClaimer interface {
	ClaimReserving(ctx context.Context, workerID string, n, low int, ttl time.Duration) ([]store.Lease, error)
}

var (
	_ Store            = (*store.Store)(nil)
	_ BatchSucceeder   = (*store.Store)(nil)
	_ BatchHeartbeater = (*store.Store)(nil)
	_ ReservingClaimer = (*store.Store)(nil)
)

// Config configures a Worker.
type Config struct {
	Store Store // required
	// Targets executes deliveries by target.type. When nil, the worker
	// serves HTTP only, built from Guard (or Client).
	Targets target.Registry
	// Guard checks every address the HTTP target dials (required unless
	// Targets or Client is set).
	Guard *jobspec.Guard
	// ID names the worker in run rows (default host-pid).
	ID          string
	Lease       time.Duration
	Poll        time.Duration
	Concurrency int
	// ReservedHigh is how many of the Concurrency slots only HIGH-priority
	// runs may use (default Concurrency/4; negative means none), so a
	// flood of NORMAL/LOW runs cannot delay HIGH ones.
	ReservedHigh int
	// ClaimCooldown is the least time between claims while attempts are
	// in flight (an idle worker claims at once); default 25 ms.
	ClaimCooldown time.Duration
	// Client overrides the HTTP client (it must enforce the allowlist itself).
	Client  *http.Client
	Metrics *metrics.Metrics
	Logger  *slog.Logger
	// BeforeRecord, when set, runs after the target call and before the
	// outcome is written (tests use it to stall a worker past its lease).
	BeforeRecord func(store.Lease)
	// Yield, when set and true, holds new claims — for at most MaxYield
	// at a stretch, so execution is delayed, never starved. The command
	// passes the same process's runner.Firing: a burst is fired first.
	Yield func() bool
	// MaxYield bounds how long Yield holds claims at a stretch (default
	// DefaultMaxYield).
	MaxYield time.Duration
}

// DefaultMaxYield is Config.MaxYield's default.
const DefaultMaxYield = time.Second

// yieldPoll is how often a held worker looks again.
const yieldPoll = 10 * time.Millisecond

// Worker is a long-running execution loop.
type Worker struct {
	cfg  Config
	wake chan struct{}
	// completions feeds the batching completer while Run runs (nil
	// otherwise: Execute then records each success on its own).
	completions chan completion
	// beats heartbeats the attempts in flight together while Run runs
	// (nil otherwise: each attempt then heartbeats on its own).
	beats *beats
}

type completion struct {
	runID, token int64
	done         chan error
}

// New validates cfg and fills defaults.
func New(cfg Config) (*Worker, error) {
	if cfg.Store == nil {
		return nil, errors.New("worker: Store is required")
	}
	if cfg.Targets == nil {
		if cfg.Guard == nil && cfg.Client == nil {
			return nil, errors.New("worker: Targets, Guard or Client is required")
		}
		h, err := httptarget.New(httptarget.Config{Guard: cfg.Guard, Client: cfg.Client})
		if err != nil {
			return nil, err
		}
		cfg.Targets = target.Registry{jobspec.TargetHTTP: h}
	}
	if cfg.ID == "" {
		h, _ := os.Hostname()
		cfg.ID = h + "-" + strconv.Itoa(os.Getpid())
	}
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.Poll <= 0 {
		cfg.Poll = DefaultPoll
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	switch {
	case cfg.ReservedHigh == 0:
		cfg.ReservedHigh = cfg.Concurrency / 4
	case cfg.ReservedHigh < 0:
		cfg.ReservedHigh = 0
	}
	if cfg.ClaimCooldown <= 0 {
		cfg.ClaimCooldown = DefaultClaimCooldown
	}
	if cfg.ReservedHigh >= cfg.Concurrency {
		return nil, errors.New("worker: ReservedHigh must be less than Concurrency")
	}
	if cfg.MaxYield <= 0 {
		cfg.MaxYield = DefaultMaxYield
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New(nil)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Worker{cfg: cfg, wake: make(chan struct{}, 1)}, nil
}

// Run claims and executes runs until ctx is done. In-flight attempts are
// abandoned on shutdown (their leases expire and the reaper retries them).
func (w *Worker) Run(ctx context.Context) error {
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		total   int // attempts in flight
		nonHigh int // of which not HIGH priority
	)
	defer wg.Wait()
	if bs, ok := w.cfg.Store.(BatchSucceeder); ok {
		w.completions = make(chan completion)
		cctx, stop := context.WithCancel(context.WithoutCancel(ctx))
		var cwg sync.WaitGroup
		cwg.Go(func() { w.complete(cctx, bs) })
		defer func() { wg.Wait(); stop(); cwg.Wait() }()
	}
	if bh, ok := w.cfg.Store.(BatchHeartbeater); ok {
		w.beats = newBeats()
		hctx, stop := context.WithCancel(ctx)
		var hwg sync.WaitGroup
		hwg.Go(func() { w.beats.run(hctx, bh, w.cfg.Lease) })
		defer func() { wg.Wait(); stop(); hwg.Wait(); w.beats = nil }()
	}
	t := time.NewTicker(w.cfg.Poll)
	defer t.Stop()
	var last, heldSince time.Time
	for {
		mu.Lock()
		free := w.cfg.Concurrency - total
		allowance := w.cfg.Concurrency - w.cfg.ReservedHigh - nonHigh
		mu.Unlock()
		yield := w.cfg.Yield != nil && w.cfg.Yield()
		switch {
		case !yield && !heldSince.IsZero():
			w.cfg.Metrics.WorkerYield.Add(min(time.Since(heldSince), w.cfg.MaxYield).Seconds())
			heldSince = time.Time{}
		case yield && heldSince.IsZero():
			heldSince = time.Now()
		}
		var cool <-chan time.Time
		if wait := w.cfg.ClaimCooldown - time.Since(last); free > 0 && free < w.cfg.Concurrency && wait > 0 {
			cool = time.After(wait)
		} else if free > 0 && yield && time.Since(heldSince) < w.cfg.MaxYield {
			cool = time.After(yieldPoll)
		} else if free > 0 {
			last = time.Now()
			leases := w.claim(ctx, free, allowance)
			w.cfg.Metrics.Transitions.WithLabelValues(store.StatusRunning).Add(float64(len(leases)))
			for _, l := range leases {
				high := jobspec.PriorityRank(l.Spec.Execution.Priority) == 0
				mu.Lock()
				total++
				if !high {
					nonHigh++
				}
				mu.Unlock()
				wg.Go(func() {
					// The slot is free once the attempt has ended: its
					// outcome is written afterwards (batched), and a
					// claim need not wait for that write.
					w.execute(ctx, l, func() {
						mu.Lock()
						total--
						if !high {
							nonHigh--
						}
						mu.Unlock()
						select {
						case w.wake <- struct{}{}:
						default:
						}
					})
				})
			}
			if len(leases) == free {
				continue // more may be waiting
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-w.wake:
		case <-cool:
		}
	}
}

// complete records successes sent by Execute in batches: it takes one,
// gathers more for completeWindow (up to maxCompleteBatch) and writes them
// with one fenced UPDATE, answering each sender with its own result.
func (w *Worker) complete(ctx context.Context, bs BatchSucceeder) {
	for {
		var batch []completion
		select {
		case <-ctx.Done():
			return
		case c := <-w.completions:
			batch = append(batch, c)
		}
		window := time.NewTimer(completeWindow)
	gather:
		for len(batch) < maxCompleteBatch {
			select {
			case c := <-w.completions:
				batch = append(batch, c)
			case <-window.C:
				break gather
			}
		}
		window.Stop()
		ids, tokens := make([]int64, len(batch)), make([]int64, len(batch))
		for i, c := range batch {
			ids[i], tokens[i] = c.runID, c.token
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		errs, err := bs.SucceedMany(wctx, ids, tokens)
		cancel()
		for i, c := range batch {
			switch {
			case err != nil:
				c.done <- err
			default:
				c.done <- errs[i]
			}
		}
	}
}

// batched routes Succeed through the completer while Run runs.
type batched struct {
	Store
	w *Worker
}

func (b batched) Succeed(ctx context.Context, runID, token int64) error {
	if b.w.completions == nil {
		return b.Store.Succeed(ctx, runID, token)
	}
	c := completion{runID: runID, token: token, done: make(chan error, 1)}
	select {
	case b.w.completions <- c:
	case <-ctx.Done():
		return ctx.Err()
	}
	return <-c.done
}

// claim leases up to free runs of which at most allowance may be below
// HIGH priority: when the reserve is in use it claims HIGH runs first and
// fills what the allowance leaves with any priority.
func (w *Worker) claim(ctx context.Context, free, allowance int) []store.Lease {
	one := func(n, maxRank int) []store.Lease {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		leases, err := w.cfg.Store.Claim(cctx, w.cfg.ID, n, w.cfg.Lease, maxRank)
		if err != nil && ctx.Err() == nil {
			w.cfg.Logger.Error("worker: claim failed", "err", err)
		}
		return leases
	}
	if allowance >= free {
		return one(free, 2)
	}
	if rc, ok := w.cfg.Store.(ReservingClaimer); ok {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		leases, err := rc.ClaimReserving(cctx, w.cfg.ID, free, max(allowance, 0), w.cfg.Lease)
		if err != nil && ctx.Err() == nil {
			w.cfg.Logger.Error("worker: claim failed", "err", err)
		}
		return leases
	}
	leases := one(free, 0)
	if n := min(free-len(leases), allowance); n > 0 {
		leases = append(leases, one(n, 2)...)
	}
	return leases
}

// Execute runs one leased attempt and records its outcome (exported so
// tests can drive a claimed lease directly).
func (w *Worker) Execute(ctx context.Context, l store.Lease) { w.execute(ctx, l, nil) }

// execute is Execute, calling release (when not nil) once the attempt
// has ended and its heartbeats stopped, before its outcome is written.
func (w *Worker) execute(ctx context.Context, l store.Lease, release func()) {
	exec := l.Spec.Execution
	actx, cancel := context.WithTimeout(ctx, time.Duration(exec.TimeoutSeconds)*time.Second)
	defer cancel()
	var (
		lost      sync.Once
		cancelled atomic.Bool
	)
	lostCh := make(chan struct{})
	markLost := func() { lost.Do(func() { close(lostCh); cancel() }) }
	var stopBeats func() // returns once no heartbeat of this run is in flight
	if b := w.beats; b != nil {
		stopBeats = b.add(l.RunID, l.Token, func(c bool) {
			if c {
				cancelled.Store(true)
			}
			markLost() // stop the attempt: the run is no longer ours
		})
	} else {
		hbDone := make(chan struct{})
		go w.heartbeat(actx, l, &cancelled, markLost, hbDone)
		stopBeats = func() { <-hbDone }
	}
	res := w.cfg.Targets.Deliver(actx, target.Delivery{RunID: l.RunID, JobID: l.ScheduleID, ScheduledAt: l.ScheduledAt,
		Attempt: l.Attempt, Spec: l.Spec})
	msg := res.Message
	cancel()
	stopBeats()
	if release != nil {
		release()
	}
	w.record(ctx, l, res, msg, lostCh, &cancelled)
}

// heartbeat extends l's lease every Lease/3 until actx ends, on its own
// (an attempt run outside Run), calling markLost when the lease is gone.
func (w *Worker) heartbeat(actx context.Context, l store.Lease, cancelled *atomic.Bool, markLost func(), hbDone chan<- struct{}) {
	defer close(hbDone)
	t := time.NewTicker(w.cfg.Lease / 3)
	defer t.Stop()
	for {
		select {
		case <-actx.Done():
			return
		case <-t.C:
		}
		hctx, hcancel := context.WithTimeout(actx, w.cfg.Lease/3)
		err := w.cfg.Store.Heartbeat(hctx, l.RunID, l.Token, w.cfg.Lease)
		hcancel()
		if errors.Is(err, store.ErrCancelled) {
			cancelled.Store(true)
		}
		if errors.Is(err, store.ErrLeaseLost) || errors.Is(err, store.ErrCancelled) {
			markLost() // stop the attempt: the run is no longer ours
			return
		}
	}
}

// beats heartbeats a worker's attempts in flight together: every tick
// (Lease/3), one HeartbeatMany for those whose last heartbeat (or start)
// is at least Lease/6 old, so each lease is extended at least every
// Lease/2 — as before, well inside the lease.
type beats struct {
	mu   sync.Mutex
	idle *sync.Cond // signalled when a batch's results are handed out
	runs map[int64]*beat
}

type beat struct {
	token   int64
	last    time.Time
	lost    func(cancelled bool)
	sending bool // in the batch being written
}

func newBeats() *beats {
	b := &beats{runs: map[int64]*beat{}}
	b.idle = sync.NewCond(&b.mu)
	return b
}

// add registers an attempt; the returned stop unregisters it and returns
// once no heartbeat of it is in flight (so lost is not called after).
func (b *beats) add(runID, token int64, lost func(cancelled bool)) (stop func()) {
	e := &beat{token: token, last: time.Now(), lost: lost}
	b.mu.Lock()
	b.runs[runID] = e
	b.mu.Unlock()
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		for e.sending {
			b.idle.Wait()
		}
		if b.runs[runID] == e {
			delete(b.runs, runID)
		}
	}
}

func (b *beats) run(ctx context.Context, st BatchHeartbeater, lease time.Duration) {
	t := time.NewTicker(lease / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		var (
			ids, tokens []int64
			batch       []*beat
		)
		b.mu.Lock()
		for id, e := range b.runs {
			if now.Sub(e.last) >= lease/6 {
				e.sending = true
				ids, tokens, batch = append(ids, id), append(tokens, e.token), append(batch, e)
			}
		}
		b.mu.Unlock()
		if len(ids) == 0 {
			continue
		}
		hctx, cancel := context.WithTimeout(ctx, lease/3)
		errs, err := st.HeartbeatMany(hctx, ids, tokens, lease)
		cancel()
		b.mu.Lock()
		for i, e := range batch {
			e.sending = false
			switch {
			case err != nil: // transient: the next tick tries again
			case errs[i] == nil:
				e.last = now
			case errors.Is(errs[i], store.ErrCancelled), errors.Is(errs[i], store.ErrLeaseLost):
				e.lost(errors.Is(errs[i], store.ErrCancelled))
				if b.runs[ids[i]] == e {
					delete(b.runs, ids[i])
				}
			}
		}
		b.idle.Broadcast()
		b.mu.Unlock()
	}
}

// record writes the outcome of an ended attempt unless its lease was lost.
func (w *Worker) record(ctx context.Context, l store.Lease, res target.Result, msg string, lostCh <-chan struct{}, cancelled *atomic.Bool) {
	select {
	case <-lostCh:
		if cancelled.Load() {
			w.cfg.Logger.Info("worker: run cancelled during attempt; stopped", "run", l.RunID, "token", l.Token)
			return
		}
		w.cfg.Metrics.LeasesLost.Inc()
		w.cfg.Logger.Warn("worker: lease lost during attempt; outcome not recorded", "run", l.RunID, "token", l.Token)
		return
	default:
	}
	if ctx.Err() != nil {
		return // shutting down: the lease will expire and the run be retried
	}
	if w.cfg.BeforeRecord != nil {
		w.cfg.BeforeRecord(l)
	}
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer wcancel()
	to, err := Record(wctx, batched{Store: w.cfg.Store, w: w}, l, res, rand.Float64())
	switch {
	case errors.Is(err, store.ErrCancelled):
		w.cfg.Logger.Info("worker: run cancelled; outcome not recorded", "run", l.RunID, "token", l.Token)
		return
	case errors.Is(err, store.ErrLeaseLost):
		w.cfg.Metrics.LeasesLost.Inc()
		w.cfg.Logger.Warn("worker: lease lost; outcome not recorded", "run", l.RunID, "token", l.Token)
		return
	case err != nil:
		w.cfg.Logger.Error("worker: record outcome", "run", l.RunID, "err", err)
		return
	}
	Observe(w.cfg.Metrics, res, to)
	if to == store.StatusDead {
		if res.Outcome == target.Deferred {
			msg = store.ReasonCircuitOpen + ": deferred past execution.maxDeferSeconds; " + msg
		}
		w.cfg.Logger.Warn("worker: run dead-lettered", "run", l.RunID, "job", l.ScheduleID, "attempt", l.Attempt, "err", msg)
	}
}

// Recorder is the store's fenced outcome writes.
type Recorder interface {
	Succeed(ctx context.Context, runID, token int64) error
	RetryLater(ctx context.Context, runID, token int64, delay time.Duration, msg string) error
	Dead(ctx context.Context, runID, token int64, msg string) error
	Defer(ctx context.Context, runID, token int64, delay, maxDefer time.Duration, msg string) (dead bool, err error)
}

// Record applies the job's retry policy to an attempt's result and writes
// the run's new status (SUCCEEDED, RETRY_WAIT or DEAD), every write
// conditioned on l.Token. u in [0, 1) draws the full-jitter backoff. A
// Deferred result returns RETRY_WAIT without using an attempt, or DEAD
// (reason CIRCUIT_OPEN) once the run has been deferred for the job's
// execution.maxDeferSeconds since its last real attempt. Local
// workers and the gRPC worker API both record through it.
func Record(ctx context.Context, st Recorder, l store.Lease, res target.Result, u float64) (string, error) {
	exec := l.Spec.Execution
	switch {
	case res.Outcome == target.Succeeded:
		return store.StatusSucceeded, st.Succeed(ctx, l.RunID, l.Token)
	case res.Outcome == target.Deferred:
		dead, err := st.Defer(ctx, l.RunID, l.Token, res.RetryAfter, exec.MaxDefer(), res.Message)
		if dead {
			return store.StatusDead, err
		}
		return store.StatusRetryWait, err
	case res.Outcome == target.Retryable && l.Attempt < exec.Retry.MaxAttempts:
		return store.StatusRetryWait, st.RetryLater(ctx, l.RunID, l.Token, Backoff(exec.Retry, l.Attempt, u), res.Message)
	default:
		return store.StatusDead, st.Dead(ctx, l.RunID, l.Token, res.Message)
	}
}

// Observe counts a recorded outcome in m.
func Observe(m *metrics.Metrics, res target.Result, to string) {
	m.Transitions.WithLabelValues(to).Inc()
	switch {
	case to == store.StatusDead:
		m.DeadLetters.Inc()
	case res.Outcome == target.Deferred:
		m.Deferred.Inc()
	case to == store.StatusRetryWait:
		m.Retries.Inc()
	}
}

// Backoff is full jitter: u·min(maxBackoff, initial·2^(attempt−1)) for u
// uniform in [0, 1).
func Backoff(r jobspec.Retry, attempt int, u float64) time.Duration {
	ceiling := float64(r.MaxBackoffMs)
	if exp := float64(r.InitialBackoffMs) * float64(uint64(1)<<min(attempt-1, 40)); exp < ceiling {
		ceiling = exp
	}
	return time.Duration(u * ceiling * float64(time.Millisecond))
}
