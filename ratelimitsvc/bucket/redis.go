package bucket

import (
	"context"
	"crypto/tls"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/redis/go-redis/v9"
)

//go:embed check.lua
var checkLua string

// DefaultTimeout bounds each Redis call: the limiter must never add more
// than this to a request.
const DefaultTimeout = 5 * time.Millisecond

// Breaker defaults: a shard's breaker opens after DefaultBreakerFailures
// consecutive failures and lets one probe through every DefaultBreakerDelay.
const (
	DefaultBreakerFailures = 3
	DefaultBreakerDelay    = time.Second
)

// RedisConfig configures a Redis store.
type RedisConfig struct {
	// Client is any go-redis UniversalClient (single node, Sentinel,
	// Cluster). It should have ContextTimeoutEnabled and MaxRetries -1 so
	// the per-call timeout is the only one (see NewRedisClient).
	Client redis.UniversalClient
	// Timeout per Check (default DefaultTimeout).
	Timeout time.Duration
	// Now, when set, replaces Redis TIME with this clock. Test-only: it
	// lets the bucket-math suite run against Redis with injected time.
	Now func() time.Time
	// BreakerFailures is how many consecutive failures open a shard's
	// circuit breaker (default DefaultBreakerFailures).
	BreakerFailures uint
	// BreakerDelay is how long an open breaker fails calls at once before
	// it half-opens and lets one probe through (default DefaultBreakerDelay).
	BreakerDelay time.Duration
}

// Redis is the shared store: one EVALSHA per Check runs check.lua, which
// evaluates every item and commits only if all vetoing items allow. Time
// comes from Redis TIME, so gateway clocks do not matter. On a Cluster, a
// script may only touch keys of one hash slot: a Check whose keys have
// several hash tags runs one script per tag and gives back the commits of
// a denied request (checkSpread, which states what that guarantees).
//
// Each shard (on a Cluster the master owning a slot; the one server
// otherwise) has a circuit breaker, so an outage costs one timeout per
// probe, not one per request: while it is open, Check fails at once with
// ErrBreakerOpen, and the first success after a probe closes it.
type Redis struct {
	cfg       RedisConfig
	sha       string
	refundSHA string
	cluster   *redis.ClusterClient
	breakers  sync.Map // shard name -> circuitbreaker.CircuitBreaker[any]

	refundsGiven, refundsFailed atomic.Uint64
}

