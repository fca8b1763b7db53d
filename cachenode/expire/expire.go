// Package expire runs active expiry: Redis's adaptive sampling cycle.
// Lazy expiry (on access, in package keyspace) guarantees no reader sees a
// dead key; this loop reclaims the memory of keys nobody reads.
//
// Each cycle walks the shards of every registered keyspace round-robin,
// sampling up to SampleSize keys with a TTL per step and deleting the
// expired ones. A shard is re-sampled while more than Threshold of its
// sample was expired, and the cycle stops when its CPU budget is spent,
// resuming where it left off next time.
package expire

import (
	"context"
	"time"
)

// Target is a keyspace the cycle can sample (*keyspace.DB).
type Target interface {
	NumShards() int
	ExpireSample(shard, n int) (sampled, expired int)
}

// Defaults, as Redis (hz 10, 20 keys per loop, 10% acceptable stale, 25% CPU).
const (
	DefaultInterval   = 100 * time.Millisecond
	DefaultSampleSize = 20
	DefaultThreshold  = 0.10
	DefaultBudget     = 25 * time.Millisecond
)

// Config configures a Cycler. Zero values take the defaults.
type Config struct {
	Interval   time.Duration
	SampleSize int
	Threshold  float64
	// Budget bounds the time spent in one cycle.
	Budget time.Duration
	// Targets returns the keyspaces to expire (called once per cycle, so
	// namespaces added by a reload are picked up).
	Targets func() []Target
	// Now is the monotonic clock used for the budget (default time.Now).
	Now func() time.Time
	// OnCycle, when set, is called after every cycle (a test signal).
	OnCycle func(Stats)
}

// Stats describes one cycle.
type Stats struct {
	Sampled, Expired int
	// TimedOut is true when the budget ended the cycle early.
	TimedOut bool
}

// Cycler runs expiry cycles. Cycle must not be called concurrently.
type Cycler struct {
	cfg    Config
	cursor map[Target]int
	first  int // target the next cycle starts with, rotated so none starves
}

// New returns a Cycler.
func New(cfg Config) *Cycler {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.SampleSize <= 0 {
		cfg.SampleSize = DefaultSampleSize
	}
	if cfg.Threshold <= 0 {
		cfg.Threshold = DefaultThreshold
	}
	if cfg.Budget <= 0 {
		cfg.Budget = DefaultBudget
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Cycler{cfg: cfg, cursor: map[Target]int{}}
}

// Cycle runs one cycle over every target.
func (c *Cycler) Cycle() Stats {
	var st Stats
	start := c.cfg.Now()
	targets := c.cfg.Targets()
	live := make(map[Target]int, len(targets))
	c.first++
	for k := range targets {
		t := targets[(c.first+k)%len(targets)]
		pos := c.cursor[t]
		n := t.NumShards()
		for step := 0; step < n; step++ {
			shard := (pos + step) % n
			for {
				s, e := t.ExpireSample(shard, c.cfg.SampleSize)
				st.Sampled += s
				st.Expired += e
				if s == 0 || float64(e) <= c.cfg.Threshold*float64(s) {
					break
				}
				if c.cfg.Now().Sub(start) > c.cfg.Budget {
					st.TimedOut = true
					break
				}
			}
			if st.TimedOut || c.cfg.Now().Sub(start) > c.cfg.Budget {
				st.TimedOut = true
				pos = shard
				break
			}
		}
		live[t] = pos
		if st.TimedOut {
			break
		}
	}
	for _, t := range targets {
		if _, ok := live[t]; !ok {
			live[t] = c.cursor[t]
		}
	}
	c.cursor = live
	if c.cfg.OnCycle != nil {
		c.cfg.OnCycle(st)
	}
	return st
}

// Run cycles every Interval until ctx is done.
func (c *Cycler) Run(ctx context.Context) error {
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			c.Cycle()
		}
	}
}
