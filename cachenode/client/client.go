// Package client is the Portico cache's smart client library: cache-aside
// reads over a go-redis cluster client (one hop to the slot's owner), with
// per-key single-flight on a miss, soft and hard TTLs (stale-while-
// revalidate), jittered TTLs, versioned values whose fills cannot overwrite
// a newer version (a compare-and-set on the node: SET NX / SET IFEQ),
// delete-on-write with a version tombstone, negative caching, a tight
// per-call timeout with one retry against a replica, a circuit breaker
// that degrades a failing cache to the loader, a bulkhead that keeps that
// fallback from becoming the outage, and an in-process cache for the keys
// the cluster reports hot.
//
// A Client is safe for concurrent use. Values returned by Get may be shared
// with other callers (the in-process cache): callers MUST NOT modify them.
package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/bulkhead"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/timeout"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"
)

// Loader reads a key from the origin: its value and the origin's version of
// it (a row version, a commit index: anything that grows with each write).
// It returns ErrNotFound (wrapped or not) for a key the origin does not
// have. It MUST honour ctx, which carries Options.LoaderTimeout.
type Loader func(ctx context.Context) (value []byte, version int64, err error)

// Client is the cache-aside client. Create it with New, stop it with Close.
type Client struct {
	opts     Options
	rdb      redis.UniversalClient
	replica  redis.UniversalClient
	owned    []redis.UniversalClient
	breaker  circuitbreaker.CircuitBreaker[any]
	loadExec failsafe.Executor[loaded]
	flight   singleflight.Group
	local    *local
	hot      atomic.Pointer[map[string]struct{}]
	m        *metrics
	log      *slog.Logger
	now      func() time.Time

	ctx    context.Context // parent of fills and background work; cancelled by Close
	cancel context.CancelFunc
	closed atomic.Bool
	bg     sync.WaitGroup // delayed second deletes
}

// loaded is one loader result, shared by the callers of a flight.
type loaded struct {
	payload  []byte
	version  int64
	notFound bool
}

// New validates opts, fills in defaults and returns a Client. It does not
// wait for the cache; clients it builds are warmed in the background.
func New(opts Options) (*Client, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	if opts.Overload == ServeStale && opts.LocalSize == 0 {
		return nil, fmt.Errorf("cachenode/client: Overload ServeStale needs LocalSize")
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, fmt.Errorf("cachenode/client: metrics: %w", err)
	}
	c := &Client{opts: opts, m: m, log: opts.Logger, now: opts.Now}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	if opts.Client != nil {
		if !contextTimeouts(opts.Client) {
			c.log.Warn("cachenode/client: Options.Client has ContextTimeoutEnabled off: the per-call Timeout is not enforced on reads (its ReadTimeout is)")
		}
		c.rdb = opts.Client
		if !opts.NoReplicaRetry {
			c.replica = opts.Replica
		}
	} else {
		build := func(readOnly bool) *redis.ClusterClient {
			return redis.NewClusterClient(&redis.ClusterOptions{
				// go-redis appends to Addrs: every client gets its own slice.
				Addrs:    slices.Clone(opts.Addrs),
				Username: opts.Username, Password: opts.Password,
				TLSConfig:                  opts.TLS,
				PoolSize:                   opts.PoolSize,
				ReadOnly:                   readOnly,
				ContextTimeoutEnabled:      true,
				ReadTimeout:                opts.Timeout,
				WriteTimeout:               opts.Timeout,
				DialTimeout:                max(4*opts.Timeout, 100*time.Millisecond),
				ClusterStateReloadInterval: opts.ClusterStateReloadInterval,
			})
		}
		cc := build(false)
		c.rdb = cc
		c.owned = append(c.owned, cc)
		if !opts.NoReplicaRetry {
			rc := build(true)
			c.replica = rc
			c.owned = append(c.owned, rc)
		}
		c.warm()
	}
	c.breaker = circuitbreaker.NewBuilder[any]().
		WithFailureThresholdRatio(uint(opts.BreakerFailures), uint(opts.BreakerWindow)).
		WithDelay(opts.BreakerDelay).
		WithSuccessThreshold(uint(opts.BreakerSuccesses)).
		OnStateChanged(c.breakerChanged).
		Build()
	// The bulkhead is outermost so that waiting for a slot does not eat
	// the loader's time.
	bh := bulkhead.NewBuilder[loaded](uint(opts.MaxLoaders)).WithMaxWaitTime(opts.LoaderWait).Build()
	c.loadExec = failsafe.With[loaded](bh, timeout.New[loaded](opts.LoaderTimeout))
	if opts.LocalSize > 0 {
		c.local = newLocal(opts.LocalSize)
	}
	return c, nil
}