// NewRedis returns a store on cfg.Client. It does not contact Redis: the
// scripts are loaded on first NOSCRIPT.
func NewRedis(cfg RedisConfig) (*Redis, error) {
	if cfg.Client == nil {
		return nil, errors.New("bucket: RedisConfig.Client is required")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.BreakerFailures == 0 {
		cfg.BreakerFailures = DefaultBreakerFailures
	}
	if cfg.BreakerDelay <= 0 {
		cfg.BreakerDelay = DefaultBreakerDelay
	}
	r := &Redis{cfg: cfg, sha: redis.NewScript(checkLua).Hash(), refundSHA: redis.NewScript(refundLua).Hash()}
	r.cluster, _ = cfg.Client.(*redis.ClusterClient)
	return r, nil
}

// shard names the server that owns key: the master of its slot on a
// Cluster (from the client's cached slot map), else the single server or
// Sentinel group.
func (r *Redis) shard(ctx context.Context, key string) string {
	if r.cluster != nil {
		if c, err := r.cluster.MasterForKey(ctx, key); err == nil {
			return c.Options().Addr
		}
		return "cluster" // no slot map yet: one breaker until it loads
	}
	return "redis"
}

func (r *Redis) breaker(shard string) circuitbreaker.CircuitBreaker[any] {
	if cb, ok := r.breakers.Load(shard); ok {
		return cb.(circuitbreaker.CircuitBreaker[any])
	}
	cb := circuitbreaker.NewBuilder[any]().
		WithFailureThreshold(r.cfg.BreakerFailures).
		WithDelay(r.cfg.BreakerDelay).
		WithSuccessThreshold(1).
		Build()
	got, _ := r.breakers.LoadOrStore(shard, cb)
	return got.(circuitbreaker.CircuitBreaker[any])
}

// Timeout is the bound on one Check.
func (r *Redis) Timeout() time.Duration { return r.cfg.Timeout }

// Degraded is the number of shards whose breaker is not closed (open or
// probing): the portico_ratelimitsvc_degraded gauge.
func (r *Redis) Degraded() int {
	n := 0
	r.breakers.Range(func(_, v any) bool {
		if !v.(circuitbreaker.CircuitBreaker[any]).IsClosed() {
			n++
		}
		return true
	})
	return n
}

// ClientConfig says which Redis deployment to use.
type ClientConfig struct {
	// Addr is host:port; comma-separated, several addresses are Cluster
	// seeds, or Sentinels when MasterName is set.
	Addr string
	// MasterName selects Sentinel: the name of the monitored master.
	MasterName string
	// Cluster forces Cluster mode with a single seed address (a managed
	// cluster's configuration endpoint).
	Cluster bool
	// Username and Password authenticate to Redis (ACL user, or
	// requirepass when Username is empty); SentinelPassword to the
	// Sentinels.
	Username, Password, SentinelPassword string
	// TLS, when set, is the TLS client configuration of every connection
	// (the server's name is taken from its address unless set).
	TLS *tls.Config
}

// NewClient returns a client for cfg whose every call is bounded by the
// caller's context (ContextTimeoutEnabled) and never retried, commands or
// dials: retries would multiply the timeout, and the caller already fails
// open or closed.
func NewClient(cfg ClientConfig) redis.UniversalClient {
	return redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs:                 strings.Split(cfg.Addr, ","),
		MasterName:            cfg.MasterName,
		IsClusterMode:         cfg.Cluster,
		Username:              cfg.Username,
		Password:              cfg.Password,
		SentinelPassword:      cfg.SentinelPassword,
		TLSConfig:             cfg.TLS,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
		// One dial attempt per connection: go-redis would otherwise retry a
		// failed dial 5 times, 100ms apart.
		DialerRetries: 1,
		DialTimeout:   time.Second,
		PoolSize:      64,
		MinIdleConns:  4,
	})
}

// NewRedisClient is NewClient for a single server or Cluster seeds.
func NewRedisClient(addr string) redis.UniversalClient { return NewClient(ClientConfig{Addr: addr}) }

