package bucket

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed check.lua
var checkLua string

// DefaultTimeout bounds each Redis call: the limiter must never add more
// than this to a request.
const DefaultTimeout = 5 * time.Millisecond

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
}

// Redis is the shared store: one EVALSHA per Check runs check.lua, which
// evaluates every item and commits only if all vetoing items allow. Time
// comes from Redis TIME, so gateway clocks do not matter.
type Redis struct {
	cfg RedisConfig
	sha string
}

// NewRedis returns a store on cfg.Client. It does not contact Redis: the
// script is loaded on first NOSCRIPT.
func NewRedis(cfg RedisConfig) (*Redis, error) {
	if cfg.Client == nil {
		return nil, errors.New("bucket: RedisConfig.Client is required")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	return &Redis{cfg: cfg, sha: redis.NewScript(checkLua).Hash()}, nil
}

// NewRedisClient returns a client for addr whose every call is bounded by
// the caller's context (ContextTimeoutEnabled) and never retried, commands
// or dials: retries would multiply the timeout, and the caller already
// fails open or closed.
func NewRedisClient(addr string) redis.UniversalClient {
	return redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs:                 strings.Split(addr, ","),
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

// Check runs the script once (plus SCRIPT LOAD and one retry on NOSCRIPT).
// Errors wrap ErrBackend.
func (r *Redis) Check(ctx context.Context, items []Item) (Decision, error) {
	if len(items) == 0 {
		return Decision{Committed: true}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	keys := make([]string, len(items))
	args := make([]any, 1, 1+6*len(items))
	args[0] = ""
	if r.cfg.Now != nil {
		args[0] = strconv.FormatInt(r.cfg.Now().UnixMilli(), 10)
	}
	for i, it := range items {
		keys[i] = it.Key
		kind := "t"
		if it.Kind == FixedWindow {
			kind = "f"
		}
		veto := "0"
		if it.Veto {
			veto = "1"
		}
		args = append(args, kind, it.Limit, it.Capacity, it.Window.Milliseconds(), it.Cost, veto)
	}
	res, err := r.cfg.Client.EvalSha(ctx, r.sha, keys, args...).Result()
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		if err = r.cfg.Client.ScriptLoad(ctx, checkLua).Err(); err == nil {
			res, err = r.cfg.Client.EvalSha(ctx, r.sha, keys, args...).Result()
		}
	}
	if err != nil {
		return Decision{}, fmt.Errorf("%w: %w", ErrBackend, err)
	}
	vals, ok := res.([]any)
	if !ok || len(vals) != 1+4*len(items) {
		return Decision{}, fmt.Errorf("%w: unexpected script reply %v", ErrBackend, res)
	}
	n := make([]int64, len(vals))
	for i, v := range vals {
		if n[i], ok = v.(int64); !ok {
			return Decision{}, fmt.Errorf("%w: unexpected script reply %v", ErrBackend, res)
		}
	}
	d := Decision{Committed: n[0] == 1, Results: make([]Result, len(items))}
	for i := range items {
		o := 1 + 4*i
		d.Results[i] = Result{
			Allowed:    n[o] == 1,
			Remaining:  uint64(max(0, n[o+1])),
			RetryAfter: time.Duration(n[o+2]) * time.Millisecond,
			ResetAfter: time.Duration(n[o+3]) * time.Millisecond,
		}
	}
	return d, nil
}

// Ping checks that Redis answers, for readiness.
func (r *Redis) Ping(ctx context.Context) error {
	if err := r.cfg.Client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrBackend, err)
	}
	return nil
}