// warm loads the slot map and go-redis's COMMAND table into the clients New
// built, in the background: a ReadOnly client routes a read to a replica
// only once it knows the command is read-only, and loading that table on
// the first (retried) read can take longer than Timeout.
func (c *Client) warm() {
	for _, r := range c.owned {
		c.bg.Add(1)
		go c.warmOne(c.ctx, r)
	}
}

func (c *Client) warmOne(ctx context.Context, r redis.UniversalClient) {
	defer c.bg.Done()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r.Get(ctx, "cachenode/client:warm") // the reply does not matter
}

// contextTimeouts reports whether rdb turns a context deadline into the
// socket deadline (unknown client types are assumed to).
func contextTimeouts(rdb redis.UniversalClient) bool {
	switch r := rdb.(type) {
	case *redis.Client:
		return r.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return r.Options().ContextTimeoutEnabled
	}
	return true
}

// breakerChanged runs under the breaker's lock: it must not call it.
func (c *Client) breakerChanged(e circuitbreaker.StateChangedEvent) {
	var v float64
	switch e.NewState {
	case circuitbreaker.OpenState:
		v = 1
		c.log.Warn("cache circuit breaker opened: reads go to the loader", "from", e.OldState.String())
	case circuitbreaker.HalfOpenState:
		v = 2
		c.log.Info("cache circuit breaker half-open: probing the cache", "from", e.OldState.String())
	default:
		c.log.Info("cache circuit breaker closed: cache back in use", "from", e.OldState.String())
	}
	c.m.breakerState.Set(v)
}

// BreakerState is the cache circuit breaker's state.
func (c *Client) BreakerState() circuitbreaker.State { return c.breaker.State() }

// Close stops background work and closes the clients New built (not a
// caller-supplied Client or Replica).
func (c *Client) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	c.cancel()
	c.bg.Wait()
	var errs []error
	for _, r := range c.owned {
		errs = append(errs, r.Close())
	}
	return errors.Join(errs...)
}

// Get returns key's value from the cache, or from loader on a miss (then
// stores it). See the package comment for what happens around that; the
// errors are ErrNotFound (from the loader or cached), ErrOverloaded, the
// loader's error, and ctx's.
func (c *Client) Get(ctx context.Context, key string, loader Loader) ([]byte, error) {
	if c.closed.Load() {
		return nil, ErrClosed
	}
	if c.local != nil && c.isHot(key) {
		if e, ok := c.local.get(key); ok && e.expires >= c.now().UnixMilli() {
			c.m.localHits.Inc()
			return result(e.payload, e.negative)
		}
	}
	raw, err := c.read(ctx, key, true)
	switch {
	case err == nil:
		e, derr := decode(raw)
		if derr != nil || e.tombstone() {
			break // a miss; the fill compares versions with it
		}
		now := c.now().UnixMilli()
		if now < e.soft {
			c.m.hits.Inc()
			if c.local != nil && c.isHot(key) {
				c.local.put(key, localEntry{payload: e.payload, negative: e.negative(), expires: now + c.opts.LocalTTL.Milliseconds()}, now)
			}
			return result(e.payload, e.negative())
		}
		c.m.stale.Inc()
		c.refresh(key, loader)
		return result(e.payload, e.negative())
	case errors.Is(err, redis.Nil):
	default:
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		c.m.fallbacks.Inc()
		return c.load(ctx, key, loader, true)
	}
	c.m.misses.Inc()
	return c.load(ctx, key, loader, false)
}

func result(payload []byte, negative bool) ([]byte, error) {
	if negative {
		return nil, ErrNotFound
	}
	return payload, nil
}