// Check runs the script once (plus SCRIPT LOAD and one retry on NOSCRIPT),
// unless the shard's breaker is open. On a Cluster, items whose keys have
// different hash tags are decided by checkSpread instead. Errors wrap
// ErrBackend (and ErrBreakerOpen when a breaker refused the call).
func (r *Redis) Check(ctx context.Context, items []Item) (Decision, error) {
	if len(items) == 0 {
		return Decision{Committed: true}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	if r.cluster != nil {
		if groups := tagGroups(items); groups != nil {
			return r.checkSpread(ctx, items, groups)
		}
	}
	shard := r.shard(ctx, items[0].Key)
	cb := r.breaker(shard)
	if !cb.TryAcquirePermit() {
		return Decision{}, fmt.Errorf("%w: shard %s: %w", ErrBackend, shard, ErrBreakerOpen)
	}
	rep, err := r.check(ctx, items, false)
	if err != nil {
		// Every failure counts, a cancelled caller's too: a half-open probe
		// must record an outcome or the breaker would never decide.
		cb.RecordFailure()
		return Decision{}, err
	}
	cb.RecordSuccess()
	d := Decision{Committed: rep.committed(), Results: make([]Result, len(items))}
	for i := range items {
		d.Results[i] = rep.result(i)
	}
	return d, nil
}

// reply is check.lua's answer: committed, replyWidth values per item, and
// when asked for (refundable), now (ms) and each item's reset before.
type reply []int64

const replyWidth = 5

func (p reply) committed() bool { return p[0] == 1 }

func (p reply) result(i int) Result {
	o := 1 + replyWidth*i
	return Result{
		Allowed:    p[o] == 1,
		Remaining:  uint64(max(0, p[o+1])),
		RetryAfter: time.Duration(p[o+2]) * time.Millisecond,
		ResetAfter: time.Duration(p[o+3]) * time.Millisecond,
		Leased:     uint64(max(0, p[o+4])),
	}
}

// now is the ms the script ran at, in a refundable reply of n items.
func (p reply) now(n int) int64 { return p[1+replyWidth*n] }

// resetBefore is item i's ResetAfter from before this call committed, in a
// refundable reply of n items.
func (p reply) resetBefore(i, n int) time.Duration {
	return time.Duration(p[2+replyWidth*n+i]) * time.Millisecond
}

// Script arguments, boxed once: a string converted to any allocates.
var (
	argTokenBucket, argFixedWindow, argSlidingWindow any = "t", "f", "s"

	argBool    = [2]any{"0", "1"}
	argRedisTS = any("")
)

// kindArg is the kind as check.lua and refund.lua spell it.
func kindArg(k Kind) any {
	switch k {
	case FixedWindow:
		return argFixedWindow
	case SlidingWindow:
		return argSlidingWindow
	}
	return argTokenBucket
}

// check runs check.lua on items (one hash slot); refundable asks for what
// refund.lua needs.
func (r *Redis) check(ctx context.Context, items []Item, refundable bool) (reply, error) {
	keys := make([]string, len(items))
	args := make([]any, 2, 2+7*len(items))
	args[0], args[1] = argRedisTS, argBool[0]
	if r.cfg.Now != nil {
		args[0] = strconv.FormatInt(r.cfg.Now().UnixMilli(), 10)
	}
	size := 1 + replyWidth*len(items)
	if refundable {
		args[1] = argBool[1]
		size += 1 + len(items)
	}
	for i, it := range items {
		keys[i] = it.Key
		veto := argBool[0]
		if it.Veto {
			veto = argBool[1]
		}
		args = append(args, kindArg(it.Kind), it.Limit, it.Capacity, it.Window.Milliseconds(), it.Cost, veto, it.Lease)
	}
	res, err := r.eval(ctx, r.sha, checkLua, keys, args)
	if err != nil {
		return nil, err
	}
	vals, ok := res.([]any)
	if !ok || len(vals) != size {
		return nil, fmt.Errorf("%w: unexpected script reply %v", ErrBackend, res)
	}
	n := make(reply, len(vals))
	for i, v := range vals {
		if n[i], ok = v.(int64); !ok {
			return nil, fmt.Errorf("%w: unexpected script reply %v", ErrBackend, res)
		}
	}
	return n, nil
}

// eval runs a script by its SHA, loading it on NOSCRIPT (after a restart
// or failover; on a Cluster, SCRIPT LOAD goes to every primary) and trying
// once more.
func (r *Redis) eval(ctx context.Context, sha, src string, keys []string, args []any) (any, error) {
	res, err := r.cfg.Client.EvalSha(ctx, sha, keys, args...).Result()
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		if err = r.cfg.Client.ScriptLoad(ctx, src).Err(); err == nil {
			res, err = r.cfg.Client.EvalSha(ctx, sha, keys, args...).Result()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBackend, err)
	}
	return res, nil
}

// Prepare loads the bucket scripts on every node that serves keys (each
// primary of a Cluster) and so proves that the store answers: the first
// decision after a start then runs its EVALSHA at once, instead of a
// NOSCRIPT, a SCRIPT LOAD to every primary over new connections and a
// second EVALSHA inside one request's timeout. It fails while a Cluster's
// slot map lists no primary.
func (r *Redis) Prepare(ctx context.Context) error {
	load := func(ctx context.Context, c redis.Scripter) error {
		for _, src := range []string{checkLua, refundLua} {
			if err := c.ScriptLoad(ctx, src).Err(); err != nil {
				return err
			}
		}
		return nil
	}
	var err error
	if c, ok := r.cfg.Client.(*redis.ClusterClient); ok {
		var primaries atomic.Int32
		err = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			primaries.Add(1)
			return load(ctx, m)
		})
		if err == nil && primaries.Load() == 0 {
			err = errors.New("the cluster's slot map lists no primary")
		}
	} else {
		err = load(ctx, r.cfg.Client)
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBackend, err)
	}
	return nil
}

// Ping checks that Redis answers, for readiness.
func (r *Redis) Ping(ctx context.Context) error {
	if err := r.cfg.Client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrBackend, err)
	}
	return nil
}
