// Package peers counts the live ratelimitsvc replicas that share one Redis,
// so degraded mode can split each limit among them: every replica renews
// a membership entry each Interval and reads how many entries are fresh.
// The count is taken while Redis works and used when it does not, which
// is exactly when degraded mode needs it; the last count is kept through
// an outage.
package peers

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Defaults.
const (
	DefaultInterval = time.Second
	// An entry not renewed for TTL is not counted: a replica that died or
	// lost Redis drops out within TTL.
	DefaultTTL = 5 * time.Second
)

// Config configures a Counter. Zero values take defaults.
type Config struct {
	Client redis.UniversalClient
	// Key holds the membership sorted set (member = ID, score = expiry ms).
	Key string
	ID  string
	// Interval between renewals; TTL after which an entry is stale.
	Interval, TTL time.Duration
	// Timeout bounds each renewal (default Interval/2).
	Timeout time.Duration
	// Set receives each count (at least 1, since this replica is live).
	Set    func(n int)
	Logger *slog.Logger
	// Renewed, when set, is called after every renewal attempt (tests).
	Renewed func(n int, err error)
}

// Counter renews this replica's entry and reports the live count.
type Counter struct{ cfg Config }

// renew adds this replica with a fresh expiry, drops expired entries, and
// counts the rest, in one atomic step on the server's clock.
var renew = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) * 2)
return redis.call('ZCARD', KEYS[1])
`)

// New validates cfg.
func New(cfg Config) (*Counter, error) {
	if cfg.Client == nil || cfg.Key == "" || cfg.ID == "" || cfg.Set == nil {
		return nil, errors.New("peers: Client, Key, ID and Set are required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.TTL <= cfg.Interval {
		return nil, errors.New("peers: TTL must exceed Interval")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = cfg.Interval / 2
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Counter{cfg: cfg}, nil
}

// Run renews until ctx ends, then removes this replica's entry (best
// effort) so the others stop counting it at once.
func (c *Counter) Run(ctx context.Context) {
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	last := 0
	for {
		n, err := c.once(ctx)
		switch {
		case err == nil && n != last:
			c.cfg.Logger.Info("ratelimitsvc replicas", "count", n)
			last = n
			c.cfg.Set(n)
		case err != nil && ctx.Err() == nil:
			c.cfg.Logger.Debug("replica count not renewed; keeping the last", "count", last, "err", err)
		}
		if c.cfg.Renewed != nil {
			c.cfg.Renewed(n, err)
		}
		select {
		case <-ctx.Done():
			// ctx is done: the deregistration gets a context of its own.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.Timeout)
			_ = c.cfg.Client.ZRem(cctx, c.cfg.Key, c.cfg.ID).Err()
			cancel()
			return
		case <-t.C:
		}
	}
}

func (c *Counter) once(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	n, err := renew.Run(ctx, c.cfg.Client, []string{c.cfg.Key}, c.cfg.ID, strconv.FormatInt(c.cfg.TTL.Milliseconds(), 10)).Int()
	if err != nil {
		return 0, err
	}
	return max(1, n), nil
}