// load joins or starts key's flight and waits for it or ctx. degraded: the
// cache failed, so the flight neither reads nor fills it.
func (c *Client) load(ctx context.Context, key string, loader Loader, degraded bool) ([]byte, error) {
	ch := c.flight.DoChan(key, func() (any, error) { return c.fill(key, loader, degraded) })
	select {
	case r := <-ch:
		if r.Err != nil {
			if errors.Is(r.Err, ErrOverloaded) {
				return c.overloaded(key)
			}
			return nil, r.Err
		}
		l := r.Val.(loaded)
		return result(l.payload, l.notFound)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// refresh starts key's flight unless one runs, without waiting for it.
func (c *Client) refresh(key string, loader Loader) {
	if c.opts.OnRefresh == nil {
		c.flight.DoChan(key, func() (any, error) { return c.fill(key, loader, false) })
		return
	}
	// The test signal fires once the flight is over (no caller can join
	// it any more), and only for the flight this call started.
	var ran atomic.Bool
	ch := c.flight.DoChan(key, func() (any, error) { ran.Store(true); return c.fill(key, loader, false) })
	go func() {
		r := <-ch
		if ran.Load() {
			c.opts.OnRefresh(key, r.Err)
		}
	}()
}

// overloaded answers a caller the bulkhead turned away.
func (c *Client) overloaded(key string) ([]byte, error) {
	c.m.overloaded.Inc()
	if c.opts.Overload == ServeStale && c.local != nil {
		if e, ok := c.local.get(key); ok {
			c.m.stale.Inc()
			return result(e.payload, e.negative)
		}
	}
	return nil, ErrOverloaded
}

// fill is one flight: read the cache again (a flight that starts just
// after another finished finds its value), call the loader, store the
// result conditionally on the version read.
func (c *Client) fill(key string, loader Loader, degraded bool) (loaded, error) {
	ctx := c.ctx
	var old []byte
	haveOld := false
	cacheOK := !degraded
	if cacheOK {
		raw, err := c.read(ctx, key, false)
		switch {
		case err == nil:
			if e, derr := decode(raw); derr == nil && !e.tombstone() && c.now().UnixMilli() < e.soft {
				return loaded{payload: e.payload, version: e.version, notFound: e.negative()}, nil
			}
			old, haveOld = raw, true
		case errors.Is(err, redis.Nil):
		default:
			cacheOK = false
		}
	}
	l, err := c.callLoader(ctx, loader)
	if err != nil {
		return loaded{}, err
	}
	now := c.now().UnixMilli()
	if cacheOK {
		soft, hard := c.ttls(l.notFound)
		e := entry{version: l.version, soft: now + soft.Milliseconds(), payload: l.payload}
		if l.notFound {
			e.flags = flagNegative
		}
		if _, err := c.condSet(ctx, key, old, haveOld, encode(e), l.version, modeFill, hard); err != nil {
			c.log.Debug("cache fill failed", "key", key, "err", err)
		}
	} else if c.local != nil {
		// Remembered for ServeStale while the cache is away; already
		// expired, so it is never served as fresh.
		c.local.put(key, localEntry{payload: l.payload, negative: l.notFound, expires: now - 1}, now)
	}
	return l, nil
}

func (c *Client) callLoader(ctx context.Context, loader Loader) (loaded, error) {
	//nolint:contextcheck // exec.Context() is ctx (WithContext), or a child of it carrying the loader timeout; the linter cannot see through failsafe.
	l, err := c.loadExec.WithContext(ctx).GetWithExecution(func(exec failsafe.Execution[loaded]) (loaded, error) {
		c.m.loads.Inc()
		v, ver, err := loader(exec.Context())
		if errors.Is(err, ErrNotFound) {
			return loaded{version: ver, notFound: true}, nil
		}
		return loaded{payload: v, version: ver}, err
	})
	switch {
	case errors.Is(err, bulkhead.ErrFull):
		return loaded{}, ErrOverloaded
	case err != nil:
		c.m.loadErrors.Inc()
		return loaded{}, fmt.Errorf("cachenode/client: loader: %w", err)
	}
	return l, nil
}

// ttls returns the jittered soft and hard TTLs of a fill.
func (c *Client) ttls(negative bool) (soft, hard time.Duration) {
	if negative {
		d := c.jitter(c.opts.NegativeTTL)
		return d, d
	}
	soft = c.jitter(c.opts.SoftTTL)
	return soft, max(c.jitter(c.opts.HardTTL), soft)
}

// jitter spreads d uniformly over [d(1-j), d(1+j)] so that keys filled
// together do not expire together.
func (c *Client) jitter(d time.Duration) time.Duration {
	if c.opts.Jitter == 0 {
		return d
	}
	return time.Duration(float64(d) * (1 + c.opts.Jitter*(2*rand.Float64()-1)))
}

// read GETs key through the breaker with the per-call timeout; with
// replica, a read that failed other than by a reply (timeout, refused
// connection: a dead or stuck primary) is retried once on the replica
// client.
func (c *Client) read(ctx context.Context, key string, replica bool) ([]byte, error) {
	if !c.breaker.TryAcquirePermit() {
		return nil, circuitbreaker.ErrOpen
	}
	tctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	raw, err := c.rdb.Get(tctx, key).Bytes()
	cancel()
	if replica && c.replica != nil && err != nil && ctx.Err() == nil && isTransport(err) {
		c.m.replicaReads.Inc()
		tctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
		raw, err = c.replica.Get(tctx, key).Bytes()
		cancel()
	}
	c.record(ctx, err)
	return raw, err
}

// do runs one cache command through the breaker with the per-call timeout.
func (c *Client) do(ctx context.Context, args ...any) error {
	if !c.breaker.TryAcquirePermit() {
		return circuitbreaker.ErrOpen
	}
	tctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	err := c.rdb.Do(tctx, args...).Err()
	cancel()
	c.record(ctx, err)
	return err
}

// record reports a command's outcome to the breaker. Every acquired permit
// MUST be recorded (a half-open breaker counts them). A reply, even an
// error reply, is a live node, except CLUSTERDOWN; a caller that gave up
// says nothing about the cache.
func (c *Client) record(ctx context.Context, err error) {
	if err == nil || !isTransport(err) || ctx.Err() != nil {
		c.breaker.RecordSuccess()
		return
	}
	c.m.cacheErrors.Inc()
	c.breaker.RecordFailure()
}

// isTransport: err is not a reply from a node that is up.
func isTransport(err error) bool {
	if errors.Is(err, redis.Nil) {
		return false
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return strings.HasPrefix(rerr.Error(), "CLUSTERDOWN")
	}
	return true
}

// Conditional set modes.
type setMode int

const (
	modeFill         setMode = iota // a value or not-found of version v
	modeTombstone                   // Invalidate: the writer's version v
	modeSecondDelete                // Invalidate's delayed pass: only values older than v
)

// Attempts of a conditional set before giving up: a fill may give up (it
// only loses a cache entry); an invalidation must get through, so it
// tries for longer (each attempt is a round trip, bounded by ctx too).
const (
	fillAttempts      = 8
	tombstoneAttempts = 128
)

var errContended = errors.New("cachenode/client: conditional set lost the race too often")

// condSet stores newRaw (version v) at key unless the cache holds a newer
// version. The decision is made on old, the bytes read, and the write is
// SET NX (nothing was there) or SET IFEQ old (nothing changed since): the
// node applies it atomically, so a value written between the read and the
// write makes the write fail, and the loop reads and decides again.
func (c *Client) condSet(ctx context.Context, key string, old []byte, haveOld bool, newRaw []byte, v int64, mode setMode, ttl time.Duration) (bool, error) {
	px := max(ttl.Milliseconds(), 1)
	attempts := fillAttempts
	if mode != modeFill {
		attempts = tombstoneAttempts
	}
	for range attempts {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		var err error
		if haveOld {
			replace, done := mayReplace(old, v, mode)
			if done {
				return true, nil
			}
			if !replace {
				c.m.fillsRefused.Inc()
				return false, nil
			}
			err = c.do(ctx, "SET", key, newRaw, "IFEQ", old, "PX", px)
		} else {
			if mode == modeSecondDelete {
				return false, nil
			}
			err = c.do(ctx, "SET", key, newRaw, "NX", "PX", px)
		}
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, redis.Nil) {
			return false, err
		}
		raw, err := c.read(ctx, key, false)
		switch {
		case err == nil:
			old, haveOld = raw, true
		case errors.Is(err, redis.Nil):
			old, haveOld = nil, false
		default:
			return false, err
		}
	}
	return false, errContended
}

// mayReplace decides on the value read: replace it, or done (the same
// tombstone is already there).
func mayReplace(old []byte, v int64, mode setMode) (replace, done bool) {
	e, err := decode(old)
	if err != nil {
		return mode != modeSecondDelete, false // not ours: overwrite
	}
	switch mode {
	case modeFill:
		return e.version <= v, false
	case modeTombstone:
		if e.tombstone() && e.version == v {
			return false, true
		}
		return e.version < v || (e.version == v && !e.tombstone()), false
	default:
		return !e.tombstone() && e.version < v, false
	}
}

// Invalidate is the writer's half of delete-on-write: after committing
// version to the origin, it replaces key with a tombstone carrying version
// for Options.TombstoneTTL, so a fill of an older version that raced the
// write is refused, and, with Options.SecondDeleteDelay, deletes again
// later whatever older value got in after the tombstone expired. A newer
// value or tombstone is left alone.
func (c *Client) Invalidate(ctx context.Context, key string, version int64) error {
	if c.closed.Load() {
		return ErrClosed
	}
	if c.local != nil {
		c.local.drop(key)
	}
	// Callers after this point start a new flight rather than join one
	// that may have read the origin before the write.
	c.flight.Forget(key)
	if err := c.tombstone(ctx, key, version, modeTombstone); err != nil {
		return err
	}
	if d := c.opts.SecondDeleteDelay; d > 0 {
		c.bg.Add(1)
		go func() {
			defer c.bg.Done()
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-c.ctx.Done():
				return
			case <-t.C:
			}
			if err := c.tombstone(c.ctx, key, version, modeSecondDelete); err != nil && c.ctx.Err() == nil {
				c.log.Warn("delayed second delete failed", "key", key, "err", err)
			}
		}()
	}
	return nil
}

func (c *Client) tombstone(ctx context.Context, key string, version int64, mode setMode) error {
	raw, err := c.read(ctx, key, false)
	haveOld := err == nil
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("%w: %w", ErrCacheUnavailable, err)
	}
	tomb := encode(entry{flags: flagTombstone, version: version})
	if _, err := c.condSet(ctx, key, raw, haveOld, tomb, version, mode, c.opts.TombstoneTTL); err != nil {
		return fmt.Errorf("%w: %w", ErrCacheUnavailable, err)
	}
	return nil
}
